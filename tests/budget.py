"""Per-example cost of the parsers of outside input, as the fuzz tests check it (each under 50 ms).

Measured in CPU time of the calling thread (``time.thread_time``: user + system time spent by this thread only),
so a loaded machine, where the thread waits for a core, does not stretch it. Paused meanwhile: the cyclic garbage
collector (a collection's cost is that of the whole test process's heap, not of the parser) and a line tracer
(Hypothesis traces every line of the examples it generates, for its "explain" phase: 10x the cost).

Even so, a virtual machine's thread CPU clock counts some of what the host takes from it (CI's fuzz run measured
53-58 ms for parses that cost 2-5 ms when repeated). So a call over the budget is repeated, four times at most,
and the least CPU time counts: interference only ever adds time, so the minimum is the parser's own cost, while a
parse that really is slow is slow every time. Hypothesis's own ``deadline`` (wall clock, generous) stays as the
hang detector.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

EXAMPLE_CPU_BUDGET = 0.050        # seconds of CPU per parsed example
# the first run and up to four repeats (the module docstring says why); the least CPU time of them counts
ATTEMPTS = 5
# A whole file (NodeSLO, pods file) cannot be parsed in a fixed time whatever its size: the bound that holds is
# linear in its size (no alias bomb, no nesting blow-up), up to the loaders' 16 MiB cap. PyYAML's pure-Python
# loader, which the bounds need, reads a pods file at ~2.2 us per byte on an idle 2-CPU VM (JSON: the json module,
# far less), but its cost is per token, and the densest YAML has a token every two bytes: an 18 KB flow list of
# one-digit items ("a: [1,1,1,...]") took 128 ms, 7.1 us per byte, on the same idle VM, and ~147 ms under make
# fuzz's parallel load. So the allowance is the densest case's cost, with 1.7x for load.
FILE_CPU_PER_BYTE = 12e-6


def file_budget(size: int) -> float:
    """The CPU budget of loading a file of ``size`` bytes (see FILE_CPU_PER_BYTE)."""
    return EXAMPLE_CPU_BUDGET + FILE_CPU_PER_BYTE * size


def _measured(fn: Callable[..., T], args: tuple[Any, ...]) -> tuple[float, T | None, BaseException | None]:
    was_enabled = gc.isenabled()
    tracer = sys.gettrace()
    gc.disable()
    sys.settrace(None)
    start = time.thread_time()
    try:
        result, error = fn(*args), None
    except Exception as e:
        result, error = None, e
    finally:
        spent = time.thread_time() - start
        sys.settrace(tracer)
        if was_enabled:
            gc.enable()
    return spent, result, error


def within_budget(what: str, fn: Callable[..., T], *args: Any, budget: float = EXAMPLE_CPU_BUDGET) -> T:
    """``fn(*args)``: its result, or the exception it raised (a refusal must be as quick as an answer: the bounds
    exist to refuse early); AssertionError when even its cheapest of up to ``ATTEMPTS`` runs used more than
    ``budget`` seconds of this thread's CPU. ``fn`` must be repeatable (a pure parse of the same input)."""
    spent, result, error = _measured(fn, args)
    least = spent
    for _ in range(ATTEMPTS - 1):
        if least <= budget:
            break
        spent, result, error = _measured(fn, args)
        least = min(least, spent)
    if least > budget:
        raise AssertionError(f"{what}: {least * 1000:.1f} ms of CPU for one example, the least of {ATTEMPTS} runs "
                             f"(budget {budget * 1000:.0f} ms)")
    if error is not None:
        raise error
    return result  # type: ignore[return-value]
