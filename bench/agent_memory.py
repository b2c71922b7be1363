"""Benchmark: the agent's memory outside the metric cache's samples, with no pods and per container.

For each pod count (``--pods``, default 0,250) the node is built as ``bench/agent_soak.py`` builds it (real cgroup v1
dirs, two containers per pod, one sleeping process each, the pods file) and the real agent
(``koordlet run --standalone``, collection and QoS every second) runs on it twice, each time until ``--seconds``
after its ``/readyz`` first answers 200:

* plain (``python -m koordlet``), for the kernel's view: VmRSS and RssAnon then;
* under tracemalloc, started before the agent's first import (``--frames`` frames per allocation): a snapshot then,
  after a full collection. Each allocation is owned by its innermost frame in the agent's own code (the line that
  asked for it, whichever library or import did the work), else by its innermost frame; those owned by
  ``koordlet/metriccache`` (the samples' window, which fills for 30 minutes and which the cache's own benchmarks
  measure) are counted apart, as ``traced_cache``.

Reported: each run's RSS and traced bytes with the top owners; then, against the first pod count, the traced bytes
and the RSS each added container costs, with the owners that grew most. Python's allocations are what the agent can
cut; RSS adds the allocator's slack, the sqlite page cache and the shared libraries.

Needs root and cgroup v1 controllers (as CI); otherwise it prints why and exits 0.
Usage: python bench/agent_memory.py [--pods 0,250] [--seconds 90] [--top 15]
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_soak import ROOT, proc_sample, soak_node, stop  # bench/ is on sys.path when run as a script

KI, MI = 1 << 10, 1 << 20
#: The agent's own code: an allocation belongs to the innermost frame under one of these (where it was asked for,
#: whichever library did it), else to its innermost frame.
PROJECT = tuple(os.path.join(ROOT, package) + os.sep for package in ("koordlet", "nri_plugin", "hami_bridge"))
#: Owners whose allocations are counted apart: the metric cache (its samples' window) ...
CACHE = os.path.join(ROOT, "koordlet", "metriccache") + os.sep
#: ... and left out: this harness.
HARNESS = (os.path.abspath(__file__), tracemalloc.__file__)


def run_agent_traced(out: str, frames: int, argv: list[str]) -> int:
    """The agent's own ``main`` with tracemalloc on from the start; once ``out``.go exists, a snapshot of what
    survives a full collection is dumped to ``out``."""
    tracemalloc.start(frames)

    def snap() -> None:
        while not os.path.exists(out + ".go"):
            time.sleep(0.2)
        gc.collect()
        tracemalloc.take_snapshot().dump(out + ".tmp")
        os.replace(out + ".tmp", out)

    threading.Thread(target=snap, name="memory-snapshot", daemon=True).start()
    from koordlet.cli import main
    return main(argv)


def run(agent_args: list[str], work: str, seconds: float, traced: str = "", frames: int = 1) -> dict[str, float]:
    """Run the agent until ``seconds`` after it is ready (plain, or traced into the snapshot file ``traced``): both
    runs are measured at the same point of the agent's life, however much tracemalloc slows its start. Its memory
    then."""
    cmd = ([sys.executable, os.path.abspath(__file__), "--agent-traced", traced, str(frames), "--"]
           if traced else [sys.executable, "-m", "koordlet"])
    proc = subprocess.Popen([*cmd, *agent_args], env=dict(os.environ, STATE_DIRECTORY=work), cwd=work)
    readyz = f"http://{agent_args[agent_args.index('--addr') + 1]}/readyz"
    try:
        ready_at = None
        while ready_at is None or time.monotonic() < ready_at + seconds or (traced and not os.path.exists(traced)):
            if proc.poll() is not None:
                raise RuntimeError(f"the agent exited with {proc.returncode}")
            if ready_at is None and answers(readyz):
                ready_at = time.monotonic()
            if ready_at is not None and traced and time.monotonic() >= ready_at + seconds:
                open(traced + ".go", "w").close()
            time.sleep(0.5)
        from doubles.realcgroup import proc_rss_anon
        out: dict[str, float] = proc_sample(proc.pid)
        out["rss_anon_mib"] = proc_rss_anon(proc.pid) / MI
        return out
    finally:
        stop(proc)


def answers(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def groups(snapshot: tracemalloc.Snapshot) -> tuple[dict[str, tuple[int, int]], int]:
    """Bytes and blocks per owner (``file:line`` of the allocation's innermost frame in the agent's own code, else
    its innermost frame), without the metric cache's and the harness's; and the metric cache's bytes."""
    out: dict[str, tuple[int, int]] = {}
    cache = 0
    for stat in snapshot.statistics("traceback"):
        frames = stat.traceback[::-1]            # innermost first
        frame = next((f for f in frames if f.filename.startswith(PROJECT)), frames[0])
        if frame.filename.startswith(CACHE):
            cache += stat.size
            continue
        if frame.filename.startswith(HARNESS):
            continue
        name = os.path.relpath(frame.filename, ROOT) if frame.filename.startswith(ROOT) else frame.filename
        size, count = out.get(f"{name}:{frame.lineno}", (0, 0))
        out[f"{name}:{frame.lineno}"] = (size + stat.size, count + stat.count)
    return out, cache


def measure(n_pods: int, args: argparse.Namespace) -> dict[str, Any]:
    with soak_node(n_pods, addr="127.0.0.1:19318") as (work, agent_args):
        plain = run(agent_args, work, args.seconds)
        snapshot_file = os.path.join(work, "agent.tracemalloc")
        run(agent_args, work, args.seconds, snapshot_file, args.frames)
        owners, cache = groups(tracemalloc.Snapshot.load(snapshot_file))
        return {"pods": n_pods, "containers": 2 * n_pods, **plain, "groups": owners, "cache": cache}


def top(rows: dict[str, tuple[int, int]], n: int, per: int = 1) -> str:
    """The ``n`` largest groups, bytes (divided by ``per``) and blocks."""
    lines = sorted(rows.items(), key=lambda kv: -abs(kv[1][0]))[:n]
    return "\n".join(f"  {size / per:12.0f} B {count / per:9.1f} blocks  {where}" for where, (size, count) in lines)


def main() -> int:
    if sys.argv[1:2] == ["--agent-traced"]:
        out, frames = sys.argv[2:4]
        assert sys.argv[4] == "--"
        return run_agent_traced(out, int(frames), sys.argv[5:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", default="0,250", help="pod counts, comma-separated (2 containers each); the first is "
                                                   "the base the others are compared with")
    ap.add_argument("--seconds", type=float, default=90.0,
                    help="seconds the agent runs after it is ready before it is measured (90: past the first "
                         "reports and prediction training, a minute after start, and before the next)")
    ap.add_argument("--frames", type=int, default=32, help="frames kept per traced allocation (enough to reach "
                                                           "the agent's own frame under library calls and imports)")
    ap.add_argument("--top", type=int, default=15, help="allocation groups listed")
    args = ap.parse_args()
    from doubles.realcgroup import v1_available
    reason = v1_available()
    if reason:
        print(f"skipped: {reason}")
        return 0
    base = None
    for n in (int(x) for x in args.pods.split(",")):
        r = measure(n, args)
        traced = sum(size for size, _ in r["groups"].values())
        print(f"containers={r['containers']} rss={r['rss_mib']:.1f} MiB rss_anon={r['rss_anon_mib']:.1f} MiB "
              f"traced_outside_cache={traced / MI:.2f} MiB traced_cache={r['cache'] / MI:.2f} MiB "
              f"threads={r['threads']:.0f}\n"
              f"{top(r['groups'], args.top)}", flush=True)
        if base is None:
            base = r
            continue
        added = r["containers"] - base["containers"]
        diff = {k: (r["groups"].get(k, (0, 0))[0] - base["groups"].get(k, (0, 0))[0],
                    r["groups"].get(k, (0, 0))[1] - base["groups"].get(k, (0, 0))[1])
                for k in r["groups"].keys() | base["groups"].keys()}
        grown = sum(size for size, _ in diff.values())
        print(f"per container ({added} added): traced_outside_cache={grown / max(added, 1) / KI:.1f} KiB "
              f"traced_cache={(r['cache'] - base['cache']) / max(added, 1) / KI:.1f} KiB "
              f"rss={(r['rss_mib'] - base['rss_mib']) * KI / max(added, 1):.1f} KiB "
              f"rss_anon={(r['rss_anon_mib'] - base['rss_anon_mib']) * KI / max(added, 1):.1f} KiB\n"
              f"{top(diff, args.top, max(added, 1))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
