"""Timing a daemon cycle the way the daemon runs it: once per interval, with the machine doing other things between.

Back to back, a cycle finds everything warm: the dentries of the paths it opened a millisecond ago, the CPU caches, the
branch predictors. The daemon runs it once a second, so each cycle pays for a fresh walk; measured on the collection
cycle, that is 1.72× the read floor paced against 1.54× back to back (bench/NOTES.md). So every cycle benchmark reports
the paced figure as its headline and back to back as a secondary line.

:func:`paced` runs each named step once per ``interval``, each at its own phase of the interval (the floor and the
cycle half an interval apart, so neither warms the caches for the other), and times it with the wall clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

Step = Callable[[], object]


def paced(steps: Mapping[str, Step], cycles: int, interval: float = 1.0) -> dict[str, list[float]]:
    """Seconds per run of each step, ``cycles`` runs each; step k of n runs at k/n of every interval."""
    names = list(steps)
    out: dict[str, list[float]] = {name: [] for name in names}
    start = time.monotonic()
    for cycle in range(cycles):
        for k, name in enumerate(names):
            wait = start + (cycle + k / len(names)) * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            t = time.perf_counter()
            steps[name]()
            out[name].append(time.perf_counter() - t)
    return out


def back_to_back(steps: Mapping[str, Step], cycles: int) -> dict[str, list[float]]:
    """The same steps with no pause: what a cycle costs with every cache warm (the secondary figure)."""
    out: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(cycles):
        for name, step in steps.items():
            t = time.perf_counter()
            step()
            out[name].append(time.perf_counter() - t)
    return out


def p90(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * 0.9))]


def line(label: str, values: list[float], floor: list[float] | None = None) -> str:
    """``label median=… ms p90=… ms [ratio=…x]`` (the ratio of medians against the floor when given)."""
    med = statistics.median(values)
    text = f"{label:<28} median={med * 1e3:.2f} ms  p90={p90(values) * 1e3:.2f} ms"
    if floor is not None:
        text += f"  ratio={med / statistics.median(floor):.2f}x"
    return text
