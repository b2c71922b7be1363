"""Blkio QoS: block resolution over fake sysfs/procfs trees laid out as the kernel does (class/block symlinks into
devices/, partitions inside their disk's directory, dm slaves), and the strategy's v1 and v2 files.

Fake cgroup files are plain files: a write replaces the whole file, where the kernel keeps one line per device.
Tests that need several devices in one file look at the executor's audit events; the real kernel's per-device
behaviour is covered by tests/integration/test_blkio_real.py.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from koordlet.host.blockdev import BlockDevError, BlockDevices, Disk, parse_mountinfo, split_lvm_name, supported
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.blkio import BlkIO, Limits, devices_in, pod_blocks, probe, root_values, throttle_values
from koordlet.states.decode import DecodeError
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import IOCfg
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view, pod_meta

V1, V2 = CgroupVersion.V1, CgroupVersion.V2
UID_BE, UID_LS, UID_RAW, UID_PENDING = ("be000000-0000-0000-0000-000000000001", "15000000-0000-0000-0000-000000000002",
                                        "00000000-0000-0000-0000-000000000003", "9e000000-0000-0000-0000-000000000004")
# each pod's one container, main, its id the pod's uid without the dashes
MAIN = {uid: {"main": uid.replace("-", "")} for uid in (UID_BE, UID_LS, UID_RAW, UID_PENDING)}
BLKIO = "koordinator.sh/blkioQOS"
TR = "blkio.throttle."


# --------------------------------------------------------------------------------------------------
# fake kernel: sysfs block devices and the mount table
# --------------------------------------------------------------------------------------------------

class FakeBlock:
    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths
        self.mountinfo: list[str] = []
        for d in ("class/block", "dev/block"):
            os.makedirs(paths.sys(d), exist_ok=True)
        self._write(paths.proc("self", "mountinfo"), "")
        self.mount("/", "254:0", "ext4", "/dev/vda")

    @staticmethod
    def _write(path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def _register(self, name: str, number: str, real: str) -> None:
        self._write(os.path.join(real, "dev"), number + "\n")
        os.makedirs(os.path.join(real, "slaves"), exist_ok=True)
        os.symlink(os.path.relpath(real, self.paths.sys("class", "block")), self.paths.sys("class", "block", name))
        os.symlink(os.path.relpath(real, self.paths.sys("dev", "block")), self.paths.sys("dev", "block", number))

    def disk(self, name: str, number: str, bus: str = "pci0000:00/0000:00:05.0/virtio2") -> str:
        real = self.paths.sys("devices", bus, "block", name)
        self._register(name, number, real)
        return real

    def partition(self, disk: str, name: str, number: str, index: int = 1) -> None:
        real = os.path.join(os.path.realpath(self.paths.sys("class", "block", disk)), name)
        self._register(name, number, real)
        self._write(os.path.join(real, "partition"), f"{index}\n")

    def dm(self, index: int, dm_name: str, slaves: list[str], lvm: bool = True) -> str:
        name = f"dm-{index}"
        real = self.paths.sys("devices", "virtual", "block", name)
        self._register(name, f"253:{index}", real)
        self._write(os.path.join(real, "dm", "name"), dm_name + "\n")
        self._write(os.path.join(real, "dm", "uuid"), (f"LVM-abc{index}" if lvm else f"CRYPT-LUKS2-{index}") + "\n")
        for s in slaves:
            os.symlink(os.path.relpath(os.path.realpath(self.paths.sys("class", "block", s)),
                                       os.path.join(real, "slaves")), os.path.join(real, "slaves", s))
        return name

    def mount(self, point: str, number: str, fstype: str, source: str) -> None:
        esc = point.replace(" ", "\\040")
        self.mountinfo.append(f"{30 + len(self.mountinfo)} 1 {number} / {esc} rw,relatime shared:1 - {fstype} "
                              f"{source} rw")
        self._write(self.paths.proc("self", "mountinfo"), "\n".join(self.mountinfo) + "\n")

    def csi_mount(self, uid: str, volume: str, number: str, source: str) -> str:
        point = os.path.join(self.paths.var_lib_kubelet, "pods", uid, "volumes", "kubernetes.io~csi", volume, "mount")
        os.makedirs(point, exist_ok=True)
        self.mount(point, number, "ext4", source)
        return point


@pytest.fixture
def block(tmp_path):
    """sda (8:0) with sda1/sda2; sdb (8:16) whole; sdc (8:32) with sdc1 as the only PV of vg-data (two LVs, one of
    them mounted as a pod's CSI volume); sdd (8:48) and sde (8:64) both PVs of vg two; nvme0n1 (259:0) with p1..p3
    (259:1..3); dm-9 a dm-crypt volume over sdb."""
    fb = FakeBlock(HostPaths.under(str(tmp_path)))
    fb.disk("sda", "8:0")
    fb.partition("sda", "sda1", "8:1", 1)
    fb.partition("sda", "sda2", "8:2", 2)
    fb.disk("sdb", "8:16")
    fb.disk("sdc", "8:32")
    fb.partition("sdc", "sdc1", "8:33")
    fb.dm(0, "vg--data-lv1", ["sdc1"])
    fb.dm(1, "vg--data-pvc--1", ["sdc1"])
    fb.disk("sdd", "8:48")
    fb.disk("sde", "8:64")
    fb.dm(2, "two-a", ["sdd"])
    fb.dm(3, "two-b", ["sde"])
    fb.disk("nvme0n1", "259:0", bus="pci0000:00/0000:00:06.0/nvme/nvme0")
    for i in (1, 2, 3):
        fb.partition("nvme0n1", f"nvme0n1p{i}", f"259:{i}", i)
    fb.dm(9, "secret", ["sdb"], lvm=False)
    fb.csi_mount(UID_LS, "pvc-1", "253:1", "/dev/mapper/vg--data-pvc--1")
    return fb


# --------------------------------------------------------------------------------------------------
# block resolution
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device,expected", [
    ("/dev/sdb", Disk("sdb", "8:16")), ("sdb", Disk("sdb", "8:16")), ("8:16", Disk("sdb", "8:16")),
    ("/dev/sda2", Disk("sda", "8:0")),                       # a partition: its disk
    ("/dev/nvme0n1p3", Disk("nvme0n1", "259:0")),            # upstream's minor - minor % 16 would say 259:0 too,
    ("259:2", Disk("nvme0n1", "259:0")),                     # ... but only by luck of the numbering
    ("/dev/mapper/vg--data-lv1", Disk("sdc", "8:32")),       # LV -> VG's single PV (a partition) -> disk
    ("/dev/vg-data/lv1", Disk("sdc", "8:32")),
    ("/dev/mapper/secret", Disk("sdb", "8:16")),             # non-LVM dm: its single slave
])
def test_device_resolution(block, device, expected):
    assert BlockDevices(block.paths).disk_of_device(device) == expected


def test_partition_parent_is_read_from_sysfs_not_guessed(block):
    block.disk("sdq", "65:0")
    block.partition("sdq", "sdq17", "259:40", 17)        # extended minors: the number says nothing of the disk
    assert BlockDevices(block.paths).disk_of_device("/dev/sdq17") == Disk("sdq", "65:0")


def test_volume_group(block):
    devices = BlockDevices(block.paths)
    assert devices.disk_of_volume_group("vg-data") == Disk("sdc", "8:32")
    with pytest.raises(BlockDevError, match=r"volumegroup 'two'.* 2 physical volumes \(sdd, sde\).*single-PV"):
        devices.disk_of_volume_group("two")
    with pytest.raises(BlockDevError, match=r"device '/dev/mapper/two-a'.*2 physical volumes"):
        devices.disk_of_device("/dev/mapper/two-a")          # an LV of a two-PV VG: refused, as upstream
    with pytest.raises(BlockDevError, match="no active logical volume of volume group 'vg'"):
        devices.disk_of_volume_group("vg")                   # "vg--data" is vg-data, not vg + "-data"


def test_thin_pool_stack_resolves_to_its_pv(block):
    block.disk("sdf", "8:80")
    block.dm(20, "thin-pool_tdata", ["sdf"])
    block.dm(21, "thin-pool_tmeta", ["sdf"])
    block.dm(22, "thin-pool-tpool", ["dm-20", "dm-21"])
    block.dm(23, "thin-vol1", ["dm-22"])
    assert BlockDevices(block.paths).disk_of_device("/dev/thin/vol1") == Disk("sdf", "8:80")


def test_pod_volume_through_the_mount_table(block):
    devices = BlockDevices(block.paths)
    assert devices.resolve("podvolume", "pvc-1", UID_LS) == Disk("sdc", "8:32")
    with pytest.raises(BlockDevError, match=r"podvolume 'pvc-2'.*pods/15000000.*pvc-2/mount: nothing is mounted"):
        devices.resolve("podvolume", "pvc-2", UID_LS)
    with pytest.raises(BlockDevError, match="only a pod's koordinator.sh/blkioQOS annotation"):
        devices.resolve("podvolume", "pvc-1")
    with pytest.raises(BlockDevError, match="not a volume name"):
        devices.resolve("podvolume", "../../etc", UID_LS)


def test_mounts_by_anonymous_number_and_escapes(block):
    block.mount("/data/my disk", "0:45", "btrfs", "/dev/sda1")          # btrfs: anonymous st_dev, source names it
    block.mount("/nfs", "0:50", "nfs4", "server:/export")
    block.mount("/srv", "8:1", "ext4", "/dev/sda1")
    block.mount("/srv", "8:16", "xfs", "/dev/sdb")                     # mounted over: the top one counts
    devices = BlockDevices(block.paths)
    assert devices.disk_of_mount("/data/my disk") == Disk("sda", "8:0")
    assert devices.disk_of_mount("/srv/") == Disk("sdb", "8:16")
    with pytest.raises(BlockDevError, match=r"mount point /nfs: nfs4 from 'server:/export' is not on a block device"):
        devices.disk_of_mount("/nfs")


@pytest.mark.parametrize("block_type,name,pattern", [
    ("device", "/dev/sdz", r"device '/dev/sdz': no such block device in .*/sys/class/block"),
    ("device", "7:99", r"device '7:99': no block device 7:99"),
    ("device", "/dev/mapper/nope", "no device-mapper device named 'nope'"),
    ("volumegroup", "", "volumegroup without a name"),
    ("partition", "sda", "unknown type 'partition'"),
])
def test_resolution_errors_name_the_block(block, block_type, name, pattern):
    with pytest.raises(BlockDevError, match=pattern):
        BlockDevices(block.paths).resolve(block_type, name)


def test_multi_slave_crypt_is_refused(block):
    block.dm(30, "raid", ["sdd", "sde"], lvm=False)
    with pytest.raises(BlockDevError, match=r"device-mapper raid \(dm-30\) sits on 2 devices \(sdd, sde\)"):
        BlockDevices(block.paths).disk_of_device("/dev/dm-30")


def test_split_lvm_name_and_mountinfo_parsing():
    assert split_lvm_name("vg--data-pvc--1") == ("vg-data", "pvc-1")
    assert split_lvm_name("a-b-c") == ("a", "b-c")
    assert split_lvm_name("nodash") is None and split_lvm_name("-x") is None and split_lvm_name("x-") is None
    mounts = parse_mountinfo("36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 shared:2 - ext3 /dev/root rw\n"
                             "garbage\n")
    assert [(m.mount_point, m.number, m.fs_type, m.source) for m in mounts] == [("/mnt/a b", "98:0", "ext3",
                                                                                  "/dev/root")]


def test_supported_for_doctor(tmp_path):
    paths = HostPaths.under(str(tmp_path))
    os.makedirs(paths.sys("class", "block"))
    v1 = Cgroups(paths.cgroup_root, V1, Driver.CGROUPFS)
    os.makedirs(v1.path("blkio", ""))
    ok, why = supported(paths, v1)
    assert not ok and "CONFIG_BLK_DEV_THROTTLING" in why
    open(v1.path("blkio", "", "blkio.throttle.write_bps_device"), "w").close()
    ok, why = supported(paths, v1)
    assert ok and "iocost absent" in why and "flat" in why
    v2root = str(tmp_path / "v2")
    os.makedirs(os.path.join(v2root, "kubepods"))
    v2 = Cgroups(v2root, V2, Driver.CGROUPFS)
    files = {"cgroup.controllers": "cpu memory", "cgroup.subtree_control": "cpu memory"}

    def write():
        for f, text in files.items():
            with open(os.path.join(v2root, f), "w") as fh:
                fh.write(text + "\n")
    write()
    assert supported(paths, v2) == (False, "io controller not in cgroup.controllers")
    files["cgroup.controllers"] += " io"
    write()
    assert "not delegated" in supported(paths, v2)[1]
    files["cgroup.subtree_control"] += " io"
    files["kubepods/cgroup.subtree_control"] = "cpu"
    write()
    assert not supported(paths, v2)[0] and "below kubepods" in supported(paths, v2)[1]
    files["kubepods/cgroup.subtree_control"] = "cpu io"
    files["io.cost.qos"] = ""
    write()
    assert supported(paths, v2) == (True, "v2 io.max; iocost io.cost.qos/model and io.weight present")


# --------------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------------

def test_value_formats():
    lim = Limits.from_io(IOCfg(read_bps=1048576, write_iops=300, io_weight_percent=60))
    assert throttle_values(V1, "8:16", lim, True) == [
        (TR + "read_iops_device", "8:16 0"), (TR + "read_bps_device", "8:16 1048576"),
        (TR + "write_iops_device", "8:16 300"), (TR + "write_bps_device", "8:16 0"),
        ("blkio.cost.weight", "8:16 60")]
    assert throttle_values(V2, "8:16", lim, True) == [
        ("io.max", "8:16 rbps=1048576 wbps=max riops=max wiops=300"), ("io.weight", "8:16 60")]
    assert throttle_values(V2, "8:16", Limits(), False) == [("io.max", "8:16 rbps=max wbps=max riops=max wiops=max")]
    assert Limits.from_io(None) == Limits() == Limits(0, 0, 0, 0, 100)
    assert root_values(V1, "8:0", None, True) == [
        ("blkio.cost.qos", "8:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000"),
        ("blkio.cost.model", "8:0 ctrl=auto")]
    user = IOCfg(read_latency=2000, write_latency_percent=90, enable_user_model=True, model_read_bps=100,
                 model_write_bps=200, model_read_seq_iops=3, model_write_seq_iops=4, model_read_rand_iops=5,
                 model_write_rand_iops=6)
    assert root_values(V2, "8:0", user, True) == [
        ("io.cost.qos", "8:0 enable=1 ctrl=user rpct=95.00 rlat=2000 wpct=90.00 wlat=3000"),
        ("io.cost.model", "8:0 ctrl=user rbps=100 rseqiops=3 rrandiops=5 wbps=200 wseqiops=4 wrandiops=6")]
    assert root_values(V2, "8:0", None, False) == [
        ("io.cost.qos", "8:0 enable=1 ctrl=user rpct=95.00 rlat=3000 wpct=95.00 wlat=3000")]
    assert Limits(0, 100, 50, 0, 80).tighter(Limits(10, 200, 0, 0, 100)) == Limits(10, 100, 50, 0, 80)
    assert devices_in("default 100\n8:16 50\n259:0 rbps=1 wbps=max riops=max wiops=max\nbogus\n") == {"8:16", "259:0"}


@pytest.mark.parametrize("annotations,blocks,problem", [
    ({}, None, None),
    ({"koordinator.sh/blkioQOS": ""}, 0, None),
    ({"koordinator.sh/blkioQOS": '{"blocks":[{"name":"v","type":"podvolume","ioCfg":{"writeBPS":5}}]}'}, 1, None),
    ({"koordinator.sh/blkioQOS": "{oops"}, 0, "not JSON"),
    ({"koordinator.sh/blkioQOS": "[]"}, 0, "expected an object"),
    ({"koordinator.sh/blkioQOS": '{"blocks":[{"name":"v","type":"disk"}]}'}, 0, "unknown value 'disk'"),
    ({"koordinator.sh/blkioQOS": '{"blocks":[{"name":"v","type":"device","ioCfg":{"readBPS":-1}}]}'}, 0,
     "must be at least 0"),
])
def test_pod_annotation_parsing(annotations, blocks, problem):
    if problem is not None:
        with pytest.raises(DecodeError) as e:
            pod_blocks(agent_pod("u-1", "p", annotations=annotations))
        assert problem in e.value.problem and e.value.key == "koordinator.sh/blkioQOS"
        return
    got = pod_blocks(agent_pod("u-1", "p", annotations=annotations))
    assert (None if got is None else len(got)) == blocks


# --------------------------------------------------------------------------------------------------
# the strategy over fake cgroup trees
# --------------------------------------------------------------------------------------------------

V1_FILES = {TR + "read_iops_device": "", TR + "read_bps_device": "", TR + "write_iops_device": "",
            TR + "write_bps_device": "", "blkio.cost.weight": ""}
V2_FILES = {"io.max": "", "io.weight": "default 100\n"}


def blkio_slo(be=None, root=None, ls=None):
    qos = {}
    for key, cfg in (("beClass", be), ("cgroupRoot", root), ("lsClass", ls)):
        if cfg is not None:
            qos[key] = {"blkioQOS": cfg}
    spec, errors = merge_node_slo_spec({"resourceQOSStrategy": qos})
    assert errors == []
    return spec


class Env:
    def __init__(self, tmp_path, block, version, files, root_files=("cost.qos", "cost.model")):
        self.paths = block.paths
        self.block = block
        self.cg = Cgroups(self.paths.cgroup_root, version, Driver.CGROUPFS)
        self.metrics = AgentMetrics("n1")
        self.executor = Executor(self.cg, self.metrics)
        self.files = files
        self.sub = "blkio" if version is V1 else "io"
        prefix = "blkio." if version is V1 else "io."
        if version is V2:
            with open(os.path.join(self.mkdir(""), "cgroup.subtree_control"), "w") as f:
                f.write("cpu io memory\n")
        for f in root_files:
            self.set("", prefix + f, "")
        self.metas = [pod_meta(UID_BE, "batch", namespace="ns", qos="BestEffort", qos_class="BE",
                               containers=MAIN[UID_BE], layout=self.cg.layout),
                      pod_meta(UID_LS, "web", namespace="ns", qos_class="LS", containers=MAIN[UID_LS],
                               layout=self.cg.layout)]
        for rel in [self.cg.layout.qos_dir(q) for q in KubeQOS] + self.dirs(self.metas):
            self.touch(rel)

    @staticmethod
    def dirs(metas):
        return [d for m in metas for d in [m.cgroup_dir] + [rel for _, rel in m.containers]]

    def mkdir(self, rel):
        d = self.cg.path(self.sub, rel)
        os.makedirs(d, exist_ok=True)
        return d

    def touch(self, rel):
        self.mkdir(rel)
        for name, value in self.files.items():
            if not os.path.exists(self.cg.path(self.sub, rel, name)):
                self.set(rel, name, value)

    def set(self, rel, name, value):
        with open(os.path.join(self.mkdir(rel), name), "w") as f:
            f.write(value)

    def read(self, rel, name):
        with open(self.cg.path(self.sub, rel, name)) as f:
            return f.read().strip()

    def view(self, slo, metas=None):
        return node_view(pods=self.metas if metas is None else metas, slo=slo, node=NodeInfo("n1"))

    def writes(self, since=0):
        return [(os.path.relpath(e["file"], self.paths.cgroup_root), e["new"]) for e in self.executor.events()[since:]]


BE_DIR = "kubepods/besteffort"


def test_v1_be_class_root_and_unsupported_classes(tmp_path, block, caplog):
    env = Env(tmp_path, block, V1, V1_FILES)
    strategy = BlkIO(env.paths, env.metrics)
    slo = blkio_slo(
        be={"enable": True, "blocks": [
            {"name": "/dev/sdb", "type": "device", "ioCfg": {"readBPS": 1048576, "writeIOPS": 300,
                                                             "ioWeightPercent": 60}},
            {"name": "/dev/sdz", "type": "device", "ioCfg": {"readBPS": 1}}]},
        root={"enable": True, "blocks": [{"name": "vg-data", "type": "volumegroup",
                                          "ioCfg": {"readLatency": 2000}}]},
        ls={"enable": True, "blocks": [{"name": "/dev/sdb", "type": "device"}]})
    env.set(BE_DIR, TR + "write_bps_device", "8:48 1000\n")       # a device no longer configured
    with caplog.at_level(logging.INFO):
        strategy.reconcile(env.view(slo), env.executor)
    be_ctr = env.metas[0].containers[0][1]
    ls_ctr = env.metas[1].containers[0][1]
    # a 0 (no limit) is a line the kernel does not print: "8:16 0" counts as in place and is not written
    assert {f: env.read(BE_DIR, f) for f in V1_FILES} == {
        TR + "read_iops_device": "", TR + "read_bps_device": "8:16 1048576",
        TR + "write_iops_device": "8:16 300", TR + "write_bps_device": "8:48 1000", "blkio.cost.weight": "8:16 60"}
    # v1 throttling is flat: the BE container gets the throttles (not the weight); the LS container nothing
    assert {f: env.read(be_ctr, f) for f in V1_FILES} == {
        TR + "read_iops_device": "", TR + "read_bps_device": "8:16 1048576",
        TR + "write_iops_device": "8:16 300", TR + "write_bps_device": "", "blkio.cost.weight": ""}
    assert {f: env.read(ls_ctr, f) for f in V1_FILES} == dict.fromkeys(V1_FILES, "")
    assert env.read("", "blkio.cost.qos") == "8:32 enable=1 ctrl=user rpct=95 rlat=2000 wpct=95 wlat=3000"
    assert env.read("", "blkio.cost.model") == "8:32 ctrl=auto"
    # the unresolvable block: one line naming it; while it fails, the stale 8:48 line is not reset
    assert caplog.text.count("blkio block skipped scope=qos besteffort block=1 type=device name=/dev/sdz") == 1
    assert "8:48 0" not in [v for _, v in env.writes()]
    assert caplog.text.count("configuring blkio of the LS class is not supported") == 1
    assert env.metrics.blkio_block_errors.labels("n1", "device")._value.get() == 1

    n = len(env.executor.events())
    strategy.reconcile(env.view(slo), env.executor)
    assert env.writes(n) == []                                          # converged: zero writes
    assert caplog.text.count("blkio block skipped") == 1 and caplog.text.count("LS class is not supported") == 1


def test_v1_stale_reset_and_disable(tmp_path, block):
    env = Env(tmp_path, block, V1, V1_FILES)
    strategy = BlkIO(env.paths)
    env.set(BE_DIR, TR + "read_bps_device", "8:48 1000\n")
    slo = blkio_slo(be={"enable": True, "blocks": [{"name": "sdb", "type": "device",
                                                    "ioCfg": {"writeBPS": 4096, "ioWeightPercent": 60}}]},
                    root={"enable": True, "blocks": [{"name": "sdb", "type": "device"}]})
    env.set("", "blkio.cost.qos", "8:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n")
    strategy.reconcile(env.view(slo), env.executor)
    writes = env.writes()
    assert (f"blkio/{BE_DIR}/{TR}read_bps_device", "8:48 0") in writes          # every block resolved: reset
    assert ("blkio/blkio.cost.qos", "8:0 enable=0") in writes
    assert ("blkio/blkio.cost.qos", "8:16 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000") in writes

    assert (f"blkio/{BE_DIR}/blkio.cost.weight", "8:48 100") not in writes      # no line: nothing to reset

    # disabled: every configured device is reset, in the QoS dir and in the container it was pushed to (the
    # files as the kernel shows them after cycle 1: a 0 deletes the line, one line per device)
    for f, text in ((TR + "read_bps_device", ""), (TR + "write_bps_device", "8:16 4096"),
                    ("blkio.cost.weight", "8:16 60")):
        env.set(BE_DIR, f, text)
    env.set("", "blkio.cost.qos", "8:0 enable=0 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n"
                                  "8:16 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n")
    off = blkio_slo(be={"enable": False, "blocks": slo.resource_qos.be.blkio_qos.to_wire()["blocks"]},
                    root={"enable": False})
    n = len(env.executor.events())
    strategy.reconcile(env.view(off), env.executor)
    be_ctr = env.metas[0].containers[0][1]
    assert sorted(env.writes(n)) == sorted([
        (f"blkio/{BE_DIR}/{TR}write_bps_device", "8:16 0"), (f"blkio/{be_ctr}/{TR}write_bps_device", "8:16 0"),
        (f"blkio/{BE_DIR}/blkio.cost.weight", "8:16 100"), ("blkio/blkio.cost.qos", "8:16 enable=0")])
    env.set("", "blkio.cost.qos", "8:0 enable=0 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n"
                                  "8:16 enable=0 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n")
    n = len(env.executor.events())
    strategy.reconcile(env.view(off), env.executor)
    strategy.reconcile(env.view(off), Executor(env.cg))                 # a restart over the reset host, too
    assert env.writes(n) == []


def test_v2_files(tmp_path, block):
    env = Env(tmp_path, block, V2, V2_FILES)
    strategy = BlkIO(env.paths)
    assert probe(env.cg).weight and probe(env.cg).cost_model
    slo = blkio_slo(
        be={"enable": True, "blocks": [{"name": "/dev/sda1", "type": "device",
                                        "ioCfg": {"writeBPS": 4194304, "readIOPS": 100, "ioWeightPercent": 50}}]},
        root={"enable": True, "blocks": [{"name": "/dev/sda", "type": "device",
                                          "ioCfg": {"enableUserModel": True, "modelReadBPS": 1000,
                                                    "modelWriteBPS": 2000, "modelReadSeqIOPS": 30,
                                                    "modelWriteSeqIOPS": 40, "modelReadRandIOPS": 50,
                                                    "modelWriteRandIOPS": 60}}]})
    strategy.reconcile(env.view(slo), env.executor)
    assert env.read(BE_DIR, "io.max") == "8:0 rbps=max wbps=4194304 riops=100 wiops=max"
    assert env.read(BE_DIR, "io.weight") == "8:0 50"
    assert env.read("", "io.cost.qos") == "8:0 enable=1 ctrl=user rpct=95.00 rlat=3000 wpct=95.00 wlat=3000"
    assert env.read("", "io.cost.model") == ("8:0 ctrl=user rbps=1000 rseqiops=30 rrandiops=50 wbps=2000 "
                                             "wseqiops=40 wrandiops=60")
    be_ctr = env.metas[0].containers[0][1]
    assert env.read(be_ctr, "io.max") == ""                  # v2 is hierarchical: nothing pushed to containers
    n = len(env.executor.events())
    strategy.reconcile(env.view(slo), env.executor)
    assert env.writes(n) == []
    # the kernel prints more fields than we write: a restarted agent still finds the host converged
    env.set("", "io.cost.qos", "8:0 enable=1 ctrl=user rpct=95.00 rlat=3000 wpct=95.00 wlat=3000 min=1.00 "
                               "max=10000.00\n")
    env.set("", "io.cost.model", "8:0 ctrl=user model=linear rbps=1000 rseqiops=30 rrandiops=50 wbps=2000 "
                                 "wseqiops=40 wrandiops=60\n")
    env.set(BE_DIR, "io.weight", "default 100\n8:0 50\n")
    BlkIO(env.paths).reconcile(env.view(slo), Executor(env.cg))
    assert env.writes(n) == []
    # disabled: the all-max io.max line (the kernel deletes it), weight back to 100, iocost off
    off = blkio_slo(be={"enable": False}, root={"enable": False})
    ex = Executor(env.cg)
    strategy.reconcile(env.view(off), ex)
    assert sorted((os.path.basename(e["file"]), e["new"]) for e in ex.events()) == [
        ("io.cost.qos", "8:0 enable=0"), ("io.max", "8:0 rbps=max wbps=max riops=max wiops=max"),
        ("io.weight", "8:0 100")]


def test_v2_without_iocost_has_no_weight_or_root(tmp_path, block, caplog):
    env = Env(tmp_path, block, V2, {"io.max": ""}, root_files=())
    strategy = BlkIO(env.paths)
    slo = blkio_slo(be={"enable": True, "blocks": [{"name": "sdb", "type": "device", "ioCfg": {"writeBPS": 5}}]},
                    root={"enable": True, "blocks": [{"name": "sdb", "type": "device"}]})
    with caplog.at_level(logging.INFO):
        strategy.reconcile(env.view(slo), env.executor)
        strategy.reconcile(env.view(slo), env.executor)
    assert [(os.path.basename(e["file"]), e["new"]) for e in env.executor.events()] == [
        ("io.max", "8:16 rbps=max wbps=5 riops=max wiops=max")]
    assert caplog.text.count("cgroupRoot blocks ignored: the kernel has no iocost (io.cost.qos missing") == 1
    assert env.executor.total.missing == 0


def test_pod_annotations(tmp_path, block, caplog):
    env = Env(tmp_path, block, V1, V1_FILES)
    strategy = BlkIO(env.paths)
    vol = json.dumps({"blocks": [{"name": "pvc-1", "type": "podvolume", "ioCfg": {"writeBPS": 2097152}},
                                 {"name": "pvc-9", "type": "podvolume", "ioCfg": {"writeBPS": 1}}]})
    ls = pod_meta(UID_LS, "web", namespace="ns", qos_class="LS", containers=MAIN[UID_LS], annotations={BLKIO: vol},
                  layout=env.cg.layout)
    # a raw (unlabelled) pod and a pending one are left alone, whatever they carry
    raw = pod_meta(UID_RAW, "raw", namespace="ns", containers=MAIN[UID_RAW], annotations={BLKIO: vol},
                   layout=env.cg.layout)
    pending = pod_meta(UID_PENDING, "pend", namespace="ns", qos_class="LS", phase="Pending",
                       containers=MAIN[UID_PENDING], annotations={BLKIO: vol}, layout=env.cg.layout)
    # a BE pod with its own, tighter limit on sdb and a malformed sibling key
    be_ann = json.dumps({"blocks": [{"name": "/dev/sdb", "type": "device",
                                     "ioCfg": {"readBPS": 1000, "writeBPS": 9000}}]})
    be = pod_meta(UID_BE, "batch", namespace="ns", qos="BestEffort", qos_class="BE", containers=MAIN[UID_BE],
                  annotations={BLKIO: be_ann}, layout=env.cg.layout)
    metas = [ls, raw, pending, be]
    for rel in env.dirs(metas):
        env.touch(rel)
    env.set(pending.cgroup_dir, TR + "write_bps_device", "8:16 7\n")
    slo = blkio_slo(be={"enable": True, "blocks": [{"name": "sdb", "type": "device",
                                                    "ioCfg": {"readBPS": 5000, "writeBPS": 3000}}]})
    with caplog.at_level(logging.INFO):
        strategy.reconcile(env.view(slo, metas), env.executor)
    ls_ctr, be_ctr = ls.containers[0][1], be.containers[0][1]
    assert env.read(ls.cgroup_dir, TR + "write_bps_device") == "8:32 2097152"     # LV on sdc1 -> sdc
    assert env.read(ls_ctr, TR + "write_bps_device") == "8:32 2097152"
    assert "podvolume 'pvc-9'" in caplog.text and "scope=pod ns/web block=1" in caplog.text
    for m in (raw, pending):
        assert [w for w in env.writes() if m.cgroup_dir in w[0]] == []
    assert env.read(be.cgroup_dir, TR + "read_bps_device") == "8:16 1000"
    assert env.read(be_ctr, TR + "read_bps_device") == "8:16 1000"            # tighter of pod 1000 / class 5000
    assert env.read(be_ctr, TR + "write_bps_device") == "8:16 3000"           # tighter of pod 9000 / class 3000
    n = len(env.executor.events())
    strategy.reconcile(env.view(slo, metas), env.executor)
    assert env.writes(n) == []

    # malformed annotation: one log line naming the pod; the pod falls back to no limits
    bad = pod_meta(UID_LS, "web", namespace="ns", qos_class="LS", containers=MAIN[UID_LS],
                   annotations={BLKIO: '{"blocks": 3}'}, layout=env.cg.layout)
    for _ in range(2):
        with caplog.at_level(logging.INFO):
            strategy.reconcile(env.view(slo, [bad, be]), env.executor)
    assert caplog.text.count("blkio qos annotation ignored pod=ns/web annotation=koordinator.sh/blkioQOS") == 1
    assert env.read(ls.cgroup_dir, TR + "write_bps_device") == "8:32 0"
    assert env.read(ls_ctr, TR + "write_bps_device") == "8:32 0"

    # annotation removed: the pod's own devices are reset once; the BE container keeps the class limits
    plain_be = pod_meta(UID_BE, "batch", namespace="ns", qos="BestEffort", qos_class="BE", containers=MAIN[UID_BE],
                        layout=env.cg.layout)
    n = len(env.executor.events())
    strategy.reconcile(env.view(slo, [bad, plain_be]), env.executor)
    assert sorted(w for w in env.writes(n) if w[0].startswith(f"blkio/{be.cgroup_dir}/blkio.")) == [
        (f"blkio/{be.cgroup_dir}/{TR}read_bps_device", "8:16 0"),
        (f"blkio/{be.cgroup_dir}/{TR}write_bps_device", "8:16 0")]
    assert env.read(be_ctr, TR + "read_bps_device") == "8:16 5000"
    assert env.read(be_ctr, TR + "write_bps_device") == "8:16 3000"
    env.set(be.cgroup_dir, TR + "read_bps_device", "8:16 1000\n")                # someone else's, later
    n = len(env.executor.events())
    strategy.reconcile(env.view(slo, [bad, plain_be]), env.executor)
    assert env.writes(n) == []                                                 # no longer ours to reset


def test_unsupported_host_is_a_quiet_no_op(tmp_path, block, caplog):
    env = Env(tmp_path, block, V1, {}, root_files=())
    strategy = BlkIO(env.paths)
    slo = blkio_slo(be={"enable": True, "blocks": [{"name": "sdb", "type": "device", "ioCfg": {"writeBPS": 5}}]})
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            strategy.reconcile(env.view(slo), env.executor)
    assert env.executor.events() == [] and env.executor.total.missing == 0
    assert caplog.text.count("blkio qos unsupported") == 1
