"""Benchmark: the whole agent daemon on N pods × 2 containers of real cgroups, against a read floor.

For each pod count (``--pods``, default 0,50,100,200) the benchmark builds a real cgroup v1 kubepods tree (cgroupfs
naming; two thirds BestEffort batch pods, one third LS pods, two containers each, one sleeping process per
container), writes the pods file the standalone agent takes their metadata from, and runs the real agent
(``koordlet run --standalone``, collection and QoS reconcile every second, everything else at its default) for
``--seconds`` (default 600). Every ``--sample`` seconds it reads the agent's CPU time, RSS, threads and fds (psutil)
and the metric cache's files on disk.

The **read floor** runs in the same run, beside the agent: a minimal process that opens and reads exactly the kernel
files the agent opened (and lists the directories it listed), at the same rate, and does nothing else. What the
agent opened is taken from the agent itself: it runs under a Python audit hook that records every ``open`` and
directory listing under /proc, /sys and the cgroup root during ``--record`` seconds after the warm-up, then stops
recording (a hook that returns at once costs ~0.1 µs per event: far below what is measured). The floor replays
that recording second by second, in a loop. Writes are counted, not replayed.

Reported per pod count: agent millicores mean and p95 (over the sample intervals after the recording window),
the floor's mean and the agent/floor ratio, CPU in the fifth minute and in the last minute, RSS at 1, 10 and 30
minutes (those reached), fds, threads and the metric cache's size. ``--json`` writes all of it with the series.

Needs root and cgroup v1 controllers (as CI); otherwise it prints why and exits 0. Budget: ≤ 50
millicores mean at 200 containers, agent/floor ≤ 2.0, minute-30 CPU within 10 % of minute 5, RSS ≤ 120 MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MI = 1 << 20
BATCH_CPU, BATCH_MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
SPEC = "node.koordinator.sh/extended-resource-spec"


# ---- the recording hook (runs inside the agent's process) ----------------------------------------------------

def run_agent_recorded(out: str, start_after: float, length: float, prefixes: list[str], argv: list[str]) -> int:
    """The agent's own ``main`` under an audit hook that records, for ``length`` seconds from ``start_after``
    seconds after start, every open and directory listing of a path under ``prefixes``, as JSON lines of [seconds
    since the window began, kind, path] written as they happen (nothing held in the agent's memory: what the soak
    measures of it is the agent's own), moved to ``out`` once the window closes."""
    t0 = time.monotonic()
    begin, end = t0 + start_after, t0 + start_after + length
    sink = open(out + ".tmp", "w")  # noqa: SIM115 (open for the hook's life; before it: not an event)
    lock = threading.Lock()              # the agent's threads all open files: one line at a time
    state = {"on": True}
    pre = tuple(prefixes)
    clock = time.monotonic

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not state["on"] or event not in ("open", "os.scandir", "os.listdir"):
            return
        now = clock()
        if now < begin:
            return
        if now >= end:
            with lock:
                if state["on"]:
                    state["on"] = False
                    sink.close()
                    os.replace(out + ".tmp", out)
            return
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        if not isinstance(path, str) or not path.startswith(pre):
            return
        if event == "open":
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
            kind = "write" if (flags & (os.O_WRONLY | os.O_RDWR)) or any(c in mode for c in "wa+") else "read"
        else:
            kind = "list"
        line = json.dumps((now - begin, kind, path)) + "\n"
        with lock:
            if state["on"]:
                sink.write(line)

    sys.addaudithook(hook)
    from koordlet.cli import main
    return main(argv)


# ---- the read floor (its own process) -------------------------------------------------------------------------

def run_floor(recording: str, period: float) -> int:
    """Replay the recording's reads and listings, one recorded second per ``period``, until SIGTERM."""
    buckets: dict[int, list[tuple[str, str]]] = {}
    span = 1
    with open(recording) as f:
        for line in f:
            t, kind, path = json.loads(line)
            if kind == "write":
                continue
            buckets.setdefault(int(t), []).append((kind, path))
            span = max(span, int(t) + 1)
    plan = [buckets.get(i, []) for i in range(span)]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    i, next_at = 0, time.monotonic()
    while not stop:
        for kind, path in plan[i % span]:
            try:
                if kind == "read":
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.read(fd, 65536)
                    finally:
                        os.close(fd)
                else:
                    with os.scandir(path) as it:
                        for entry in it:
                            entry.is_dir(follow_symlinks=False)
            except OSError:
                pass
        i += 1
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
    return 0


# ---- the node ------------------------------------------------------------------------------------------------

def pod_objects(n_pods: int) -> list[dict[str, Any]]:
    """Two thirds BestEffort batch pods, one third LS (Burstable) pods; two containers each."""
    pods = []
    for n in range(n_pods):
        ids = {f"c{k}": f"{n:030x}a{k:033x}" for k in range(2)}
        statuses = [{"name": name, "containerID": f"containerd://{cid}", "state": {"running": {}}}
                    for name, cid in ids.items()]
        if n % 3 == 2:
            uid = f"15000000-0000-4000-8000-{n:012d}"
            containers = [{"name": name, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                       "limits": {"cpu": "1", "memory": "256Mi"}}}
                          for name in ids]
            labels, annotations, kube_qos = {"koordinator.sh/qosClass": "LS"}, {}, "Burstable"
        else:
            uid = f"5a0c0000-0000-4000-8000-{n:012d}"
            batch = {name: {"requests": {BATCH_CPU: str((250, 500, 1000)[(n + k) % 3]), BATCH_MEM: str(256 * MI)},
                            "limits": {BATCH_CPU: str((500, 1000, 2000)[(n + k) % 3]), BATCH_MEM: str(512 * MI)}}
                     for k, name in enumerate(ids)}
            containers = [{"name": name, "resources": res} for name, res in batch.items()]
            labels, annotations, kube_qos = ({"koordinator.sh/qosClass": "BE"},
                                             {SPEC: json.dumps({"containers": batch})}, "BestEffort")
        pods.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"bench-{n}", "namespace": "bench", "uid": uid, "labels": labels,
                                  "annotations": annotations},
                     "spec": {"containers": containers},
                     "status": {"phase": "Running", "qosClass": kube_qos, "containerStatuses": statuses}})
    return pods


def build_node(tree, pods: list[dict[str, Any]]) -> None:
    """The pods' cgroup dirs as the kubelet makes them (cgroupfs naming), one sleeping process per container."""
    from koordlet.host.cgroup import Driver, KubeQOS, Layout
    layout = Layout(Driver.CGROUPFS)
    for qos in KubeQOS:
        tree.mkdir(layout.qos_dir(qos))
    for obj in pods:
        pod_dir = layout.pod_dir(KubeQOS(obj["status"]["qosClass"]), obj["metadata"]["uid"])
        for status in obj["status"]["containerStatuses"]:
            rel = f"{pod_dir}/{status['containerID'].partition('://')[2]}"
            tree.mkdir(rel)
            proc = subprocess.Popen(["sleep", "1000000"], preexec_fn=lambda r=rel: tree.attach(r, os.getpid()))
            tree.procs.append(proc)


@contextlib.contextmanager
def soak_node(n_pods: int, addr: str = "127.0.0.1:19317") -> Iterator[tuple[str, list[str]]]:
    """A node of ``n_pods`` pods in a fresh work directory, removed afterwards with its cgroups and processes;
    yields the work directory and the standalone agent's arguments on it (state, caches and reports in the work
    directory, collection and reconcile every second, metrics on ``addr``)."""
    from doubles.realcgroup import RealCgroupTree
    work = tempfile.mkdtemp(prefix="koordlet-soakbench-")
    link_root = os.path.join(work, "cgroup")
    os.mkdir(link_root)
    tree = RealCgroupTree(link_root)
    try:
        pods = pod_objects(n_pods)
        build_node(tree, pods)
        pods_file = os.path.join(work, "pods.json")
        with open(pods_file, "w") as f:
            json.dump(pods, f)
        yield work, ["run", "--standalone", "--node-name", "bench", "--cgroup-root-dir", link_root,
                     "--cgroup-driver", "cgroupfs", "--pods-file", pods_file, "--addr", addr,
                     "--tsdb-path", os.path.join(work, "cache"), "--collect-res-used-interval", "1s",
                     "--reconcile-interval-seconds", "1", "--var-run-root-dir", os.path.join(work, "run"),
                     "--prediction-checkpoint-filepath", os.path.join(work, "checkpoints"),
                     "--report-dir", os.path.join(work, "reports"), "--log-level", "warning"]
    finally:
        tree.cleanup()
        subprocess.run(["rm", "-rf", work], check=False)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 15 s, unless it has already exited."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- measuring --------------------------------------------------------------------------------------------------

def proc_sample(pid: int) -> dict[str, float]:
    """CPU seconds (user + system), RSS MiB, threads and fds of a live process."""
    proc = psutil.Process(pid)
    with proc.oneshot():                 # one read of /proc/<pid>/stat and status for all of them
        times = proc.cpu_times()
        return {"cpu": times.user + times.system, "rss_mib": proc.memory_info().rss / MI,
                "threads": proc.num_threads(), "fds": proc.num_fds()}


def dir_bytes(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


def millicores(series: list[dict[str, float]], key: str, t_from: float, t_to: float) -> list[float]:
    """Per-interval millicores of ``key`` CPU seconds between samples within [t_from, t_to]."""
    pts = [s for s in series if t_from <= s["t"] <= t_to]
    return [(b[key] - a[key]) / (b["t"] - a["t"]) * 1000 for a, b in itertools.pairwise(pts)]


def measure(n_pods: int, args: argparse.Namespace) -> dict[str, Any]:
    agent = floor = None
    with soak_node(n_pods, args.addr) as (work, agent_args):
        try:
            recording = os.path.join(work, "reads.jsonl")
            cache = os.path.join(work, "cache")
            link_root = agent_args[agent_args.index("--cgroup-root-dir") + 1]
            prefixes = ["/proc/", "/sys/", link_root + "/"]
            cmd = [sys.executable, os.path.abspath(__file__), "--agent-recorded", recording, str(args.warmup),
                   str(args.record), json.dumps(prefixes), "--", *agent_args, *args.agent_args]
            agent = subprocess.Popen(cmd, env=dict(os.environ, STATE_DIRECTORY=work), cwd=work)
            t0 = time.monotonic()
            series: list[dict[str, float]] = []
            floor_pid = None
            while True:
                now = time.monotonic() - t0
                if agent.poll() is not None:
                    raise RuntimeError(f"the agent exited with {agent.returncode} at {now:.0f} s")
                if floor is None and os.path.exists(recording):
                    floor = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--floor", recording])
                    floor_pid = floor.pid
                s = {"t": now, **proc_sample(agent.pid), "cache_bytes": dir_bytes(cache)}
                if floor_pid is not None:
                    s["floor_cpu"] = proc_sample(floor_pid)["cpu"]
                series.append(s)
                if now >= args.seconds:
                    break
                time.sleep(max(0.0, args.sample - (time.monotonic() - t0 - now)))
            recorded = recording_counts(recording, args.record)
            cache_gauges = scrape_cache_gauges(args.addr)
            if args.keep_recording:
                shutil.copy(recording, f"{args.keep_recording}.{n_pods}.jsonl")
        finally:
            stop(agent)
            stop(floor)
    with_floor = [s for s in series if "floor_cpu" in s]
    if len(with_floor) < 3:
        raise RuntimeError("the run ended before the floor had two intervals: raise --seconds")
    t_from, t_to = with_floor[0]["t"], series[-1]["t"]
    agent_m = millicores(with_floor, "cpu", t_from, t_to)
    floor_m = millicores(with_floor, "floor_cpu", t_from, t_to)
    def minute(m: int) -> float:
        return statistics.fmean(millicores(series, "cpu", 60 * (m - 1), 60 * m) or [float("nan")])
    rss_at = {m: next((s["rss_mib"] for s in series if s["t"] >= 60 * m), None) for m in (1, 10, 30, 45, 60)}

    def rss_mean(m_from: int, m_to: int) -> float | None:
        pts = [s["rss_mib"] for s in series if 60 * m_from <= s["t"] <= 60 * m_to]
        return statistics.fmean(pts) if pts else None

    def cache_growth(m_from: int, m_to: int) -> float | None:
        """MiB a hour the metric cache's directory grew by between the two minutes (roll-ups begin at ~40)."""
        pts = [s for s in series if 60 * m_from <= s["t"] <= 60 * m_to]
        if len(pts) < 2:
            return None
        return (pts[-1]["cache_bytes"] - pts[0]["cache_bytes"]) / MI / ((pts[-1]["t"] - pts[0]["t"]) / 3600)
    flat = (rss_mean(31, 45), rss_mean(45, 60))
    last = series[-1]
    result = {
        "pods": n_pods, "containers": 2 * n_pods, "seconds": round(t_to, 1), "measured_from_s": round(t_from, 1),
        "agent_millicores_mean": statistics.fmean(agent_m), "agent_millicores_p95": pct(agent_m, 0.95),
        "floor_millicores_mean": statistics.fmean(floor_m),
        "cpu_minute5": minute(5) if t_to >= 300 else None,
        "cpu_last_minute": statistics.fmean(millicores(series, "cpu", t_to - 60, t_to)),
        "rss_mib": {str(k): v for k, v in rss_at.items() if v is not None}, "rss_end_mib": last["rss_mib"],
        "fds_end": last["fds"], "threads_end": last["threads"], "cache_mib_end": last["cache_bytes"] / MI,
        "rss_flat_pct": 100 * (flat[1] - flat[0]) / flat[0] if flat[0] and flat[1] else None,
        "cache_mib_per_hour_45_60": cache_growth(45, 60), **cache_gauges,
        "series": series,
    }
    result["ratio"] = result["agent_millicores_mean"] / max(result["floor_millicores_mean"], 1e-9)
    result.update(recorded)
    return result


def scrape_cache_gauges(addr: str) -> dict[str, float]:
    """The agent's own account of its metric cache (samples held, their bytes, history on disk), from /metrics."""
    import urllib.request
    wanted = {"koordlet_metric_cache_points": "samples_held", "koordlet_metric_cache_point_bytes": "sample_bytes",
              'koordlet_metric_cache_history_seconds{kind="held"': "history_held_s",
              'koordlet_metric_cache_history_seconds{kind="capacity"': "history_capacity_s"}
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        for prefix, key in wanted.items():
            name = prefix.partition("{")[0]
            if line.startswith(name) and (prefix == name or prefix.partition("{")[2] in line):
                out[key] = float(line.rsplit(" ", 1)[1])
    if out.get("samples_held"):
        out["bytes_per_sample"] = out.get("sample_bytes", 0.0) / out["samples_held"]
    return out


def recording_counts(recording: str, seconds: float) -> dict[str, float]:
    """Reads, listings and writes per second in the recording (what the floor replays, and what it skips)."""
    counts = {"read": 0, "list": 0, "write": 0}
    with open(recording) as f:
        for line in f:
            counts[json.loads(line)[1]] += 1
    return {f"{kind}s_per_s": n / seconds for kind, n in counts.items()}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> int:
    if sys.argv[1:2] == ["--agent-recorded"]:
        out, start_after, length, prefixes = sys.argv[2:6]
        assert sys.argv[6] == "--"
        return run_agent_recorded(out, float(start_after), float(length), json.loads(prefixes), sys.argv[7:])
    if sys.argv[1:2] == ["--floor"]:
        return run_floor(sys.argv[2], 1.0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", default="0,50,100,200", help="pod counts, comma-separated (2 containers each)")
    ap.add_argument("--seconds", type=float, default=600.0, help="agent run per pod count (30 min for the record)")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples of the agent")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds before the read recording starts")
    ap.add_argument("--record", type=float, default=70.0,
                    help="seconds of the agent's reads recorded for the floor (over a minute: the 60 s refreshes)")
    ap.add_argument("--agent-args", default="", help="extra agent flags, e.g. '--reconcile-interval-seconds 0'")
    ap.add_argument("--keep-recording", default="", help="copy the floor's recording to PREFIX.<pods>.jsonl")
    ap.add_argument("--json", default="", help="write the results (with the sample series) here")
    ap.add_argument("--addr", default="127.0.0.1:19317", help="the agent's metrics address")
    args = ap.parse_args()
    args.agent_args = args.agent_args.split()
    from doubles.realcgroup import v1_available
    reason = v1_available()
    if reason:
        print(f"skipped: {reason}")
        return 0
    results = []
    print(f"agent soak: {args.seconds:.0f} s per pod count, samples every {args.sample:.0f} s, floor recorded "
          f"{args.warmup:.0f}-{args.warmup + args.record:.0f} s; load before: {os.getloadavg()[0]:.2f} "
          f"{' '.join(args.agent_args)}")
    for n in (int(x) for x in args.pods.split(",")):
        r = measure(n, args)
        results.append(r)
        rss = " ".join(f"{m}min={v:.1f}" for m, v in r["rss_mib"].items())
        m5 = f"{r['cpu_minute5']:.1f}" if r["cpu_minute5"] is not None else "-"
        print(f"containers={r['containers']:4d} agent mean={r['agent_millicores_mean']:.1f} m "
              f"p95={r['agent_millicores_p95']:.1f} m  floor={r['floor_millicores_mean']:.1f} m  "
              f"ratio={r['ratio']:.2f}x  minute5={m5} m last-minute={r['cpu_last_minute']:.1f} m  "
              f"rss {rss} end={r['rss_end_mib']:.1f} MiB  fds={r['fds_end']:.0f} threads={r['threads_end']:.0f} "
              f"cache={r['cache_mib_end']:.1f} MiB  reads/s={r['reads_per_s']:.0f} lists/s={r['lists_per_s']:.1f} "
              f"writes/s={r['writes_per_s']:.2f}", flush=True)
        extra = {k: r.get(k) for k in ("rss_flat_pct", "bytes_per_sample", "samples_held", "cache_mib_per_hour_45_60",
                                       "history_held_s", "history_capacity_s")}
        print("   " + " ".join(f"{k}={v:.2f}" for k, v in extra.items() if v is not None), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
