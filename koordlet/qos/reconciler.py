"""The periodic QoS loop: one NodeView per cycle, every enabled strategy in the registry's order
(koordlet.qos.STRATEGIES), one executor. A strategy that raises is logged once (with its traceback at debug) and
counted; the others still run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from koordlet.base.logutil import LogOnce
from koordlet.component import Strategy
from koordlet.states.hostapps import HostApp
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, executor: Executor, strategies: Sequence[Strategy], metrics: AgentMetrics | None = None,
                 interval: float = 1.0) -> None:
        self.executor = executor
        self.strategies = list(strategies)
        self.interval = interval
        self._metrics = metrics
        self._bad = LogOnce(log)
        self._wake = threading.Event()
        self.cycles = 0
        self.last_view: NodeView | None = None   # what the NRI hooks decide from between cycles
        self._app_dirs: dict[str, tuple[int, ...]] = {}   # host application dir -> its identity last cycle

    def nudge(self) -> None:
        """Run the next cycle now (a container just started: cookies and task moves need its processes)."""
        self._wake.set()

    def run_once(self, view: NodeView) -> None:
        self.last_view = view
        self._forget_remade(view.host_apps)
        for strategy in self.strategies:
            try:
                strategy.reconcile(view, self.executor)
                if self._bad.forget(strategy.name):
                    log.info("qos strategy recovered name=%s", strategy.name)
            except Exception as e:   # one broken strategy must not stop the others
                if self._bad(strategy.name, "qos strategy failed name=%s error=%s", strategy.name, e):
                    log.debug("qos strategy failure detail name=%s", strategy.name, exc_info=True)
                if self._metrics is not None:
                    self._metrics.qos_strategy_errors.labels(self._metrics.node, strategy.name).inc()
        # the executor's write cache forgets pods that left and whose cgroups are gone (no NRI RemovePodSandbox
        # needed); cheap when the pod set is unchanged
        self.executor.prune(meta.cgroup_dir for meta in view.pods)
        self.cycles += 1

    def _forget_remade(self, apps: Sequence[HostApp]) -> None:
        """A host application's cgroup is removed and made again at the same path whenever its service restarts
        (systemd does that to every unit's cgroup). The executor's cache would take the old dir's values for the
        new one's until they expire (its force refresh, a minute): for a dir made again it forgets them, so this
        cycle writes the new dir."""
        dirs = {}
        for app in apps:
            identity = self.executor.cgroups.identity(app.cgroup_dir)
            if self._app_dirs.get(app.cgroup_dir, identity) != identity:
                self.executor.forget_cgroup(app.cgroup_dir)
            dirs[app.cgroup_dir] = identity
        self._app_dirs = dirs

    def run(self, stop: threading.Event, view: Callable[[], NodeView | None],
            on_cycle: Callable[[], None] = lambda: None, offset: float = 0.0) -> None:
        """Every interval until stop, or sooner when nudged, the first cycle ``offset`` seconds after the start (see
        :func:`koordlet.component.spread`); ``view`` returns None while the agent cannot decide yet (no pods synced).
        Whoever sets ``stop`` calls :meth:`nudge` so the wait ends at once. ``on_cycle`` after each cycle, decided or
        skipped: the agent's progress stamp (a cycle that never returns is a stuck loop, see
        :func:`koordlet.component.assess`)."""
        names = ",".join(s.name for s in self.strategies)
        log.info("qos reconciler starting interval=%.1fs strategies=%s", self.interval, names)
        if offset > 0 and stop.wait(offset):
            return
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                snapshot = view()
                if snapshot is not None:
                    self.run_once(snapshot)
            except Exception as e:     # building the view failed (bad topology read...): try next cycle
                self._bad("view", "qos cycle skipped error=%s", e)
            on_cycle()
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:
                next_tick, delay = time.monotonic(), 0.0
            self._wake.wait(delay)
            self._wake.clear()
