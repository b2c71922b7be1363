"""Components: how a QoS strategy, a collector, a report or a service declares itself, and the loops that run them.

Each component module ends with one ``PLUGIN = Plugin(...)`` line: its name, the feature gates that enable it, the
options it also needs, how it builds itself from a :class:`Context`, its period (collectors and reports), whether it
needs a cluster (reports for the API server: off standalone) and, where the host may lack what it needs, a probe
that says so (``koordlet doctor`` prints these). The package lists its
plugins in order (``koordlet/qos/__init__.py``, ``koordlet/collectors/__init__.py``,
``koordlet/reporters/__init__.py``, ``koordlet/services.py``); the agent builds the enabled ones and runs them under
:class:`Loops`. Adding a component is its module plus one line in that list (plus the config table if it has
options). Upstream koordlet does the same with its plugin maps.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from koordlet.base.diskfull import DiskFull
from koordlet.base.logutil import LogOnce
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.config import Config
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import PodMeta
from koordlet.states.nodestate import NodeState, NodeView
from koordlet.states.readings import CgroupReadings

if TYPE_CHECKING:
    from koordlet.prediction.feed import Prediction
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Probe = Callable[[Config, HostPaths, Cgroups], "tuple[bool, str]"]

# a loop that failed this many times in a row turns /healthz red (it keeps running)
UNHEALTHY_AFTER = 3


@dataclass
class Context:
    """What a component builds itself from: everything wired, nothing started."""

    config: Config
    paths: HostPaths
    cgroups: Cgroups
    metrics: AgentMetrics
    cache: MetricCache
    node: NodeState
    prediction: Prediction
    executor: Executor | None = None       # the only kernel writer; None: enforcement off (not root, interval 0)
    nudge: Callable[[], None] = lambda: None   # run the next QoS cycle now (set once the reconciler exists)
    view: Callable[[], NodeView | None] = lambda: None   # the latest NodeView (set by the agent)
    readings: CgroupReadings = field(default_factory=CgroupReadings)   # what the collectors read this second
    persist: bool = True                   # False for one-shot commands: touch no state on disk
    disk_full: DiskFull = field(default_factory=DiskFull)   # which of the agent's stores have no room (shared)


class StartupError(RuntimeError):
    """The agent cannot start with this configuration on this host (the message says what to fix)."""


def _always(config: Config) -> bool:
    return True


def running_as_root() -> bool:
    """Enforcement (executor, reconciler, NRI hooks) needs root; without it the agent collects and reports."""
    return os.geteuid() == 0


def host_probe(check: Callable[[HostPaths, Cgroups], tuple[bool, str]]) -> Probe:
    """A :mod:`koordlet.host.probes` check as a plugin probe (one that needs no option)."""
    return lambda config, paths, cgroups: check(paths, cgroups)


def collecting(config: Config) -> bool:
    """Usage collection is on: strategies that read usage back from the metric cache need it."""
    return config.collect_res_used_interval > 0


@dataclass(frozen=True)
class Plugin(Generic[T_co]):
    """A component's declaration (see the module docstring). ``build`` may return None when the host lacks what
    the component needs; it then logs why once."""

    name: str
    build: Callable[[Context], T_co | None]
    gates: tuple[str, ...] = ()                            # enabled when any is on; () = always
    when: Callable[[Config], bool] = _always               # options it also needs (an interval > 0, a flag)
    period: Callable[[Config], float] | None = None        # collectors and reports: seconds between runs
    probe: Probe | None = None                             # does this host support it, and why not
    primary: bool = False                                  # collectors: part of the main usage cycle (run --once)
    cluster: bool = False                                  # reports: sent to the API server, so never standalone

    def enabled(self, config: Config) -> bool:
        return ((not self.gates or any(config.gate(g) for g in self.gates)) and self.when(config)
                and not (self.cluster and config.standalone))


def build_enabled(plugins: tuple[Plugin[T], ...], ctx: Context) -> list[tuple[Plugin[T], T]]:
    """The enabled plugins built, in list order. A :class:`StartupError` (bad configuration) stops the agent;
    any other failure of one build is logged and that component left out (the others go on)."""
    out = []
    for plugin in plugins:
        if not plugin.enabled(ctx.config):
            continue
        try:
            component = plugin.build(ctx)
        except StartupError:
            raise
        except Exception as e:  # one component that cannot start must not stop the others
            log.error("component not started name=%s error=%s", plugin.name, e)
            continue
        if component is not None:
            out.append((plugin, component))
    return out


# --- the interfaces the agent drives -----------------------------------------------------------------------------


class Strategy(Protocol):
    """A QoS strategy: the desired kernel state for one feature, handed to the executor. Must not raise for bad
    input (log once, fall back to defaults) and must be idempotent (an unchanged host costs no writes)."""

    name: str

    def reconcile(self, view: NodeView, executor: Executor) -> None: ...


@dataclass(frozen=True)
class Tick:
    """What one collection run sees."""

    now: float                              # Unix seconds
    pods: tuple[PodMeta, ...]
    host_apps: tuple[HostApp, ...] = ()
    stop: threading.Event = field(default_factory=threading.Event)   # long windows (CPI) end early on it


class Collector(Protocol):
    """Reads the host through koordlet.host and returns metric-cache samples; errors are logged once inside."""

    name: str

    def collect(self, tick: Tick) -> list[Sample]: ...


class Report(Protocol):
    """Sends one kind of report. ``ready`` is False while what it needs is not there yet (a watch not synced);
    ``send`` returns the result label (updated, created, unchanged, absent, written…) or raises."""

    kind: str
    wait_first: bool          # the first run after one interval (as upstream's NodeMetric), not at start

    def interval(self) -> float: ...

    def ready(self) -> bool: ...

    def send(self, stop: threading.Event) -> str: ...


# --- supervised loops --------------------------------------------------------------------------------------------

# A watched loop is stuck when its last completed iteration is older than STALL_PERIODS of its period, and never
# sooner than STALL_FLOOR seconds: a GC pause, a loaded host or a slow first cycle must not restart the agent, while
# a read blocked on a hung filesystem or a peer that never answers must.
STALL_PERIODS = 5
STALL_FLOOR = 10.0

def spread(periods: Sequence[float]) -> list[float]:
    """Start offsets for periodic loops, in the order given: loops of the same period evenly over it (the i-th of n
    at i/n of the period). The collectors and the QoS reconcile each read hundreds of kernel files every second;
    started together they stay together, and run at the same instant on two CPUs they cost more than one after the
    other (measured at 500 containers: the usage collector, the throttled collector and the reconcile 60 ms of CPU
    a second together, 52 ms a quarter of a second apart; the kernel's cgroup files and the GIL are contended)."""
    counts = Counter(periods)
    seen: Counter[float] = Counter()
    offsets = []
    for period in periods:
        offsets.append(period * seen[period] / counts[period])
        seen[period] += 1
    return offsets


def stall_deadline(period: float) -> float:
    """Seconds without a completed iteration after which a loop of this period counts as stuck."""
    return max(STALL_PERIODS * period, STALL_FLOOR)


@dataclass
class Loop:
    """One supervised thread: ``runs`` steps completed, ``failures`` in a row, and two progress stamps
    (monotonic seconds): ``progress_at`` the last completed iteration, failed or not (the loop is alive),
    ``success_at`` the last successful one (what it produces is fresh). ``deadline`` None: not watched for stalls
    (a watch that waits for events as long as nothing happens)."""

    name: str
    target: Callable[[threading.Event], None]
    runs: int = 0
    failures: int = 0
    thread: threading.Thread | None = None
    deadline: float | None = None
    progress_at: float | None = None      # None until started
    success_at: float | None = None       # None until the first success

    def beat(self, ok: bool = True, now: float | None = None) -> None:
        """An iteration completed (``ok``: and succeeded). Called by the loop itself, or by the component that
        owns a long-running target (the informer after each sync, the reconciler after each cycle)."""
        now = time.monotonic() if now is None else now
        self.progress_at = now
        if ok:
            self.success_at = now


@dataclass(frozen=True)
class LoopState:
    """One loop as :func:`assess` sees it: seconds since its stamps at the moment of the snapshot."""

    name: str
    deadline: float | None
    since_progress: float | None = None   # None: not started
    since_success: float | None = None    # None: never succeeded
    failures: int = 0


@dataclass(frozen=True)
class Verdict:
    """What the agent says about itself, from one snapshot: /healthz (``healthy``, ``health``), /readyz
    (``ready``, ``readiness``), the systemd watchdog (``progressing``: WATCHDOG=1 may be sent) and ``STATUS=``."""

    healthy: bool
    health: str
    ready: bool
    readiness: str
    progressing: bool
    status: str


def assess(loops: Sequence[LoopState], required: Sequence[tuple[str, str]] = ()) -> Verdict:
    """The one rule for health, readiness and the watchdog (pure: the server, the notifier and the tests call it).

    - **stuck**: a watched loop whose last completed iteration (failed or not) is older than its deadline. It
      stops the watchdog (systemd restarts the agent) and turns /healthz red. A loop that keeps failing but keeps
      iterating is not stuck: a restart would not bring the kubelet back.
    - **failing**: :data:`UNHEALTHY_AFTER` failures in a row turn /healthz red until it succeeds again.
    - **ready**: every loop in ``required`` (name, what it provides) that exists has succeeded within its
      deadline, so /readyz goes back to 503 when pod sync or collection stops, and to 200 when it resumes.
    """
    stuck = [f"{s.name} (no progress for {s.since_progress:.1f}s, deadline {s.deadline:g}s)" for s in loops
             if s.deadline is not None and s.since_progress is not None and s.since_progress > s.deadline]
    failing = sorted(s.name for s in loops if s.failures >= UNHEALTHY_AFTER)
    problems = ([f"stuck loops: {', '.join(stuck)}"] if stuck else []) + \
        ([f"failing loops: {','.join(failing)}"] if failing else [])
    by_name = {s.name: s for s in loops}
    unready = []
    for name, what in required:
        state = by_name.get(name)
        if state is None:
            continue
        if state.since_success is None:
            unready.append(f"no {what} completed yet")
        elif state.deadline is not None and state.since_success > state.deadline:
            unready.append(f"no {what} for {state.since_success:.1f}s (deadline {state.deadline:g}s)")
    if not loops:
        unready.append("not started")
    readiness = "; ".join(unready) or "ok"
    health = "; ".join(problems) or "ok"
    if problems:
        status = health + ("; watchdog withheld" if stuck else "")
    else:
        status = f"running: {len(loops)} loops progressing" if not unready else f"not ready: {readiness}"
    return Verdict(not problems, health, not unready, readiness, not stuck, status)


class Loops:
    """Every agent thread goes through here: a step that raises is logged once, counted in
    ``koordlet_loop_errors_total{loop}`` and the loop goes on; a loop failing :data:`UNHEALTHY_AFTER` times in a
    row makes :meth:`healthy` false until it succeeds again. Each loop carries progress stamps (:meth:`Loop.beat`)
    and, when watched, its own deadline (:func:`stall_deadline` of its period); :meth:`states` snapshots them for
    :func:`assess`."""

    def __init__(self, stop: threading.Event, metrics: AgentMetrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stop = stop
        self._metrics = metrics
        self._bad = LogOnce(log, logging.ERROR)
        self._clock = clock
        self.loops: dict[str, Loop] = {}

    def every(self, name: str, period: float, step: Callable[[], object], offset: float = 0.0) -> Loop:
        """``step`` every ``period`` seconds (its own duration included), the first ``offset`` seconds after the
        start (:func:`spread`); overruns skip ticks, never burst. Each step that returns is progress; the loop is
        stuck after :func:`stall_deadline` of ``period`` without one."""
        loop = Loop(name, lambda stop: None, deadline=stall_deadline(period))

        def run(stop: threading.Event) -> None:
            if offset > 0 and stop.wait(offset):
                return
            next_tick = time.monotonic()
            while not stop.is_set():
                loop.beat(self._step(loop, step), self._clock())
                next_tick += period
                delay = next_tick - time.monotonic()
                if delay < 0:
                    next_tick, delay = time.monotonic(), 0.0
                if stop.wait(delay):
                    return

        loop.target = run
        self.loops[name] = loop
        return loop

    def forever(self, name: str, target: Callable[[threading.Event], None], restart_after: float = 1.0, *,
                period: float | None = None) -> Loop:
        """A long-running ``target(stop)`` (a watch, an event loop): restarted after ``restart_after`` seconds if it
        raises, until stop. With ``period`` (how often it completes an iteration) it is watched: whoever drives it
        calls :meth:`beat` after each iteration, and it is stuck after :func:`stall_deadline` of ``period``
        without one."""
        loop = Loop(name, lambda stop: None, deadline=None if period is None else stall_deadline(period))

        def run(stop: threading.Event) -> None:
            while not stop.is_set():
                if self._step(loop, lambda: target(stop)) or stop.wait(restart_after):
                    return

        loop.target = run
        self.loops[name] = loop
        return loop

    def beat(self, name: str, ok: bool = True) -> None:
        """Progress of the loop ``name`` (a no-op for a loop not registered: a one-shot run has none)."""
        loop = self.loops.get(name)
        if loop is not None:
            loop.beat(ok, self._clock())

    def _step(self, loop: Loop, step: Callable[[], object]) -> bool:
        try:
            step()
        except Exception as e:   # nothing may end a loop: count, log once, go on
            loop.failures += 1
            self._metrics.loop_errors.labels(self._metrics.node, loop.name).inc()
            if self._bad(loop.name, "loop step failed loop=%s error=%s", loop.name, e):
                log.debug("loop failure detail loop=%s", loop.name, exc_info=True)
            return False
        loop.runs += 1
        loop.failures = 0
        if self._bad.forget(loop.name):
            log.info("loop recovered loop=%s", loop.name)
        return True

    def start(self) -> None:
        now = self._clock()
        for loop in self.loops.values():
            if loop.thread is None:
                if loop.progress_at is None:   # the deadline of the first iteration runs from here
                    loop.progress_at = now
                loop.thread = threading.Thread(target=loop.target, args=(self.stop,), name=loop.name, daemon=True)
                loop.thread.start()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for loop in self.loops.values():
            if loop.thread is not None:
                loop.thread.join(max(0.0, deadline - time.monotonic()))

    def states(self) -> list[LoopState]:
        """A snapshot of every loop's stamps, for :func:`assess` (reads plain attributes: no lock needed)."""
        now = self._clock()
        return [LoopState(loop.name, loop.deadline,
                          None if loop.progress_at is None else now - loop.progress_at,
                          None if loop.success_at is None else now - loop.success_at, loop.failures)
                for loop in self.loops.values()]

    def healthy(self) -> tuple[bool, str]:
        """/healthz: no loop stuck past its deadline, none failing :data:`UNHEALTHY_AFTER` times in a row."""
        verdict = assess(self.states(), required=())
        return verdict.healthy, verdict.health
