"""Benchmark: the agent's HTTP server (koordlet/ops/server.py) under a burst of concurrent scrapes and slow clients.

The server runs in its own process (as in the agent) with a registry of ``--series`` gauge series; the client is
one non-blocking process (selectors), so it opens every connection of a burst at once without threads of its own.
Three measurements, each relative to the first:

1. a single scrape, a new connection each time (median of ``--single`` scrapes): the unit;
2. ``--burst`` scrapes opened at the same moment (Connection: close): errors (refused / reset / unfinished), the
   latency of each from connect to the end of the response, and the burst's wall time in units of (1);
3. single scrapes while ``--slow`` clients hold connections with a request head they never finish.

``--server-file`` runs another server module (e.g. ``git show <rev>:koordlet/ops/server.py > /tmp/old.py``) for
comparison; it must have the same ``HttpServer(addr, registry, ready)`` constructor.

Usage: python bench/http_scrapes.py [--burst 500 --series 4000 --slow 200 --single 50 --server-file PATH]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from doubles.httpload import burst  # noqa: E402

SERVER = r"""
import importlib.util, sys
from prometheus_client import CollectorRegistry, Gauge
path, series = sys.argv[1], int(sys.argv[2])
if path:
    spec = importlib.util.spec_from_file_location("server_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
else:
    import koordlet.ops.server as mod
registry = CollectorRegistry()
gauge = Gauge("koordlet_bench_value", "a value", ["pod", "container"], registry=registry)
for i in range(series):
    gauge.labels(f"pod-{i // 4}", f"c{i % 4}").set(i)
srv = mod.HttpServer(("127.0.0.1", 0), registry, lambda: (True, "ok"))
srv.start()
print(srv.address[1], flush=True)
sys.stdin.read()
srv.stop()
"""

def scrapes(port: int, n: int, timeout: float = 120) -> tuple[list[float], list[str], float]:
    """``n`` scrapes opened at once: each one's latency (connect to end of response), the errors (a status other
    than 200 is one), and the wall time of the whole burst."""
    b = burst(port, n, "/metrics", timeout)
    errors = b.errors + [f"status {s}" for s in b.statuses if s != 200]
    return [t for s, t in zip(b.statuses, b.latencies, strict=True) if s == 200], errors, b.wall


def single(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        latencies, errors, _ = scrapes(port, 1)
        if errors:
            raise SystemExit(f"single scrape failed: {errors}")
        out.append(latencies[0])
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--series", type=int, default=4000)
    ap.add_argument("--slow", type=int, default=200)
    ap.add_argument("--single", type=int, default=50)
    ap.add_argument("--server-file", default="")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, args.server_file, str(args.series)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        unit = statistics.median(single(port, args.single))
        print(f"server={args.server_file or 'koordlet/ops/server.py'} series={args.series}")
        print(f"single scrape: median {unit * 1e3:.2f} ms")
        latencies, errors, wall = scrapes(port, args.burst)
        print(f"burst of {args.burst}: ok={len(latencies)} errors={len(errors)} {sorted(set(errors))[:3]}")
        if latencies:
            print(f"  latency p50 {pct(latencies, 0.5) * 1e3:.1f} ms  p99 {pct(latencies, 0.99) * 1e3:.1f} ms  "
                  f"max {max(latencies) * 1e3:.1f} ms")
        print(f"  wall {wall:.3f} s = {wall / unit:.0f} single scrapes ({wall / unit / args.burst:.2f} per scrape)")
        slow = []
        for _ in range(args.slow):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
            slow.append(sock)
        time.sleep(0.5)
        with_slow = statistics.median(single(port, args.single))
        print(f"with {args.slow} slow clients: single scrape median {with_slow * 1e3:.2f} ms "
              f"({with_slow / unit:.2f}x)")
        for sock in slow:
            sock.close()
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
