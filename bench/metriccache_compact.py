"""Benchmark: what the metric cache's memory tier costs per sample on a node of N pods × 2 containers.

The cache is driven as the agent drives it, on a simulated clock: every second one batch of samples (per pod CPU,
memory, working set and memory with page cache; per container the same and CPU throttling: 14 series a pod), a
flush every 10 s and a trim every 60 s, with a sqlite file (``--disk``) or memory-only. Two value profiles:

* ``idle``: what bench/agent_soak.py's node produces (sleeping processes: CPU 0, memory constant);
* ``busy``: CPU in cores with full float noise, memory in bytes moving in 4 KiB pages, throttling ratios in
  hundredths: the worst realistic case for compression.

After ``--minutes`` of samples (30: the memory window, so the tier is full) it reports the samples held, the bytes
of their buffers (``MetricCache.memory_usage``), bytes per sample, and — with ``--tracemalloc`` — the bytes
tracemalloc sees allocated by the metric cache's modules, as a check on that figure. Timings (best of the run, per
sample): an append batch, the flush that seals blocks, and the reporter's query: each pod's CPU and memory over
the last 300 s and the node's over 1800 s, aggregated as NodeMetric does (avg and p95).

With ``--disk`` it also reports the sqlite file's size and the history it holds: ``--disk --minutes 720`` is 12 h
(the default retention) against the default 100 MiB cap.

``python bench/metriccache_compact.py --pods 250`` runs both profiles. The same script at an older commit gives the
"before" figures (its cache reports no ``memory_usage``: then the buffers are counted from tracemalloc only).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from koordlet.metriccache import MetricCache, Sample

POD_KINDS = ("pod_cpu_usage", "pod_memory_usage", "pod_memory_working_set", "pod_memory_usage_with_page_cache")
CONTAINER_KINDS = ("container_cpu_usage", "container_memory_usage", "container_memory_working_set",
                   "container_memory_usage_with_page_cache", "container_cpu_throttled")
T0 = 1_900_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def values(profile: str, rng: random.Random, kind: str, state: dict[str, float], key: str) -> float:
    """The next value of one series."""
    if profile == "idle":
        return 0.0 if "cpu" in kind else 12_582_912.0
    if kind.endswith("cpu_usage"):
        return rng.uniform(0.05, 2.5)
    if kind.endswith("throttled"):
        return round(rng.uniform(0, 0.3), 2)
    v = state.get(key, 2e8) + 4096 * rng.randint(-3, 4)
    state[key] = v
    return v


def run(profile: str, pods: int, minutes: int, disk: bool, trace: bool) -> dict[str, float | str]:
    rng = random.Random(1)
    clock = Clock()
    tmp = tempfile.mkdtemp(prefix="mc-bench-") if disk else None
    if trace:
        tracemalloc.start()
    cache = MetricCache(tmp, memory_window=1800, clock=clock)
    series = [(k, (("pod_uid", f"uid-{p}"),)) for p in range(pods) for k in POD_KINDS]
    series += [(k, (("container_id", f"c-{p}-{c}"),)) for p in range(pods) for c in range(2) for k in CONTAINER_KINDS]
    state: dict[str, float] = {}
    append_s, flush_s, query_s = [], [], []
    for sec in range(minutes * 60):
        clock.now = T0 + sec + rng.uniform(0, 0.004)
        batch = [Sample(k, lb, clock.now, values(profile, rng, k, state, k + lb[0][1])) for k, lb in series]
        t = time.perf_counter()
        cache.append(batch)
        append_s.append((time.perf_counter() - t) / len(batch))
        if sec % 10 == 9:
            t = time.perf_counter()
            cache.flush()
            flush_s.append(time.perf_counter() - t)
        if sec % 60 == 59:
            cache.trim()
    now = clock.now
    t = time.perf_counter()
    got = 0
    for p in range(pods):
        for kind in ("pod_cpu_usage", "pod_memory_usage"):
            res = cache.query(kind, {"pod_uid": f"uid-{p}"}, now - 300, now)
            res.value("avg")
            res.value("p95")
            got += res.count()
    query_s.append((time.perf_counter() - t) / max(got, 1))
    gc.collect()
    out: dict[str, float | str] = {"series": len(series)}
    if hasattr(cache, "memory_usage"):
        held, nbytes = cache.memory_usage()
        out.update(samples_held=held, buffer_bytes=nbytes, bytes_per_sample=nbytes / max(held, 1))
    if trace:
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/metriccache/*")])
        traced = sum(s.size for s in snap.statistics("filename"))
        tracemalloc.stop()
        held = out.get("samples_held") or len(series) * 1800
        out.update(traced_bytes=traced, traced_bytes_per_sample=traced / held)
    out.update(append_us=1e6 * min(append_s), append_median_us=1e6 * sorted(append_s)[len(append_s) // 2],
               flush_ms_max=1e3 * max(flush_s), flush_ms_median=1e3 * sorted(flush_s)[len(flush_s) // 2],
               query_us_per_point=1e6 * query_s[0])
    if tmp is not None:
        held, holds = cache.history()
        db = os.path.join(tmp, "metrics.db")
        size = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
        out.update(disk_mib=size / 2**20, history_h=held / 3600, holds_h=(holds or 0) / 3600,
                   disk_mib_per_hour=size / 2**20 / max(held / 3600, 1e-9))
    cache.close()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--minutes", type=int, default=30, help="simulated minutes (720 with --disk: 12 h on disk)")
    ap.add_argument("--profiles", default="idle,busy")
    ap.add_argument("--disk", action="store_true", help="with a sqlite file (flushes write it)")
    ap.add_argument("--tracemalloc", action="store_true", help="also count the bytes tracemalloc sees allocated")
    args = ap.parse_args()
    print(f"metric cache memory tier: {args.pods} pods x 2 containers, {args.minutes} min of 1 s samples, "
          f"flush 10 s, trim 60 s, disk={'yes' if args.disk else 'no'}")
    for profile in args.profiles.split(","):
        r = run(profile, args.pods, args.minutes, args.disk, args.tracemalloc)
        print(f"  {profile}: " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
