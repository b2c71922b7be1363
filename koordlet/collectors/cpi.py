"""CPI: cycles and retired instructions of every container over a window (upstream
``pkg/koordlet/metricsadvisor/collectors/performance/performance_collector_linux.go``:
``performanceCollector.collectContainerCPI``).

Every ``interval`` (60 s upstream) the collector opens grouped counters for each container cgroup on every CPU,
lets them count for ``window`` (10 s), reads, scales for multiplexing, sums over CPUs and closes. Samples are the
raw totals, as upstream stores them: ``container_cpi{pod_uid, container_id, cpi_resource=cycle|instruction}``;
Prometheus ``koordlet_container_cpi{..., cpi_field=cycles|instructions}``. CPI = cycles / instructions.

File descriptors: a window needs CPUs × 2 fds per container, which on a 128-CPU node with 100 containers is
25,600. The collector raises the soft RLIMIT_NOFILE towards the hard limit when that is needed, keeps a reserve
for the rest of the agent, and when the budget is still short it counts a rotating subset of the containers (each
gets its turn over successive windows) and says so in ``koordlet_cpi_containers{state}``; an EMFILE mid-window
ends the opening for that window instead of failing. A host whose PMU has no such events (ENOENT: VMs) or whose
``perf_event_paranoid`` forbids them is reported once and the collector stays off.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.host.perf import CYCLES, INSTRUCTIONS, CgroupCounters, Event, LinuxPerf, PerfKernel
from koordlet.host.procfs import open_fd_count, raise_nofile
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

FD_RESERVE = 512                  # fds left for sockets, files and the metric cache while a window is open
_UNSUPPORTED = {errno.ENOENT: "no such hardware event on this host's PMU (typical of VMs)",
                errno.EOPNOTSUPP: "the PMU does not support these events",
                errno.EACCES: "denied by kernel.perf_event_paranoid",
                errno.EPERM: "denied by kernel.perf_event_paranoid (or the agent lacks CAP_PERFMON)"}


@dataclass(frozen=True)
class Target:
    pod_uid: str
    pod_name: str
    pod_namespace: str
    container_id: str
    container_name: str
    cgroup_dir: str               # absolute: the perf_event hierarchy's directory of the container


class CPICollector:
    """Cycles and instructions per container, counted over one window per run (upstream's CPI collector)."""

    name = "cpi"

    def __init__(self, cgroups: Cgroups, metrics: AgentMetrics, cpus: Sequence[int], *,
                 kernel: PerfKernel | None = None, events: tuple[Event, Event] = (CYCLES, INSTRUCTIONS),
                 window: float = 10.0, fd_limit: Callable[[int], int] = raise_nofile,
                 fds_in_use: Callable[[], int] = open_fd_count) -> None:
        self._cgroups, self._metrics, self._cpus = cgroups, metrics, list(cpus)
        self._kernel: PerfKernel = kernel if kernel is not None else LinuxPerf()
        self._events, self._window = events, window
        self._fd_limit, self._fds_in_use = fd_limit, fds_in_use
        self._cursor = 0                          # where the next window starts when only a subset fits
        self._bad = LogOnce(log)
        self._exported: set[tuple[str, ...]] = set()
        self.unsupported = ""                     # why the collector is off ("" while it works)
        self.last_fds = 0                         # fds the last window held (bench, tests)

    def targets(self, pods: Sequence[PodMeta]) -> list[Target]:
        sub = "perf_event" if self._cgroups.version is CgroupVersion.V1 else ""
        return [Target(m.pod.uid, m.pod.name, m.pod.namespace, c.id, c.name, self._cgroups.path(sub, rel))
                for m in pods for c, rel in m.containers if c.id]

    def budget(self, per_target: int, wanted: int) -> int:
        """How many containers one window may count."""
        limit = self._fd_limit(self._fds_in_use() + FD_RESERVE + per_target * wanted)
        return max(0, (limit - self._fds_in_use() - FD_RESERVE) // per_target)

    def collect(self, tick: Tick) -> list[Sample]:
        """One window: open, count for ``window`` seconds (or until the tick's stop), read, close. [] when off."""
        if self.unsupported:
            return []
        now = tick.now
        targets = self.targets(tick.pods)
        per_target = len(self._cpus) * len(self._events)
        fits = min(len(targets), self.budget(per_target, len(targets))) if per_target else 0
        if fits < len(targets) and targets:
            start = self._cursor % len(targets)
            chosen = (targets + targets)[start:start + fits]
            self._cursor = start + fits
            self._bad("budget", "cpi: fd budget covers %d of %d containers per window; counting them in turns",
                      fits, len(targets))
        else:
            chosen = targets
            self._bad.forget("budget")
        counting: list[tuple[Target, CgroupCounters]] = []
        try:
            for target in chosen:
                opened = self._open(target)
                if opened == "off":
                    return []
                if opened == "emfile":
                    break
                if isinstance(opened, CgroupCounters):
                    counting.append((target, opened))
            self.last_fds = sum(c.fds for _, c in counting)
            self._metrics.cpi_containers.labels(self._metrics.node, "counted").set(len(counting))
            self._metrics.cpi_containers.labels(self._metrics.node, "deferred").set(len(targets) - len(counting))
            for _, counters in counting:
                counters.start()
            tick.stop.wait(self._window)
            samples = []
            for target, counters in counting:
                try:
                    cycles, instructions = counters.stop_and_read()
                except (OSError, ValueError) as e:
                    self._metrics.skipped("cpi", "error")
                    self._bad(f"read {target.container_id}", "cpi read failed container=%s error=%s",
                              target.container_id, e)
                    continue
                samples += self._record(target, now, cycles, instructions)
            self._forget_gone({t.container_id for t in targets})
            return samples
        finally:
            for _, counters in counting:
                counters.close()

    def _open(self, target: Target) -> CgroupCounters | str:
        """The container's counters, or why not: "skip" (this container), "emfile" (no more this window), "off"."""
        try:
            counters = CgroupCounters.open(self._kernel, target.cgroup_dir, self._cpus, self._events)
        except OSError as e:
            return self._failed(target, e)
        if counters is None:
            self._metrics.skipped("cpi", "vanished")
            return "skip"
        return counters

    def _failed(self, target: Target, e: OSError) -> str:
        if e.errno in _UNSUPPORTED:
            self.unsupported = f"perf_event_open({self._events[0].name}): {_UNSUPPORTED[e.errno]}"
            log.warning("cpi collector off: %s", self.unsupported)
            return "off"
        if e.errno in (errno.EMFILE, errno.ENFILE):
            self._metrics.skipped("cpi", "emfile")
            self._bad("emfile", "cpi: out of file descriptors at container=%s; counting fewer this window",
                      target.container_id)
            return "emfile"
        self._metrics.skipped("cpi", "error")
        self._bad(f"open {target.container_id}", "cpi open failed container=%s error=%s", target.container_id, e)
        return "skip"

    def _record(self, target: Target, now: float, cycles: float, instructions: float) -> list[Sample]:
        labels = (target.container_id, target.container_name, target.pod_uid, target.pod_name, target.pod_namespace)
        gauge = self._metrics.container_cpi
        gauge.labels(self._metrics.node, *labels, "cycles").set(cycles)
        gauge.labels(self._metrics.node, *labels, "instructions").set(instructions)
        self._exported.add(labels)
        base = (("container_id", target.container_id), ("pod_uid", target.pod_uid))
        return [Sample("container_cpi", (base[0], ("cpi_resource", "cycle"), base[1]), now, cycles),
                Sample("container_cpi", (base[0], ("cpi_resource", "instruction"), base[1]), now, instructions)]

    def _forget_gone(self, live: set[str]) -> None:
        for labels in [exported for exported in self._exported if exported[0] not in live]:
            for field in ("cycles", "instructions"):
                try:
                    self._metrics.container_cpi.remove(self._metrics.node, *labels, field)
                except KeyError:
                    pass
            self._exported.discard(labels)


def _build(ctx: Context) -> CPICollector:
    return CPICollector(ctx.cgroups, ctx.metrics, ctx.node.topology.online, window=ctx.config.collect_cpi_timewindow)


PLUGIN = Plugin("cpi", _build, gates=("CPICollector",), when=lambda c: c.cpi_collector_interval > 0,
                period=lambda c: c.cpi_collector_interval, probe=host_probe(probes.hardware_perf))
