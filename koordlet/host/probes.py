"""Kernel feature probes: what this host supports and, when not, why. Feeds ``koordlet doctor``.

Each probe looks at the real interface the feature would use (the cgroup file, the syscall, the mount),
so the answer is what enforcement would meet, not what a kernel version suggests.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from koordlet.host import coresched, perf
from koordlet.host.cgroup import Cgroups, CgroupVersion, KubeQOS, detect_driver
from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths


@dataclass(frozen=True)
class Feature:
    name: str
    supported: bool
    detail: str


def _file_probe(name: str, path: str, what: str) -> Feature:
    if not os.path.exists(path):
        return Feature(name, False, f"{path} missing: {what}")
    if not os.access(path, os.W_OK):
        return Feature(name, False, f"{path} present but not writable by this process")
    return Feature(name, True, path)


def probe(paths: HostPaths, cgroups: Cgroups) -> list[Feature]:
    v1 = cgroups.version is CgroupVersion.V1
    features: list[Feature] = []
    add = features.append

    add(Feature("cgroup version", True, "v1 (per-subsystem hierarchies)" if v1 else "v2 (unified)"))
    driver, why = detect_driver(cgroups.root, cgroups.version, paths)
    add(Feature("cgroup driver", True, f"{cgroups.layout.driver.value} (detected: {driver.value}, {why})"))
    kubepods = cgroups.listing_dir(cgroups.layout.qos_dir(KubeQOS.GUARANTEED))
    add(Feature("kubepods tree", os.path.isdir(kubepods),
                kubepods if os.path.isdir(kubepods) else f"{kubepods} missing: no kubelet pods on this host"))

    if v1:
        for subsystem in ("cpu", "cpuacct", "cpuset", "memory", "blkio", "net_cls"):
            d = os.path.join(cgroups.root, subsystem)
            add(Feature(f"controller {subsystem}", os.path.isdir(d),
                        d if os.path.isdir(d) else f"{d} not mounted"))
    else:
        try:
            controllers = set(read_text(os.path.join(cgroups.root, "cgroup.controllers")).split())
        except OSError as e:
            controllers = set()
            add(Feature("controllers", False, f"cgroup.controllers unreadable: {e.strerror}"))
        for c in ("cpu", "cpuset", "memory", "io"):
            add(Feature(f"controller {c}", c in controllers,
                        "enabled" if c in controllers else "not in cgroup.controllers"))

    cpu_root = cgroups.path("cpu", "")
    add(Feature("collection", os.access(cgroups.usage_files("").memory_stat, os.R_OK),
                "cgroup usage files readable" if os.access(cgroups.usage_files("").memory_stat, os.R_OK)
                else "root memory.stat unreadable"))
    writable = os.geteuid() == 0 and os.access(cpu_root, os.W_OK)
    add(Feature("enforcement", writable, "root and the cgroup tree is writable" if writable
                else f"not root (uid={os.geteuid()}) or {cpu_root} read-only: collection only"))
    return features


# --- per-component probes: (supported, where or why not); the components' PLUGIN lines name them ----------------

Support = tuple[bool, str]


def _file(path: str, what: str) -> Support:
    f = _file_probe("", path, what)
    return f.supported, f.detail


def cpu_idle(paths: HostPaths, cgroups: Cgroups) -> Support:
    return _file(os.path.join(cgroups.path("cpu", ""), "cpu.idle"), "kernel < 5.15 or no CONFIG_FAIR_GROUP_SCHED")


def group_identity(paths: HostPaths, cgroups: Cgroups) -> Support:
    """cpu.bvt_warp_ns (Anolis / Alibaba Cloud Linux), or cpu.idle for BE pods where it is missing."""
    gi_sysctl = paths.proc("sys", "kernel", "sched_group_identity_enabled")
    if os.path.exists(gi_sysctl):
        return True, gi_sysctl
    cpu_root = cgroups.path("cpu", "")
    ok, why = _file(os.path.join(cpu_root, "cpu.bvt_warp_ns"), "only Alibaba Cloud Linux / Anolis kernels have it")
    if ok:
        return ok, why
    idle, idle_why = cpu_idle(paths, cgroups)
    return idle, why + ("; BE pods get cpu.idle=1 instead" if idle else f"; no cpu.idle either: {idle_why}")


def cpu_burst(paths: HostPaths, cgroups: Cgroups) -> Support:
    v1 = cgroups.version is CgroupVersion.V1
    return _file(os.path.join(cgroups.path("cpu", ""), "cpu.cfs_burst_us" if v1 else "cpu.max.burst"),
                 "kernel < 5.14")


def core_sched(paths: HostPaths, cgroups: Cgroups) -> Support:
    return coresched.CoreSchedKernel().supported(paths)


def resctrl(paths: HostPaths, cgroups: Cgroups) -> Support:
    from koordlet.host import resctrl
    return resctrl.supported(paths, cgroups)


def blkio(paths: HostPaths, cgroups: Cgroups) -> Support:
    from koordlet.host import blockdev
    return blockdev.supported(paths, cgroups)


def net_qos(paths: HostPaths, cgroups: Cgroups) -> Support:
    from koordlet.host import netlink
    return netlink.supported(paths, cgroups)


def hardware_perf(paths: HostPaths, cgroups: Cgroups) -> Support:
    try:
        os.close(perf.perf_event_open(perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_CPU_CYCLES, 0, -1))
        return True, "perf_event_open(cycles) works"
    except OSError as e:
        reasons: dict[int | None, str] = {errno.ENOENT: "no hardware PMU exposed (typical of VMs)",
                                          errno.EACCES: "denied by kernel.perf_event_paranoid",
                                          errno.EPERM: "denied by kernel.perf_event_paranoid"}
        why = reasons.get(e.errno, e.strerror)
        return False, f"perf_event_open(cycles): {why}"


def nvidia_gpus(paths: HostPaths, cgroups: Cgroups) -> Support:
    """GPUs for the GPU collectors: without one they have nothing to read."""
    from koordlet.host import nvml
    return nvml.supported(paths)


def psi(paths: HostPaths, cgroups: Cgroups) -> Support:
    """Node PSI, and per-cgroup PSI (pods and containers)."""
    from koordlet.host import psi
    node_ok, node_why = psi.node_supported(paths)
    cg_ok, cg_why = psi.cgroup_supported(cgroups, cgroups.layout.qos_dir(KubeQOS.GUARANTEED))
    return node_ok, f"node: {node_why}; per cgroup: {cg_why if cg_ok else 'no: ' + cg_why}"


def kidled(paths: HostPaths, cgroups: Cgroups) -> Support:
    from koordlet.host.kidled import kidled_supported
    if cgroups.version is not CgroupVersion.V1:
        return False, "kidled is cgroup v1 only"
    return kidled_supported(paths)


def memory_qos(paths: HostPaths, cgroups: Cgroups) -> Support:
    if cgroups.version is CgroupVersion.V1:
        return _file(os.path.join(cgroups.path("memory", ""), "memory.min"),
                     "cgroup v1 has memory.min only on Anolis kernels")
    kube = cgroups.path("", cgroups.layout.qos_dir(KubeQOS.GUARANTEED))
    ok = "memory" in read_text_or_empty(os.path.join(cgroups.root, "cgroup.subtree_control"))
    return ok, f"memory controller delegated to children ({kube})" if ok else "memory controller not delegated"


def read_text_or_empty(path: str) -> str:
    try:
        return read_text(path)
    except OSError:
        return ""
