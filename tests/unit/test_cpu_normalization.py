"""Gate CPUNormalization: the cfs quota of cpu-share pods (LS, or no class and not pinned) divided by the node's
``node.koordinator.sh/cpu-normalization-ratio``, as upstream's cpunormalization hook does in its reconciler; the
CPU burst strategy then keeps the same base, so the two never undo each other. Over a fake v1 tree."""

from __future__ import annotations

from functools import partial
from typing import Any

from koordlet.metriccache import MetricCache
from koordlet.qos.cpu_burst import CPUBurst
from koordlet.qos.pod_resources import PodResources
from koordlet.rules.resources import cpu_share_pod, normalization_rule, normalized_pod_quota
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.pod import resource_status
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view
from tests.unit.test_qos_strategies import build, fake_host, value

RATIO = "node.koordinator.sh/cpu-normalization-ratio"
LIMITED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
UNLIMITED = {"requests": {"cpu": "1"}}
PINNED = {"scheduling.koordinator.sh/resource-status": '{"cpuset": "0-1"}'}
C0, C1 = f"{0:064x}", f"{1:064x}"          # container ids

# pods as the kubelet reports them before a phase; uid, QoS classes, annotations and containers vary
pod = partial(agent_pod, namespace="ns", phase=None)


def test_which_pods_and_quotas() -> None:
    one = {"containers": {"c0": C0}, "resources": {"c0": LIMITED}}
    ls = pod("u-1", "p", qos_class="LS", **one)
    none_pinned = pod("u-1", "p", qos="Guaranteed", annotations=PINNED, **one)
    assert cpu_share_pod(ls, resource_status(ls))
    assert cpu_share_pod(pod("u-1", "p", **one), resource_status(ls))
    assert not cpu_share_pod(none_pinned, resource_status(none_pinned))
    assert not cpu_share_pod(pod("u-1", "p", qos_class="LSR", qos="Guaranteed"), resource_status(ls))
    assert not cpu_share_pod(pod("u-1", "p", qos_class="BE", qos="BestEffort"), resource_status(ls))
    two = {"c0": C0, "c1": C1}
    assert normalized_pod_quota(pod("u-1", "p", qos_class="LS", containers=two,
                                    resources={"c0": LIMITED, "c1": LIMITED}), 1.5) == 266_667   # ceil(400000/1.5)
    assert normalized_pod_quota(pod("u-1", "p", qos_class="LS", containers=two,
                                    resources={"c0": LIMITED, "c1": UNLIMITED}), 1.5) is None    # kubelet: no quota
    assert normalization_rule({}) == (None, None)
    assert normalization_rule({RATIO: "1.25"}) == (1.25, None)
    assert normalization_rule({RATIO: "-2"})[0] is None and normalization_rule({RATIO: "-2"})[1]


def test_reconciler_divides_ls_quotas_and_restores_them(tmp_path: Any) -> None:
    _paths, cg, files = fake_host(tmp_path, files=())
    two = {"c0": C0, "c1": C1}
    ls = pod("u-ls", "u-ls", qos_class="LS", containers=two, resources={"c0": LIMITED, "c1": LIMITED})
    half = pod("u-none", "u-none", containers=two, resources={"c0": LIMITED, "c1": UNLIMITED})
    pinned = pod("u-pinned", "u-pinned", qos="Guaranteed", annotations=PINNED, containers={"c0": C0},
                 resources={"c0": LIMITED})
    metas = build(cg, files, [ls, half, pinned])
    for m in metas:                                  # what the kubelet set
        for rel in [m.cgroup_dir] + [r for _, r in m.containers]:
            with open(cg.path("cpu", rel, "cpu.cfs_quota_us"), "w") as f:
                f.write("200000\n" if rel != m.cgroup_dir else "400000\n")
    ex = Executor(cg)
    strategy = PodResources(cpuset=False, batch=False, normalization=True)
    strategy.reconcile(node_view(pods=metas, node=NodeInfo("n", annotations={RATIO: "1.6"})), ex)
    ls_dir, (c0, c1) = metas[0].cgroup_dir, [r for _, r in metas[0].containers]
    assert value(cg, "cpu", ls_dir, "cpu.cfs_quota_us") == "250000"             # 400000 / 1.6
    assert value(cg, "cpu", c0, "cpu.cfs_quota_us") == value(cg, "cpu", c1, "cpu.cfs_quota_us") == "125000"
    none_dir, (n0, n1) = metas[1].cgroup_dir, [r for _, r in metas[1].containers]
    assert value(cg, "cpu", n0, "cpu.cfs_quota_us") == "125000"
    assert value(cg, "cpu", n1, "cpu.cfs_quota_us") == "200000"                 # no limit: left alone
    assert value(cg, "cpu", none_dir, "cpu.cfs_quota_us") == "400000"           # kubelet set none: left alone
    pinned_c = metas[2].containers[0][1]
    assert value(cg, "cpu", pinned_c, "cpu.cfs_quota_us") == "200000"           # pinned: not cpu-share
    assert {e["reason"] for e in ex.events()} == {"CPUNormalization"}
    n = len(ex.events())
    strategy.reconcile(node_view(pods=metas, node=NodeInfo("n", annotations={RATIO: "1.6"})), ex)
    assert len(ex.events()) == n                                                # converged
    # the ratio goes: the kubelet's quotas come back, once
    strategy.reconcile(node_view(pods=metas, node=NodeInfo("n", annotations={})), ex)
    assert value(cg, "cpu", ls_dir, "cpu.cfs_quota_us") == "400000"
    assert value(cg, "cpu", c0, "cpu.cfs_quota_us") == "200000"
    n = len(ex.events())
    strategy.reconcile(node_view(pods=metas, node=NodeInfo("n", annotations={})), ex)
    assert len(ex.events()) == n


def test_gate_off_leaves_quotas_alone(tmp_path: Any) -> None:
    _paths, cg, files = fake_host(tmp_path, files=())
    metas = build(cg, files, [pod("u-ls", "u-ls", qos_class="LS", containers={"c0": C0}, resources={"c0": LIMITED})])
    ex = Executor(cg)
    view = node_view(pods=metas, node=NodeInfo("n", annotations={RATIO: "2"}))
    PodResources(cpuset=False, batch=False).reconcile(view, ex)
    assert ex.events() == []


def test_cpu_burst_keeps_the_normalized_base(tmp_path: Any) -> None:
    """Policy none resets a container's quota to its base each cycle; with CPUNormalization that base is the
    normalized quota, so burst and pod-resources agree and neither writes again."""
    _paths, cg, files = fake_host(tmp_path, files=("cpu.cfs_period_us", "cpu.cfs_burst_us"))
    metas = build(cg, files, [pod("u-ls", "u-ls", qos_class="LS", containers={"c0": C0}, resources={"c0": LIMITED})])
    for rel in [metas[0].cgroup_dir] + [r for _, r in metas[0].containers]:
        with open(cg.path("cpu", rel, "cpu.cfs_period_us"), "w") as f:
            f.write("100000\n")
    spec, errors = merge_node_slo_spec({"cpuBurstStrategy": {"policy": "none"}}, "n")
    assert not errors
    ex = Executor(cg)
    resources = PodResources(cpuset=False, batch=False, normalization=True)
    burst = CPUBurst(MetricCache(None), 1.0, normalization=True)
    view = node_view(pods=metas, slo=spec, node=NodeInfo("n", annotations={RATIO: "2"}))
    for _ in range(2):
        resources.reconcile(view, ex)
        burst.reconcile(view, ex)
    c0 = metas[0].containers[0][1]
    assert value(cg, "cpu", c0, "cpu.cfs_quota_us") == "100000"
    n = len(ex.events())
    resources.reconcile(view, ex)
    burst.reconcile(view, ex)
    assert len(ex.events()) == n
    # without the gate, burst resets to the kubelet's base (upstream's fight, here only when the gate is off)
    CPUBurst(MetricCache(None), 1.0).reconcile(view, ex)
    assert value(cg, "cpu", c0, "cpu.cfs_quota_us") == "200000"
