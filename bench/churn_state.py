"""Benchmark: the agent's state under steady pod churn (the metric cache's memory, the executor's write cache).

1. Metric cache RSS: pods come and go at the observed rate (12,400 pods in 5 minutes, each living ``--lifetime``
   seconds, one container, the usage collector's six series per pod) into a real sqlite-backed cache, on a clock that
   advances one second per cycle (so five minutes of churn take seconds), flushed every 10 s and trimmed every 60 s as
   the agent does. Each configuration runs in its own process so RSS is its own: ``uncapped`` (``max_series``
   effectively infinite) and ``capped`` (the default cap). Reports VmRSS before the first sample and at the end, VmHWM,
   series in memory and series evicted.
2. Executor write cache: 2,000 pods through reconcile cycles (PodResources) on a fake cgroup tree on tmpfs,
   20 leaving (cgroups removed, no NRI RemovePodSandbox) and 20 arriving per cycle: cache entries at the end with
   and without the reconciler's prune.

Usage: python bench/churn_state.py [--pods 12400 --seconds 300 --lifetime 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _rss() -> float:
    """This process's resident set, in MiB."""
    return float(psutil.Process().memory_info().rss) / 2**20


def _hwm() -> float:
    """This process's peak resident set (``VmHWM`` of /proc/self/status, which psutil does not report), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cache_child(args: argparse.Namespace) -> None:
    """One configuration, in its own process; prints one JSON line."""
    from koordlet.metriccache import MetricCache, Sample, labels
    from koordlet.metriccache.store import MAX_SERIES

    now = [1_700_000_000.0]
    per_second = args.pods / args.seconds
    with tempfile.TemporaryDirectory() as d:
        cache = MetricCache(d, max_series=MAX_SERIES if args.child == "capped" else 10**12, clock=lambda: now[0])
        rss0 = _rss()
        alive: list[tuple[str, str, float]] = []        # (uid, container id, last second)
        trace: list[float] = []                         # VmRSS every 5 simulated minutes
        born = 0.0
        for k in range(args.seconds):
            t = now[0] = 1_700_000_000.0 + k
            born += per_second
            while born >= 1:
                born -= 1
                n = len(alive) + k * 1000
                alive.append((f"{n:08d}-0000-0000-0000-000000000000", f"{n:064x}", t + args.lifetime - 1))
            alive = [p for p in alive if p[2] >= t]
            batch = []
            for uid, cid, _ in alive:
                pl, cl = labels(pod_uid=uid), labels(container_id=cid)
                batch += [Sample("pod_cpu_usage", pl, t, 0.25), Sample("pod_memory_usage", pl, t, 1e8),
                          Sample("pod_memory_working_set", pl, t, 1.2e8), Sample("container_cpu_usage", cl, t, 0.25),
                          Sample("container_memory_usage", cl, t, 1e8),
                          Sample("container_memory_working_set", cl, t, 1.2e8)]
            cache.append(batch)
            if k % 10 == 9:
                cache.flush()
            if k % 60 == 59:
                cache.trim()
            if k % 300 == 299:
                trace.append(round(_rss(), 1))
        out = {"config": args.child, "rss_start_mib": round(rss0, 1), "rss_end_mib": round(_rss(), 1),
               "hwm_mib": round(_hwm(), 1), "series": cache.series_count(),
               "evicted": cache.evicted_count()[0], "pods": args.pods, "seconds": args.seconds,
               "rss_every_5min": trace}
        cache.close()
    print(json.dumps(out))


def executor_cache(pods: int) -> dict[str, int]:
    from doubles.churn import Clock, add_be_pod, remove_pod, view
    from doubles.fakehost import FakeHost
    from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
    from koordlet.qos.pod_resources import PodResources
    from koordlet.qos.reconciler import Reconciler
    from koordlet.writer.executor import Executor

    out = {}
    for prune in (False, True):
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
            host = FakeHost(d, CgroupVersion.V1, Driver.CGROUPFS)
            cg = Cgroups.detect(host.paths)
            ex = Executor(cg, clock=Clock())
            if not prune:
                ex.prune = lambda live: 0          # type: ignore[method-assign]   # the agent before
            rec = Reconciler(ex, [PodResources()])
            live = [add_be_pod(host, cg, n) for n in range(20)]
            rec.run_once(view(live))
            for n in range(20, pods, 20):
                for meta in live[:20]:
                    remove_pod(cg, meta)
                live = live[20:] + [add_be_pod(host, cg, m) for m in range(n, n + 20)]
                rec.run_once(view(live))
            out["with prune" if prune else "without prune"] = ex.cache_size()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pods", type=int, default=12400)
    p.add_argument("--seconds", type=int, default=300)
    p.add_argument("--lifetime", type=int, default=10)
    p.add_argument("--executor-pods", type=int, default=2000)
    p.add_argument("--child", choices=("uncapped", "capped"))
    p.add_argument("--only", choices=("uncapped", "capped"), help="run one configuration of the cache")
    args = p.parse_args()
    if args.child:
        cache_child(args)
        return
    print(f"metric cache: {args.pods} pods in {args.seconds} s, lifetime {args.lifetime} s, 6 series a pod")
    for config in (args.only,) if args.only else ("uncapped", "capped"):
        start = time.perf_counter()
        line = subprocess.run([sys.executable, __file__, "--child", config, "--pods", str(args.pods),
                               "--seconds", str(args.seconds), "--lifetime", str(args.lifetime)],
                              check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(line)
        print(f"  {config:9s} RSS {r['rss_start_mib']:.1f} -> {r['rss_end_mib']:.1f} MiB (peak {r['hwm_mib']:.1f}),"
              f" series in memory {r['series']}, evicted {r['evicted']}  [{time.perf_counter() - start:.1f} s]")
        print(f"            RSS every 5 simulated minutes: {r['rss_every_5min']}")
    print(f"executor write cache after {args.executor_pods} pods, 20 alive: {executor_cache(args.executor_pods)}")


if __name__ == "__main__":
    main()
