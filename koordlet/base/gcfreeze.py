"""Shorter stop-the-world pauses of CPython's cyclic garbage collector, for a long-running agent.

A full (generation 2) collection walks every tracked object while holding the GIL, so every thread waits: the
HTTP server's ``/healthz``, the NRI hooks inside their budget. Under pod churn the agent's long-lived state
(metric-cache series, predictor models, pods, Prometheus children: ~55,000 tracked objects with 200 pods) would be
walked every ~5 s, 20-30 ms each on a quiet 2-CPU VM and past 100 ms on an overloaded host (measured in the soak,
bench/NOTES.md). Almost all of it survives every collection.

So after each full collection the survivors are moved to the permanent generation (``gc.freeze()``): the next
full collections walk only what was made since. What is frozen is still freed by reference counting, the way
nearly all the agent's garbage goes; only a reference cycle among frozen objects would wait, so every
``THAW_EVERY`` seconds the permanent generation is returned to the collector (``gc.unfreeze()``) and the next full
collection walks everything once, reclaiming any such cycle. One long pause per period instead of one every few
seconds; no growth beyond a period's worth of cycles.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

THAW_EVERY = 600.0            # seconds between full walks of everything (cycles among frozen objects freed then)


class FreezeAfterFullCollection:
    """The gc callback (see the module docstring); ``install`` once, ``uninstall`` in tests."""

    def __init__(self, thaw_every: float = THAW_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self._thaw_every = thaw_every
        self._clock = clock
        self._thawed_at = clock()
        self._lock = threading.Lock()
        self.frozen = 0               # full collections followed by a freeze
        self.thawed = 0               # thaws (each makes the next full collection walk everything)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2:
            return
        with self._lock:               # collections run in whichever thread allocates: keep the counts exact
            now = self._clock()
            if now - self._thawed_at >= self._thaw_every:
                gc.unfreeze()
                self._thawed_at = now
                self.thawed += 1
            else:
                gc.freeze()
                self.frozen += 1

    def install(self) -> None:
        gc.freeze()                   # what start-up built lives as long as the process
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
