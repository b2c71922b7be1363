"""The daemon as a user runs it: a real process, real HTTP, SIGTERM, and the metric cache on disk."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS
from koordlet.metriccache import MetricCache
from tests.builders import pod_object
from tests.fakehost import CgroupValues, FakeHost
from tests.waits import wait_for

A = "a" * 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class cpu_slowdown_probe:
    """A CPU-bound task started now: its wall time over its own CPU time (the kernel's account, getrusage) is how
    much the host's load stretches work that needs a CPU, over the same moment as what it is compared with."""
    CPU_S = 0.3
    CODE = ("import time\nc0, w0 = time.process_time(), time.monotonic()\n"
            f"while time.process_time() - c0 < {CPU_S}: pass\n"
            "print(time.monotonic() - w0, time.process_time() - c0)")

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE], stdout=subprocess.PIPE, text=True)

    def slowdown(self) -> float:
        wall, cpu = map(float, self.proc.communicate(timeout=120)[0].split())
        return max(1.0, wall / cpu)


@pytest.fixture
def daemon(tmp_path):
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump([pod_object("uid-web", "web", namespace="shop", containers={"app": A})]))
    port = free_port()
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", "/proc/",
           "--pods-file", str(pods), "--addr", f"127.0.0.1:{port}", "--tsdb-path", str(tmp_path / "cache")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        yield proc, base, tmp_path / "cache"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_serves_metrics_and_stops_on_sigterm(daemon):
    proc, base, cache_dir = daemon
    def ready():
        try:
            return get(base + "/readyz")[0] == 200
        except OSError:
            return False
    assert wait_for(ready, 15), proc.stderr.read() if proc.poll() is not None else "not ready"
    assert get(base + "/healthz") == (200, "ok\n")
    assert wait_for(lambda: "koordlet_node_used_cpu_cores{" in get(base + "/metrics")[1], 5)
    status, body = get(base + "/metrics")
    assert status == 200
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in body.splitlines()
              if line.startswith("koordlet_") and not line.startswith("#")}
    assert values['koordlet_node_used_memory_bytes{node="node-a"}'] > 0
    assert 'koordlet_node_used_cpu_cores{node="node-a"}' in values
    assert values['koordlet_pods{node="node-a",source="standalone"}'] == 1.0
    assert get(base + "/nope")[0] == 404

    time.sleep(1.5)                          # a few cycles that only the shutdown flush will persist
    probe = cpu_slowdown_probe()
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    stopped = time.monotonic() - start
    assert proc.returncode == 0
    # the contract: a clean stop within 2 s, on a host that gives the agent a CPU; on a loaded one, 2 s
    # stretched by how much slower than its CPU time a CPU-bound task ran over the same moment
    slowdown = probe.slowdown()
    assert stopped < 2.0 * slowdown, f"stopped in {stopped:.2f} s, CPU slowdown {slowdown:.2f}x"
    stderr = proc.stderr.read()
    assert "agent stopped node=node-a" in stderr

    cache = MetricCache(str(cache_dir))
    try:
        now = time.time()
        node = cache.query("node_memory_usage", None, now - 60, now)
        assert node.count() >= 2                          # flushed on SIGTERM, reloaded from sqlite
        pod = cache.query("pod_memory_usage", {"pod_uid": "uid-web"}, now - 60, now)
        assert pod.value("last") == 64 << 20
    finally:
        cache.close()


def test_not_ready_until_pods_synced_and_collected(tmp_path):
    """/readyz says why it is not ready; a cgroup root that does not exist is a clear start-up error."""
    r = subprocess.run([sys.executable, "-m", "koordlet", "run", "--standalone", "--cgroup-root-dir",
                        str(tmp_path / "missing"), "--tsdb-path", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 2
    assert "cgroup-root-dir" in r.stderr and "missing" in r.stderr


def test_systemd_notify_ready(tmp_path):
    """Type=notify: the agent sends READY=1 on $NOTIFY_SOCKET once it serves (a real datagram socket)."""
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)
    sock_path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(sock_path)
        sock.settimeout(15)
        env = dict(os.environ, NOTIFY_SOCKET=sock_path)
        proc = subprocess.Popen([sys.executable, "-m", "koordlet", "run", "--standalone", "--addr",
                                 f"127.0.0.1:{free_port()}", "--tsdb-path", str(tmp_path / "c"),
                                 "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", "/proc/"],
                                env=env, stderr=subprocess.DEVNULL, cwd=tmp_path)
        try:
            first = sock.recv(4096).decode()
            assert first.startswith("STATUS=starting")            # STATUS= while it builds
            ready = sock.recv(4096).decode().splitlines()
            assert ready[0] == "READY=1" and ready[1].startswith("STATUS=")
        finally:
            proc.terminate()
            proc.wait(5)


@pytest.mark.skipif(os.geteuid() != 0, reason="the NRI plugin runs only as root (the runtime's socket is root's)")
def test_daemon_serves_nri_to_a_runtime(tmp_path):
    """`koordlet run` registers with a runtime's NRI socket and answers CreateContainer from the shared rules."""
    import tempfile

    from doubles.nriruntime import FakeRuntime
    from tests.unit.test_nri_hooks import be_spec, container, sandbox
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)
    sock_dir = tempfile.mkdtemp(prefix="nrid")
    rt = FakeRuntime(os.path.join(sock_dir, "nri", "nri.sock"))
    rt.start()
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--addr", f"127.0.0.1:{free_port()}",
           "--tsdb-path", str(tmp_path / "cache"),
           "--var-run-root-dir", sock_dir]          # the runtime's socket: nri/nri.sock under it (the default)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert rt.wait_ready(15), rt.closed_reasons
        assert [(r.plugin_name, r.plugin_idx) for r in rt.registrations] == [("koordlet_nri", "00")]
        pod = sandbox("u-be", "BE", "besteffort", be_spec("app"))
        cpu = rt.create_container(pod, container(pod, "app")).adjust.linux.resources.cpu
        assert (cpu.shares.value, cpu.quota.value) == (512, 200000)
        assert rt.violations == []
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        assert proc.returncode == 0 and "nri plugin stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        rt.stop()


def test_daemon_serves_pod_resources_to_multus(tmp_path):
    """With the PodResourcesProxy gate, `koordlet run` serves the kubelet's answer plus the pods' VFs."""
    import json
    import tempfile

    from doubles import multus
    from doubles.kubelet_podresources import FakeKubelet
    from koordlet.base import wire
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V1, Driver.CGROUPFS)
    host.add_pod(KubeQOS.BURSTABLE, "uid-rdma", CgroupValues(cpu_ns=1), {A: CgroupValues(cpu_ns=1)})
    obj = pod_object("uid-rdma", "train", namespace="ml", containers={"app": A})
    obj["spec"]["containers"][0]["resources"] = {"limits": {wire.RESOURCE_RDMA: "1"}}
    obj["metadata"]["annotations"] = {wire.ANNOTATION_DEVICE_ALLOCATED: json.dumps({"rdma": [
        {"minor": 0, "id": "0000:09:00.0", "extension": {"vfs": [{"minor": 1, "busID": "0000:09:00.4"}]}}]})}
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump([obj]))
    short = tempfile.mkdtemp(prefix="prd")          # unix socket paths must stay under 108 bytes
    os.makedirs(os.path.join(short, "kubelet", "pod-resources"))
    kubelet = FakeKubelet(os.path.join(short, "kubelet", "pod-resources", "kubelet.sock"), [obj]).start()
    proxy_dir = os.path.join(short, "proxy")
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--addr", f"127.0.0.1:{free_port()}",
           "--pods-file", str(pods), "--tsdb-path", str(tmp_path / "cache"), "--enable-nri-runtime-hook=false",
           "--feature-gates", "PodResourcesProxy=true", "--var-lib-kubelet-dir", os.path.join(short, "kubelet"),
           "--pod-resources-proxy-path", proxy_dir]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    sock = os.path.join(proxy_dir, "kubelet.sock")
    try:
        assert wait_for(lambda: os.path.exists(sock), timeout=15), "proxy socket never appeared"
        assert multus.device_ids_for(sock, "ml", "train", wire.RESOURCE_RDMA) == ["0000:09:00.4"]
        assert kubelet.count("List") == 1
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        assert proc.returncode == 0 and not os.path.exists(sock)
    finally:
        if proc.poll() is None:
            proc.kill()
        kubelet.stop()


@pytest.mark.skipif(not os.path.exists("/proc/pressure/cpu"), reason="kernel without PSI")
def test_daemon_exports_psi_and_page_cache_and_stays_quiet_without_a_pmu_or_kidled(tmp_path):
    """With the performance gates on, a host like this VM (node PSI, no pod PSI, no PMU, no kidled) gets node PSI
    on /metrics, page-cache usage in the metric cache, and no error lines."""
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
    port = free_port()
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", "/proc/", "--addr", f"127.0.0.1:{port}",
           "--tsdb-path", str(tmp_path / "cache"), "--enable-nri-runtime-hook=false",
           "--feature-gates", "PSICollector=true,CPICollector=true,ColdPageCollector=true",
           "--enable-pagecache-collector=true", "--metric-cache-flush-interval=1s"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"

        def psi_exported():
            try:
                return 'koordlet_node_psi{node="node-a",psi_degree="some",psi_precision="avg10",' \
                       'psi_resource_type="cpu"}' in get(base + "/metrics")[1]
            except OSError:
                return False
        assert wait_for(psi_exported, 15)
        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        stderr = proc.stderr.read()
        assert proc.returncode == 0
        assert " ERROR " not in stderr and "Traceback" not in stderr, stderr
        assert "cold page collector off" in stderr          # said once at start, then quiet
        cache = MetricCache(str(tmp_path / "cache"))
        try:
            assert cache.series_count() > 0
            from koordlet.metriccache import EmptyError
            try:
                value = cache.query("node_memory_usage_with_page_cache", (), 0, time.time() + 1).value("last")
            except EmptyError:
                value = 0
            assert value > 0
        finally:
            cache.close()
    finally:
        if proc.poll() is None:
            proc.kill()


# upstream families a standalone agent run as root on this fake host, with an NRI runtime creating one container,
# must have series for; the others must still be there with their type (and their labels where they have series)
SERIES_HERE = {
    "koordlet_start_time", "koordlet_node_used_cpu_cores", "koordlet_node_used_memory_bytes",
    "koordlet_collect_node_cpu_info_status", "koordlet_collect_node_numa_info_status",
    "koordlet_container_resource_requests", "koordlet_container_resource_limits",
    "koordlet_cpuset_share_pool_cpu_cores", "koordlet_cpuset_be_share_pool_cpu_cores",
    "koordlet_cpuset_share_pool_info", "koordlet_cpuset_be_share_pool_info",
    "koordlet_container_oom_score_adj", "koordlet_runtime_hook_invoked_duration_milliseconds",
}


@pytest.mark.skipif(os.geteuid() != 0, reason="the NRI plugin runs only as root (the runtime's socket is root's)")
def test_a_scrape_of_the_running_agent_shows_upstreams_41_families(tmp_path):
    """Every upstream ``koordlet_*`` family on /metrics with upstream's name, type and label names, split
    over /internal-metrics and /external-metrics as upstream; the series of a deleted pod go with it."""
    import tempfile

    from doubles.nriruntime import FakeRuntime
    from koordlet.ops.metrics.upstream import UPSTREAM_FAMILIES
    from tests.scrape import Scrape
    from tests.unit.test_nri_hooks import container, sandbox
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
    pods = tmp_path / "pods.yaml"
    pods.write_text(yaml.safe_dump([pod_object(
        "uid-web", "web", namespace="shop", containers={"app": A},
        resources={"app": {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/mid-memory": "1Gi"},
                           "limits": {"kubernetes.io/batch-cpu": "1k"}}})]))
    sock_dir = tempfile.mkdtemp(prefix="nrim")
    rt = FakeRuntime(os.path.join(sock_dir, "nri", "nri.sock"))
    rt.start()
    port = free_port()
    cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
           "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", "/proc/", "--pods-file", str(pods),
           "--addr", f"127.0.0.1:{port}", "--tsdb-path", str(tmp_path / "cache"), "--var-run-root-dir", sock_dir,
           "--feature-gates", "OOMScoreAdj=true,PerCPUMetric=true"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        assert rt.wait_ready(20), rt.closed_reasons
        oom = sandbox("u-oom", "LS", annotations={"koordinator.sh/oom-score-adj": "-500"}, name="db")
        assert rt.create_container(oom, container(oom, "app")).adjust.linux.oom_score_adj.value == -500

        def scrape() -> Scrape | None:
            try:
                got = Scrape.get(base + "/metrics")
            except OSError:
                return None
            return got if all(got.families.get(n) and got.families[n].samples for n in SERIES_HERE) else None
        assert wait_for(scrape, 30), proc.stderr.read() if proc.poll() is not None else "series missing"
        pages = {p: Scrape.get(base + p) for p in ("/metrics", "/internal-metrics", "/external-metrics")}
        problems = [p for f in UPSTREAM_FAMILIES for p in pages["/metrics"].problems(f, series=f.name in SERIES_HERE)]
        assert problems == []
        for f in UPSTREAM_FAMILIES:
            own, other = ("/internal-metrics", "/external-metrics") if f.registry == "internal" else \
                ("/external-metrics", "/internal-metrics")
            assert pages[own].problems(f, series=False) == [] and f.name not in pages[other].types, f.name
        requests = pages["/external-metrics"].families["koordlet_container_resource_requests"].samples
        assert {(s.labels["resource"], s.labels["unit"], s.value) for s in requests} == {
            ("kubernetes.io/batch-cpu", "integer", 500), ("kubernetes.io/mid-memory", "integer", 2**30)}
        assert {s.labels["container_id"] for s in requests} == {f"containerd://{A}"}

        # the pod is deleted: its series go at the next pod sync (PLEG sees its cgroup go)
        pods.write_text("[]\n")
        host.remove(host.pod_dir(KubeQOS.BURSTABLE, "uid-web"))

        def gone() -> bool:
            family = Scrape.get(base + "/external-metrics").families["koordlet_container_resource_requests"]
            return not family.samples
        assert wait_for(gone, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        rt.stop()
