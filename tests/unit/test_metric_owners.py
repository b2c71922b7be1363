"""Each upstream metric family is set by the code that owns its fact: the executor, the kubelet client, the node state,
the collectors, the reports, prediction, the strategies and the NRI hooks. One test per owner, against the same fakes
the owner's own tests use."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest

from koordlet.collectors.usage import UsageCollection
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.ops.config import build
from koordlet.ops.metrics import AgentMetrics
from koordlet.prediction.feed import Prediction
from koordlet.prediction.server import PredictionConfig, Resources
from koordlet.qos.blkio import BlkIO
from koordlet.qos.pod_resources import PodResources
from koordlet.reporters.nodemetric import record_metrics
from koordlet.states.informer import PodsInformer, resource_rows
from koordlet.states.nodestate import NodeState
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view, pod_meta
from tests.fakehost import CgroupValues, FakeHost

N = "n1"
A = "a" * 64


def count(m: AgentMetrics, family: str, **labels: str) -> float | None:
    """A histogram's observation count, a counter's total or a gauge's value."""
    get = m.registry.get_sample_value
    for name in (family + "_count", family + "_total", family):
        value = get(name, labels)
        if value is not None:
            return value
    return None


def test_executor_times_every_write_it_asks_the_kernel_for(tmp_path):
    from tests.unit.test_qos_strategies import fake_host, mkcg
    _paths, cg, _ = fake_host(tmp_path, files=())
    mkcg(cg, "kubepods/podx", ())
    m = AgentMetrics(N)
    ex = Executor(cg, m)
    ex.update([ex.cgroup("kubepods/podx", "cpu.shares", 512, "pod x", "test")])
    ex.update([ex.cgroup("kubepods/podx", "cpu.shares", 512, "pod x", "test")])      # cached: no write, not timed
    assert count(m, "koordlet_resource_update_duration_milliseconds", type="cgroup", status="success") == 1
    ex.update([ex.cgroup("kubepods/gone", "cpu.shares", 2, "pod y", "test")])         # vanished: ignored
    sysctl = tmp_path / "proc-sys-file"
    sysctl.write_text("0\n")
    from koordlet.writer.executor import Update
    ex.update([Update(str(sysctl), "1", "node", "test")])
    assert count(m, "koordlet_resource_update_duration_milliseconds", type="default", status="success") == 1
    assert count(m, "koordlet_resource_update_duration_milliseconds", type="cgroup", status="failed") is None


def test_kubelet_client_times_every_request_that_got_an_answer():
    from doubles.kubelet_double import KubeletDouble
    from koordlet.states.kubelet import KubeletClient, KubeletError
    m = AgentMetrics(N)
    with KubeletDouble() as double:
        client = KubeletClient("127.0.0.1", double.port, https=False, token_path=None, timeout=2.0, metrics=m)
        try:
            client.get_pods()
            client.get_configz()
            double.error_status = 503
            with pytest.raises(KubeletError):
                client.get_pods()
        finally:
            client.close()
    h = "koordlet_kubelet_request_duration_seconds"
    assert count(m, h, verb="get", path="/pods/", code="200") == 1
    assert count(m, h, verb="get", path="/configz", code="200") == 1
    assert count(m, h, verb="get", path="/pods/", code="503") == 1


def node_state(tmp_path, m: AgentMetrics, gates: dict[str, bool] | None = None, cluster=None) -> NodeState:
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    host.set_numa({0: [0, 1], 1: [2, 3]})
    for cpu in range(4):
        topo = os.path.join(host.paths.sys("devices", "system", "cpu"), f"cpu{cpu}", "topology")
        os.makedirs(topo, exist_ok=True)
        for name, value in (("physical_package_id", cpu // 2), ("core_id", cpu % 2)):
            with open(os.path.join(topo, name), "w") as f:
                f.write(f"{value}\n")
    cgroups = Cgroups.detect(host.paths)
    informer = PodsInformer(list, 60.0, "standalone")
    informer.sync()
    flags = {"standalone": True, "node-name": N, **({"feature-gates": gates} if gates else {})}
    return NodeState(build(environ={}, flags=flags), host.paths, cgroups, informer, cluster=cluster, metrics=m)


def test_node_state_counts_topology_reads_and_records_pools_and_allocatable(tmp_path):
    m = AgentMetrics(N)
    node = SimpleNamespace(on_change=[], object=None)
    state = node_state(tmp_path, m, {"PerCPUMetric": True}, cluster=SimpleNamespace(node=node))
    assert count(m, "koordlet_collect_node_cpu_info_status", node=N, status="succeeded") == 1
    assert count(m, "koordlet_collect_node_numa_info_status", node=N, status="succeeded") == 1
    pools = state.pools(None)
    cpus = sorted({c for pool in pools.ls.values() for c in pool})
    assert cpus and count(m, "koordlet_cpuset_share_pool_cpu_cores", node=N) == len(cpus)
    assert count(m, "koordlet_cpuset_be_share_pool_cpu_cores", node=N) == len(cpus)
    assert count(m, "koordlet_cpuset_share_pool_info", node=N, cpu=str(cpus[0])) == 1
    # the Node watch hands over each new copy: batch/mid allocatable, 0 when absent (as upstream)
    for callback in node.on_change:
        callback({"metadata": {"name": N}, "status": {"allocatable": {"kubernetes.io/batch-cpu": "50k",
                                                                      "kubernetes.io/batch-memory": "8Gi"}}})
    g = "koordlet_node_resource_allocatable"
    assert count(m, g, node=N, resource="kubernetes.io/batch-cpu", unit="integer") == 50000
    assert count(m, g, node=N, resource="kubernetes.io/batch-memory", unit="byte") == 8 * 2**30
    assert count(m, g, node=N, resource="kubernetes.io/mid-cpu", unit="integer") == 0


def test_per_cpu_pool_series_only_with_the_gate(tmp_path):
    m = AgentMetrics(N)
    node_state(tmp_path, m).pools(None)
    assert count(m, "koordlet_cpuset_share_pool_cpu_cores", node=N)
    assert not [s for metric in m.registry.collect() if metric.name == "koordlet_cpuset_share_pool_info"
                for s in metric.samples]


def test_be_collector_records_the_be_tiers_usage(tmp_path):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    cg = Cgroups.detect(host.paths)
    m = AgentMetrics(N)
    coll = UsageCollection(host.paths, cg, m, interval=1.0, outdated=10.0)
    be_dir = cg.layout.qos_dir(KubeQOS.BESTEFFORT)
    host.set_cgroup(be_dir, CgroupValues(cpu_ns=0, cpuset="0-7"))
    coll.be.collect(1.0, 1.0, [])
    host.set_cgroup(be_dir, CgroupValues(cpu_ns=int(1e9), cpuset="0-7"))
    coll.be.collect(3.0, 3.0, [])
    assert count(m, "koordlet_be_suppress_be_used_cpu_cores", node=N) == pytest.approx(0.5)


def test_nodemetric_report_records_reclaimable_and_with_the_gate_the_usages():
    from koordlet.prediction.reclaimable import ReclaimPrediction
    m = AgentMetrics(N)
    status = {"nodeMetric": {"nodeUsage": {"resources": {"cpu": "1500m", "memory": "1Gi"}},
                             "systemUsage": {"resources": {"cpu": "250m", "memory": "100Mi"}},
                             "numaUsages": [{"numaNodeID": 1, "nodeUsage": {"resources": {"cpu": "1", "memory": "1Ki"}},
                                             "systemUsage": {}}]}}
    ctx = SimpleNamespace(metrics=m, config=SimpleNamespace(gate=lambda g: g == "NodeMetricPromMetrics"))
    record_metrics(ctx, status, ReclaimPrediction(Resources(1500, 2**30), None))
    r = "koordlet_node_priority_resource_reclaimable"
    assert count(m, r, node=N, priority="koord-prod", resource="cpu", unit="core") == 1.5
    assert count(m, r, node=N, priority="koord-prod", resource="memory", unit="byte") == 2**30
    assert count(m, "koordlet_node_resource_priority_reclaimable_status", node=N, priority="koord-prod") == 0
    assert count(m, "koordlet_node_metric_node_usage", node=N, resource="cpu", unit="core") == 1.5
    assert count(m, "koordlet_node_metric_system_usage", node=N, resource="memory", unit="byte") == 100 * 2**20
    assert count(m, "koordlet_node_metric_numa_node_usage", node=N, numa_node_id="1", resource="memory",
                 unit="byte") == 1024
    # the prediction failed: 0 with status 1; the NUMA node that dropped out of the status goes
    record_metrics(ctx, {"nodeMetric": {}}, ReclaimPrediction(None, None, "no model"))
    assert count(m, r, node=N, priority="koord-prod", resource="cpu", unit="core") == 0
    assert count(m, "koordlet_node_resource_priority_reclaimable_status", node=N, priority="koord-prod") == 1
    assert count(m, "koordlet_node_metric_numa_node_usage", node=N, numa_node_id="1", resource="memory",
                 unit="byte") is None
    off = AgentMetrics(N)
    record_metrics(SimpleNamespace(metrics=off, config=SimpleNamespace(gate=lambda g: False)), status, None)
    assert count(off, "koordlet_node_metric_node_usage", node=N, resource="cpu", unit="core") is None


def test_prediction_records_each_predictors_answer(tmp_path):
    from koordlet.metriccache import MetricCache
    m = AgentMetrics(N)
    prediction = Prediction(MetricCache(None), PredictionConfig(checkpoint_dir=None), m)
    meta = pod_meta("u1", "web", containers={"app": A}, resources={"app": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    layout=Cgroups(str(tmp_path), CgroupVersion.V2, Driver.SYSTEMD).layout)
    prediction.reclaimable(1e9, Resources(8000, 16 * 2**30), [meta])
    # no models yet: the pod predictor still answers (the pod counts whole), the priority one cannot
    peak = "koordlet_node_predicted_resource_peak"
    assert count(m, peak, node=N, predictor="podReclaimablePredictor", resource="cpu", unit="core") == 1.0
    assert count(m, peak, node=N, predictor="podReclaimablePredictor", resource="memory", unit="byte") == 2**30
    assert count(m, peak, node=N, predictor="priorityReclaimablePredictor", resource="cpu", unit="core") is None
    assert count(m, "koordlet_node_predicted_resource_reclaimable", node=N, predictor="podReclaimablePredictor",
                 resource="cpu", unit="core") == 0


def test_pod_sync_rows_are_the_batch_and_mid_resources_of_started_containers(tmp_path):
    layout = Cgroups(str(tmp_path), CgroupVersion.V2, Driver.SYSTEMD).layout
    be = pod_meta("u1", "be", namespace="shop", qos="BestEffort", containers={"app": A, "side": "b" * 64},
                  resources={"app": {"requests": {"kubernetes.io/batch-cpu": "500",
                                                  "kubernetes.io/batch-memory": "1Gi"},
                                     "limits": {"kubernetes.io/batch-cpu": "1k",
                                                "kubernetes.io/batch-memory": "1Gi"}},
                             "side": {"limits": {"kubernetes.io/mid-cpu": "200"}}}, layout=layout)
    rows = resource_rows([be])
    got = {(r.container_name, r.resource): (r.request, r.limit) for r in rows}
    assert got == {("app", "kubernetes.io/batch-cpu"): (500, 1000), ("app", "kubernetes.io/batch-memory"): (2**30,
                                                                                                            2**30),
                   ("side", "kubernetes.io/mid-cpu"): (200, 200)}     # the API server defaults request to limit
    assert {r.container_id for r in rows} == {"containerd://" + A, "containerd://" + "b" * 64}
    m = AgentMetrics(N)
    m.pods_synced(["u1"], rows)
    assert count(m, "koordlet_container_resource_limits", node=N, resource="kubernetes.io/batch-cpu", unit="byte",
                 pod_uid="u1", pod_name="be", pod_namespace="shop", container_id="containerd://" + A,
                 container_name="app") == 1000


def test_pod_resources_strategy_times_its_decisions_per_level_and_resource(tmp_path):
    from tests.unit.test_qos_strategies import build as build_tree
    from tests.unit.test_qos_strategies import fake_host
    _paths, cg, files = fake_host(tmp_path, files=())
    lsr = {"namespace": "ns", "phase": None, "qos_class": "LSR", "qos": "Guaranteed", "containers": {"c0": "0" * 64},
           "resources": {"c0": {}}}
    ok = agent_pod("u-ok", "u-ok", **lsr,
                   annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset": "4-5"}'})
    broken = agent_pod("u-broken", "u-broken", **lsr, annotations={"scheduling.koordinator.sh/resource-status": "{"})
    metas = build_tree(cg, files, [ok, broken])
    m = AgentMetrics(N)
    view = node_view(pods=metas, ls_pools={0: (0, 1, 2, 3)})
    PodResources(metrics=m).reconcile(view, Executor(cg))
    h = "koordlet_runtime_hook_reconciler_invoked_duration_milliseconds"
    assert count(m, h, node=N, level="container", resource_type="cpuset.cpus", status="succeeded") == 1
    assert count(m, h, node=N, level="container", resource_type="cpuset.cpus", status="failed") == 1


def test_blkio_counts_its_read_of_the_nodes_local_storage(tmp_path):
    from koordlet.host.paths import HostPaths
    paths = HostPaths.under(str(tmp_path))
    m = AgentMetrics(N)
    strategy = BlkIO(paths, m)
    cg = Cgroups(paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
    view = node_view()
    strategy.reconcile(view, Executor(cg))             # no mount table under this root
    assert count(m, "koordlet_collect_node_local_storage_info_status", node=N, status="failed") == 1
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "mountinfo").write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n")
    strategy.reconcile(view, Executor(cg))
    assert count(m, "koordlet_collect_node_local_storage_info_status", node=N, status="succeeded") == 1


def test_nri_hooks_record_the_oom_score_adj_they_set_and_the_plugin_times_each_event(tmp_path):
    from nri_plugin.hooks import Hooks
    from nri_plugin.plugin import NRIPlugin, PluginSettings
    from tests.hookfeatures import hook_features
    from tests.unit.test_nri_hooks import POOLS, container, sandbox
    from tests.unit.test_qos_strategies import fake_host
    _paths, cg, _ = fake_host(tmp_path, files=())
    m = AgentMetrics(N)
    hooks = Hooks(hook_features("oom_score_adj"), cg.layout, lambda: node_view(ls_pools=POOLS), metrics=m)
    pod = sandbox("u-oom", "LS", annotations={"koordinator.sh/oom-score-adj": "-500"}, name="web")
    plugin = NRIPlugin(PluginSettings(socket_path="/nonexistent/nri.sock"), hooks, m)

    async def create() -> None:
        await plugin._run("CreateContainer", 5.0, hooks.create_container, pod, container(pod, "app"))
        await plugin._run("RunPodSandbox", 5.0, lambda: 1 / 0)        # a hook that raises: failed, fail-open

    asyncio.run(create())
    assert count(m, "koordlet_container_oom_score_adj", node=N, pod_name="web", pod_namespace="ns",
                 pod_uid="u-oom", container_name="app") == -500
    h = "koordlet_runtime_hook_invoked_duration_milliseconds"
    assert count(m, h, node=N, hook="koordlet-py", stage="PreCreateContainer", status="succeeded") == 1
    assert count(m, h, node=N, hook="koordlet-py", stage="PreRunPodSandbox", status="failed") == 1
