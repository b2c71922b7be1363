"""Soak: the real agent daemon under continuous pod churn on real cgroups, for half an hour.

The agent runs in its own process (``koordlet run --standalone``: collection every second, QoS reconcile every
second, the NRI plugin connected to the runtime-side peer of doubles/nriruntime.py), over a real cgroup v1 tree
(doubles/realcgroup.py). The test keeps ``KOORDLET_SOAK_PODS`` (200) pods alive: every ``TICK`` seconds the pods
whose lifetime (uniform around ``KOORDLET_SOAK_LIFETIME`` s) is over are deleted and as many new ones created, as
the kubelet and a runtime would do it: the pods file (standalone metadata) first, then the cgroup dirs, then
RunPodSandbox / CreateContainer / StartContainer to the agent's NRI plugin; deletion in the reverse order.
Two thirds of the pods are BestEffort batch pods (two containers, per-pod batch-cpu / batch-memory), one third LS
pods. Three hostile pods stay for the whole run (a ``resource-status`` of 5,000 nested brackets, a cpuset
``0-20000000``, a batch quantity ``1e10000000``) and go through the NRI plugin once a minute as well.

Checked, every ``KOORDLET_SOAK_SAMPLE`` seconds, and written as a time series to ``KOORDLET_SOAK_OUT`` (JSON;
default: the test's tmp dir, printed at the end):

- the agent's RSS (VmRSS of its process) stays under 120 MiB, and shows no growth trend once its in-memory state
  is full: the median of the second half of the samples after ``WARMUP`` is not above the first half's (+5 %,
  +2 MiB for noise). What a deleted pod leaves in memory goes away after at most 30 minutes: its metric-cache
  series when they leave the in-memory window (``KOORDLET_SOAK_WINDOW``, the agent's default 1800 s), its peak
  predictor model when it expires (30 minutes without an update, upstream's fixed ``ModelExpirationDuration``;
  not an option). So ``WARMUP`` is the longer of the two plus two training minutes, and the trend is checked only
  when at least 10 minutes of samples follow it (``KOORDLET_SOAK_SECONDS`` >= 2520 with the defaults); a shorter
  run records the series and says the trend was not checked;
- open fds and threads flat: the last third's maximum is not above the middle third's (+4 fds, +2 threads);
- every non-hostile pod older than ``GRACE`` seconds correctly enforced, read from the kernel files: BE pod and
  container ``cpu.shares`` / ``cpu.cfs_quota_us`` / ``memory.limit_in_bytes`` as the BatchResource rule gives (the
  pod: the containers' sums), LS containers' ``cpuset.cpus`` = the LS share pool; and every NRI CreateContainer
  answer for a BE container carries the same shares / quota / memory limit;
- ``/healthz`` polled from a small process of this test's (new connection each time, every 0.2 s; out of this
  process so that the churn's work and GIL are not in the measurement) answers 200 under 100 ms, every time; the
  distribution (p50 / p99 / max) is reported, with the agent's CPU and the host's load average per sample.

Run: ``make soak`` (``KOORDLET_SOAK_SECONDS=60 make soak`` for a smoke run). Needs root and cgroup v1.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import psutil
import pytest

from doubles.nriruntime import FakeRuntime, TTRPCError
from doubles.realcgroup import SUBSYSTEMS, RealCgroupTree, proc_cpu_seconds, v1_available
from koordlet._proto.nri import api_pb2 as api
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.states.informer import meta_for
from koordlet.states.pod import pod_from_k8s
from tests.builders import pod_object

pytestmark = [pytest.mark.soak, pytest.mark.root]

DURATION = float(os.environ.get("KOORDLET_SOAK_SECONDS", "1800"))
PODS = int(os.environ.get("KOORDLET_SOAK_PODS", "200"))
LIFETIME = float(os.environ.get("KOORDLET_SOAK_LIFETIME", "60"))      # mean pod lifetime, s
WINDOW = float(os.environ.get("KOORDLET_SOAK_WINDOW", "1800"))       # the agent's metric-cache-memory-window
MODEL_EXPIRATION = 1800.0      # koordlet/prediction/server.py: a deleted pod's peak model goes after 30 minutes
WARMUP = max(WINDOW, MODEL_EXPIRATION + 120)
SAMPLE = float(os.environ.get("KOORDLET_SOAK_SAMPLE", "0")) or max(2.0, min(10.0, DURATION / 60))
OUT = os.environ.get("KOORDLET_SOAK_OUT", "")
TICK = 2.0            # churn period, s
GRACE = 3.0           # a pod is checked once this old: PLEG (< 1 s) + the reconcile period (1 s) + slack
HEALTHZ_EVERY = 0.2
RSS_LIMIT_MIB = 120.0
HEALTHZ_LIMIT_S = 0.100

SPEC = "node.koordinator.sh/extended-resource-spec"
STATUS = "scheduling.koordinator.sh/resource-status"
BATCH_CPU, BATCH_MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MI = 1 << 20


# ---- the pods -------------------------------------------------------------------------------------------------

@dataclass
class SoakPod:
    n: int
    obj: dict                                  # the Pod in Kubernetes JSON (the pods file entry)
    pod_dir: str                               # relative to the test tree's cgroup root
    containers: list[tuple[str, str, str]]     # (name, id, relative dir)
    expected: dict[str, dict[str, str]]        # relative dir -> {cgroup file: value}
    nri_expected: dict[str, tuple[int, int, int]]   # container name -> (shares, quota, memory limit)
    born: float
    dies: float
    hostile: bool = False
    sandbox: api.PodSandbox = field(default_factory=api.PodSandbox)


def _shares(milli: int) -> int:
    return max(milli * 1024 // 1000, 2)


def be_pod(n: int, cg: Cgroups, now: float, life: float) -> SoakPod:
    """A BestEffort batch pod with two containers whose batch resources depend on n."""
    uid = f"5a0c0000-0000-4000-8000-{n:012d}"
    batch = {}
    for k in range(2):
        req = (250, 500, 1000, 1500)[(n + k) % 4]
        lim = req * (2, 4)[(n // 4 + k) % 2]
        mem = (256, 512, 1024)[(n + 2 * k) % 3] * MI
        batch[f"c{k}"] = {"requests": {BATCH_CPU: str(req), BATCH_MEM: str(mem // 2)},
                          "limits": {BATCH_CPU: str(lim), BATCH_MEM: str(mem)}}
    ids = {f"c{k}": f"{n:032x}{k:032x}" for k in range(2)}
    obj = pod_object(uid, f"be-{n}", namespace="soak", qos="BestEffort", containers=ids, resources=batch,
                     labels={"koordinator.sh/qosClass": "BE"},
                     annotations={SPEC: json.dumps({"containers": batch})})
    meta = meta_for(pod_from_k8s(obj), cg.layout)
    expected: dict[str, dict[str, str]] = {}
    nri: dict[str, tuple[int, int, int]] = {}
    rels = {c.name: rel for c, rel in meta.containers}
    for name, b in batch.items():
        req, lim, mem = int(b["requests"][BATCH_CPU]), int(b["limits"][BATCH_CPU]), int(b["limits"][BATCH_MEM])
        expected[rels[name]] = {"cpu/cpu.shares": str(_shares(req)), "cpu/cpu.cfs_quota_us": str(lim * 100),
                                "memory/memory.limit_in_bytes": str(mem)}
        nri[name] = (_shares(req), lim * 100, mem)
    def total(section: str, resource: str) -> int:
        return sum(int(b[section][resource]) for b in batch.values())
    expected[meta.cgroup_dir] = {                                   # the pod: the containers' sums
        "cpu/cpu.shares": str(_shares(total("requests", BATCH_CPU))),
        "cpu/cpu.cfs_quota_us": str(total("limits", BATCH_CPU) * 100),
        "memory/memory.limit_in_bytes": str(total("limits", BATCH_MEM))}
    pod = SoakPod(n, obj, meta.cgroup_dir, [(c.name, c.id, rel) for c, rel in meta.containers], expected, nri,
                  now, now + life)
    pod.sandbox = sandbox_of(obj, f"/kubepods/besteffort/pod{uid}")
    return pod


def ls_pod(n: int, cg: Cgroups, now: float, life: float, ls_pool: str) -> SoakPod:
    uid = f"15000000-0000-4000-8000-{n:012d}"
    obj = pod_object(uid, f"ls-{n}", namespace="soak", qos="Burstable", containers={"c0": f"{n:032x}{7:032x}"},
                     resources={"c0": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                     labels={"koordinator.sh/qosClass": "LS"})
    meta = meta_for(pod_from_k8s(obj), cg.layout)
    expected = {rel: {"cpuset/cpuset.cpus": ls_pool} for _, rel in meta.containers}
    pod = SoakPod(n, obj, meta.cgroup_dir, [(c.name, c.id, rel) for c, rel in meta.containers], expected, {},
                  now, now + life)
    pod.sandbox = sandbox_of(obj, f"/kubepods/burstable/pod{uid}")
    return pod


def hostile_pods(cg: Cgroups, now: float) -> list[SoakPod]:
    """What the decoder must refuse, each in a pod that lives for the whole run."""
    deep = "[" * 5000 + "]" * 5000
    huge = json.dumps({"containers": {"c0": {"limits": {BATCH_CPU: "1e10000000"}}}})
    specs = [("LSR", "Guaranteed", {STATUS: deep, SPEC: huge}),
             ("LSR", "Guaranteed", {STATUS: json.dumps({"cpuset": "0-20000000"})}),
             ("BE", "BestEffort", {SPEC: huge, STATUS: json.dumps({"cpuset": "0-20000000"})})]
    out = []
    for k, (qos, kube, bad) in enumerate(specs):
        uid = f"ba000000-0000-4000-8000-{k:012d}"
        obj = pod_object(uid, f"hostile-{k}", namespace="soak", qos=kube, containers={"c0": f"{k:032x}{9:032x}"},
                         labels={"koordinator.sh/qosClass": qos}, annotations=bad)
        meta = meta_for(pod_from_k8s(obj), cg.layout)
        pod = SoakPod(-1 - k, obj, meta.cgroup_dir, [(c.name, c.id, rel) for c, rel in meta.containers], {}, {},
                      now, float("inf"), hostile=True)
        parent = "/kubepods" if kube == "Guaranteed" else f"/kubepods/{kube.lower()}"
        pod.sandbox = sandbox_of(obj, f"{parent}/pod{uid}")
        out.append(pod)
    return out


def sandbox_of(obj: dict, cgroup_parent: str) -> api.PodSandbox:
    md = obj["metadata"]
    sb = api.PodSandbox(id="sb-" + md["uid"], name=md["name"], uid=md["uid"], namespace=md["namespace"],
                        labels=md.get("labels") or {}, annotations=md.get("annotations") or {})
    sb.linux.cgroup_parent = cgroup_parent
    return sb


def container_msg(pod: SoakPod, name: str, cid: str) -> api.Container:
    ctr = api.Container(id=cid, pod_sandbox_id=pod.sandbox.id, name=name, state=api.CONTAINER_CREATED)
    ctr.linux.resources.cpu.shares.value = 2
    return ctr


# ---- the agent process ------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid: int) -> dict[str, int]:
    """RSS and peak RSS (KiB), threads and fds of a live process; the peak is ``VmHWM`` of /proc/<pid>/status,
    which psutil does not report."""
    proc = psutil.Process(pid)
    with proc.oneshot():
        out = {"VmRSS": proc.memory_info().rss // 1024, "Threads": proc.num_threads(), "fds": proc.num_fds()}
    with open(f"/proc/{pid}/status") as f:
        out["VmHWM"] = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return out


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


PROBE = """
import http.client, sys, time
port, every = int(sys.argv[1]), float(sys.argv[2])
while True:
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        body = r.read()
        conn.close()
        err = "" if r.status == 200 and body == b"ok\\n" else f"status={r.status}"
    except OSError as e:
        err = type(e).__name__
    print(f"{time.time():.3f} {time.perf_counter() - start:.6f} {err}", flush=True)
    time.sleep(every)
"""


class HealthProbe(threading.Thread):
    """GET /healthz on a new connection every HEALTHZ_EVERY s, from a process of its own (so neither this test's
    work nor its GIL is in the measurement); latencies (s) and failures, drained per sample."""

    def __init__(self, port: int) -> None:
        super().__init__(name="soak-healthz", daemon=True)
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE, str(port), str(HEALTHZ_EVERY)],
                                     stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            stamp, latency, *err = line.split()
            with self.lock:
                self.latencies.append(float(latency))
                if err:
                    self.failures.append(f"{stamp} {err[0]}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.join(5)

    def drain(self) -> list[float]:
        with self.lock:
            out, self.latencies = self.latencies, []
        return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# ---- the soak ---------------------------------------------------------------------------------------------------

class Churn:
    def __init__(self, tree: RealCgroupTree, cg: Cgroups, pods_file: str, rt: FakeRuntime, ls_pool: str) -> None:
        self.tree, self.cg, self.pods_file, self.rt, self.ls_pool = tree, cg, pods_file, rt, ls_pool
        self.live: dict[int, SoakPod] = {}
        self.next_n = 0
        self.created = self.deleted = 0
        self.nri_calls = 0
        self.nri_misses: list[str] = []
        self.nri_errors: list[str] = []
        self.rng = random.Random(18)

    def write_pods_file(self) -> None:
        tmp = self.pods_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump([p.obj for p in self.live.values()], f)       # JSON is YAML
        os.replace(tmp, self.pods_file)

    def mkdirs(self, pod: SoakPod) -> None:
        for rel in (pod.pod_dir, *(rel for _, _, rel in pod.containers)):
            self.tree.mkdir(rel)

    def rmdirs(self, pod: SoakPod) -> None:
        for rel in (*(rel for _, _, rel in pod.containers), pod.pod_dir):
            for s in SUBSYSTEMS:
                try:
                    os.rmdir(self.tree.real(s, rel))
                except FileNotFoundError:
                    pass
            self.tree.dirs.remove(rel)

    def nri_create(self, pod: SoakPod) -> None:
        try:
            self.rt.run_pod_sandbox(pod.sandbox)
            for name, cid, _ in pod.containers:
                resp = self.rt.create_container(pod.sandbox, container_msg(pod, name, cid))
                self.nri_calls += 2
                want = pod.nri_expected.get(name)
                if want is not None:
                    r = resp.adjust.linux.resources
                    got = (r.cpu.shares.value, r.cpu.quota.value, r.memory.limit.value)
                    if got != want:
                        self.nri_misses.append(f"{pod.obj['metadata']['name']}/{name}: got {got}, want {want}")
                self.rt.start_container(pod.sandbox, container_msg(pod, name, cid))
                self.nri_calls += 1
        except (TTRPCError, TimeoutError, ConnectionError) as e:
            self.nri_errors.append(f"{time.time():.1f} create {pod.obj['metadata']['name']}: {e}")

    def nri_remove(self, pod: SoakPod) -> None:
        try:
            for name, cid, _ in pod.containers:
                self.rt.stop_container(pod.sandbox, container_msg(pod, name, cid))
                self.rt.remove_container(pod.sandbox, container_msg(pod, name, cid))
                self.nri_calls += 2
            self.rt.stop_pod_sandbox(pod.sandbox)
            self.rt.remove_pod_sandbox(pod.sandbox)
            self.nri_calls += 2
        except (TTRPCError, TimeoutError, ConnectionError) as e:
            self.nri_errors.append(f"{time.time():.1f} remove {pod.obj['metadata']['name']}: {e}")

    def new_pod(self, now: float) -> SoakPod:
        n = self.next_n
        self.next_n += 1
        life = self.rng.uniform(0.5 * LIFETIME, 1.5 * LIFETIME)
        return (ls_pod(n, self.cg, now, life, self.ls_pool) if n % 3 == 2 else be_pod(n, self.cg, now, life))

    def add_hostile(self, pods: list[SoakPod]) -> None:
        for p in pods:
            self.live[p.n] = p
        self.write_pods_file()
        for p in pods:
            self.mkdirs(p)
            self.nri_create(p)

    def tick(self, now: float, initial: bool = False) -> None:
        """Delete the pods whose time is up, create as many (up to PODS non-hostile)."""
        dead = [p for p in self.live.values() if p.dies <= now]
        for p in dead:
            self.nri_remove(p)
            self.rmdirs(p)
            del self.live[p.n]
            self.deleted += 1
        count = sum(1 for p in self.live.values() if not p.hostile)
        born = [self.new_pod(now) for _ in range(PODS - count)]
        if initial:            # a staggered start, so the first deaths do not come all at once
            for p in born:
                p.dies = now + self.rng.uniform(0.1 * LIFETIME, 1.5 * LIFETIME)
        for p in born:
            self.live[p.n] = p
        self.write_pods_file()                      # metadata first, as a pod is known before its cgroups
        for p in born:
            self.mkdirs(p)
            self.nri_create(p)
            self.created += 1

    def check(self, now: float) -> tuple[int, list[str]]:
        """(pods checked, misses) of every non-hostile pod older than GRACE, from the kernel files."""
        checked, misses = 0, []
        for p in self.live.values():
            if p.hostile or now - p.born < GRACE:
                continue
            checked += 1
            for rel, files in p.expected.items():
                for key, want in files.items():
                    sub, name = key.split("/")
                    with open(self.tree.real(sub, os.path.join(rel, name))) as f:
                        got = f.read().strip()
                    if got != want:
                        misses.append(f"{p.obj['metadata']['name']} age {now - p.born:.1f}s {rel} {name}: "
                                      f"{got} != {want}")
        return checked, misses


@pytest.mark.skipif(v1_available() is not None, reason=str(v1_available()))
def test_soak(tmp_path):
    link_root = tmp_path / "cgroup"
    link_root.mkdir()
    tree = RealCgroupTree(str(link_root))
    cg = Cgroups(str(link_root), CgroupVersion.V1, Driver.CGROUPFS)
    sock_dir = tempfile.mkdtemp(prefix="soak")          # AF_UNIX paths: < 108 bytes
    rt = FakeRuntime(os.path.join(sock_dir, "nri", "nri.sock"))
    proc: subprocess.Popen | None = None
    probe: HealthProbe | None = None
    try:
        for d in ("kubepods/besteffort", "kubepods/burstable"):
            tree.mkdir(d)
        with open(tree.real("cpuset", "cpuset.cpus")) as f:
            ls_pool = f.read().strip()              # no reservations, no pinned pods: the LS pool is every CPU
        pods_file = str(tmp_path / "pods.json")
        rt.start()
        churn = Churn(tree, cg, pods_file, rt, ls_pool)
        churn.write_pods_file()
        port = free_port()
        cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "soak-node",
               "--cgroup-root-dir", str(link_root), "--cgroup-driver", "cgroupfs", "--proc-root-dir", "/proc/",
               "--pods-file", pods_file, "--addr", f"127.0.0.1:{port}", "--tsdb-path", str(tmp_path / "cache"),
               "--collect-res-used-interval", "1s", "--reconcile-interval-seconds", "1",
               "--metric-cache-memory-window", f"{WINDOW:.0f}s",
               "--var-run-root-dir", sock_dir,     # the runtime's socket: nri/nri.sock under it (the default)
               "--prediction-checkpoint-filepath", str(tmp_path / "checkpoints"),
               "--report-dir", str(tmp_path / "reports")]
        log_path = tmp_path / "agent.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        assert rt.wait_ready(30), f"NRI plugin never connected: {rt.closed_reasons}; {log_path.read_text()[-3000:]}"
        start = time.monotonic()
        while time.monotonic() - start < 30:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"agent never ready; log: {log_path.read_text()[-3000:]}")

        hostile = hostile_pods(cg, time.time())
        churn.add_hostile(hostile)
        churn.tick(time.time(), initial=True)
        probe = HealthProbe(port)
        probe.start()

        series: list[dict] = []
        all_lat: list[float] = []
        all_misses: list[str] = []
        t0 = time.monotonic()
        next_tick, next_sample, next_hostile = t0 + TICK, t0 + SAMPLE, t0 + 60
        cpu_prev, cpu_t = proc_cpu_seconds(proc.pid), t0
        while (elapsed := time.monotonic() - t0) < DURATION:
            assert proc.poll() is None, f"agent exited {proc.returncode}; log: {log_path.read_text()[-3000:]}"
            now_m = time.monotonic()
            if now_m >= next_tick:
                churn.tick(time.time())
                next_tick += TICK
            if now_m >= next_hostile:
                for p in hostile:
                    churn.nri_create(p)
                next_hostile += 60
            if now_m >= next_sample:
                next_sample += SAMPLE
                checked, misses = churn.check(time.time())
                all_misses += misses
                st = proc_status(proc.pid)
                cpu_now, t_now = proc_cpu_seconds(proc.pid), time.monotonic()
                cpu_pct = 100 * (cpu_now - cpu_prev) / (t_now - cpu_t)
                cpu_prev, cpu_t = cpu_now, t_now
                lat = probe.drain()
                all_lat += lat
                series.append({"t": round(elapsed, 1), "rss_mib": round(st["VmRSS"] / 1024, 1),
                               "hwm_mib": round(st["VmHWM"] / 1024, 1), "fds": st["fds"], "threads": st["Threads"],
                               "pods": len(churn.live), "created": churn.created, "deleted": churn.deleted,
                               "agent_cpu_pct": round(cpu_pct, 1), "load1": load1(), "checked": checked,
                               "misses": len(misses), "nri_calls": churn.nri_calls,
                               "healthz_n": len(lat), "healthz_p50_ms": round(pct(lat, 0.5) * 1000, 2),
                               "healthz_max_ms": round(max(lat, default=float("nan")) * 1000, 2)})
                if len(series) % 12 == 1:
                    s = series[-1]
                    print(f"[soak] t={s['t']:.0f}s rss={s['rss_mib']}MiB fds={s['fds']} threads={s['threads']} "
                          f"cpu={s['agent_cpu_pct']}% load={s['load1']} "
                          f"pods={s['pods']} created={s['created']} misses={len(all_misses)} "
                          f"healthz max={s['healthz_max_ms']}ms", flush=True)
            time.sleep(max(0.0, min(next_tick, next_sample) - time.monotonic()))
        probe.stop()
        all_lat += probe.drain()

        # ---- the verdict ----
        third = max(1, len(series) // 3)
        mid, last = series[third:2 * third], series[2 * third:]
        med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
        steady = [r for r in series if r["t"] >= WARMUP]
        if steady and steady[-1]["t"] - steady[0]["t"] >= 600:
            half = len(steady) // 2
            rss_trend = {"rss_steady_from_s": WARMUP, "rss_median_first_half_mib": med(steady[:half], "rss_mib"),
                         "rss_median_second_half_mib": med(steady[half:], "rss_mib")}
        else:
            rss_trend = {"rss_trend": f"not checked: the run ends before {WARMUP:.0f} s (warm-up) + 600 s"}
        summary = {
            "duration_s": DURATION, "pods": PODS, "mean_lifetime_s": LIFETIME, "memory_window_s": WINDOW,
            "sample_s": SAMPLE, "created": churn.created, "deleted": churn.deleted, "nri_calls": churn.nri_calls,
            "rss_peak_mib": max(r["rss_mib"] for r in series), "rss_final_mib": series[-1]["rss_mib"],
            "hwm_mib": series[-1]["hwm_mib"],
            "rss_median_mid_mib": med(mid, "rss_mib"), "rss_median_last_mib": med(last, "rss_mib"), **rss_trend,
            "fds_min": min(r["fds"] for r in series), "fds_max": max(r["fds"] for r in series),
            "fds_max_mid": max(r["fds"] for r in mid), "fds_max_last": max(r["fds"] for r in last),
            "fds_final": series[-1]["fds"],
            "threads_min": min(r["threads"] for r in series), "threads_max": max(r["threads"] for r in series),
            "threads_max_mid": max(r["threads"] for r in mid), "threads_max_last": max(r["threads"] for r in last),
            "threads_final": series[-1]["threads"],
            "pod_checks": sum(r["checked"] for r in series), "enforcement_misses": len(all_misses),
            "nri_misses": len(churn.nri_misses), "nri_errors": len(churn.nri_errors),
            "healthz_requests": len(all_lat), "healthz_failures": len(probe.failures),
            "healthz_p50_ms": round(pct(all_lat, 0.5) * 1000, 2), "healthz_p99_ms": round(pct(all_lat, 0.99) * 1000, 2),
            "healthz_max_ms": round(max(all_lat) * 1000, 2),
            "healthz_over_100ms": sum(1 for x in all_lat if x >= HEALTHZ_LIMIT_S),
            "agent_cpu_pct_mean": round(statistics.mean(r["agent_cpu_pct"] for r in series), 1),
            "agent_cpu_s": round(proc_cpu_seconds(proc.pid), 1), "host_load1_max": max(r["load1"] for r in series),
            "agent_log_bytes": os.path.getsize(log_path),
        }
        # the agent must stop cleanly after all that
        proc.send_signal(signal.SIGTERM)
        summary["exit_code"] = proc.wait(30)
        log_text = log_path.read_text(errors="replace")
        summary["agent_log_lines"] = log_text.count("\n")
        checkpoints = tmp_path / "checkpoints"
        summary["checkpoint_files"] = len(os.listdir(checkpoints)) if checkpoints.is_dir() else 0
        summary["tsdb_bytes"] = sum(p.stat().st_size for p in (tmp_path / "cache").iterdir())
        summary["hostile_refused_in_log"] = all(
            m in log_text for m in ("nested deeper than", "'0-20000000' is not a cpu list", "'1e10000000'"))
        summary["agent_log_errors"] = sum(1 for line in log_text.splitlines()
                                          if " ERROR " in line or "Traceback" in line)
        out = OUT or str(tmp_path / "soak.json")
        with open(out, "w") as f:
            json.dump({"summary": summary, "series": series, "enforcement_misses": all_misses[:200],
                       "nri_misses": churn.nri_misses[:200], "nri_errors": churn.nri_errors[:200],
                       "healthz_failures": probe.failures[:200], "agent_log_tail": log_text[-5000:]}, f, indent=1)
        print("\n[soak] summary: " + json.dumps(summary, indent=1) + f"\n[soak] time series: {out}", flush=True)

        assert summary["exit_code"] == 0, log_text[-3000:]
        assert summary["hostile_refused_in_log"], "the decoder's refusals of the hostile pods are not in the log"
        assert summary["rss_peak_mib"] < RSS_LIMIT_MIB, summary
        if "rss_median_second_half_mib" in summary:
            assert summary["rss_median_second_half_mib"] <= summary["rss_median_first_half_mib"] * 1.05 + 2, summary
        assert summary["fds_max_last"] <= summary["fds_max_mid"] + 4, summary
        assert summary["threads_max_last"] <= summary["threads_max_mid"] + 2, summary
        assert all_misses == [], all_misses[:20]
        assert churn.nri_misses == [] and churn.nri_errors == [], (churn.nri_misses[:10], churn.nri_errors[:10])
        assert probe.failures == [], probe.failures[:10]
        assert summary["healthz_over_100ms"] == 0, summary
        assert rt.violations == [], rt.violations[:10]
    finally:
        if probe is not None and probe.proc.poll() is None:
            probe.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        rt.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
        tree.cleanup()
