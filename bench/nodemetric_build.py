"""Benchmark: build and serialize the NodeMetric status for 200 pods from a full metric cache.

The cache holds 30 minutes of 1 s samples for the node, the system remainder and 200 pods (the largest window
the default policy queries), i.e. ~730k points in memory, trimmed once as the agent's housekeeping does (which
seals the older blocks into compressed chunks). One call = what the reporter does each interval.
The peer in the same run fetches the same (series, window) pairs from the cache and sums them, so the ratio
shows what percentile sorting, quantity formatting and JSON add on top of reading the data.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from koordlet.host.cgroup import KubeQOS
from koordlet.metriccache import MetricCache, Sample
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder
from koordlet.states.informer import PodMeta
from koordlet.states.pod import Pod

PODS, WINDOW = 200, 1800


def main() -> int:
    now = 1_900_000_000.0
    cache = MetricCache(None, memory_window=WINDOW + 60, clock=lambda: now)
    pods = [PodMeta(Pod(uid=f"uid-{i}", name=f"pod-{i}", namespace="bench", kube_qos=KubeQOS.BURSTABLE),
                    f"p/{i}", ()) for i in range(PODS)]
    for t in range(WINDOW):
        ts = now - WINDOW + t + 1
        batch = [Sample("node_cpu_usage", (), ts, 10 + t % 7), Sample("node_memory_usage", (), ts, 8e9),
                 Sample("sys_cpu_usage", (), ts, 1 + t % 3), Sample("sys_memory_usage", (), ts, 1e9)]
        for p in pods:
            lb = (("pod_uid", p.pod.uid),)
            batch += [Sample("pod_cpu_usage", lb, ts, 0.05 * (t % 5)), Sample("pod_memory_usage", lb, ts, 3e8)]
        cache.append(batch)
    cache.trim()                                   # as the agent's housekeeping leaves it: older blocks sealed
    policy = CollectPolicy()
    builder = NodeMetricBuilder(cache, policy)
    # the peer: the same (series, window) pairs the builder reads, each fetched and summed once
    agg_start = now - policy.aggregate_duration
    queries = [(agg_start, n, {"pod_uid": p.pod.uid}) for p in pods for n in ("pod_cpu_usage", "pod_memory_usage")]
    queries += [(agg_start, n, None) for n in ("node_cpu_usage", "node_memory_usage", "sys_cpu_usage",
                                               "sys_memory_usage")]
    queries += [(now - d, n, None) for d in policy.durations
                for n in ("node_cpu_usage", "node_memory_usage", "sys_cpu_usage", "sys_memory_usage")]
    build, floor = [], []
    for _ in range(10):
        t0 = time.perf_counter()
        body = json.dumps(builder.status(pods, now))
        build.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        total = 0.0
        for start, name, labels in queries:
            total += sum(cache.query(name, labels, start, now).values())
        floor.append(time.perf_counter() - t0)
    med = statistics.median
    print(f"pods={PODS} points={WINDOW * (4 + 2 * PODS)} status_json_bytes={len(body)}")
    print(f"build+serialize median={med(build) * 1e3:.1f} ms; one pass over the same series median="
          f"{med(floor) * 1e3:.1f} ms; ratio={med(build) / med(floor):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
