import itertools
import os
from pathlib import Path

import pytest

from koordlet.host.cgroup import (
    Cgroups,
    CgroupVersion,
    Driver,
    KubeQOS,
    Layout,
    detect_driver,
    detect_version,
    parse_container_id,
    parse_cpu_list,
)
from tests.fakehost import CgroupValues, FakeHost

UID = "6f1a2b3c-0000-4d5e-8f90-123456789abc"
CID = "a" * 64

EXPECTED_POD_DIRS = {
    (Driver.CGROUPFS, KubeQOS.GUARANTEED): f"kubepods/pod{UID}",
    (Driver.CGROUPFS, KubeQOS.BURSTABLE): f"kubepods/burstable/pod{UID}",
    (Driver.CGROUPFS, KubeQOS.BESTEFFORT): f"kubepods/besteffort/pod{UID}",
    (Driver.SYSTEMD, KubeQOS.GUARANTEED): f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice",
    (Driver.SYSTEMD, KubeQOS.BURSTABLE):
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice",
    (Driver.SYSTEMD, KubeQOS.BESTEFFORT):
        f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice",
}


@pytest.mark.parametrize("version", list(CgroupVersion))
@pytest.mark.parametrize("root", ["/r", "/r/", "r", "/", ""])
def test_path_is_os_path_join(root, version):
    """The prefix shortcut gives exactly os.path.join's path, empty, absolute and slash-ended parts included."""
    cg = Cgroups(root, version, Driver.CGROUPFS)
    for subsystem, rel, file in itertools.product(["cpu", "memory", "", "/abs"],
                                                  ["", "/", "a", "/a", "a/", "a/b", "/a/b/", "kubepods/pod1"],
                                                  ["", "x", "/x", "cpu.stat"]):
        want = os.path.join(root, *((subsystem,) if version is CgroupVersion.V1 else ()), rel, file)
        assert cg.path(subsystem, rel, file) == want, (subsystem, rel, file)
        assert cg.path(subsystem, rel, file) == want       # the second time from the cached prefix


@pytest.mark.parametrize("driver,qos", list(itertools.product(Driver, KubeQOS)))
def test_pod_dir_naming_roundtrip(driver, qos):
    layout = Layout(driver)
    rel = layout.pod_dir(qos, UID)
    assert rel == EXPECTED_POD_DIRS[(driver, qos)]
    assert layout.pod_uid_of(qos, rel.rsplit("/", 1)[1]) == UID
    # a pod dir of another QoS tier is not mistaken for this one (systemd names carry the tier)
    if driver is Driver.SYSTEMD:
        for other in KubeQOS:
            if other is not qos:
                assert layout.pod_uid_of(other, rel.rsplit("/", 1)[1]) is None


@pytest.mark.parametrize("runtime,scope", [("containerd", f"cri-containerd-{CID}.scope"),
                                           ("docker", f"docker-{CID}.scope"), ("cri-o", f"crio-{CID}.scope"),
                                           ("pouch", f"pouch-{CID}.scope")])
def test_container_dir_forms(runtime, scope):
    rt, cid = parse_container_id(f"{runtime}://{CID}")
    assert (rt, cid) == (runtime, CID)
    assert Layout(Driver.SYSTEMD).container_dir("p", rt, cid) == f"p/{scope}"
    assert Layout(Driver.SYSTEMD).container_of(scope) == (runtime, CID)
    assert Layout(Driver.CGROUPFS).container_dir("p", rt, cid) == f"p/{CID}"
    assert Layout(Driver.CGROUPFS).container_of(CID) == ("", CID)


@pytest.mark.parametrize("bad", ["containerd://../../etc", "containerd://a/b", "rkt://abc", "abc", "containerd://"])
def test_unsafe_container_ids_refused(bad):
    with pytest.raises(ValueError):
        parse_container_id(bad)


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 200])
def test_unsafe_pod_uids_refused(bad):
    with pytest.raises(ValueError):
        Layout(Driver.CGROUPFS).pod_dir(KubeQOS.BURSTABLE, bad)


def test_non_pod_names_ignored():
    layout = Layout(Driver.CGROUPFS)
    assert layout.pod_uid_of(KubeQOS.GUARANTEED, "burstable") is None
    assert layout.pod_uid_of(KubeQOS.GUARANTEED, "cgroup.procs") is None
    assert Layout(Driver.SYSTEMD).container_of("cgroup.procs") is None


@pytest.mark.parametrize("version", list(CgroupVersion))
@pytest.mark.parametrize("driver", list(Driver))
def test_detection_and_discovery(tmp_path, version, driver):
    host = FakeHost(str(tmp_path), version, driver)
    assert detect_version(host.paths.cgroup_root) is version
    assert detect_driver(host.paths.cgroup_root, version, host.paths)[0] is driver
    for i, qos in enumerate(KubeQOS):
        host.add_pod(qos, f"{i}" * 8 + "-aaaa", containers={f"{i}" * 64: CgroupValues()})
        for d in host.dirs(host.pod_dir(qos, f"{i}" * 8 + "-aaaa")):
            open(os.path.join(d, "tasks"), "w").close()          # v1 control files are not containers
    cg = Cgroups.detect(host.paths)
    assert cg.version is version and cg.layout.driver is driver
    pods = sorted(cg.list_pods())
    assert [(q, u) for q, u, _ in pods] == sorted((q, f"{i}" * 8 + "-aaaa") for i, q in enumerate(KubeQOS))
    for qos, uid, rel in pods:
        (container,) = cg.list_containers(rel)
        assert container[1] == uid[0] * 64
        assert container[2] == host.container_dir(qos, uid, container[1])


def test_driver_from_kubelet_cmdline_and_config(tmp_path):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    host.remove("kubepods")
    proc = host.paths.proc_root
    os.makedirs(f"{proc}/4242")
    Path(f"{proc}/4242/comm").write_text("kubelet\n")
    cfg = tmp_path / "k.yaml"
    cfg.write_text("kind: KubeletConfiguration\ncgroupDriver: cgroupfs\n")
    Path(f"{proc}/4242/cmdline").write_bytes(f"/usr/bin/kubelet\0--config\0{cfg}\0".encode())
    assert detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)[0] is Driver.CGROUPFS
    Path(f"{proc}/4242/cmdline").write_bytes(b"/usr/bin/kubelet\0--v=2\0")     # no --config: cgroupfs
    assert detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)[0] is Driver.CGROUPFS
    Path(f"{proc}/4242/comm").write_text("bash\n")                             # no kubelet: systemd
    assert detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)[0] is Driver.SYSTEMD
    Path(f"{proc}/4242/comm").write_text("kubelet\n")
    Path(f"{proc}/4242/cmdline").write_bytes(b"/usr/bin/kubelet\0--cgroup-driver=systemd\0")
    assert detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)[0] is Driver.SYSTEMD


def test_kubelet_config_is_read_through_the_kubelets_root(tmp_path):
    """The DaemonSet mounts no /etc/kubernetes: an absolute --config is read under /proc/<pid>/root (the
    kubelet's root, the host's), before the path as the agent sees it."""
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    host.remove("kubepods")
    proc = host.paths.proc_root
    os.makedirs(f"{proc}/4242/root/etc/rancher/k3s")
    Path(f"{proc}/4242/comm").write_text("kubelet\n")
    Path(f"{proc}/4242/root/etc/rancher/k3s/kubelet.yaml").write_text("cgroupDriver: cgroupfs\n")
    Path(f"{proc}/4242/cmdline").write_bytes(b"/usr/bin/kubelet\0--config=/etc/rancher/k3s/kubelet.yaml\0")
    driver, why = detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)
    assert (driver, why) == (Driver.CGROUPFS, "kubelet config /etc/rancher/k3s/kubelet.yaml")
    # the kubelet's root wins over a file at the same path in the agent's own filesystem
    own = tmp_path / "own.yaml"
    own.write_text("cgroupDriver: systemd\n")
    Path(f"{proc}/4242/cmdline").write_bytes(f"/usr/bin/kubelet\0--config\0{own}\0".encode())
    os.makedirs(f"{proc}/4242/root{tmp_path}")
    Path(f"{proc}/4242/root{own}").write_text("cgroupDriver: cgroupfs\n")
    assert detect_driver(host.paths.cgroup_root, CgroupVersion.V1, host.paths)[0] is Driver.CGROUPFS


@pytest.mark.parametrize("version", list(CgroupVersion))
def test_usage_readers(tmp_path, version):
    host = FakeHost(str(tmp_path), version, Driver.SYSTEMD)
    rel = host.add_pod(KubeQOS.BURSTABLE, "u1", CgroupValues(
        cpu_ns=5_000_000_000, anon=100 << 20, active_file=30 << 20, inactive_file=20 << 20,
        unevictable=1 << 20, usage=160 << 20, cpuset="0-1,3", quota=150000, period=100000))
    cg = Cgroups.detect(host.paths)
    files = cg.usage_files(rel)
    assert cg.read_cpu_ns(files) == 5_000_000_000
    mem = cg.read_memory(files)
    assert mem.anon == (100 << 20) + (1 << 20)            # inactive+active anon + unevictable
    assert mem.working_set == (160 << 20) - (20 << 20)    # usage − inactive_file
    assert mem.with_page_cache == (151 << 20)
    assert parse_cpu_list(cg.read_cpuset(rel)) == [0, 1, 3]
    assert cg.read_cfs_quota(rel) == (150000, 100000)
    assert cg.read_quota(rel) == 150000


@pytest.mark.parametrize("version", list(CgroupVersion))
def test_quota_alone_reads_unlimited_and_refuses_garbage(tmp_path, version):
    host = FakeHost(str(tmp_path), version, Driver.SYSTEMD)
    rel = host.add_pod(KubeQOS.BURSTABLE, "u1", CgroupValues(quota=-1, period=100000))
    cg = Cgroups.detect(host.paths)
    assert cg.read_quota(rel) == -1 == cg.read_cfs_quota(rel)[0]
    Path(cg.path("cpu", rel, "cpu.cfs_quota_us" if version is CgroupVersion.V1 else "cpu.max")).write_text("\n")
    with pytest.raises(ValueError):
        cg.read_quota(rel)


def test_memory_stat_missing_key_is_an_error(tmp_path):
    host = FakeHost(str(tmp_path))
    rel = host.add_pod(KubeQOS.BURSTABLE, "u1")
    cg = Cgroups.detect(host.paths)
    path = cg.usage_files(rel).memory_stat
    Path(path).write_text("total_rss 1\n")
    with pytest.raises(ValueError, match="missing total_inactive_anon"):
        cg.read_memory(cg.usage_files(rel))


def test_working_set_floors_at_zero(tmp_path):
    host = FakeHost(str(tmp_path))
    rel = host.add_pod(KubeQOS.BURSTABLE, "u1", CgroupValues(inactive_file=50, usage=10))
    cg = Cgroups.detect(host.paths)
    assert cg.read_memory(cg.usage_files(rel)).working_set == 0


def test_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []
