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
    add(_file_probe("cpu.idle (BE sched idle)", os.path.join(cpu_root, "cpu.idle"),
                    "kernel < 5.15 or no CONFIG_FAIR_GROUP_SCHED"))
    gi_sysctl = paths.proc("sys", "kernel", "sched_group_identity_enabled")
    if os.path.exists(gi_sysctl):
        add(Feature("group identity (cpu.bvt_warp_ns)", True, gi_sysctl))
    else:
        idle = os.path.exists(os.path.join(cpu_root, "cpu.idle"))
        add(_file_probe("group identity (cpu.bvt_warp_ns)", os.path.join(cpu_root, "cpu.bvt_warp_ns"),
                        "only Alibaba Cloud Linux / Anolis kernels have it" +
                        ("; BE pods get cpu.idle=1 instead" if idle else "")))
    add(_file_probe("cpu burst", os.path.join(cpu_root, "cpu.cfs_burst_us" if v1 else "cpu.max.burst"),
                    "kernel < 5.14"))
    ok, why = coresched.CoreSchedKernel().supported(paths)
    add(Feature("core scheduling", ok, why))

    from koordlet.host import blockdev, netlink, resctrl
    ok, why = resctrl.supported(paths, cgroups)
    add(Feature("resctrl (LLC/MB)", ok, why))
    ok, why = blockdev.supported(paths, cgroups)
    add(Feature("blkio QoS", ok, why))
    ok, why = netlink.supported(paths, cgroups)
    add(Feature("net QoS (tc/HTB)", ok, why))

    try:
        os.close(perf.perf_event_open(perf.PERF_TYPE_HARDWARE, perf.PERF_COUNT_HW_CPU_CYCLES, 0, -1))
        add(Feature("hardware perf counters (CPI)", True, "perf_event_open(cycles) works"))
    except OSError as e:
        why = {errno.ENOENT: "no hardware PMU exposed (typical of VMs)",
               errno.EACCES: "denied by kernel.perf_event_paranoid",
               errno.EPERM: "denied by kernel.perf_event_paranoid"}.get(e.errno, e.strerror)
        add(Feature("hardware perf counters (CPI)", False, f"perf_event_open(cycles): {why}"))

    from koordlet.host import psi
    ok, why = psi.node_supported(paths)
    add(Feature("PSI (node)", ok, why))
    ok, why = psi.cgroup_supported(cgroups, cgroups.layout.qos_dir(KubeQOS.GUARANTEED))
    add(Feature("PSI per cgroup", ok, why))

    from koordlet.host.kidled import kidled_supported
    ok, why = kidled_supported(paths) if v1 else (False, "kidled is cgroup v1 only")
    add(Feature("cold memory (kidled)", ok, why))
    mem_root = cgroups.path("memory", "")
    if v1:
        add(_file_probe("memory QoS (memory.min)", os.path.join(mem_root, "memory.min"),
                        "cgroup v1 has memory.min only on Anolis kernels"))
    else:
        kube = cgroups.path("", cgroups.layout.qos_dir(KubeQOS.GUARANTEED))
        add(Feature("memory QoS (memory.min)", "memory" in read_text_or_empty(
            os.path.join(cgroups.root, "cgroup.subtree_control")), "memory controller delegated to children"
            f" ({kube})"))
    return features


def read_text_or_empty(path: str) -> str:
    try:
        return read_text(path)
    except OSError:
        return ""
