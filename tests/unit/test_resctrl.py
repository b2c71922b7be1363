"""Resctrl (RDT CAT/MBA): the value functions, the annotation, and the strategy against a fake of the kernel's resctrl
filesystem (doubles/fakeresctrl.py) with real task files (upstream
pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go, runtimehooks/hooks/resctrl)."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
from typing import Any

import pytest

from doubles.fakeresctrl import AMD, INTEL, FakeResctrl, Profile
from koordlet.base import wire
from koordlet.host import resctrl as hr
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS, Layout
from koordlet.host.paths import HostPaths
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.resctrl.annotation import parse_pod_resctrl
from koordlet.qos.resctrl.schemata import class_schemata, l3_mask, mb_value, pod_schemata
from koordlet.qos.resctrl.strategy import Resctrl
from koordlet.states.informer import PodMeta, meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec, ResctrlQOSCfg
from koordlet.states.pod import Container, Pod
from koordlet.writer.executor import Executor
from tests.builders import node_view

QOS_LABEL = "koordinator.sh/qosClass"
KUBE = {"Guaranteed": KubeQOS.GUARANTEED, "Burstable": KubeQOS.BURSTABLE, "BestEffort": KubeQOS.BESTEFFORT}


def info_for(profile: Profile, tmp_path: Any) -> hr.ResctrlInfo:
    fake = FakeResctrl(HostPaths.under(str(tmp_path)), profile)
    info, why = hr.detect(fake.paths)
    assert info is not None, why
    return info


# ---------------------------------------------------------------------------------------------------------------
# values

@pytest.mark.parametrize("cbm,start,end,min_bits,want,widened", [
    (0x7FF, 0, 30, 1, "f", False),          # 11 ways, BE 0-30 %: the low 4 ways
    (0x7FF, 10, 50, 1, "3c", False),
    (0x3FF, 10, 80, 1, "fe", False),
    (0x7FF, 0, 100, 1, "7ff", False),
    (0x7FF, 30, 100, 1, "7f0", False),
    (0xFFFFF, 0, 50, 1, "3ff", False),
    (0xFFFF, 25, 75, 0, "ff0", False),
    (0x7FF, 0, 10, 2, "3", False),           # ceil(1.1) = 2 ways: already enough
    (0x7FF, 1, 5, 1, "2", True),             # ceil(.11) = ceil(.55) = 1: empty, widened to 1 way
    (0x7FF, 95, 100, 2, "600", True),        # 11..11 at the top: widened downwards
    (0x7FF, 1, 5, 0, "2", True),              # min_cbm_bits 0 (AMD) still never gives an empty mask
])
def test_l3_mask(cbm: int, start: int, end: int, min_bits: int, want: str, widened: bool) -> None:
    mask, w = l3_mask(cbm, start, end, min_bits)
    assert (f"{mask:x}", w) == (want, widened)


@pytest.mark.parametrize("cbm,start,end", [(0x5, 0, 50), (0x6, 0, 50), (0, 0, 50), (0x7FF, 30, 30),
                                           (0x7FF, -1, 10), (0x7FF, 0, 101), (0x7FF, 50, 10)])
def test_l3_mask_rejects(cbm: int, start: int, end: int) -> None:
    with pytest.raises(ValueError):
        l3_mask(cbm, start, end)


@pytest.mark.parametrize("profile", [INTEL, INTEL.with_(cbm=0xFFFFF, min_cbm_bits=2), AMD, AMD.with_(sparse=False)])
def test_every_class_range_gives_a_line_the_kernel_accepts(profile: Profile, tmp_path: Any) -> None:
    """Every start/end pair in steps of 5 %: the line we build is accepted by the fake kernel's validation and
    printed back as the same value."""
    fake = FakeResctrl(HostPaths.under(str(tmp_path)), profile)
    info, _ = hr.detect(fake.paths)
    assert info is not None
    fake.make_group(fake.root, "T")
    for start in range(0, 100, 5):
        for end in range(start + 5, 101, 5):
            lines, problem, _ = class_schemata(ResctrlQOSCfg(True, start, end, end), info)
            assert problem is None
            text = "".join(hr.schemata_line(n, v) for n, v in lines.items())
            with open(os.path.join(fake.root, "T", "schemata"), "w") as f:
                f.write(text)
            fake.apply()
            assert fake.violations == [] and fake.rounded == []
            printed = fake.schemata("T")
            assert hr.schemata_values(printed, "L3") == lines["L3"]
            assert hr.schemata_values(printed, "MB") == lines["MB"]


@pytest.mark.parametrize("percent,want", [(100, 100), (95, 100), (50, 50), (51, 60), (1, 10), (10, 10),
                                          (0, None), (101, None), (-5, None), (None, None)])
def test_mb_intel(percent: int | None, want: int | None, tmp_path: Any) -> None:
    assert mb_value(percent, info_for(INTEL, tmp_path)) == want


@pytest.mark.parametrize("gran,minimum,percent,want", [(1, 0, 55, 55), (20, 10, 50, 60), (10, 30, 20, 30)])
def test_mb_intel_uses_the_granularity_files(gran: int, minimum: int, percent: int, want: int, tmp_path: Any) -> None:
    assert mb_value(percent, info_for(INTEL.with_(mb_gran=gran, mb_min=minimum), tmp_path)) == want


@pytest.mark.parametrize("percent,want", [(100, 2048), (50, 80), (1, 1), (99, 158), (10, 16), (0, None)])
def test_mb_amd_units(percent: int, want: int | None, tmp_path: Any) -> None:
    """AMD counts in 1/8 GB/s: 100 % is the kernel's unlimited 2048, else floor(160 * p / 100)."""
    assert mb_value(percent, info_for(AMD, tmp_path)) == want


def test_info_reads_the_kernel_files(tmp_path: Any) -> None:
    info = info_for(INTEL.with_(mb_closids=8), tmp_path)
    assert (info.cbm_mask, info.ways, info.min_cbm_bits, info.cache_ids, info.cache_names) == \
        (0x7FF, 11, 1, (0, 1), ("L3",))
    assert (info.mb, info.mb_ids, info.mb_gran, info.mb_min, info.mb_max) == (True, (0, 1), 10, 10, 100)
    assert info.num_closids == 8 and info.vendor == "GenuineIntel" and not info.amd
    amd = info_for(AMD, tmp_path / "amd")
    assert amd.amd and amd.mb_max == 2048 and amd.min_cbm_bits == 0 and amd.sparse_masks


# ---------------------------------------------------------------------------------------------------------------
# the annotation

def test_annotation_both_spellings(tmp_path: Any) -> None:
    info = info_for(INTEL, tmp_path)
    lower = parse_pod_resctrl(json.dumps({"llc": {"schemata": {"range": [0, 50]},
                                                  "schemataPerCache": [{"cacheID": 1, "range": [50, 100]}]},
                                          "mb": {"schemata": {"percent": 30},
                                                 "schemataPerCache": [{"cacheID": 0, "percent": 55}]}}))
    upper = parse_pod_resctrl(json.dumps({"LLC": {"Schemata": {"Range": [0, 50]},
                                                  "SchemataPerCache": [{"cacheid": 1, "range": [50, 100]}]},
                                          "MB": {"schemata": {"percent": 30},
                                                 "schemataPerCache": [{"cacheid": 0, "percent": 55}]}}))
    assert lower == upper
    desired, widened, note = pod_schemata(lower, info)
    assert desired == {"L3": {0: 0x3F, 1: 0x7C0}, "MB": {0: 60, 1: 30}} and not widened and note is None


def test_annotation_unset_parts_are_the_kernel_defaults(tmp_path: Any) -> None:
    info = info_for(INTEL, tmp_path)
    assert pod_schemata(parse_pod_resctrl("{}"), info)[0] == {"L3": {0: 0x7FF, 1: 0x7FF}, "MB": {0: 100, 1: 100}}
    only_mb = pod_schemata(parse_pod_resctrl('{"mb":{"schemata":{"percent":40}}}'), info)[0]
    assert only_mb == {"L3": {0: 0x7FF, 1: 0x7FF}, "MB": {0: 40, 1: 40}}
    zero = parse_pod_resctrl('{"mb":{"schemata":{"percent":0}},"llc":{"schemata":{"range":[]}}}')
    assert pod_schemata(zero, info)[0] == pod_schemata(parse_pod_resctrl("{}"), info)[0]


@pytest.mark.parametrize("raw,problem", [
    ("not json", "not JSON"),
    ("[]", "expected an object"),
    ('{"llc": 5}', "llc must be an object"),
    ('{"llc":{"schemata":{"range":[0]}}}', "llc.schemata.range must be [start, end]"),
    ('{"llc":{"schemata":{"range":[50,10]}}}', "0 <= start < end <= 100"),
    ('{"llc":{"schemata":{"range":["0","10"]}}}', "must be an integer"),
    ('{"llc":{"schemata":{"range":[0,true]}}}', "must be an integer"),
    ('{"mb":{"schemata":{"percent":150}}}', "mb.schemata.percent 150 must be 1-100"),
    ('{"mb":{"schemataPerCache":[{"cacheID":7,"percent":50}]}}', "mb cacheID 7"),
    ('{"llc":{"schemataPerCache":[{"cacheID":3,"range":[0,50]}]}}', "llc cacheID 3"),
    ('{"llc":{"schemataPerCache":{"cacheID":0}}}', "must be a list"),
])
def test_annotation_problems(raw: str, problem: str, tmp_path: Any) -> None:
    info = info_for(INTEL, tmp_path)
    with pytest.raises(ValueError) as e:
        pod_schemata(parse_pod_resctrl(raw), info)
    assert problem in str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# the strategy on the fake kernel

def spec(**classes: dict[str, Any]) -> NodeSLOSpec:
    """Merged NodeSLO with resctrlQOS per class, e.g. spec(beClass={"enable": True, "mbaPercent": 50})."""
    rq = {cls: {"resctrlQOS": cfg} for cls, cfg in classes.items()}
    merged, errors = merge_node_slo_spec({"resourceQOSStrategy": rq})
    assert errors == []
    return merged


ENABLED = spec(lsrClass={"enable": True}, lsClass={"enable": True}, beClass={"enable": True})


class Env:
    def __init__(self, tmp_path: Any, profile: Profile = INTEL, *, mounted: bool = True,
                 version: CgroupVersion = CgroupVersion.V1, pod_level: bool = True) -> None:
        self.paths = HostPaths.under(str(tmp_path))
        self.fake = FakeResctrl(self.paths, profile, mounted=mounted)
        self.version = version
        self.cgroups = Cgroups(self.paths.cgroup_root, version, Driver.CGROUPFS)
        self.layout = Layout(Driver.CGROUPFS)
        self.now = 1000.0
        self.metrics = AgentMetrics("n1")
        self.executor = Executor(self.cgroups, self.metrics, clock=lambda: self.now)
        self.strategy = Resctrl(self.paths, self.metrics, kernel=self.fake, pod_level=pod_level)
        self.pods: dict[str, PodMeta] = {}
        self.slo = spec()
        self._next_id = 1

    def task_file(self, rel: str) -> str:
        if self.version is CgroupVersion.V1:
            return os.path.join(self.paths.cgroup_root, "cpu", rel, "tasks")
        return os.path.join(self.paths.cgroup_root, rel, "cgroup.threads")

    def write_tids(self, rel: str, tids: list[int]) -> None:
        path = self.task_file(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("".join(f"{t}\n" for t in tids))
        self.fake.add_threads(*tids)

    def add_pod(self, uid: str, qos_class: str | None = "LS", kube: str = "Burstable",
                containers: list[list[int]] | None = None, sandbox: list[int] | None = None,
                annotation: str | None = None, phase: str = "Running", created: float = 0.0) -> PodMeta:
        cs = []
        for tids in containers if containers is not None else [[]]:
            cid = f"{self._next_id:064x}"
            self._next_id += 1
            cs.append((Container(f"c{len(cs)}", "containerd", cid), tids))
        labels = {QOS_LABEL: qos_class} if qos_class else {}
        annotations = {wire.ANNOTATION_POD_RESCTRL: annotation} if annotation is not None else {}
        pod = Pod(uid=uid, name=f"p-{uid}", namespace="ns", kube_qos=KUBE[kube], labels=labels,
                  annotations=annotations, phase=phase, containers=tuple(c for c, _ in cs), created=created)
        meta = meta_for(pod, self.layout)
        for (_, rel), (_, tids) in zip(meta.containers, cs, strict=False):
            self.write_tids(rel, tids)
        if sandbox is not None:
            self.write_tids(f"{meta.cgroup_dir}/{self._next_id:064x}", sandbox)
            self._next_id += 1
        self.pods[uid] = meta
        return meta

    def set_annotation(self, uid: str, annotation: str | None) -> None:
        meta = self.pods[uid]
        annotations = {wire.ANNOTATION_POD_RESCTRL: annotation} if annotation is not None else {}
        pod = dataclasses.replace(meta.pod, annotations=annotations)
        self.pods[uid] = PodMeta(pod, meta.cgroup_dir, meta.containers)

    def cycle(self, advance: float = 1.0) -> None:
        view = node_view(pods=self.pods.values(), slo=self.slo, node=NodeInfo("n1"))
        self.strategy.reconcile(view, self.executor)
        self.fake.apply()
        assert self.fake.violations == [], self.fake.violations
        assert self.fake.rounded == [], self.fake.rounded
        self.now += advance

    def schemata_writes(self) -> list[dict[str, Any]]:
        return [e for e in self.executor.events() if str(e["file"]).endswith("/schemata")]

    def task_appends(self) -> list[dict[str, Any]]:
        return [e for e in self.executor.events() if str(e["file"]).endswith("/tasks")]

    def gauge(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name, {"node": "n1"}) or 0.0


def test_default_nodeslo_creates_class_groups_without_writing(tmp_path: Any) -> None:
    """Every class disabled: the None values (full range, MB 100) are the kernel's defaults of a new group."""
    env = Env(tmp_path)
    env.cycle()
    assert set(hr.list_groups(env.fake.root)) == {"LSR", "LS", "BE"}
    assert oct(os.stat(os.path.join(env.fake.root, "BE")).st_mode & 0o777) == "0o755"
    assert env.schemata_writes() == []
    assert env.fake.schemata("BE") == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"


def test_class_schemata_written_once_and_kept(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = spec(beClass={"enable": True, "mbaPercent": 50}, lsClass={"enable": False, "catRangeEndPercent": 40})
    env.cycle()
    assert env.fake.schemata("BE") == "L3:0=00f;1=00f\nMB:0= 50;1= 50\n"      # as the kernel prints it
    assert env.fake.schemata("LS") == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"      # disabled: None values
    writes = env.schemata_writes()
    assert [(w["file"].split("/")[-2], w["new"]) for w in writes] == [("BE", "L3:0=f;1=f\nMB:0=50;1=50\n")]
    for _ in range(3):
        env.cycle()
    assert len(env.schemata_writes()) == 1                                    # a steady cycle writes nothing
    env.now += 120                                                            # past the force refresh: re-read,
    env.cycle()                                                               # still nothing to write
    assert len(env.schemata_writes()) == 1


def test_one_resource_changes_one_line(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = spec(beClass={"enable": True, "mbaPercent": 50})
    env.cycle()
    env.slo = spec(beClass={"enable": True, "mbaPercent": 71})
    env.cycle()
    assert env.schemata_writes()[-1]["new"] == "MB:0=80;1=80\n"               # rounded up to the granularity
    assert env.fake.schemata("BE") == "L3:0=00f;1=00f\nMB:0= 80;1= 80\n"      # the kernel kept L3


def test_drift_repaired_after_force_refresh(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = spec(beClass={"enable": True})
    env.cycle()
    env.fake.set_values("BE", "L3", {1: 0x7FF})
    env.cycle()
    assert "1=7ff" in env.fake.schemata("BE")                                 # verified recently: not re-read
    env.now += env.executor.force_refresh
    env.cycle()
    assert env.fake.schemata("BE").startswith("L3:0=00f;1=00f\n")
    assert env.schemata_writes()[-1]["new"] == "L3:0=f;1=f\n"


def test_amd(tmp_path: Any) -> None:
    env = Env(tmp_path, AMD)
    env.slo = spec(beClass={"enable": True, "mbaPercent": 50})
    env.cycle()
    assert env.fake.schemata("BE") == "L3:0=001f;1=001f;2=001f;3=001f\nMB:0=  80;1=  80;2=  80;3=  80\n"
    assert env.fake.schemata("LS").endswith("MB:0=2048;1=2048;2=2048;3=2048\n")
    env.cycle()
    assert len(env.schemata_writes()) == 1


def test_cdp_writes_code_and_data(tmp_path: Any) -> None:
    env = Env(tmp_path, INTEL.with_(cdp=True))
    env.slo = spec(beClass={"enable": True, "mbaPercent": 30})
    env.cycle()
    assert env.fake.schemata("BE") == "L3CODE:0=00f;1=00f\nL3DATA:0=00f;1=00f\n    MB:0= 30;1= 30\n"
    env.cycle()
    assert len(env.schemata_writes()) == 1


def test_l3_only_host(tmp_path: Any) -> None:
    """A CPU with cat_l3 but no mba: L3 lines only, and a pod's MB setting is noted, not written."""
    env = Env(tmp_path, INTEL.with_(mb=False, flags=("cat_l3",)))
    env.slo = spec(beClass={"enable": True, "mbaPercent": 30})
    env.add_pod("p1", annotation='{"mb":{"schemata":{"percent":30}},"llc":{"schemata":{"range":[0,50]}}}')
    env.cycle()
    assert env.fake.schemata("BE") == "L3:0=00f;1=00f\n"
    assert env.fake.schemata("koordlet-p1") == "L3:0=03f;1=03f\n"


def test_failed_write_is_retried_line_by_line(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = spec(beClass={"enable": True, "mbaPercent": 50})
    env.cycle()
    env.slo = spec(beClass={"enable": True, "catRangeEndPercent": 50, "mbaPercent": 60})
    path = os.path.join(env.fake.root, "BE", "schemata")
    os.remove(path)
    os.symlink("/proc/version", path)      # readable, but every write fails (EIO) as a rejected schemata would
    env.strategy.reconcile(node_view(slo=env.slo, node=NodeInfo("n1")), env.executor)
    assert env.executor.total.failed == 3                                     # both lines, then each alone


# --- tasks

def test_class_tasks_moved(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = ENABLED
    env.add_pod("ls", "LS", containers=[[101, 102], [103]], sandbox=[100])
    env.add_pod("lse", "LSE", "Guaranteed", containers=[[201]])
    env.add_pod("be", "BE", "BestEffort", containers=[[301]])
    env.add_pod("sys", "SYSTEM", "Guaranteed", containers=[[401]])
    env.add_pod("guaranteed", None, "Guaranteed", containers=[[501]])
    env.add_pod("done", "LS", containers=[[601]], phase="Succeeded")
    env.cycle()
    assert env.fake.members("LS") == {100, 101, 102, 103}
    assert env.fake.members("LSR") == {201, 501}
    assert env.fake.members("BE") == {301}
    assert env.fake.group_of(401) == "" and env.fake.group_of(601) == ""
    appends = len(env.task_appends())
    env.cycle()
    assert len(env.task_appends()) == appends                                # nothing new: no writes
    env.write_tids(env.pods["ls"].containers[1][1], [103, 104])               # a new thread
    env.cycle()
    assert env.fake.group_of(104) == "LS"
    assert env.task_appends()[-1]["new"] == "+1 ids"
    with open(os.path.join(env.fake.root, "tasks"), "a") as f:               # someone moves a thread out
        f.write("101\n")
    env.fake.apply()
    assert env.fake.group_of(101) == ""
    env.cycle()
    assert env.fake.group_of(101) == "LS"                                     # the container list did not change


def test_class_disabled_moves_nothing(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = spec(lsClass={"enable": True})
    env.add_pod("ls", "LS", containers=[[11]])
    env.add_pod("be", "BE", "BestEffort", containers=[[12]])
    env.cycle()
    assert env.fake.group_of(11) == "LS" and env.fake.group_of(12) == ""


def test_cgroup_v2_threads(tmp_path: Any) -> None:
    env = Env(tmp_path, version=CgroupVersion.V2)
    env.slo = ENABLED
    env.add_pod("be", "BE", "BestEffort", containers=[[7, 8]], sandbox=[6])
    env.cycle()
    assert env.fake.members("BE") == {6, 7, 8}


# --- pod groups

POD_CFG = '{"llc":{"schemata":{"range":[0,50]}},"mb":{"schemata":{"percent":30}}}'


def test_pod_group_lifecycle(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = ENABLED
    env.add_pod("p1", "LS", containers=[[21, 22]], sandbox=[20], annotation=POD_CFG)
    env.add_pod("p2", "LS", containers=[[31]])
    env.cycle()
    assert env.fake.schemata("koordlet-p1") == "L3:0=03f;1=03f\nMB:0= 30;1= 30\n"
    assert env.fake.members("koordlet-p1") == {20, 21, 22}                    # not the class group
    assert env.fake.members("LS") == {31}
    # the annotation changes: the schemata follow (upstream writes only once)
    env.set_annotation("p1", '{"LLC":{"schemataPerCache":[{"cacheid":1,"range":[50,100]}]}}')
    env.cycle()
    assert env.fake.schemata("koordlet-p1") == "L3:0=7ff;1=7c0\nMB:0=100;1=100\n"
    assert ("mkdir", "koordlet-p1") in env.fake.calls and env.fake.calls.count(("mkdir", "koordlet-p1")) == 1
    writes = len(env.schemata_writes())
    env.cycle()
    assert len(env.schemata_writes()) == writes
    # the pod goes away: the group goes after the grace from creation, its threads back to the root group
    del env.pods["p1"]
    env.now = 1000.0 + 9.0                                                    # created at 1000: 9 s later, kept
    env.cycle()
    assert "koordlet-p1" in hr.list_groups(env.fake.root)
    env.now = 1000.0 + 10.0
    env.cycle()
    assert "koordlet-p1" not in hr.list_groups(env.fake.root)
    assert env.fake.group_of(21) == ""


def test_annotation_removed_moves_pod_to_class_group(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = ENABLED
    env.add_pod("p1", "BE", "BestEffort", containers=[[41]], annotation="{}")
    env.cycle()
    assert env.fake.group_of(41) == "koordlet-p1"
    env.now += 20
    env.set_annotation("p1", None)
    env.cycle()
    assert "koordlet-p1" not in hr.list_groups(env.fake.root)
    assert env.fake.group_of(41) == "BE"


def test_restart_adopts_groups(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.slo = ENABLED
    env.add_pod("keep", "LS", containers=[[51]], annotation=POD_CFG)
    env.add_pod("gone", "LS", containers=[[61]], annotation=POD_CFG)
    env.cycle()
    del env.pods["gone"]
    env.set_annotation("keep", '{"mb":{"schemata":{"percent":70}}}')
    env.now += 100
    env.strategy = Resctrl(env.paths, env.metrics, kernel=env.fake)          # the agent restarts
    env.fake.calls.clear()
    env.cycle()
    groups = set(hr.list_groups(env.fake.root))
    assert {"koordlet-keep", "koordlet-gone"} <= groups                       # gone: within the grace of adoption
    assert env.fake.schemata("koordlet-keep") == "L3:0=7ff;1=7ff\nMB:0= 70;1= 70\n"
    assert not [c for c in env.fake.calls if c[0] == "mkdir"]
    env.now += 10
    env.cycle()
    assert "koordlet-gone" not in hr.list_groups(env.fake.root)
    assert env.fake.calls == [("rmdir", "koordlet-gone")]


def test_closid_exhaustion(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """6 CLOSIDs: root + LSR/LS/BE leave two pod groups; the others run in their class group."""
    env = Env(tmp_path, INTEL.with_(l3_closids=6, mb_closids=6))
    env.slo = ENABLED
    for i in range(4):
        env.add_pod(f"p{i}", "LS", containers=[[70 + i]], annotation=POD_CFG, created=float(i))
    with caplog.at_level(logging.INFO, logger="koordlet.qos.resctrl"):
        env.cycle()
        env.cycle()
    assert {g for g in hr.list_groups(env.fake.root) if g.startswith("koordlet-")} == {"koordlet-p0", "koordlet-p1"}
    assert env.fake.group_of(72) == "LS" and env.fake.group_of(73) == "LS"
    assert env.gauge("koordlet_resctrl_pods_without_group") == 2
    assert env.gauge("koordlet_resctrl_closid_exhausted_total") == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "CLOSIDs exhausted" in errors[0].getMessage() and "ns/p-p2" in errors[0].getMessage()
    assert ("mkdir", "koordlet-p2") not in env.fake.calls                     # never asked the kernel for more
    del env.pods["p0"]
    env.now += 10
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="koordlet.qos.resctrl"):
        env.cycle()
    assert "koordlet-p2" in hr.list_groups(env.fake.root) and env.fake.group_of(72) == "koordlet-p2"
    assert env.gauge("koordlet_resctrl_pods_without_group") == 1
    assert env.gauge("koordlet_resctrl_closid_exhausted_total") == 2


def test_enospc_from_the_kernel_falls_back(tmp_path: Any) -> None:
    """The kernel may hold CLOSIDs longer than info says (dirty RMIDs): ENOSPC from mkdir is exhaustion."""
    env = Env(tmp_path, INTEL.with_(l3_closids=5, mb_closids=5))
    with open(os.path.join(env.fake.root, "info", "L3", "num_closids"), "w") as f:
        f.write("16\n")
    with open(os.path.join(env.fake.root, "info", "MB", "num_closids"), "w") as f:
        f.write("16\n")
    env.slo = ENABLED
    env.add_pod("a", "LS", containers=[[81]], annotation="{}", created=1)
    env.add_pod("b", "LS", containers=[[82]], annotation="{}", created=2)
    env.cycle()
    assert env.fake.group_of(81) == "koordlet-a" and env.fake.group_of(82) == "LS"
    assert env.gauge("koordlet_resctrl_pods_without_group") == 1


def test_malformed_annotation(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    env = Env(tmp_path)
    env.slo = ENABLED
    env.add_pod("bad", "BE", "BestEffort", containers=[[91]], annotation='{"llc":{"schemata":{"range":[40,20]}}}')
    env.add_pod("good", "BE", "BestEffort", containers=[[92]], annotation=POD_CFG)
    with caplog.at_level(logging.WARNING, logger="koordlet.qos.resctrl"):
        env.cycle()
        env.cycle()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "ns/p-bad" in lines[0] and wire.ANNOTATION_POD_RESCTRL in lines[0] and "40, 20" in lines[0]
    assert env.fake.group_of(91) == "BE" and env.fake.group_of(92) == "koordlet-good"
    assert "koordlet-bad" not in hr.list_groups(env.fake.root)


def test_pod_level_off_uses_class_groups(tmp_path: Any) -> None:
    env = Env(tmp_path, pod_level=False)
    env.slo = ENABLED
    env.add_pod("p1", "LS", containers=[[95]], annotation=POD_CFG)
    env.cycle()
    assert env.fake.group_of(95) == "LS" and not [g for g in hr.list_groups(env.fake.root) if "koordlet" in g]


# --- support

def test_unsupported_host_is_a_quiet_no_op(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    env = Env(tmp_path, INTEL.with_(flags=("sse2",)), mounted=False)
    env.slo = ENABLED
    env.add_pod("p1", "LS", containers=[[1]], annotation=POD_CFG)
    with caplog.at_level(logging.INFO, logger="koordlet.qos.resctrl"):
        for _ in range(3):
            env.cycle()
    assert os.listdir(env.fake.root) == [] and env.fake.calls == []
    assert len(caplog.records) == 1 and "cat_l3" in caplog.records[0].getMessage()
    assert env.executor.total.written == 0
    ok, why = hr.supported(env.paths)
    assert not ok and "cat_l3" in why


def test_mounts_when_the_cpu_supports_it(tmp_path: Any) -> None:
    env = Env(tmp_path, mounted=False)
    assert hr.supported(env.paths)[0] == (os.geteuid() == 0)
    env.slo = spec(beClass={"enable": True})
    env.cycle()
    assert env.fake.calls[0] == ("mount", env.fake.root)
    assert env.fake.schemata("BE").startswith("L3:0=00f")
    ok, why = hr.supported(env.paths)
    assert ok and "mounted" in why and "cbm=7ff" in why


def test_unmounted_later_probes_again(tmp_path: Any) -> None:
    env = Env(tmp_path)
    env.cycle()
    env.fake.unmount()
    env.cycle()                                                              # remounts (cat_l3) and rebuilds
    assert env.fake.calls.count(("mount", env.fake.root)) == 1
    assert set(hr.list_groups(env.fake.root)) == {"LSR", "LS", "BE"}


def test_real_mount_syscall_reports_errors(tmp_path: Any) -> None:
    """The ctypes mount(2) path against the real kernel: a missing mount point is an OSError with errno."""
    with pytest.raises(OSError) as e:
        hr.ResctrlKernel().mount(str(tmp_path / "missing"))
    assert e.value.errno in (errno.ENOENT, errno.ENODEV, errno.EPERM)


# --- the fake kernel itself rejects what the kernel rejects

@pytest.mark.parametrize("text,problem", [
    ("L3:0=f;1=f", "trailing newline"),
    ("L3:0=5;1=f\n", "non-consecutive"),
    ("L3:0=0;1=f\n", "at least 1 bits"),
    ("L3:0=fff;1=f\n", "out of range"),
    ("L2:0=f\n", "unknown resource"),
    ("L3:2=f\n", "unknown domain"),
    ("MB:0=5;1=50\n", "out of range"),
    ("MB:0=50\nL3:0=5\n", "non-consecutive"),
])
def test_fake_kernel_rejects(text: str, problem: str, tmp_path: Any) -> None:
    fake = FakeResctrl(HostPaths.under(str(tmp_path)), INTEL)
    fake.make_group(fake.root, "G")
    before = fake.schemata("G")
    with open(os.path.join(fake.root, "G", "schemata"), "w") as f:
        f.write(text)
    fake.apply()
    assert len(fake.violations) == 1 and problem in fake.violations[0]
    assert fake.schemata("G") == before                                       # nothing applied


def test_fake_kernel_partial_writes_and_closids(tmp_path: Any) -> None:
    fake = FakeResctrl(HostPaths.under(str(tmp_path)), INTEL.with_(l3_closids=3))
    fake.make_group(fake.root, "A")
    with open(os.path.join(fake.root, "A", "schemata"), "w") as f:
        f.write("MB:1=55\n")
    fake.apply()
    assert fake.schemata("A") == "L3:0=7ff;1=7ff\nMB:0=100;1= 60\n" and fake.rounded == ["MB 55 stored as 60"]
    fake.make_group(fake.root, "B")
    with pytest.raises(OSError) as e:
        fake.make_group(fake.root, "C")
    assert e.value.errno == errno.ENOSPC
