"""The extender's verbs as kube-scheduler sees them: JSON in and out (kube-scheduler extender/v1/types.go), decisions
from a cache fed with the watch handlers (no API server here: the cache's own event methods, as the reflectors call
them), binding through a recorded binder."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from doubles import schedcluster as sc
from scheduler.cache import ClusterCache
from scheduler.config import ExtenderConfig
from scheduler.extender import NOT_SYNCED, UNKNOWN_NODE, Extender

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"


def _cluster(boards: int = 2, gpus: int = 8, nics: int = 0, *, clock: Callable[[], float] | None = None,
             assume_ttl: float = 30) -> ClusterCache:
    """``boards`` GPU nodes n0, n1, ...; with ``clock``, assumptions expire ``assume_ttl`` seconds later on it."""
    cache = ClusterCache() if clock is None else ClusterCache(ExtenderConfig(assume_ttl=assume_ttl), clock=clock)
    for i in range(boards):
        name = f"n{i}"
        cache.on_node("ADDED", sc.node(name))
        cache.on_device("ADDED", sc.gpu_board(name, gpus, nics=nics))
    return cache


class Binds:
    """A binder that records what it was asked to write (and can be told to fail)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str, dict[str, str]]] = []
        self.fail: Exception | None = None
        self.lock = threading.Lock()

    def __call__(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        if self.fail is not None:
            raise self.fail
        with self.lock:
            self.calls.append((namespace, name, uid, node, dict(annotations)))


def _args(pod: dict, names: list[str]) -> dict:
    # exactly what kube-scheduler sends with nodeCacheCapable: Nodes null, NodeNames set
    return json.loads(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))


def test_filter_answers_node_names_with_capitalized_keys_and_never_an_unsent_name() -> None:
    ext = Extender(_cluster(2))
    pod = sc.pod("p", {"nvidia.com/gpu": "4"})
    result = ext.filter(_args(pod, ["n1", "n0", "ghost"]))
    assert result == {"Nodes": None, "NodeNames": ["n1", "n0"], "FailedNodes": {"ghost": UNKNOWN_NODE},
                      "FailedAndUnresolvableNodes": {}, "Error": ""}
    assert json.loads(json.dumps(result)) == result     # plain JSON: lists and maps, no objects of ours


def test_filter_with_no_fitting_node_still_sends_an_empty_list_not_null() -> None:
    ext = Extender(_cluster(1, gpus=2))
    result = ext.filter(_args(sc.pod("p", {"nvidia.com/gpu": "4"}), ["n0"]))
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert result["FailedNodes"] == {"n0": "Insufficient gpu devices"}


def test_invalid_device_request_is_unresolvable_on_every_node() -> None:
    ext = Extender(_cluster(2))
    pod = sc.pod("p", {"koordinator.sh/gpu-core": "50"})          # gpu-core alone is not an allowed combination
    result = ext.filter(_args(pod, ["n0", "n1"]))
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"] == dict.fromkeys(
        ["n0", "n1"], "invalid resource device requests: [koordinator.sh/gpu-core]")


def test_node_without_devices_is_unresolvable_for_a_gpu_pod_but_fits_a_cpu_pod() -> None:
    cache = _cluster(1)
    cache.on_node("ADDED", sc.node("cpu-only"))
    ext = Extender(cache)
    gpu_result = ext.filter(_args(sc.pod("g", {"nvidia.com/gpu": "1"}), ["n0", "cpu-only"]))
    assert gpu_result["NodeNames"] == ["n0"]
    assert gpu_result["FailedAndUnresolvableNodes"] == {"cpu-only": "Insufficient gpu devices"}
    cpu_result = ext.filter(_args(sc.pod("c", {"cpu": "1"}), ["n0", "cpu-only"]))
    assert cpu_result["NodeNames"] == ["n0", "cpu-only"]


def test_filter_refuses_until_caches_synced() -> None:
    cache = _cluster(1)

    class NotYet:
        synced = threading.Event()
    cache._reflectors = [NotYet()]            # type: ignore[list-item]  # a reflector that has not listed yet
    result = Extender(cache).filter(_args(sc.pod("p", {"cpu": "1"}), ["n0"]))
    assert result["Error"] == NOT_SYNCED and result["NodeNames"] is None


def test_full_nodes_in_full_nodes_out_when_not_node_cache_capable() -> None:
    ext = Extender(_cluster(2, gpus=2))
    nodes = {"metadata": {}, "items": [sc.node("n0"), sc.node("n1")]}
    ext.cache.on_pod("ADDED", sc.pod("held", {"nvidia.com/gpu": "2"}, node_name="n0", annotations={
        GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                   '"koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,"resources":{"koordinator.sh/gpu-core":'
                   '"100","koordinator.sh/gpu-memory-ratio":"100"}}]}'}))
    result = ext.filter({"Pod": sc.pod("p", {"nvidia.com/gpu": "1"}), "Nodes": nodes, "NodeNames": None})
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["n1"]
    assert result["FailedNodes"] == {"n0": "Insufficient gpu devices"}


def test_prioritize_returns_integer_scores_in_extender_range_for_every_sent_node() -> None:
    cache = _cluster(2)
    # n0 has half of one card in use: binpack (MostAllocated) prefers it, spread (LeastAllocated) the empty n1
    cache.on_pod("ADDED", sc.pod("held", {"koordinator.sh/gpu": "50"}, node_name="n0", annotations={
        GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",'
                   '"koordinator.sh/gpu-memory":"40Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}'}))
    pod = sc.pod("p", {"koordinator.sh/gpu": "50"})
    spread = Extender(cache).prioritize(_args(pod, ["n0", "n1"]))
    assert [e["Host"] for e in spread] == ["n0", "n1"]
    assert all(isinstance(e["Score"], int) and 0 <= e["Score"] <= 10 for e in spread)
    packing = ClusterCache(ExtenderConfig(strategy="MostAllocated"))
    for kind, handler in (("node", packing.on_node), ("device", packing.on_device)):
        for state in (cache.get("n0"), cache.get("n1")):
            assert state is not None
            handler("ADDED", state.node if kind == "node" else state.device_cr)
    for held in cache.get("n0").pods.values():
        packing.on_pod("ADDED", held)
    pack = Extender(packing).prioritize(_args(pod, ["n0", "n1"]))
    assert spread[1]["Score"] > spread[0]["Score"]
    assert pack[0]["Score"] > pack[1]["Score"]


def test_bind_writes_device_allocated_with_the_binding_and_counts_the_pod_at_once() -> None:
    cache = _cluster(1, gpus=2)
    binds = Binds()
    ext = Extender(cache, binder=binds)
    pod = sc.pod("p", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    cache.on_pod("ADDED", pod)
    uid = pod["metadata"]["uid"]
    assert ext.bind({"PodName": "p", "PodNamespace": "default", "PodUID": uid, "Node": "n0"}) == {"Error": ""}
    (_, _, got_uid, node, annotations), = binds.calls
    assert (got_uid, node) == (uid, "n0")
    assert annotations[GPU_ALLOC] == (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"40Gi",'
        '"koordinator.sh/gpu-memory-ratio":"50"},"id":"GPU-n0-00"}]}')
    # counted before any watch event: the next half-card pod shares card 0 (spread scoring on a 2-card node
    # prefers the empty card 1 at bind, but the filter's unscored trial sees card 0 half used)
    state = cache.get("n0")
    assert state is not None and state.devices.used["gpu"][0]["koordinator.sh/gpu-core"] == 50
    assert cache.assumed == 1


def test_failed_binding_forgets_the_assumption() -> None:
    cache = _cluster(1, gpus=1)
    binds = Binds()
    binds.fail = RuntimeError("HTTP 409 Conflict: pod p is already assigned to node n9")
    ext = Extender(cache, binder=binds)
    pod = sc.pod("p", {"nvidia.com/gpu": "1"})
    cache.on_pod("ADDED", pod)
    result = ext.bind({"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "n0"})
    assert "already assigned" in result["Error"]
    state = cache.get("n0")
    assert state is not None and not state.devices.used.get("gpu")
    assert cache.assumed == 0


def test_bind_that_no_longer_fits_fails_so_kube_retries() -> None:
    cache = _cluster(1, gpus=1)
    ext = Extender(cache, binder=Binds())
    first, second = sc.pod("a", {"nvidia.com/gpu": "1"}), sc.pod("b", {"nvidia.com/gpu": "1"})
    for p in (first, second):
        cache.on_pod("ADDED", p)
    # both passed filter on the same snapshot; the second bind finds the card taken by the first
    assert ext.filter(_args(second, ["n0"]))["NodeNames"] == ["n0"]
    assert ext.bind({"PodName": "a", "PodNamespace": "default", "PodUID": first["metadata"]["uid"],
                     "Node": "n0"}) == {"Error": ""}
    error = ext.bind({"PodName": "b", "PodNamespace": "default", "PodUID": second["metadata"]["uid"], "Node": "n0"})
    assert "no longer fits" in error["Error"]


def test_watch_confirmation_replaces_the_assumption_and_expiry_drops_an_unconfirmed_one() -> None:
    now = [0.0]
    cache = _cluster(1, gpus=2, clock=lambda: now[0])
    binds = Binds()
    ext = Extender(cache, binder=binds)
    a, b = sc.pod("a", {"nvidia.com/gpu": "1"}), sc.pod("b", {"nvidia.com/gpu": "1"})
    for p in (a, b):
        cache.on_pod("ADDED", p)
        assert ext.bind({"PodName": p["metadata"]["name"], "PodNamespace": "default",
                         "PodUID": p["metadata"]["uid"], "Node": "n0"}) == {"Error": ""}
    # the watch shows a bound with the annotation the binding carried; b's event never comes
    bound = json.loads(json.dumps(a))
    bound["spec"]["nodeName"] = "n0"
    bound["metadata"]["annotations"].update(binds.calls[0][4])
    cache.on_pod("MODIFIED", bound)
    assert cache.assumed == 1
    now[0] = 31.0
    assert cache.expire() == 1
    state = cache.get("n0")
    assert state is not None and set(state.devices.used["gpu"]) == {0}


def test_preempt_keeps_only_nodes_where_the_victims_free_the_device() -> None:
    cache = _cluster(2, gpus=1)
    low = sc.pod("low", {"nvidia.com/gpu": "1"}, node_name="n0", priority=1, annotations={
        GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                   '"koordinator.sh/gpu-memory-ratio":"100"}}]}'})
    cpu_only = sc.pod("cpu", {"cpu": "1"}, node_name="n1", priority=1)
    holder = sc.pod("holder", {"nvidia.com/gpu": "1"}, node_name="n1", priority=1000, annotations={
        GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
                   '"koordinator.sh/gpu-memory-ratio":"100"}}]}'})
    for p in (low, cpu_only, holder):
        cache.on_pod("ADDED", p)
    ext = Extender(cache)
    pod = sc.pod("urgent", {"nvidia.com/gpu": "1"}, priority=100)
    answer = ext.preempt({"Pod": pod, "NodeNameToMetaVictims": {
        "n0": {"Pods": [], "NumPDBViolations": 0},                                  # kube saw no reason to evict
        "n1": {"Pods": [{"UID": cpu_only["metadata"]["uid"]}], "NumPDBViolations": 0}}})
    # n0: evicting `low` (lower priority, holds the card) frees it; n1: evicting the CPU pod frees no GPU and the
    # card holder outranks the pod, so kube must not evict anything there
    assert answer == {"NodeNameToMetaVictims": {
        "n0": {"Pods": [{"UID": low["metadata"]["uid"]}], "NumPDBViolations": 0}}}


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
def test_http_handlers_answer_400_for_a_body_that_is_not_an_object(body: bytes) -> None:
    from scheduler.server import ExtenderMetrics, handlers
    handle = handlers(Extender(_cluster(1)), ExtenderMetrics())["/scheduler/filter"]
    status, text = handle(body)
    assert status == 400 and b"filter" in text


def test_prioritize_is_written_as_the_generic_encoder_writes_it() -> None:
    from scheduler.server import host_priorities
    pairs = [("n0", 0), ('odd"name\\', 10), ("nœud-é", 7), ("tab\there", 3), ("", 100)]
    answer = [{"Host": h, "Score": s} for h, s in pairs]
    assert host_priorities(pairs) == json.dumps(answer, separators=(",", ":")).encode()
    assert host_priorities([]) == b"[]"


def test_gpu_and_pinned_cpus_land_on_the_numa_node_whose_cards_are_free() -> None:
    """DeviceShare's NUMA hints join NodeNUMAResource's merge: with NUMA node 0's cards taken, a SingleNUMANode LSR
    pod gets cards and CPUs of NUMA node 1, written in one Binding (device-allocated + resource-status)."""
    from tests.unit.test_sched_numa import detail, nrt
    cache = ClusterCache()
    cache.on_node("ADDED", sc.node("n0"))
    cache.on_device("ADDED", sc.gpu_board("n0", 4, per_switch=2, per_numa=2))     # cards 0,1 on NUMA 0; 2,3 on 1
    topo = nrt(detail(1, 2, 4, 2), memory="64Gi")
    topo["metadata"]["name"] = "n0"
    cache.on_nrt("ADDED", topo)
    cache.on_pod("ADDED", sc.pod("held", {"nvidia.com/gpu": "2"}, node_name="n0", annotations={
        GPU_ALLOC: '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-'
                   'ratio":"100"}},{"minor":1,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-'
                   'memory-ratio":"100"}}]}'}))
    binds = Binds()
    ext = Extender(cache, binder=binds)
    pod = sc.pod("p", {"nvidia.com/gpu": "1", "cpu": "4", "memory": "8Gi"},
                 labels={"koordinator.sh/qosClass": "LSR"},
                 annotations={"scheduling.koordinator.sh/numa-topology-spec":
                              '{"numaTopologyPolicy":"SingleNUMANode"}'})
    pod["spec"]["priority"] = 9500                     # koord-prod: LSR pods get a cpuset
    cache.on_pod("ADDED", pod)
    assert ext.filter(_args(pod, ["n0"]))["NodeNames"] == ["n0"]
    assert ext.bind({"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                     "Node": "n0"}) == {"Error": ""}
    annotations = binds.calls[0][4]
    assert json.loads(annotations[GPU_ALLOC])["gpu"][0]["minor"] == 2
    status = json.loads(annotations["scheduling.koordinator.sh/resource-status"])
    assert [z["node"] for z in status["numaNodeResources"]] == [1]
    assert status["cpuset"] == "8-11"


def test_load_aware_filters_hot_and_silent_nodes_and_scores_the_idle_one_higher() -> None:
    """LoadAware through the verbs: a node over the cpu threshold (65 %) and a node whose NodeMetric is older than
    180 s are filtered; a node without a NodeMetric passes (no agent, no penalty); the idle node scores higher."""
    from tests.unit.test_sched_loadaware import NOW, metric
    cache = ClusterCache()
    for name in ("hot", "stale", "idle", "no-agent"):
        cache.on_node("ADDED", sc.node(name, cpu="100", memory="400Gi"))
    cache.on_node_metric("ADDED", metric(name="hot", usage={"cpu": "70", "memory": "10Gi"}))
    cache.on_node_metric("ADDED", metric(name="stale", update=NOW - 181, usage={"cpu": "1", "memory": "1Gi"}))
    cache.on_node_metric("ADDED", metric(name="idle", usage={"cpu": "5", "memory": "10Gi"}))
    ext = Extender(cache, clock=lambda: NOW)
    pod = sc.pod("web", {"cpu": "2", "memory": "4Gi"})
    result = ext.filter(_args(pod, ["hot", "stale", "idle", "no-agent"]))
    assert result["NodeNames"] == ["idle", "no-agent"]
    assert result["FailedNodes"] == {"hot": "node(s) cpu usage exceed threshold",
                                     "stale": "node(s) nodeMetric expired"}
    scores = {e["Host"]: e["Score"] for e in ext.prioritize(_args(pod, ["idle", "no-agent"]))}
    assert scores["idle"] > scores["no-agent"]
    # pods bound since the last report count at their estimate: 40 × 2 cpu × 85 % + 5 used + 1.7 (the pod) > 65
    for i in range(40):
        busy = sc.pod(f"b{i}", {"cpu": "2", "memory": "1Gi"}, node_name="idle")
        busy["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                         "lastTransitionTime": "2027-01-15T08:00:00Z"}]
        cache.on_pod("ADDED", busy)
    assert ext.filter(_args(pod, ["idle"]))["FailedNodes"] == {"idle": "node(s) cpu usage exceed threshold"}
