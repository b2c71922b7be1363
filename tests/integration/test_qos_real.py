"""QoS enforcement against the real kernel: real pod cgroups, real busy processes, the effect measured.

- cpu.idle on the BestEffort dir: a BE spinner and an LS spinner sharing one CPU; with BE idle the LS one gets
  (nearly) the whole CPU, without it they split ~50/50. Measured from /proc/<pid>/stat, as ratios.
- cpuset for a pinned LSR pod: the container's processes end up with that Cpus_allowed_list.
- a restart over a converged host writes nothing (the audit trail proves it).
- host mode: `koordlet run` applies a local NodeSLO's host-application QoS to a real non-container cgroup.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from koordlet.agent import Agent
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.ops import config as configmod
from koordlet.qos.cpu_qos import CPUQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.writer.executor import Executor
from tests.builders import host_paths, node_view, pod_meta
from tests.realcgroup import BUSY, IDLE, cpus_allowed
from tests.unit.test_qos_rules import slo
from tests.waits import wait_for

pytestmark = pytest.mark.root

UID_LS, UID_BE, UID_LSR = ("11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000",
                           "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")


def host(tree):
    paths = host_paths(tree.link_root)
    return paths, Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)


def kernel(tree, sub: str, rel: str, file: str) -> str:
    with open(tree.real(sub, os.path.join(rel, file))) as f:
        return f.read().strip()


def set_kernel(tree, sub: str, rel: str, file: str, value: str) -> None:
    with open(tree.real(sub, os.path.join(rel, file)), "w") as f:
        f.write(value)


def exec_seconds(pid: int) -> float:
    """The kernel's exact CPU time of a (single-threaded) task: /proc/<pid>/schedstat, in ns."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def share(pids: tuple[int, int], seconds: float = 2.0) -> float:
    """Fraction of the CPU time the first pid got while both competed. A ratio of the two tasks' own accounts, so
    other load on the CPU shrinks both and changes nothing; the accounts are exact (ns), so a tenth of a second
    of CPU between them is plenty to tell 50/50 from 99/1."""
    a0, b0 = exec_seconds(pids[0]), exec_seconds(pids[1])
    time.sleep(seconds)
    a, b = exec_seconds(pids[0]) - a0, exec_seconds(pids[1]) - b0
    assert a + b > 0.1, f"the spinners hardly ran ({a + b:.3f} s of CPU in {seconds} s)"
    return a / (a + b)


@pytest.mark.skipif(not os.path.exists("/sys/fs/cgroup/cpu/cpu.idle"), reason="kernel without cpu.idle")
def test_be_cpu_idle_yields_the_cpu_to_ls(real_tree):
    paths, cg = host(real_tree)
    common = {"namespace": "ns", "phase": None, "resources": {"main": {}}, "layout": cg.layout}
    metas = (pod_meta(UID_LS, "p-ls", qos_class="LS", qos="Burstable", containers={"main": "1" * 64}, **common),
             pod_meta(UID_BE, "p-be", qos_class="BE", qos="BestEffort", containers={"main": "2" * 64}, **common))
    for m in metas:
        real_tree.mkdir(m.containers[0][1])
    for rel in reversed(real_tree.dirs):            # one CPU, so they must compete (children narrowed first)
        set_kernel(real_tree, "cpuset", rel, "cpuset.cpus", "0")
    ls_proc = real_tree.spawn(metas[0].containers[0][1], BUSY)
    be_proc = real_tree.spawn(metas[1].containers[0][1], BUSY)
    time.sleep(0.3)
    before = share((ls_proc.pid, be_proc.pid))
    strategy = CPUQOS(cg, paths)
    assert strategy.idle and not strategy.bvt          # this VM: mainline kernel
    ex = Executor(cg)
    strategy.reconcile(node_view(pods=metas, slo=slo(be={"enable": True})), ex)
    assert kernel(real_tree, "cpu", "kubepods/besteffort", "cpu.idle") == "1"
    after = share((ls_proc.pid, be_proc.pid))
    print(f"LS share of one CPU: without BE idle {before:.3f}, with BE idle {after:.3f}")
    assert 0.3 < before < 0.7, f"without cpu.idle the two should split the CPU, LS got {before:.2f}"
    assert after > 0.9, f"with the BE tier idle, LS should get nearly all the CPU, got {after:.2f}"
    # turning BE off gives the BE tier its weight back
    strategy.reconcile(node_view(pods=metas), ex)
    assert kernel(real_tree, "cpu", "kubepods/besteffort", "cpu.idle") == "0"


def test_lsr_cpuset_moves_the_processes_and_restart_writes_nothing(real_tree):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    paths, cg = host(real_tree)
    target = str(max(os.sched_getaffinity(0)))
    meta = pod_meta(UID_LSR, "p-lsr", namespace="ns", phase=None, qos_class="LSR", qos="Guaranteed",
                    annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": target})},
                    containers={"main": "3" * 64}, resources={"main": {}}, layout=cg.layout)
    real_tree.mkdir(meta.containers[0][1])
    set_kernel(real_tree, "cpu", meta.cgroup_dir, "cpu.cfs_quota_us", "50000")
    set_kernel(real_tree, "cpu", meta.containers[0][1], "cpu.cfs_quota_us", "50000")
    proc = real_tree.spawn(meta.containers[0][1], IDLE)
    assert cpus_allowed(proc.pid) != target
    view = node_view(pods=(meta,), ls_pools={0: (0, 1)})
    ex = Executor(cg)
    PodResources().reconcile(view, ex)
    assert cpus_allowed(proc.pid) == target
    assert kernel(real_tree, "cpuset", meta.containers[0][1], "cpuset.cpus") == target
    # cpuset pods are not throttled: quota unset (pod first, then container: v1 checks the parent)
    assert kernel(real_tree, "cpu", meta.cgroup_dir, "cpu.cfs_quota_us") == "-1"
    assert kernel(real_tree, "cpu", meta.containers[0][1], "cpu.cfs_quota_us") == "-1"
    assert len(ex.events()) == 3
    # "restart": fresh executor and strategies over the converged host
    ex2 = Executor(cg)
    PodResources().reconcile(view, ex2)
    CPUQOS(cg, paths).reconcile(view, ex2)
    assert ex2.events() == [] and ex2.total.written == 0 and ex2.total.failed == 0


def test_host_mode_applies_host_application_qos_from_a_local_nodeslo(real_tree, tmp_path):
    _, _cg = host(real_tree)
    real_tree.mkdir("host-best-effort/logagent")
    real_tree.mkdir("host-latency-sensitive/nginx")
    set_kernel(real_tree, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus", "0")
    app = real_tree.spawn("host-best-effort/logagent", IDLE)
    nodeslo = tmp_path / "nodeslo.yaml"
    nodeslo.write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                   "metadata": {"name": "n"},
                                   "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}},
                                            "hostApplications": [
                                                {"name": "logagent", "qos": "BE", "priority": "koord-batch"},
                                                {"name": "nginx", "qos": "LS", "priority": "koord-prod"},
                                                {"name": "evil", "qos": "BE",
                                                 "cgroupPath": {"base": "CgroupRoot", "relativePath": "../../x"}}]}}))
    cfg = configmod.build(flags={"standalone": True, "node-name": "n", "cgroup-root-dir": real_tree.link_root,
                                 "cgroup-driver": "cgroupfs", "nodeslo-file": str(nodeslo),
                                 "tsdb-path": str(tmp_path / "tsdb"), "report-dir": "", "addr": ("127.0.0.1", 0),
                                 "prediction-checkpoint-filepath": str(tmp_path / "ckpt")}, environ={})
    agent = Agent.build(cfg)
    assert agent.reconciler is not None
    stop = threading.Event()
    t = threading.Thread(target=agent.run, args=(stop,))
    t.start()
    try:
        def applied() -> bool:
            return (kernel(real_tree, "cpu", "host-best-effort/logagent", "cpu.idle") == "1" and
                    kernel(real_tree, "cpuset", "host-latency-sensitive/nginx", "cpuset.cpus") ==
                    kernel(real_tree, "cpuset", "", "cpuset.cpus"))
        assert wait_for(applied, timeout=10), "host application QoS not applied"
        assert any(e["owner"] == "hostapp logagent" for e in agent.executor.events())
        assert app.poll() is None
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
