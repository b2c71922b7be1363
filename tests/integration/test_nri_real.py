"""NRI hooks against the real kernel: a "created" container's cgroup ends with the settings the hook promised,
and the reconciler — deciding later from the kubelet's pod — agrees with them and writes nothing.

The runtime side is the test peer; where containerd would hand the adjustment to runc, the test writes the
adjusted values into a real container cgroup exactly as runc does (shares, quota, memory limit, cpuset), and
starts a process there.
"""

from __future__ import annotations

import os

import pytest

from koordlet._proto.nri import api_pb2 as api
from koordlet.qos.pod_resources import PodResources
from koordlet.writer.executor import Executor
from nri_plugin.hooks import Hooks
from tests.builders import node_view, pod_meta
from tests.hookfeatures import hook_features
from tests.integration.test_nri_plugin import Harness
from tests.integration.test_qos_real import host, kernel
from tests.realcgroup import IDLE, cpus_allowed
from tests.unit.test_nri_hooks import STATUS, be_spec, container, sandbox
from tests.unit.test_qos_rules import BATCH
from tests.waits import wait_for

pytestmark = pytest.mark.root

UID_BE, UID_LSR = "66666666-7777-8888-9999-000000000000", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
CID_BE, CID_LSR = "b" * 64, "c" * 64


def apply_like_runc(tree, rel: str, r: api.LinuxResources) -> None:
    """What runc does with the adjusted OCI resources for a new container cgroup (v1)."""
    tree.mkdir(rel)
    writes = []
    if r.cpu.HasField("shares"):
        writes.append(("cpu", "cpu.shares", r.cpu.shares.value))
    if r.cpu.HasField("quota"):
        writes.append(("cpu", "cpu.cfs_quota_us", r.cpu.quota.value))
    if r.memory.HasField("limit"):
        writes.append(("memory", "memory.limit_in_bytes", r.memory.limit.value))
    if r.cpu.cpus:
        writes.append(("cpuset", "cpuset.cpus", r.cpu.cpus))
    for sub, name, value in writes:
        with open(tree.real(sub, os.path.join(rel, name)), "w") as f:
            f.write(str(value))


def test_created_container_cgroup_holds_what_the_hook_promised(real_tree, tmp_path):
    _paths, cg = host(real_tree)
    layout = cg.layout
    for d in ("kubepods", "kubepods/besteffort", "kubepods/burstable"):
        real_tree.mkdir(d)
    be_dir, lsr_dir = f"kubepods/besteffort/pod{UID_BE}", f"kubepods/pod{UID_LSR}"
    real_tree.mkdir(be_dir)            # the kubelet made the pod cgroups before the sandbox ran
    real_tree.mkdir(lsr_dir)
    with open(real_tree.real("cpu", os.path.join(lsr_dir, "cpu.cfs_quota_us")), "w") as f:
        f.write("100000")              # the kubelet's limit for a Guaranteed pod; pinned pods must not be throttled
    last_cpu = str(os.cpu_count() - 1)
    status = {STATUS: f'{{"cpuset": "{last_cpu}"}}'}
    executor = Executor(cg)
    pools = {0: tuple(range(os.cpu_count() or 1))}
    empty_view = node_view(ls_pools=pools)
    current = {"view": empty_view}                 # the pods are new: the agent has not seen them yet
    harness = Harness(tmp_path)
    try:
        rt = harness.runtime()
        hooks = Hooks(hook_features(), layout, lambda: current["view"], executor=executor)
        from nri_plugin.plugin import NRIPlugin, PluginSettings
        plugin = NRIPlugin(PluginSettings(socket_path=harness.socket, backoff_initial=0.1), hooks)
        plugin.start()
        harness.plugins.append(plugin)
        assert rt.wait_ready(5.0)

        be = sandbox(UID_BE, "BE", "besteffort", be_spec("app"))
        lsr = sandbox(UID_LSR, "LSR", "guaranteed", status)
        rt.run_pod_sandbox(be)
        rt.run_pod_sandbox(lsr)
        # pod level, written by the hook through the executor: the batch sums of the pod's containers
        assert (kernel(real_tree, "cpu", be_dir, "cpu.shares"), kernel(real_tree, "cpu", be_dir, "cpu.cfs_quota_us"),
                kernel(real_tree, "memory", be_dir, "memory.limit_in_bytes")) == ("512", "200000", str(2 << 30))
        assert kernel(real_tree, "cpu", lsr_dir, "cpu.cfs_quota_us") == "-1"

        be_adj = rt.create_container(be, container(be, "app", cid=CID_BE)).adjust.linux.resources
        lsr_adj = rt.create_container(lsr, container(lsr, "app", cid=CID_LSR, shares=1024,
                                                     quota=100000)).adjust.linux.resources
        be_c, lsr_c = layout.container_dir(be_dir, "containerd", CID_BE), layout.container_dir(lsr_dir, "", CID_LSR)
        apply_like_runc(real_tree, be_c, be_adj)
        apply_like_runc(real_tree, lsr_c, lsr_adj)
        assert (kernel(real_tree, "cpu", be_c, "cpu.shares"), kernel(real_tree, "cpu", be_c, "cpu.cfs_quota_us"),
                kernel(real_tree, "memory", be_c, "memory.limit_in_bytes")) == ("512", "200000", str(2 << 30))
        assert kernel(real_tree, "cpuset", lsr_c, "cpuset.cpus") == last_cpu
        assert kernel(real_tree, "cpu", lsr_c, "cpu.cfs_quota_us") == "-1"
        proc = real_tree.spawn(lsr_c, IDLE)
        assert wait_for(lambda: cpus_allowed(proc.pid) == last_cpu, 5.0)

        # later the kubelet reports both pods; the reconciler decides from the spec and finds nothing to do
        # (as the kubelet reports them once the container runs: spec resources, container id)
        metas = (pod_meta(UID_BE, UID_BE[:8], namespace="ns", phase=None, qos_class="BE", qos="BestEffort",
                          annotations=be_spec("app"), containers={"app": CID_BE}, resources={"app": BATCH},
                          layout=layout),
                 pod_meta(UID_LSR, UID_LSR[:8], namespace="ns", phase=None, qos_class="LSR", qos="Guaranteed",
                          annotations=status, containers={"app": CID_LSR}, resources={"app": {}}, layout=layout))
        assert [m.containers[0][1] for m in metas] == [be_c, lsr_c]
        current["view"] = node_view(pods=metas, ls_pools=pools)
        before, events = executor.total.written, len(executor.events())
        PodResources().reconcile(current["view"], executor)      # type: ignore[arg-type]
        assert executor.total.written == before, executor.events()[events:]
        assert executor.total.failed == 0
    finally:
        harness.close()
