"""What ``simulate`` prints and writes: the table (median and spread over the seeds at a few load levels), the
curves as CSV and JSON, and the plot."""

from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import asdict

from scheduler.simulate.protocol import Results, Spread, at, spread
from scheduler.simulate.simulator import Point

log = logging.getLogger(__name__)

LOADS = (90, 95, 100)


def loads_for(max_load: int) -> tuple[int, ...]:
    """The load levels the table shows: 90, 95, 100 and the highest, those reached."""
    return tuple(x for x in dict.fromkeys((*LOADS, max_load)) if x <= max_load)


def _percent(s: Spread | None, seeds: int) -> str:
    if s is None:
        return "-"
    return f"{100 * s.median:.2f}%" + (f" [{100 * s.low:.2f}-{100 * s.high:.2f}]" if seeds > 1 else "")


def _count(s: Spread | None) -> str:
    return "-" if s is None else f"{s.median:g}"


def table(results: Results) -> str:
    """The summary ``simulate`` prints: the protocol, each seed's workload notes, then per policy the GPU capacity
    unallocated and the failed pods at each load level of :func:`loads_for`, the fragmented share at the last, and
    the multi-GPU pods' locality (summed over the seeds)."""
    protocol = results.protocol
    loads = loads_for(protocol.max_load)
    lines = [protocol.describe()]
    for seed, notes in results.notes.items():
        for note in notes:
            lines.append(f"seed {seed}: {note}" if protocol.seeds > 1 else note)
    head = ["policy", *(f"unalloc@{x}%" for x in loads), *(f"failed@{x}%" for x in loads), f"frag@{loads[-1]}%",
            "multi-GPU in partition / PCIe"]
    rows = [head]
    for policy, runs in results.by_policy().items():
        lasts = [p for r in runs if (p := at(r, loads[-1])) is not None]
        multi = sum(p.multi_gpu for p in lasts)
        rows.append([policy, *(_percent(spread(runs, x, "unallocated"), protocol.seeds) for x in loads),
                     *(_count(spread(runs, x, "failed")) for x in loads),
                     _percent(spread(runs, loads[-1], "fragmented"), 1),
                     f"{sum(p.in_partition for p in lasts)}/{multi} / {sum(p.in_pcie for p in lasts)}/{multi}"
                     if lasts else "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if protocol.seeds > 1:
        lines.append("unalloc: median over the seeds [min-max]; failed: median; lower is better")
    else:
        lines.append("lower is better")
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


def plot(results: Results, path: str) -> str | None:
    """Unallocated GPU capacity against arrived load, per policy: the median over the seeds as a line and the
    seeds' spread as a band; the whole run, and the top fifth where the policies part. None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        log.warning("plot skipped: matplotlib is not installed (pip install 'koordlet-py[sim]')")
        return None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    top = results.protocol.max_load
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = [plt.get_cmap("tab20")(i) for i in range(20)]
    for ax, low in zip(axes, (0, top - top // 5), strict=True):
        for i, (policy, runs) in enumerate(results.by_policy().items()):
            loads = sorted({p.load for r in runs for p in r.points if p.load >= low})
            spreads = [(x, s) for x in loads if (s := spread(runs, x, "unallocated")) is not None]
            xs = [x for x, _ in spreads]
            # the paper's own policies dashed, ours solid
            line, = ax.plot(xs, [100 * s.median for _, s in spreads], label=policy,
                            color=colors[2 * i % 20 + i // 10 % 2],
                            linestyle="--" if policy.startswith("paper-") else "-")
            if results.protocol.seeds > 1:
                ax.fill_between(xs, [100 * s.low for _, s in spreads], [100 * s.high for _, s in spreads],
                                color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("arrived workload (% of GPU capacity requested)")
        ax.set_ylabel("GPU capacity unallocated (%), lower is better")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    seeds = results.protocol.seeds
    spread_note = f"median of {seeds} seeds, band: min-max" if seeds > 1 else "one seed"
    axes[0].set_title(f"Unallocated GPUs vs arrived load ({spread_note})")
    axes[1].set_title(f"{top - top // 5}-{top} % of capacity arrived")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path

