"""The Kubernetes API path end to end: our KubeApi, watchers, writers and the agent's report loop against the
HTTP API server double, which enforces resourceVersion conflicts, the status subresource, watch resume / 410 and
validates every custom resource against the CRD schemas shipped in deploy/crds."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from doubles.apiserver_double import ApiServerDouble
from doubles.crdschema import CrdSchemas
from koordlet.agent import Agent
from koordlet.host.cgroup import CgroupVersion, Driver
from koordlet.ops.config import build
from koordlet.reporters import nrt
from koordlet.reporters.cluster import NodeMetricStatusWriter, ObjectWriter
from koordlet.reporters.nrt import write_nrt
from koordlet.states import kubeapi
from koordlet.states.kubeapi import ApiError, KubeApi
from koordlet.states.node import NodeInfo
from koordlet.states.watcher import ObjectWatcher
from tests.fakehost import FakeHost
from tests.unit.test_nrt import nrt_status
from tests.waits import wait_for

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = CrdSchemas.load(REPO / "deploy" / "crds")
NODE = "node-a"
NODES = "/api/v1/nodes"
NODE_METRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODE_SLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
NRTS = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"


def node_object(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": labels or {}},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "4", "memory": "16Gi"}}}


def node_metric_object(report_interval: int = 60) -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": NODE},
            "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300,
                                             "reportIntervalSeconds": report_interval}}}


@pytest.fixture
def double() -> Iterator[ApiServerDouble]:
    with ApiServerDouble(SCHEMAS.validate, bookmark_interval=0.2) as d:
        d.resource("slo.koordinator.sh", "v1alpha1", "nodemetrics", "NodeMetric", namespaced=False,
                   status_subresource=True)
        d.resource("slo.koordinator.sh", "v1alpha1", "nodeslos", "NodeSLO", namespaced=False,
                   status_subresource=True)
        d.resource("topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", "NodeResourceTopology",
                   namespaced=False)
        d.put(NODES, node_object())
        yield d


@pytest.fixture
def api(double: ApiServerDouble, tmp_path: Path) -> Iterator[KubeApi]:
    client = KubeApi(double.write_kubeconfig(tmp_path / "kubeconfig"), timeout=2.0)
    yield client
    client.close()


class Running:
    """Runs a watcher in a thread for the length of a test."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[tuple[threading.Thread, ObjectWatcher]] = []

    def watch(self, api: KubeApi, resource: kubeapi.Resource, **kw: Any) -> ObjectWatcher:
        watcher = ObjectWatcher(api, resource, NODE, **kw)
        thread = threading.Thread(target=watcher.run, args=(self.stop,), daemon=True)
        thread.start()
        self.threads.append((thread, watcher))
        assert watcher.synced.wait(5)
        return watcher

    def close(self) -> None:
        self.stop.set()
        for thread, watcher in self.threads:
            watcher.stop()
            thread.join(5)
            assert not thread.is_alive(), "watcher did not stop"


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running()
    yield r
    r.close()


def labels_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


# --- watcher ----------------------------------------------------------------------------------------------------


def test_watcher_follows_changes_and_deletion(double, api, running):
    watcher = running.watch(api, kubeapi.NODES, watch_timeout=1)
    assert watcher.object["metadata"]["name"] == NODE
    double.put(NODES, node_object({"zone": "a"}))
    assert wait_for(lambda: labels_of(watcher.object) == {"zone": "a"}, timeout=5)
    double.put(NODES, {**node_object(), "metadata": {"name": "other-node"}})      # filtered by name
    double.remove(NODES, NODE)
    assert wait_for(lambda: watcher.object is None, timeout=5)
    double.put(NODES, node_object({"zone": "b"}))
    assert wait_for(lambda: labels_of(watcher.object) == {"zone": "b"}, timeout=5)
    # the 1 s server-side watch timeout passed several times: each time it resumed, never re-listed
    assert wait_for(lambda: sum(r.query.get("watch") == ["true"] for r in double.requests) >= 3, timeout=5)
    assert watcher.relists == 1


def test_watcher_relists_after_410_and_keeps_its_copy_through_an_outage(double, api, running):
    watcher = running.watch(api, kubeapi.NODES, watch_timeout=30)
    double.stop()                                           # the API server crashes...
    double.put(NODES, node_object({"while": "down"}))       # ...others write meanwhile...
    double.compact()                                        # ...and history is compacted past our version
    assert labels_of(watcher.object) == {}                  # the last good copy stays
    double.start()
    assert wait_for(lambda: labels_of(watcher.object) == {"while": "down"}, timeout=10)
    assert watcher.relists == 2                             # the resume got 410 Expired: listed again


def test_bookmarks_let_a_watch_resume_past_compaction(double, api, running):
    watcher = running.watch(api, kubeapi.NODES, watch_timeout=30)
    double.put(NODE_METRICS, node_metric_object())          # unrelated writes move the global resourceVersion
    latest = double.put(NODE_METRICS, node_metric_object(90))["metadata"]["resourceVersion"]
    bookmarks = sum(1 for r in double.requests if r.query.get("watch"))
    assert watcher.resource_version != latest
    double.bookmark()
    assert wait_for(lambda: watcher.resource_version == latest, timeout=5)
    double.compact()
    double.stop()                                           # drop the watch
    double.start()
    assert wait_for(lambda: sum(1 for r in double.requests if r.query.get("watch")) > bookmarks, timeout=10)
    double.put(NODES, node_object({"after": "restart"}))
    assert wait_for(lambda: labels_of(watcher.object) == {"after": "restart"}, timeout=10)
    assert watcher.relists == 1                             # resumed from the bookmark's version: no 410


# --- NodeMetric status --------------------------------------------------------------------------------------------


def status(cpu: str = "1") -> dict[str, Any]:
    return {"updateTime": "2026-11-21T10:00:00Z",
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}, "podsMetric": []}


def test_status_update_changes_only_status_and_waits_for_the_object(double, api, running):
    watcher = running.watch(api, kubeapi.NODE_METRICS)
    writer = NodeMetricStatusWriter(api, watcher, NODE)
    stop = threading.Event()
    assert writer.write(status(), stop) == "absent"         # koord-manager has not created it yet
    assert not [r for r in double.requests if r.method == "PUT"]
    double.put(NODE_METRICS, node_metric_object())
    assert wait_for(lambda: watcher.object is not None, timeout=5)
    assert writer.write(status("2"), stop) == "updated"
    stored = double.objects[(NODE_METRICS, NODE)]
    assert stored["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"
    assert stored["spec"] == node_metric_object()["spec"]
    put = [r for r in double.requests if r.method == "PUT"][-1]
    assert put.path == f"{NODE_METRICS}/{NODE}/status"


def test_status_update_retries_a_real_conflict_with_the_current_object(double, api):
    double.put(NODE_METRICS, node_metric_object())
    watcher = ObjectWatcher(api, kubeapi.NODE_METRICS, NODE)
    watcher._list()                                         # one list, no watch: its copy goes stale
    double.put(NODE_METRICS, node_metric_object(120))       # koord-manager changes the spec meanwhile
    writer = NodeMetricStatusWriter(api, watcher, NODE)
    assert writer.write(status("3"), threading.Event()) == "updated"
    puts = [r for r in double.requests if r.method == "PUT"]
    assert len(puts) == 2                                   # 409 on the stale version, then success
    stored = double.objects[(NODE_METRICS, NODE)]
    assert stored["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] == 120
    assert stored["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "3"


def test_status_update_gives_up_after_repeated_conflicts_and_raises_outages(double, api, running):
    double.put(NODE_METRICS, node_metric_object())
    watcher = running.watch(api, kubeapi.NODE_METRICS)
    writer = NodeMetricStatusWriter(api, watcher, NODE)
    double.fail_next("PUT", f"{NODE_METRICS}/{NODE}/status", 409, count=5)
    with pytest.raises(ApiError, match="still conflicting"):
        writer.write(status(), threading.Event())
    double.outage(True)
    with pytest.raises(ApiError) as err:
        writer._limiter = kubeapi.RateLimiter(0, 1)          # the 0.1 QPS limiter would make the test wait
        writer.write(status(), threading.Event())
    assert err.value.status == 503 and err.value.retryable
    double.outage(False)
    assert writer.write(status("4"), threading.Event()) == "updated"


def test_invalid_status_is_refused_by_the_schema(double, api, running):
    double.put(NODE_METRICS, node_metric_object())
    watcher = running.watch(api, kubeapi.NODE_METRICS)
    bad = status()
    bad["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "one core"
    with pytest.raises(ApiError) as err:
        NodeMetricStatusWriter(api, watcher, NODE).write(bad, threading.Event())
    assert err.value.status == 422 and not err.value.retryable


# --- NodeResourceTopology -----------------------------------------------------------------------------------------


def topo_status(node: NodeInfo) -> nrt.NRTStatus:
    from tests.unit.test_nrt import two_socket_topology
    return nrt_status(two_socket_topology(), [], node, None)


def test_nrt_created_then_updated_only_on_change_and_others_fields_kept(double, api, running):
    watcher = running.watch(api, kubeapi.NODE_RESOURCE_TOPOLOGIES)
    node = NodeInfo.from_object(double.objects[(NODES, NODE)])
    writer = ObjectWriter(api, watcher, kubeapi.NODE_RESOURCE_TOPOLOGIES)
    assert write_nrt(writer, node, topo_status(node)) == "created"
    stored = double.objects[(NRTS, NODE)]
    assert stored["metadata"]["ownerReferences"][0]["uid"] == node.uid and node.uid
    assert write_nrt(writer, node, topo_status(node)) == "unchanged"     # even before the watch delivered it
    assert wait_for(lambda: watcher.object is not None, timeout=5)
    # another component adds a resource to a zone and an annotation
    other = copy.deepcopy(double.objects[(NRTS, NODE)])
    other["metadata"]["annotations"]["scheduler.example/x"] = "1"
    other["zones"][0]["resources"].append({"name": "example.com/foo", "capacity": "1", "allocatable": "1",
                                           "available": "1"})
    double.put(NRTS, other)
    assert wait_for(lambda: "scheduler.example/x" in watcher.object["metadata"]["annotations"], timeout=5)
    assert write_nrt(writer, node, topo_status(node)) == "unchanged"
    labelled = NodeInfo.from_object(node_object({"node.koordinator.sh/enable-numa-reservation": "true"}))
    assert write_nrt(writer, labelled, topo_status(labelled)) == "updated"
    stored = double.objects[(NRTS, NODE)]
    assert stored["metadata"]["annotations"]["scheduler.example/x"] == "1"
    assert "example.com/foo" in [r["name"] for r in stored["zones"][0]["resources"]]
    assert stored["metadata"]["labels"]["node.koordinator.sh/enable-numa-reservation"] == "true"
    assert SCHEMAS.validate(stored) == []


def test_nrt_create_race_turns_into_an_update(double, api):
    watcher = ObjectWatcher(api, kubeapi.NODE_RESOURCE_TOPOLOGIES, NODE)
    watcher._list()                                          # sees nothing
    node = NodeInfo(NODE)
    double.put(NRTS, nrt.new_object(node))                   # a previous agent instance created it meanwhile
    assert write_nrt(ObjectWriter(api, watcher, kubeapi.NODE_RESOURCE_TOPOLOGIES), node, topo_status(node)) == "updated"
    assert double.objects[(NRTS, NODE)]["topologyPolicies"] == ["None"]
    assert len(double.objects[(NRTS, NODE)]["zones"]) == 2


# --- the agent ---------------------------------------------------------------------------------------------------


def test_agent_reports_nrt_follows_nodeslo_and_nodemetric_spec_and_survives_an_outage(double, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setattr("koordlet.states.watcher.BACKOFF_MAX", 0.5)     # keep the test short
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    double.put(NODE_METRICS, node_metric_object(45))
    cfg = build(environ={"NODE_NAME": NODE}, flags={
        "kubeconfig": double.write_kubeconfig(tmp_path / "kubeconfig"), "pod-source": "apiserver",
        "cgroup-root-dir": host.paths.cgroup_root, "proc-root-dir": host.paths.proc_root,
        "sys-root-dir": host.paths.sys_root, "sys-fs-root-dir": host.paths.sys_fs_root,
        "tsdb-path": str(tmp_path / "tsdb"), "addr": ("127.0.0.1", 0), "node-topology-sync-interval": 0.2,
        "collect-res-used-interval": 0.2})
    agent = Agent.build(cfg)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: (NRTS, NODE) in double.objects, timeout=10)
        assert SCHEMAS.validate(double.objects[(NRTS, NODE)]) == []
        assert agent.reports[0][1].interval() == 45                 # the NodeMetric report's, from its spec
        double.put(NODE_SLOS, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                               "metadata": {"name": NODE},
                               "spec": {"resourceUsedThresholdWithBE": {"enable": True,
                                                                        "cpuSuppressThresholdPercent": 55}}})
        assert wait_for(lambda: agent.node.node_slo().resource_threshold.cpu_suppress_threshold_percent == 55,
                 timeout=5)
        cycles = lambda: agent.metrics.registry.get_sample_value(  # noqa: E731
            "koordlet_collect_cycle_duration_seconds_count", {"node": NODE}) or 0
        double.stop()                                        # outage: collection goes on
        double.put(NODES, node_object({"node.koordinator.sh/enable-numa-reservation": "true"}))
        during = cycles()
        assert wait_for(lambda: cycles() >= during + 3, timeout=5)
        double.start()                                       # the change made during the outage arrives
        assert wait_for(lambda: labels_of(double.objects[(NRTS, NODE)]).get(
            "node.koordinator.sh/enable-numa-reservation") == "true", timeout=10)
        failed = lambda: agent.metrics.registry.get_sample_value(  # noqa: E731
            "koordlet_report_total", {"node": NODE, "kind": "noderesourcetopology", "result": "failed"}) or 0
        double.fail_next("PUT", f"{NRTS}/{NODE}", 503, count=2)   # the next two writes fail: retried
        double.put(NODES, node_object())
        assert wait_for(lambda: "node.koordinator.sh/enable-numa-reservation" not in labels_of(
            double.objects[(NRTS, NODE)]), timeout=10)
        assert failed() == 2
        assert SCHEMAS.validate(double.objects[(NRTS, NODE)]) == []
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


# --- Device --------------------------------------------------------------------------------------------------------

DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"


def test_agent_reports_devices_keeps_scheduler_allocations_and_follows_gpu_health(double, tmp_path, monkeypatch):
    """H100 board (fake NVML) + two RDMA PFs (fake sysfs): the Device is created, validated against the CRD,
    survives the scheduler's status write, turns a GPU unhealthy on XID 79 without losing the allocations, and
    is not rewritten every cycle while nothing changes."""
    import sys

    from doubles import fakenvml
    from doubles.fakepci import FakePci
    double.resource("scheduling.koordinator.sh", "v1alpha1", "devices", "Device", namespaced=False)
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    lib = fakenvml.h100_sxm8(host.paths)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    pci = FakePci(host.paths.sys_root)
    for pf, vfs, node, root in (("0000:1a:00.0", ("0000:1a:00.2", "0000:1a:00.3"), 0, "pci0000:17"),
                                ("0000:9c:00.0", ("0000:9c:00.2",), 1, "pci0000:97")):
        pci.add(pf, root=root, bridges=(f"{root[3:]}:01.0",), numa_node=node, pci_class="0x020700",
                vendor="0x15b3", device="0x101b")
        pci.add_ib(pf, f"mlx5_{0 if node == 0 else 1}")
        pci.add_vfs(pf, vfs)
    cfg = build(environ={"NODE_NAME": NODE}, flags={
        "kubeconfig": double.write_kubeconfig(tmp_path / "kubeconfig"), "pod-source": "apiserver",
        "cgroup-root-dir": host.paths.cgroup_root, "proc-root-dir": host.paths.proc_root,
        "sys-root-dir": host.paths.sys_root, "sys-fs-root-dir": host.paths.sys_fs_root,
        "tsdb-path": str(tmp_path / "tsdb"), "addr": ("127.0.0.1", 0), "node-topology-sync-interval": 0.2,
        "collect-res-used-interval": 0.2, "feature-gates": {"Accelerators": True, "RDMADevices": True}})
    agent = Agent.build(cfg)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    stored = lambda: double.objects.get((DEVICES, NODE))  # noqa: E731
    try:
        assert wait_for(lambda: stored() is not None, timeout=10)
        device = stored()
        assert SCHEMAS.validate(device) == []
        assert device["metadata"]["ownerReferences"][0]["kind"] == "Node"
        kinds = [(d["type"], d["minor"]) for d in device["spec"]["devices"]]
        assert kinds == [("gpu", m) for m in range(8)] + [("rdma", 0), ("rdma", 1)]
        assert device["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "H100-80GB-HBM3"
        table = json.loads(device["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"])
        assert [p["minors"] for p in table["4"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
        rdma1 = device["spec"]["devices"][9]
        assert rdma1["topology"] == {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:97", "busID": "0000:9c:00.0"}
        assert rdma1["vfGroups"] == [{"vfs": [{"minor": -1, "busID": "0000:9c:00.2"}]}]
        # the scheduler records an allocation (no status subresource: an ordinary update)
        allocated = copy.deepcopy(stored())
        allocated["status"] = {"allocations": [{"type": "gpu", "entries": [
            {"name": "train", "namespace": "ml", "uuid": "u-1", "minors": [0, 1]}]}]}
        double.put(DEVICES, allocated)
        writes = lambda: sum(1 for r in double.requests if r.method == "PUT" and r.path.startswith(DEVICES))  # noqa: E731
        before = writes()
        assert not wait_for(lambda: writes() > before, timeout=1.5)      # ~7 report cycles: nothing changed
        lib.xid("0000:2a:00.0", 79)                                      # minor 1 falls over
        gpu1 = lambda: stored()["spec"]["devices"][1]  # noqa: E731
        assert wait_for(lambda: gpu1()["health"] is False, timeout=10)
        assert gpu1()["conditions"][0]["type"] == "Healthy" and gpu1()["conditions"][0]["reason"] == "Xid79"
        assert all(d["health"] for i, d in enumerate(stored()["spec"]["devices"]) if i != 1)
        assert stored()["status"] == allocated["status"]                  # the scheduler's allocations survive
        assert SCHEMAS.validate(stored()) == []
        settled = writes()
        assert not wait_for(lambda: writes() > settled, timeout=1.5)      # an unhealthy GPU is no update loop
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
