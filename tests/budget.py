"""Per-example cost of the parsers of outside input, as the fuzz tests check it (issue 18: each under 50 ms).

Measured in CPU time of the calling thread (``time.thread_time``: user + system time spent by this thread only),
so a loaded machine, where the thread waits for a core, does not stretch it; the cyclic garbage collector is
paused meanwhile, because a collection's cost is that of the whole test process's heap, not of the parser.
Hypothesis's own ``deadline`` (wall clock, generous) stays as the hang detector.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

EXAMPLE_CPU_BUDGET = 0.050        # seconds of CPU per parsed example


@contextlib.contextmanager
def cpu_budget(what: str, budget: float = EXAMPLE_CPU_BUDGET) -> Iterator[None]:
    """Fail when the body used more than ``budget`` seconds of this thread's CPU, whether it returned or raised
    (a refusal must be as quick as an answer: the bounds exist to refuse early)."""
    was_enabled = gc.isenabled()
    gc.disable()
    start = time.thread_time()
    try:
        yield
    finally:
        spent = time.thread_time() - start
        if was_enabled:
            gc.enable()
        if spent > budget:
            raise AssertionError(f"{what}: {spent * 1000:.1f} ms of CPU for one example "
                                 f"(budget {budget * 1000:.0f} ms)")
