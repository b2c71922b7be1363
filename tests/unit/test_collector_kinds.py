"""Every registered collector held to the metric-kind table (koordlet/metriccache/kinds.py).

Each collector in ``koordlet.collectors.COLLECTORS`` is built by its own plugin from a ``Context`` over a fake host
that has what it reads (cgroups with pods and containers, NUMA, pressure files, kidled, NVML, the PMU, resctrl,
HAMi-core's shared region), run for two ticks (rates need two readings), and every sample it writes must name a
declared kind with exactly that kind's label keys. Each case also lists the kinds its collector writes on that
host, so a kind path the fake host does not reach shows up as a difference instead of passing unchecked.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from doubles import fakenvml
from doubles.fakehamicore import FakeLibvgpu
from doubles.fakeperf import FakePerfKernel
from koordlet.collectors import COLLECTORS, cpi, hami_vgpu
from koordlet.component import Collector, Context, Plugin, Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache, Sample, schema_problem
from koordlet.ops.config import build
from koordlet.ops.metrics import AgentMetrics
from koordlet.prediction.feed import Prediction
from koordlet.prediction.server import PredictionConfig
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import PodMeta, PodsInformer
from koordlet.states.nodestate import NodeState
from koordlet.writer.executor import Executor
from tests.fakehost import FakeHost
from tests.unit.test_gpu_devices import L40S_BUSES, write_proc_cgroup
from tests.unit.test_kidled import cold_rows, idle_page_stats, kidled_host, pods_and_apps, write_stats
from tests.unit.test_psi import write_node, write_pressure
from tests.unit.test_resctrl_collector import fake_with_groups

GiB = 2**30
GPU_PID = 4242                   # a process NVML lists on the first GPU, in the LS pod's container
VGPU_UUID = "GPU-" + "a" * 36


@dataclass(frozen=True)
class Node:
    """The host every case starts from: kidled switches and meminfo, NUMA nodes {0: 0-1, 1: 2-3}, an LS pod and a
    BE pod with one container each, and a host application (the cold page tests' node)."""
    root: Path
    host: FakeHost
    cgroups: Cgroups
    pods: tuple[PodMeta, ...]
    apps: tuple[HostApp, ...]

    @classmethod
    def make(cls, root: Path, version: CgroupVersion) -> Node:
        host, cgroups = kidled_host(root, version)
        host.set_numa({0: [0, 1], 1: [2, 3]})
        pods, apps = pods_and_apps(host, cgroups)
        return cls(root, host, cgroups, tuple(pods), tuple(apps))

    def dirs(self) -> list[str]:
        """Every pod and container cgroup (relative)."""
        return [rel for m in self.pods for rel in (m.cgroup_dir, *(r for _, r in m.containers))]


def context(node: Node) -> Context:
    """What the agent builds components from, over the fake host, with every collector's gate and option on."""
    paths = node.host.paths
    config = build(environ={}, flags={
        "standalone": True, "node-name": "n1", "tsdb-path": str(node.root / "tsdb"),
        "cgroup-root-dir": paths.cgroup_root, "sys-root-dir": paths.sys_root, "sys-fs-root-dir": paths.sys_fs_root,
        "proc-root-dir": paths.proc_root, "var-run-root-dir": paths.var_run_root, "run-root-dir": paths.run_root,
        "var-lib-kubelet-dir": paths.var_lib_kubelet,
        "feature-gates": {gate: True for plugin in COLLECTORS for gate in plugin.gates},
        "enable-pagecache-collector": True, "enable-resctrl-collector": True, "collect-cpi-timewindow": 0})
    assert HostPaths.from_config(config) == paths
    metrics = AgentMetrics("n1")
    cache = MetricCache(None)
    informer = PodsInformer(lambda: list(node.pods), 60.0, "standalone")
    informer.sync()
    state = NodeState(config, paths, node.cgroups, informer, metrics=metrics)
    return Context(config, paths, node.cgroups, metrics, cache, state,
                   Prediction(cache, PredictionConfig(checkpoint_dir=None), metrics),
                   executor=Executor(node.cgroups, metrics))


def _plugin_build(plugin: Plugin[Collector], ctx: Context, node: Node) -> Collector | None:
    return plugin.build(ctx)


def _nothing(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    return None


@dataclass(frozen=True)
class Case:
    """One collector's check: the host it reads, the cgroup versions it runs on, how it is built (its plugin's
    ``build`` unless its input lies outside the host roots) and the kinds it writes there."""
    kinds: frozenset[str]            # what the collector writes on this host
    prepare: Callable[[Node, pytest.MonkeyPatch], None] = _nothing      # what it reads beyond the common node
    versions: tuple[CgroupVersion, ...] = (CgroupVersion.V2,)
    make: Callable[[Plugin[Collector], Context, Node], Collector | None] = _plugin_build
    exports: str = ""                # a Prometheus series the run must set (for a collector that writes no samples)


# --- what each collector reads ------------------------------------------------------------------------------------

def _nvml(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four L40S GPUs; the first runs a process of the LS pod's container, with an SM-utilization sample."""
    lib = fakenvml.l40s_pcie4(node.host.paths)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    gpu = lib._gpu(L40S_BUSES[0])
    gpu.processes = [(GPU_PID, GiB)]
    gpu.samples = [(GPU_PID, 10, 50)]
    ls = node.pods[0]
    write_proc_cgroup(node.host.paths, GPU_PID, f"0::/{ls.containers[0][1]}\n")


def _pmu(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's PMU counts nothing of the fake host's cgroups: the collector gets the fake perf kernel."""
    monkeypatch.setattr(cpi, "LinuxPerf", FakePerfKernel)


def _kidled(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """idle_page_stats in the root memory cgroup, the pods', the containers' and the host application's."""
    for rel in ("", *node.dirs(), *(app.cgroup_dir for app in node.apps)):
        write_stats(node.host, rel, idle_page_stats(cold_rows(64 * 2**20)))


def _pressure(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/pressure and the pressure files of kubepods, the pods and the containers."""
    write_node(node.host)
    for rel in (node.cgroups.layout.qos_dir(KubeQOS.GUARANTEED), *node.dirs()):
        write_pressure(node.host, rel)


def _resctrl(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Intel CPU with L3 monitoring, resctrl mounted, the LSR, LS and BE class groups made."""
    fake_with_groups(node.root)


def _vgpu_root(node: Node) -> str:
    return str(node.root / "vgpu" / "containers")


def _vgpu_region(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LS pod's container has run CUDA on one shared GPU: libvgpu's region in its cache directory."""
    ls = node.pods[0]
    key = f"{ls.pod.uid}_{ls.containers[0][0].name}"
    lib = FakeLibvgpu(os.path.join(_vgpu_root(node), key, f"{key}.cache"), [(VGPU_UUID, 4 * GiB, 50)])
    lib.allocate(lib.start(7), 0, GiB)


def _vgpu_collector(plugin: Plugin[Collector], ctx: Context, node: Node) -> Collector | None:
    """The plugin's collector reads HAMi-core's cache root, a fixed host path (the NRI hook's bind-mount source)
    under no configurable root: the same collector over the fake host's copy of that directory."""
    built = plugin.build(ctx)
    assert isinstance(built, hami_vgpu.HamiVGPUCollector)
    return hami_vgpu.HamiVGPUCollector(_vgpu_root(node), ctx.metrics)


_USAGE = frozenset({
    "node_cpu_usage", "node_memory_usage", "node_numa_cpu_usage", "node_numa_memory_usage",
    "sys_cpu_usage", "sys_memory_usage", "sys_numa_cpu_usage", "sys_numa_memory_usage", "node_be",
    "pod_cpu_usage", "pod_memory_usage", "pod_memory_working_set",
    "container_cpu_usage", "container_memory_usage", "container_memory_working_set",
    "host_application_cpu_usage", "host_application_memory_usage", "host_application_memory_usage_with_page_cache"})

CASES: dict[str, Case] = {
    "usage": Case(_USAGE, versions=(CgroupVersion.V1, CgroupVersion.V2)),
    "podthrottled": Case(frozenset({"pod_cpu_throttled", "container_cpu_throttled"})),
    "gpu": Case(frozenset({"node_gpu_core_usage", "node_gpu_memory_usage", "node_gpu_memory_total",
                           "pod_gpu_core_usage", "pod_gpu_memory_usage",
                           "container_gpu_core_usage", "container_gpu_memory_usage"}), _nvml),
    "cpi": Case(frozenset({"container_cpi"}), _pmu),
    "coldpage": Case(frozenset({"node_memory_cold_page_size", "node_memory_with_hot_page_usage",
                                "pod_memory_cold_page_size", "pod_memory_with_hot_page_usage",
                                "container_memory_cold_page_size", "container_memory_with_hot_page_usage",
                                "host_application_memory_cold_page_size",
                                "host_application_memory_with_hot_page_usage"}), _kidled,
                     versions=(CgroupVersion.V1,)),
    "pagecache": Case(frozenset({"node_memory_usage_with_page_cache", "pod_memory_usage_with_page_cache",
                                 "container_memory_usage_with_page_cache"})),
    "psi": Case(frozenset({"node_psi", "pod_psi", "pod_psi_cpu_full_supported", "container_psi",
                           "container_psi_cpu_full_supported"}), _pressure),
    "resctrl-collector": Case(frozenset({"resctrl_resource_llc", "resctrl_resource_mb"}), _resctrl),
    # Prometheus only: HAMi-core's per-container vGPU use has no metric-cache kind (upstream has none either)
    "hami-vgpu": Case(frozenset(), _vgpu_region, make=_vgpu_collector,
                      exports="koordlet_container_vgpu_memory_used_bytes"),
}


def test_every_registered_collector_has_a_case():
    assert set(CASES) == {plugin.name for plugin in COLLECTORS}


@pytest.mark.parametrize("plugin", COLLECTORS, ids=[plugin.name for plugin in COLLECTORS])
def test_collector_writes_only_declared_kinds(tmp_path, monkeypatch, plugin):
    case = CASES.get(plugin.name)
    assert case is not None, f"collector {plugin.name!r} is registered without a case here"
    for version in case.versions:
        node = Node.make(tmp_path / version.name, version)
        case.prepare(node, monkeypatch)
        ctx = context(node)
        assert plugin.enabled(ctx.config)
        collector = case.make(plugin, ctx, node)
        assert collector is not None, f"{plugin.name} did not build on the fake host"
        samples: list[Sample] = []
        for i in range(2):
            if i:
                time.sleep(0.01)                    # rates divide by the monotonic time between the readings
            samples += collector.collect(Tick(100.0 + i, node.pods, node.apps))
        assert {s.name for s in samples} == case.kinds, version
        assert [p for p in map(schema_problem, samples) if p] == [], version
        if case.exports:
            assert [m.samples for m in ctx.metrics.registry.collect() if m.name == case.exports and m.samples], \
                f"{plugin.name} set no {case.exports}"
