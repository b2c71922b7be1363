"""What ``simulate`` prints and writes: the table (median and spread over the seeds at a few load levels; with churn,
at peak demand and over the steady state), the curves as CSV and JSON (one row per point: a load level, or with
churn a time level with its demand), and the plot."""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from scheduler.simulate.protocol import Results, Spread, at, spread
from scheduler.simulate.simulator import Point, Run

log = logging.getLogger(__name__)

LOADS = (90, 95, 100)
PART = 85                   # % load from which the arrival plot's second panel shows the policies parting
STEADY_FROM = 50             # churn: the steady state is the time levels above this (the second half)


def loads_for(max_load: int) -> tuple[int, ...]:
    """The load levels the table shows: 90, 95, 100 and the highest, those reached."""
    return tuple(x for x in dict.fromkeys((*LOADS, max_load)) if x <= max_load)


def _percent(s: Spread | None, seeds: int) -> str:
    if s is None:
        return "-"
    return f"{100 * s.median:.2f}%" + (f" [{100 * s.low:.2f}-{100 * s.high:.2f}]" if seeds > 1 else "")


def _count(s: Spread | None) -> str:
    return "-" if s is None else f"{s.median:g}"


def _preamble(results: Results) -> list[str]:
    """The protocol's line, then each seed's workload notes."""
    lines = [results.protocol.describe()]
    for seed, notes in results.notes.items():
        for note in notes:
            lines.append(f"seed {seed}: {note}" if results.protocol.seeds > 1 else note)
    return lines


def _columns(rows: list[list[str]]) -> list[str]:
    """Rows as left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _locality(lasts: list[Point]) -> str:
    """The multi-GPU pods' locality, summed over the runs' last points."""
    multi = sum(p.multi_gpu for p in lasts)
    return (f"{sum(p.in_partition for p in lasts)}/{multi} / {sum(p.in_pcie for p in lasts)}/{multi}"
            if lasts else "-")


def table(results: Results) -> str:
    """The summary ``simulate`` prints: the protocol, each seed's workload notes, then per policy the GPU capacity
    unallocated and the failed pods at each load level of :func:`loads_for`, the fragmented share at the last, and
    the multi-GPU pods' locality (summed over the seeds). With churn, :func:`churn_table`."""
    protocol = results.protocol
    if protocol.order == "churn":
        return churn_table(results)
    loads = loads_for(protocol.max_load)
    head = ["policy", *(f"unalloc@{x}%" for x in loads), *(f"failed@{x}%" for x in loads), f"frag@{loads[-1]}%",
            "multi-GPU in partition / PCIe"]
    rows = [head]
    for policy, runs in results.by_policy().items():
        rows.append([policy, *(_percent(spread(runs, x, "unallocated"), protocol.seeds) for x in loads),
                     *(_count(spread(runs, x, "failed")) for x in loads),
                     _percent(spread(runs, loads[-1], "fragmented"), 1),
                     _locality([p for r in runs if (p := at(r, loads[-1])) is not None])])
    lines = _preamble(results) + _columns(rows)
    if protocol.seeds > 1:
        lines.append("unalloc: median over the seeds [min-max]; failed: median; lower is better")
    else:
        lines.append("lower is better")
    return "\n".join(lines)


def _steady(points: list[Point], measure: Callable[[Point], float]) -> float:
    """A measure's mean over the points of the steady state (time levels above :data:`STEADY_FROM`)."""
    steady = [measure(p) for p in points if p.time is not None and p.time > STEADY_FROM]
    return sum(steady) / len(steady)


def _peak(points: list[Point]) -> Point:
    """The first point of highest demand."""
    return max(points, key=lambda p: p.demand or 0.0)


def churn_table(results: Results) -> str:
    """The summary of a churn run: per policy the shares of GPU capacity asked by the live pods (demand) and
    allocated at the instant of peak demand, then demand, allocated, unallocated and fragmented shares averaged over
    the steady state (the second half of the arrival span), the pods failed at the end (not retried) and the
    multi-GPU pods' locality."""
    seeds = results.protocol.seeds

    def allocated(p: Point) -> float:
        return 1 - p.unallocated

    head = ["policy", "demand@peak", "alloc@peak", "demand 2nd half", "alloc 2nd half", "unalloc 2nd half",
            "frag 2nd half", "failed@end", "multi-GPU in partition / PCIe"]
    rows = [head]
    peaks: set[int] = set()
    for policy, runs in results.by_policy().items():
        ran = [r.points for r in runs if r.points]
        if not ran:
            rows.append([policy, *("-" for _ in head[1:])])
            continue
        at_peak = [_peak(points) for points in ran]
        peaks.update(p.time for p in at_peak if p.time is not None)
        rows.append([policy, _percent(Spread.of([p.demand or 0.0 for p in at_peak]), seeds),
                     _percent(Spread.of([allocated(p) for p in at_peak]), seeds),
                     *(_percent(Spread.of([_steady(points, m) for points in ran]), seeds)
                       for m in (lambda p: p.demand or 0.0, allocated, lambda p: p.unallocated,
                                 lambda p: p.fragmented)),
                     _count(Spread.of([points[-1].failed for points in ran])),
                     _locality([points[-1] for points in ran])])
    lines = _preamble(results) + _columns(rows)
    lines.append(f"demand: GPU capacity asked by the live pods, placed or not; peak demand at "
                 f"{', '.join(str(t) for t in sorted(peaks)) or '-'} % of the arrival span; 2nd half: the mean over "
                 f"{STEADY_FROM + 1}-100 % of it (the steady state)")
    lines.append("failed@end: pods that found no node when they arrived (not retried)"
                 + ("; median over the seeds [min-max]" if seeds > 1 else ""))
    lines.append("alloc: higher is better; unalloc, frag, failed: lower is better")
    return "\n".join(lines)


def write_outputs(results: Results, out_dir: str) -> list[str]:
    """curve.csv, curve.json and unallocated.png (when matplotlib is installed) in ``out_dir``; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    points = [p for r in results.runs for p in r.points]
    paths = [os.path.join(out_dir, "curve.csv"), os.path.join(out_dir, "curve.json")]
    with open(paths[0], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(Point("", 0, 0.0, 0.0, 0))))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump({"protocol": asdict(results.protocol), "notes": {str(k): v for k, v in results.notes.items()},
                   "runs": [{"policy": r.policy, "seed": r.seed, "submitted": r.submitted, "placed": r.placed,
                             "points": [asdict(p) for p in r.points]} for r in results.runs]}, f, indent=1)
    png = plot(results, os.path.join(out_dir, "unallocated.png"))
    return [*paths, png] if png else paths


def _band(ax: Any, runs: list[Run], axis: str, low: int, measure: str, flip: bool, band: bool,
          **style: Any) -> None:
    """A measure in percent (``100 −`` it with ``flip``) against ``axis`` from ``low`` on: the median over the runs
    as a line and, with ``band``, their spread as a band of the line's colour."""
    levels = sorted({getattr(p, axis) for r in runs for p in r.points if getattr(p, axis) >= low})
    spreads = [(x, s) for x in levels if (s := spread(runs, x, measure, axis)) is not None]

    def y(v: float) -> float:
        return 100 * (1 - v) if flip else 100 * v

    xs = [x for x, _ in spreads]
    line, = ax.plot(xs, [y(s.median) for _, s in spreads], **style)
    if band:
        ax.fill_between(xs, [y(s.low) for _, s in spreads], [y(s.high) for _, s in spreads],
                        color=line.get_color(), alpha=0.2, linewidth=0)


def plot(results: Results, path: str) -> str | None:
    """Unallocated GPU capacity against arrived load (with churn: against time, and ``100 % − demand`` as a dashed
    grey line, the floor if every live pod were placed), per policy: the median over the seeds as a line and the
    seeds' spread as a band; the whole run, and where the policies part (from :data:`PART` % load, or the top
    fifth when it starts lower; with churn the steady state, the second half). None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        log.warning("plot skipped: matplotlib is not installed (pip install 'koordlet-py[sim]')")
        return None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    churn = results.protocol.order == "churn"
    axis = "time" if churn else "load"
    top = 100 if churn else results.protocol.max_load
    low = STEADY_FROM + 1 if churn else min(PART, top - top // 5)
    seeds = results.protocol.seeds
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]
    for ax, start in zip(axes, (0, low), strict=True):
        for i, (policy, runs) in enumerate(results.by_policy().items()):
            # the paper's own policies dashed, ours solid
            _band(ax, runs, axis, start, "unallocated", False, seeds > 1, label=policy,
                  color=colors[2 * i % 20 + i // 10 % 2], linestyle="--" if policy.startswith("paper-") else "-")
        if churn:
            _band(ax, results.runs, axis, start, "demand", True, False, label="100 % − demand", color="grey",
                  linestyle="--")
        ax.set_xlabel("time (% of the arrival span, arrivals compressed)" if churn
                      else "arrived workload (% of GPU capacity requested)")
        ax.set_ylabel("GPU capacity unallocated (%), lower is better")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    spread_note = f"median of {seeds} seeds, band: min-max" if seeds > 1 else "one seed"
    if churn:
        axes[0].set_title(f"Unallocated GPUs over time, pods leaving ({spread_note})")
        axes[1].set_title(f"The steady state: {low}-{top} % of the arrival span")
    else:
        axes[0].set_title(f"Unallocated GPUs vs arrived load ({spread_note})")
        axes[1].set_title(f"{low}-{top} % of capacity arrived")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
