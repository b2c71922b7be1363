"""nri_plugin.hooks: NRI requests -> adjustments and pod writes, the same answers as the reconciler's rules."""

from __future__ import annotations

import json
import logging
import os

import pytest

from koordlet._proto.nri import api_pb2 as api
from koordlet.host.cgroup import KubeQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor
from nri_plugin.hooks import Hooks, kube_qos_of_parent
from tests.builders import node_view, pod_meta
from tests.hookfeatures import hook_features
from tests.unit.test_qos_rules import ALL_ON, BATCH, slo
from tests.unit.test_qos_strategies import fake_host, mkcg, value

POOLS = {0: (0, 1, 2, 3), 1: (6, 7)}      # cpu-shared-pools: NUMA node -> CPUs
SPEC = "node.koordinator.sh/extended-resource-spec"
STATUS = "scheduling.koordinator.sh/resource-status"


def sandbox(uid: str, qos: str | None = None, kube: str = "burstable", annotations=None, labels=None,
            name: str | None = None) -> api.PodSandbox:
    """A PodSandbox as containerd sends it (cgroupfs parent encodes the Kubernetes QoS class)."""
    lb = dict(labels or {})
    if qos:
        lb["koordinator.sh/qosClass"] = qos
    parent = f"/kubepods/{kube}/pod{uid}" if kube != "guaranteed" else f"/kubepods/pod{uid}"
    pod = api.PodSandbox(id="sb-" + uid, name=name or uid, uid=uid, namespace="ns", labels=lb,
                         annotations=dict(annotations or {}))
    pod.linux.cgroup_parent = parent
    return pod


def container(pod: api.PodSandbox, name: str = "c0", cid: str | None = None, shares: int | None = 2,
              quota: int | None = None, cpus: str = "", memory: int | None = None,
              state: int = api.CONTAINER_CREATED) -> api.Container:
    ctr = api.Container(id=cid or f"{pod.uid}-{name}".replace("-", "")[:60].ljust(64, "0"), pod_sandbox_id=pod.id,
                        name=name, state=state)
    res = ctr.linux.resources
    if shares is not None:
        res.cpu.shares.value = shares
    if quota is not None:
        res.cpu.quota.value = quota
    res.cpu.cpus = cpus
    if memory is not None:
        res.memory.limit.value = memory
    return ctr


def be_spec(*names: str) -> dict[str, str]:
    return {SPEC: json.dumps({"containers": dict.fromkeys(names, BATCH)})}


def hooks(tmp_path, v: NodeView | None = None, features=hook_features(), **kw) -> Hooks:
    _paths, cg, _ = fake_host(tmp_path, files=())
    return Hooks(features, cg.layout, lambda: v, **kw)


def resources(adjust: api.ContainerAdjustment) -> dict:
    """The set fields of an adjustment's resources, for exact comparison."""
    r = adjust.linux.resources
    out = {}
    if r.cpu.cpus:
        out["cpus"] = r.cpu.cpus
    for f in ("shares", "quota"):
        if r.cpu.HasField(f):
            out[f] = getattr(r.cpu, f).value
    if r.memory.HasField("limit"):
        out["memory"] = r.memory.limit.value
    if r.HasField("rdt_class"):
        out["rdt"] = r.rdt_class.value
    if adjust.linux.HasField("oom_score_adj"):
        out["oom"] = adjust.linux.oom_score_adj.value
    return out


def test_be_container_gets_batch_resources_from_the_annotation(tmp_path):
    h = hooks(tmp_path, node_view(ls_pools=POOLS))
    pod = sandbox("u-be", "BE", "besteffort", be_spec("c0"))
    adjust = h.create_container(pod, container(pod))
    # shares = 500m * 1024 / 1000; quota = 2 cores * 100 ms; memory limit = 2Gi; no cpuset (suppress owns BE)
    assert resources(adjust) == {"shares": 512, "quota": 200000, "memory": 2 << 30}
    assert not adjust.env and not adjust.mounts and not adjust.annotations
    assert not adjust.linux.HasField("oom_score_adj") and not adjust.linux.cgroups_path


def test_only_differing_owned_fields_are_set(tmp_path):
    h = hooks(tmp_path, node_view(ls_pools=POOLS))
    pod = sandbox("u-ls", "LS")
    assert resources(h.create_container(pod, container(pod))) == {"cpus": "0-3,6-7"}
    # the runtime already has the pools (as a set, in another spelling): nothing to say
    adjust = h.create_container(pod, container(pod, cpus="6,7,0-3"))
    assert adjust.ByteSize() == 0
    pinned = sandbox("u-lsr", "LSR", "guaranteed", {STATUS: '{"cpuset": "4-5"}'})
    assert resources(h.create_container(pinned, container(pinned, shares=2048, quota=400000))) == \
        {"cpus": "4-5", "quota": -1}
    assert resources(h.create_container(pinned, container(pinned, quota=None, cpus="4-5"))) == {}


def test_without_a_view_only_the_pod_level_rules_apply(tmp_path):
    h = hooks(tmp_path, None)
    pod = sandbox("u-be", "BE", "besteffort", be_spec("c0"))
    assert resources(h.create_container(pod, container(pod))) == {"shares": 512, "quota": 200000,
                                                                    "memory": 2 << 30}
    ls = sandbox("u-ls", "LS")
    assert h.create_container(ls, container(ls)).ByteSize() == 0     # pools unknown: no cpuset


def test_malformed_annotations_leave_out_the_bad_part_and_say_so(tmp_path, caplog):
    h = hooks(tmp_path, node_view(ls_pools=POOLS), features=hook_features("oom_score_adj"))
    pod = sandbox("u-bad", "LSR", "guaranteed", {STATUS: "{", SPEC: "nope", "koordinator.sh/oom-score-adj": "x"},
                  name="broken")
    with caplog.at_level(logging.WARNING):
        adjust = h.create_container(pod, container(pod))
        h.create_container(pod, container(pod, "c1"))
    assert resources(adjust) == {"cpus": "0-3,6-7"}           # treated as unpinned: the share pools
    text = caplog.text
    for key in ("resource-status", "extended-resource-spec", "oom-score-adj"):
        assert text.count(key) == 1, key                     # once per pod, naming the key
    assert text.count("ns/broken") == 3
    bad_uid = sandbox("../../etc", "LS")
    assert h.create_container(bad_uid, container(bad_uid)).ByteSize() == 0
    assert "cannot be placed" in caplog.text


def test_update_container_names_the_container_or_says_nothing(tmp_path):
    h = hooks(tmp_path, node_view(ls_pools=POOLS))
    pod = sandbox("u-be", "BE", "besteffort", be_spec("c0"))
    ctr = container(pod)
    wanted = api.LinuxResources()
    wanted.cpu.shares.value, wanted.cpu.quota.value, wanted.memory.limit.value = 512, 200000, 2 << 30
    assert h.update_container(pod, ctr, wanted) == []
    kubelet = api.LinuxResources()
    kubelet.cpu.shares.value = 2
    (update,) = h.update_container(pod, ctr, kubelet)
    assert update.container_id == ctr.id and update.container_id
    assert update.linux.resources.cpu.shares.value == 512


def test_synchronize_reports_drift_of_live_containers_only(tmp_path):
    h = hooks(tmp_path, node_view(ls_pools=POOLS))
    be = sandbox("u-be", "BE", "besteffort", be_spec("a", "b", "c"))
    drifted = container(be, "a", state=api.CONTAINER_RUNNING)
    in_sync = container(be, "b", shares=512, quota=200000, memory=2 << 30, state=api.CONTAINER_RUNNING)
    exited = container(be, "c", state=api.CONTAINER_STOPPED)
    orphan = container(sandbox("u-gone", "BE", "besteffort"), "x", state=api.CONTAINER_RUNNING)
    (update,) = h.synchronize([be], [drifted, in_sync, exited, orphan])
    assert update.container_id == drifted.id and update.ignore_failure
    assert update.linux.resources.cpu.shares.value == 512


def test_oom_score_adj_spec_beats_the_pod_value(tmp_path):
    h = hooks(tmp_path, node_view(ls_pools=POOLS), features=hook_features("oom_score_adj"))
    pod = sandbox("u-oom", "LS", annotations={"koordinator.sh/oom-score-adj": "-500",
                                              "koordinator.sh/oom-score-adj-spec": '{"db": 900}'})
    assert resources(h.create_container(pod, container(pod, "db", cpus="0-3,6-7")))["oom"] == 900
    assert resources(h.create_container(pod, container(pod, "side", cpus="0-3,6-7")))["oom"] == -500
    off = hooks(tmp_path / "off", node_view(ls_pools=POOLS))
    assert "oom" not in resources(off.create_container(pod, container(pod, "db")))
    out_of_range = sandbox("u-oom2", "LS", annotations={"koordinator.sh/oom-score-adj": "2000"})
    assert "oom" not in resources(h.create_container(out_of_range, container(out_of_range)))


def test_rdt_class_names_only_existing_groups(tmp_path):
    root = tmp_path / "resctrl"
    feats = hook_features("resctrl", "resctrl_pods")
    h = hooks(tmp_path, node_view(ls_pools=POOLS), features=feats, resctrl_root=str(root))
    ls = sandbox("u-ls", "LS")
    assert "rdt" not in resources(h.create_container(ls, container(ls)))      # resctrl not mounted: no class
    os.makedirs(root / "LS")
    assert resources(h.create_container(ls, container(ls)))["rdt"] == "LS"
    annotated = sandbox("u-pod", "LS", annotations={"node.koordinator.sh/resctrl": '{"llc": {}}'})
    assert resources(h.create_container(annotated, container(annotated)))["rdt"] == "LS"
    os.makedirs(root / "koordlet-u-pod")
    assert resources(h.create_container(annotated, container(annotated)))["rdt"] == "koordlet-u-pod"


@pytest.mark.parametrize("parent,qos", [
    ("/kubepods/besteffort/pod1", KubeQOS.BESTEFFORT), ("/kubepods/burstable/pod1", KubeQOS.BURSTABLE),
    ("/kubepods/pod1", KubeQOS.GUARANTEED),
    ("kubepods-besteffort-pod1_2.slice", KubeQOS.BESTEFFORT), ("kubepods-burstable-pod1.slice", KubeQOS.BURSTABLE),
    ("kubepods-pod1.slice", KubeQOS.GUARANTEED)])
def test_kube_qos_from_the_cgroup_parent(parent, qos):
    assert kube_qos_of_parent(parent) is qos


def test_run_pod_sandbox_writes_what_the_reconciler_would(tmp_path):
    _paths, cg, files = fake_host(tmp_path, files=("cpu.bvt_warp_ns",))
    for q in KubeQOS:
        mkcg(cg, cg.layout.qos_dir(q), files)
    be_dir = cg.layout.pod_dir(KubeQOS.BESTEFFORT, "u-be")
    ls_dir = cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls")
    for d in (be_dir, ls_dir):
        mkcg(cg, d, files)
    ex = Executor(cg)
    v = node_view(slo=slo("groupIdentity", ls={**ALL_ON, "groupIdentity": 2}, be={**ALL_ON, "groupIdentity": -1}),
                  ls_pools=POOLS)
    h = Hooks(hook_features(), cg.layout, lambda: v, executor=ex, bvt=True)
    h.run_pod_sandbox(sandbox("u-be", "BE", "besteffort", be_spec("a", "b")))
    h.run_pod_sandbox(sandbox("u-ls", "LS"))
    assert (value(cg, "cpu", be_dir, "cpu.shares"), value(cg, "cpu", be_dir, "cpu.cfs_quota_us"),
            value(cg, "memory", be_dir, "memory.limit_in_bytes")) == ("1024", "400000", str(4 << 30))
    assert value(cg, "cpu", be_dir, "cpu.bvt_warp_ns") == "-1"
    assert value(cg, "cpu", ls_dir, "cpu.bvt_warp_ns") == "2"
    assert value(cg, "cpu", ls_dir, "cpu.shares") == "1024"        # no resources known: batch sums not guessed
    # the reconciler, given the same pod from the kubelet, has nothing left to do at the pod level
    meta = pod_meta("u-be", "u-be", namespace="ns", phase=None, qos_class="BE", qos="BestEffort",
                    containers={"c0": f"{0:064x}", "c1": f"{1:064x}"}, resources={"c0": BATCH, "c1": BATCH},
                    layout=cg.layout)
    pod_s = PodResources().plan(meta, v).pod
    assert (pod_s.cpu_shares, pod_s.cfs_quota, pod_s.memory_limit) == (1024, 400000, 4 << 30)


def test_post_start_wakes_the_reconciler_for_cookies_only(tmp_path):
    woken = []
    v = node_view(slo=slo("coreSched", ls=ALL_ON), ls_pools=POOLS)
    _paths, cg, _ = fake_host(tmp_path, files=())
    h = Hooks(hook_features("core_sched"), cg.layout, lambda: v, nudge=lambda: woken.append(1))
    ls, be = sandbox("u-ls", "LS"), sandbox("u-be", "BE", "besteffort")
    h.post_start_container(be, container(be))
    assert woken == []                                  # BE class is not enabled: cookie 0, nothing to do
    h.post_start_container(ls, container(ls))
    assert woken == [1]


def test_gpu_injection_through_create_container(tmp_path, caplog):
    from hami_bridge.inject import HostLayout
    uid = "11111111-2222-3333-4444-555555555555"
    host = HostLayout(libvgpu=str(tmp_path / "libvgpu.so"), lock_dir=str(tmp_path / "lock"),
                      cache_root=str(tmp_path / "containers"))
    _paths, cg, _ = fake_host(tmp_path, files=())
    h = Hooks(hook_features("gpu_env"), cg.layout, lambda: None, hami=host)
    alloc = json.dumps({"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-memory": "8Gi",
                                                           "koordinator.sh/gpu-core": "25",
                                                           "koordinator.sh/gpu-memory-ratio": "10"}}]})
    pod = sandbox(uid, "LS", annotations={"scheduling.koordinator.sh/device-allocated": alloc},
                  labels={"koordinator.sh/gpu-isolation-provider": "HAMi-core"})
    with caplog.at_level(logging.WARNING):
        missing = h.create_container(pod, container(pod, "app"))
    assert {e.key: e.value for e in missing.env} == {"NVIDIA_VISIBLE_DEVICES": "1"} and not missing.mounts
    assert "libvgpu.so missing" in caplog.text
    (tmp_path / "libvgpu.so").write_bytes(b"\x7fELF")
    (tmp_path / "lock").mkdir()
    adjust = h.create_container(pod, container(pod, "app"))
    env = {e.key: e.value for e in adjust.env}
    assert env["CUDA_DEVICE_MEMORY_LIMIT"] == str(8 << 30) and env["CUDA_DEVICE_SM_LIMIT"] == "25"
    assert env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"
    assert [(m.destination, m.source, list(m.options)) for m in adjust.mounts] == [
        ("/usr/local/vgpu", str(tmp_path / "containers" / f"{uid}_app"), ["rbind"]),
        ("/usr/local/vgpu/libvgpu.so", str(tmp_path / "libvgpu.so"), ["rbind"]),
        ("/tmp/vgpulock", str(tmp_path / "lock"), ["rbind"])]
    assert os.path.isdir(tmp_path / "containers" / f"{uid}_app")
    bad = sandbox(uid, "LS", annotations={"scheduling.koordinator.sh/device-allocated": "{"})
    assert h.create_container(bad, container(bad, "app")).ByteSize() == 0



@pytest.mark.skipif(os.geteuid() != 0, reason="creating device nodes (mknod) needs root")
def test_rdma_vf_device_nodes_through_create_container(tmp_path, caplog):
    """rdma_cm and the allocated VF's uverbs node, with the host node's numbers, mode 0666, for the container that
    asked for RDMA; a VF without verbs injects nothing and says why; a bus id that is not a PCI address never
    becomes a path."""
    import stat

    from doubles.fakepci import FakePci
    from koordlet.host.paths import HostPaths
    host = HostPaths.under(str(tmp_path / "host"))
    pci = FakePci(host.sys_root)
    pci.add("0000:09:00.0", pci_class="0x020000", vendor="0x15b3", device="0x101b")
    pci.add_vfs("0000:09:00.0", ["0000:09:00.4", "0000:09:00.5"])
    pci.add_verbs("0000:09:00.4", "uverbs4", "231:196")
    dev = tmp_path / "dev"
    (dev / "infiniband").mkdir(parents=True)
    os.mknod(dev / "infiniband" / "rdma_cm", stat.S_IFCHR | 0o666, os.makedev(10, 58))
    os.mknod(dev / "infiniband" / "uverbs4", stat.S_IFCHR | 0o666, os.makedev(231, 196))
    uid = "11111111-2222-3333-4444-555555555555"

    def allocated(*vfs):
        return {"scheduling.koordinator.sh/device-allocated": json.dumps({"rdma": [
            {"minor": 0, "id": "0000:09:00.0", "resources": {"koordinator.sh/rdma": "1"},
             "extension": {"vfs": [{"minor": -1, "busID": vf} for vf in vfs]}}]})}

    meta = pod_meta(uid, "train", namespace="ns", annotations=allocated("0000:09:00.4"), labels_key=False,
                    spec_containers=[{"name": "app", "resources": {"limits": {"koordinator.sh/rdma": "1"}}},
                                     {"name": "log"}], statuses=False, cgroup_dir=f"kubepods/burstable/pod{uid}")
    known = node_view(pods=[meta], ls_pools=POOLS)
    _paths, cg, _ = fake_host(tmp_path, files=())
    h = Hooks(hook_features("rdma_devices"), cg.layout, lambda: known, host=host, dev_root=str(dev))
    pod = sandbox(uid, annotations=allocated("0000:09:00.4"), name="train")
    adjust = h.create_container(pod, container(pod, "app"))
    assert [(d.path, d.type, d.major, d.minor, d.file_mode.value) for d in adjust.linux.devices] == [
        ("/dev/infiniband/rdma_cm", "c", 10, 58, 0o666), ("/dev/infiniband/uverbs4", "c", 231, 196, 0o666)]
    assert not h.create_container(pod, container(pod, "log")).linux.devices     # it did not ask for RDMA

    unknown = Hooks(hook_features("rdma_devices"), cg.layout, lambda: None, host=host, dev_root=str(dev))
    assert len(unknown.create_container(pod, container(pod, "log")).linux.devices) == 2   # as upstream: all

    with caplog.at_level(logging.WARNING):
        other = sandbox("22222222-2222-3333-4444-555555555555", annotations=allocated("0000:09:00.5"))
        assert unknown.create_container(other, container(other, "app")).ByteSize() == 0
        evil = sandbox("33333333-2222-3333-4444-555555555555", annotations=allocated("../../../etc"))
        assert unknown.create_container(evil, container(evil, "app")).ByteSize() == 0
    assert "0000:09:00.5 has no RDMA verbs device" in caplog.text
    assert "'../../../etc' is not a PCI address" in caplog.text


def test_oom_score_adj_after_start_where_the_runtime_drops_the_adjustment(tmp_path):
    """containerd 1.7's NRI has no oom_score_adj adjustment (it is dropped silently, found against the real
    runtime): the value goes to /proc/<pid>/oom_score_adj of the started container instead, as upstream does.
    A real process of this test stands in for the container's; raising the value needs no privilege."""
    import subprocess
    import sys

    from koordlet.host.paths import HostPaths
    _paths, cg, _ = fake_host(tmp_path, files=())
    h = Hooks(hook_features("oom_score_adj"), cg.layout, lambda: node_view(ls_pools=POOLS), executor=Executor(cg),
              host=HostPaths.under("/"))
    pod = sandbox("u-oom3", "LS", annotations={"koordinator.sh/oom-score-adj": "700"})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ctr = container(pod, "app")
        ctr.pid = proc.pid
        h.configure("containerd", "v1.7.24")
        assert "oom" not in resources(h.create_container(pod, ctr))      # not sent: it would do nothing
        h.post_start_container(pod, ctr)
        with open(f"/proc/{proc.pid}/oom_score_adj") as f:
            assert int(f.read()) == 700

        h.configure("containerd", "2.0.4")                               # NRI >= 0.7 applies it at creation
        assert resources(h.create_container(pod, ctr))["oom"] == 700
        with open(f"/proc/{proc.pid}/oom_score_adj", "w") as f:
            f.write("800")
        h.post_start_container(pod, ctr)
        with open(f"/proc/{proc.pid}/oom_score_adj") as f:
            assert int(f.read()) == 800                                  # no second writer
    finally:
        proc.kill()
        proc.wait()


def test_oom_adjust_support_by_runtime_version():
    from nri_plugin.features.oom import oom_adjust_supported
    assert oom_adjust_supported("containerd", "v1.7.24") is False
    assert oom_adjust_supported("containerd", "1.7.24~ds1-5") is False
    assert oom_adjust_supported("containerd", "v2.0.0") is True
    assert oom_adjust_supported("cri-o", "1.31.0") is None and oom_adjust_supported("containerd", "") is None
