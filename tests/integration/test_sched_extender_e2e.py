"""The extender as it runs in a cluster, over real HTTP on both sides: its caches fed by real watches from the
API server double (Nodes, Pods, Devices, NodeMetrics, NRTs), its verbs called by the kube-scheduler double, its
Bindings POSTed to the API server double's pods/binding (annotations merged in the same update as nodeName)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest

from doubles import schedcluster as sc
from doubles.apiserver_double import ApiServerDouble
from doubles.kube_scheduler import ExtenderConfig, KubeSchedulerDouble, ManagedResource
from koordlet.states.deviceallocation import parse_device_allocated
from koordlet.states.kubeapi import KubeApi
from scheduler.cache import ClusterCache
from scheduler.cli import make_binder
from scheduler.extender import Extender
from scheduler.server import serve
from tests.waits import wait_for

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"
DEVICE_NAMES = ("nvidia.com/gpu", "koordinator.sh/gpu", "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory",
                "koordinator.sh/gpu-memory-ratio", "koordinator.sh/gpu.shared", "koordinator.sh/rdma")


@dataclass
class Cluster:
    apiserver: ApiServerDouble
    extender: Extender
    scheduler: KubeSchedulerDouble

    def nodes(self) -> list[dict]:
        return [o for (c, _), o in sorted(self.apiserver.objects.items()) if c == "/api/v1/nodes"]

    def pods(self) -> list[dict]:
        return [o for (c, _), o in sorted(self.apiserver.objects.items()) if c.endswith("/pods")]

    def schedule(self, pod: dict) -> str | None:
        """One scheduling attempt as kube makes it, with the pods already bound as the in-tree view."""
        stored = self.apiserver.add_pod(pod)
        assert wait_for(lambda: self.extender.cache.pod(stored["metadata"]["uid"]) is not None, 10)
        assigned = [p for p in self.pods() if p["spec"].get("nodeName")]
        return self.scheduler.schedule_one(stored, self.nodes(), assigned=assigned).node


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with ApiServerDouble(bookmark_interval=1.0) as apiserver:
        apiserver.serve_koordinator_crds()
        for i in range(10):
            name = f"gpu-{i}"
            apiserver.put("/api/v1/nodes", sc.node(name, extra={"nvidia.com/gpu": "8"}))
            apiserver.put("/apis/scheduling.koordinator.sh/v1alpha1/devices", sc.gpu_board(name, 8, nics=4))
        api = KubeApi(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
        cache = ClusterCache()
        stop = threading.Event()
        threads = cache.watch(api, stop)
        extender = Extender(cache, binder=make_binder(api))
        server = serve(extender, ("127.0.0.1", 0))
        host, port = server.address
        config = ExtenderConfig(url_prefix=f"http://{host}:{port}/scheduler", filter_verb="filter",
                                prioritize_verb="prioritize", bind_verb="bind", preempt_verb="preempt", weight=1,
                                node_cache_capable=True, http_timeout=5.0,
                                managed_resources=tuple(ManagedResource(n, n != "nvidia.com/gpu")
                                                        for n in DEVICE_NAMES))
        try:
            assert wait_for(lambda: cache.synced and len(cache.node_names()) == 10, 10)
            with KubeSchedulerDouble([config], api=apiserver.url, seed=1) as scheduler:
                yield Cluster(apiserver, extender, scheduler)
        finally:
            stop.set()
            cache.stop()
            server.stop()
            for t in threads:
                t.join(10)
            api.close()


def _card_use(pods: list[dict]) -> dict[tuple[str, int], dict[str, Fraction]]:
    """(node, minor) -> Σ resources, from the annotations the API server stored on the bound pods."""
    use: dict[tuple[str, int], dict[str, Fraction]] = {}
    for p in pods:
        raw = p["metadata"].get("annotations", {}).get(GPU_ALLOC)
        if not raw or not p["spec"].get("nodeName"):
            continue
        for a in parse_device_allocated(raw).get("gpu", []):
            card = use.setdefault((p["spec"]["nodeName"], a.minor), {})
            for k, v in a.resources.items():
                card[k] = card.get(k, Fraction(0)) + v
    return use


def test_gpu_and_rdma_pod_lands_with_its_annotation_in_the_same_update_as_the_binding(cluster: Cluster) -> None:
    pod = sc.pod("train", {"nvidia.com/gpu": "2", "koordinator.sh/rdma": "1"}, annotations={
        "scheduling.koordinator.sh/device-joint-allocate": '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}',
        "scheduling.koordinator.sh/device-allocate-hint": '{"rdma":{"vfSelector":{}}}'})
    node = cluster.schedule(pod)
    assert node is not None
    stored = next(p for p in cluster.pods() if p["metadata"]["name"] == "train")
    assert stored["spec"]["nodeName"] == node
    allocated = parse_device_allocated(stored["metadata"]["annotations"][GPU_ALLOC])
    # two GPUs on one PCIe switch (2 per switch on the board), the NIC of that switch, one of its VFs
    assert [a.minor for a in allocated["gpu"]] == [0, 1]
    assert [a.minor for a in allocated["rdma"]] == [0]
    assert allocated["rdma"][0].vfs[0].bus_id == "0000:50:00.1"
    # the API server stored nodeName, the annotation and PodScheduled in one write: one MODIFIED event after ADDED
    binding_writes = [r for r in cluster.apiserver.requests if r.path.endswith("/train/binding")]
    patches = [r for r in cluster.apiserver.requests if r.method == "PATCH" and "/pods/" in r.path]
    assert len(binding_writes) == 1 and not patches


def test_concurrent_binds_never_over_allocate_a_card(cluster: Cluster) -> None:
    shapes = [{"koordinator.sh/gpu": "50"}, {"nvidia.com/gpu": "1"},
              {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"}, {"nvidia.com/gpu": "2"}]
    pods = [sc.pod(f"p{i:03d}", shapes[i % len(shapes)]) for i in range(100)]
    outcomes: dict[str, str | None] = {}
    lock = threading.Lock()

    def run(batch: list[dict]) -> None:
        for p in batch:
            node = None
            for _ in range(5):       # kube retries a pod whose bind failed
                node = cluster.schedule(json.loads(json.dumps(p)))
                if node is not None:
                    break
            with lock:
                outcomes[p["metadata"]["name"]] = node

    threads = [threading.Thread(target=run, args=(pods[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    placed = [n for n in outcomes.values() if n is not None]
    # 100 pods ask for 25 × 0.5 + 25 × 1 + 25 × 0.3 + 25 × 2 = 95 cards' worth of 80 cards: most land
    assert len(placed) >= 70
    for (node, minor), used in _card_use(cluster.pods()).items():
        assert used.get("koordinator.sh/gpu-core", 0) <= 100, (node, minor, used)
        assert used.get("koordinator.sh/gpu-memory-ratio", 0) <= 100, (node, minor, used)
        assert used.get("koordinator.sh/gpu-memory", 0) <= 80 * sc.GIB, (node, minor, used)


def test_binds_racing_on_one_snapshot_fail_and_retry_instead_of_sharing_a_card(cluster: Cluster) -> None:
    """kube binds asynchronously: here all 100 pods pass filter on the same empty cluster first, then their binds
    race (16 at a time); a bind that finds its card taken fails, and the retry (filter + bind again) places it."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    (ext,) = cluster.scheduler._extenders
    base = ext.config.url_prefix
    host, port = base.split("//")[1].split("/")[0].split(":")
    shapes = [{"koordinator.sh/gpu": "50"}, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"}]
    pods = [cluster.apiserver.add_pod(sc.pod(f"r{i:03d}", shapes[i % 3])) for i in range(100)]
    assert wait_for(lambda: all(cluster.extender.cache.pod(p["metadata"]["uid"]) for p in pods), 10)
    local = threading.local()

    def call(verb: str, args: dict) -> dict:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection(host, int(port), timeout=10)
        local.conn.request("POST", f"/scheduler/{verb}", json.dumps(args), {"Content-Type": "application/json"})
        return json.loads(local.conn.getresponse().read())

    names = [n["metadata"]["name"] for n in cluster.nodes()]
    # every pod picks the first fitting node of the same (empty) snapshot: most race for gpu-0's cards
    chosen = {p["metadata"]["uid"]: call("filter", {"Pod": p, "NodeNames": names})["NodeNames"][0] for p in pods}

    def bind(p: dict, node: str) -> str:
        meta = p["metadata"]
        return call("bind", {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"],
                             "Node": node})["Error"]

    with ThreadPoolExecutor(16) as pool:
        errors = list(pool.map(lambda p: bind(p, chosen[p["metadata"]["uid"]]), pods))
    failed = [p for p, e in zip(pods, errors, strict=True) if e]
    assert failed and all("no longer fits" in e for e in errors if e)
    for p in failed:          # kube's retry: a fresh filter, then bind
        fits = call("filter", {"Pod": p, "NodeNames": names})["NodeNames"]
        if fits:
            assert bind(p, fits[0]) == ""
    # 100 pods ask for 17 + 33 + 66 = 116 cards' worth of 80: the ones left over fit nowhere any more
    unbound = [p for p in cluster.pods() if not p["spec"].get("nodeName")]
    assert 0 < len(unbound) < len(failed)
    assert all(call("filter", {"Pod": p, "NodeNames": names})["NodeNames"] == [] for p in unbound)
    for (node, minor), used in _card_use(cluster.pods()).items():
        assert used.get("koordinator.sh/gpu-core", 0) <= 100, (node, minor, used)
        assert used.get("koordinator.sh/gpu-memory-ratio", 0) <= 100, (node, minor, used)
