"""``koord-scheduler-extender`` as a pod runs it: the console script as its own process, its watches and Bindings
against the API server double over real HTTP, its verbs on the loopback ``--address`` and its probes and metrics on
``--metrics-address``, as deploy/scheduler's manifests start it.

What only the process shows: readiness follows the watches' first lists (a failing API server keeps it at 503,
alive), the two listeners share one set of metrics while only the verbs' listener takes a verb, SIGTERM ends it
with status 0, and a configuration error ends it with status 2 and one line naming the problem, before it calls
the API server."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from doubles import schedcluster as sc
from doubles.agentproc import free_port
from doubles.apiserver_double import ApiServerDouble
from koordlet.base import wire
from koordlet.states.deviceallocation import parse_device_allocated
from scheduler.extender import NOT_SYNCED
from tests.scrape import Scrape
from tests.waits import wait_for

PREFIX = "/scheduler"
LATENCY = "koord_scheduler_extender_request_duration_seconds"
START = 60.0      # s for the process to import, list and serve (generous: a loaded machine)
# the collections the extender lists and watches (scheduler/cache.py)
WATCHED = ("/api/v1/nodes", "/api/v1/pods", "/apis/scheduling.koordinator.sh/v1alpha1/devices",
           "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
           "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies")


def command() -> list[str]:
    """The console script the manifests run (an installed venv has it), else the same entry point as a module."""
    script = os.path.join(os.path.dirname(sys.executable), "koord-scheduler-extender")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "scheduler"]


def environment() -> dict[str, str]:
    """The test's environment, less anything that would make the child write into the checkout."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def request(port: int, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    """One request to 127.0.0.1:port; (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def status(port: int, path: str) -> int | None:
    """GET's status, or None while nothing answers on the port."""
    try:
        return request(port, "GET", path)[0]
    except OSError:
        return None


@dataclass
class Extender:
    """The running process: its verbs' port, its metrics port, its combined output in ``log``."""

    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path

    def verb(self, name: str, args: dict[str, Any]) -> Any:
        code, body = request(self.port, "POST", f"{PREFIX}/{name}", args)
        assert code == 200, (name, code, body)
        return json.loads(body)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self) -> int:
        """SIGTERM; its exit status (SIGKILL, and a failure, if it does not end)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(START)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"SIGTERM did not end the extender:\n{self.output()}")


@pytest.fixture
def apiserver() -> Iterator[ApiServerDouble]:
    """Two 8-GPU nodes with their Device reports, and one node without devices."""
    with ApiServerDouble(bookmark_interval=1.0) as double:
        double.serve_koordinator_crds()
        for i in range(2):
            double.put("/api/v1/nodes", sc.node(f"gpu-{i}", extra={"nvidia.com/gpu": "8"}))
            double.put("/apis/scheduling.koordinator.sh/v1alpha1/devices", sc.gpu_board(f"gpu-{i}", 8, nics=4))
        double.put("/api/v1/nodes", sc.node("cpu-0"))
        yield double


@pytest.fixture
def start(apiserver: ApiServerDouble, tmp_path: Path) -> Iterator[Any]:
    """Starts the extender against the double (``start(*extra_args)``); every process started is ended after the
    test."""
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    started: list[Extender] = []

    def run(*extra: str) -> Extender:
        port, metrics_port = free_port(), free_port()
        log = tmp_path / f"extender-{len(started)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*command(), "serve", f"--kubeconfig={kubeconfig}", f"--address=127.0.0.1:{port}",
                 f"--metrics-address=127.0.0.1:{metrics_port}", f"--prefix={PREFIX}", *extra],
                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=environment())
        started.append(Extender(proc, port, metrics_port, log))
        return started[-1]

    yield run
    for ext in started:
        if ext.proc.poll() is None:
            ext.proc.kill()
            ext.proc.wait()


def listed(apiserver: ApiServerDouble) -> set[str]:
    """The watched collections the double has been asked to list (a GET without ``watch``)."""
    return {r.path for r in list(apiserver.requests)
            if r.method == "GET" and r.path in WATCHED and r.query.get("watch") != ["true"]}


def test_ready_only_once_the_watches_have_listed_and_sigterm_ends_it(apiserver: ApiServerDouble, start: Any) -> None:
    apiserver.outage(True)                  # every list fails (503) until the test lifts it
    ext = start()
    assert wait_for(lambda: status(ext.metrics_port, "/healthz") == 200, START), ext.output()
    assert wait_for(lambda: listed(apiserver) == set(WATCHED), START), listed(apiserver)
    # every watch has tried and failed: alive (the kubelet must not restart it), not ready, and filter says why
    assert status(ext.metrics_port, "/readyz") == 503
    assert status(ext.port, "/readyz") == 503
    answer = ext.verb("filter", {"Pod": sc.pod("early", {"nvidia.com/gpu": "1"}), "NodeNames": ["gpu-0"]})
    assert answer["Error"] == NOT_SYNCED and not answer["NodeNames"]
    apiserver.outage(False)
    # the lists are retried with backoff (1 s, doubling): ready once each has succeeded
    assert wait_for(lambda: status(ext.metrics_port, "/readyz") == 200, START), ext.output()
    assert status(ext.port, "/readyz") == 200
    assert ext.terminate() == 0, ext.output()
    assert "extender stopping" in ext.output()
    assert status(ext.metrics_port, "/healthz") is None and status(ext.port, "/healthz") is None


def test_filter_and_bind_through_the_process(apiserver: ApiServerDouble, start: Any) -> None:
    stored = apiserver.add_pod(sc.pod("train", {"nvidia.com/gpu": "2"}))     # in the first list of pods
    ext = start()
    assert wait_for(lambda: status(ext.metrics_port, "/readyz") == 200, START), ext.output()

    answer = ext.verb("filter", {"Pod": stored, "NodeNames": ["gpu-0", "cpu-0", "gpu-1"]})
    assert answer["Error"] == ""
    assert answer["NodeNames"] == ["gpu-0", "gpu-1"]            # node names in, node names out, in kube's order
    assert set(answer["FailedNodes"]) | set(answer["FailedAndUnresolvableNodes"]) == {"cpu-0"}

    meta = stored["metadata"]
    answer = ext.verb("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                               "Node": "gpu-1"})
    assert answer == {"Error": ""}
    # the Binding has landed (the verb answers after the API server did): nodeName and the allocation together
    pod = apiserver.objects[(f"/api/v1/namespaces/{meta['namespace']}/pods", meta["name"])]
    assert pod["spec"]["nodeName"] == "gpu-1"
    allocated = parse_device_allocated(pod["metadata"]["annotations"][wire.ANNOTATION_DEVICE_ALLOCATED])
    assert len(allocated["gpu"]) == 2
    bindings = [r for r in apiserver.requests if r.method == "POST" and r.path.endswith(f"/{meta['name']}/binding")]
    assert len(bindings) == 1

    # one set of metrics on both listeners: one filter and one bind so far
    for port in (ext.metrics_port, ext.port):
        scrape = Scrape.get(f"http://127.0.0.1:{port}/metrics")
        counts = {s.labels["verb"]: s.value for s in scrape.families[LATENCY].samples
                  if s.name == f"{LATENCY}_count"}
        assert counts == {"filter": 1, "bind": 1}, scrape.text
    # the metrics listener takes no verb: whoever can probe the pod cannot bind one
    code, _ = request(ext.metrics_port, "POST", f"{PREFIX}/bind", {"PodName": "x"})
    assert code == 405
    assert ext.terminate() == 0, ext.output()


def test_flags_alone_mean_serve(apiserver: ApiServerDouble, tmp_path: Path) -> None:
    """``koord-scheduler-extender --address=...`` is ``serve --address=...`` (serve is the default command)."""
    port = free_port()
    log = tmp_path / "extender.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*command(), f"--kubeconfig={apiserver.write_kubeconfig(tmp_path / 'kubeconfig')}",
                                 f"--address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env=environment())
    try:
        assert wait_for(lambda: status(port, "/readyz") == 200, START), log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(START) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


CONFIG_ERRORS: dict[str, tuple[list[str], dict[str, str], str]] = {
    # case: (flags, files to write under tmp_path ({name} in flags is that file's path), what the line must name)
    "bad --address": (["--address=localhost"], {}, "--address 'localhost'"),
    "bad --metrics-address": (["--metrics-address=127.0.0.1:http"], {}, "--metrics-address"),
    "unknown config key": (["--config={config}"], {"config": "loadAware:\n  usageThreshold: {cpu: 65}\n"},
                           "usageThreshold"),
    "unknown top-level key": (["--config={config}"], {"config": "deviceshare: {}\n"}, "deviceshare"),
    "config not YAML": (["--config={config}"], {"config": "loadAware: [\n"}, "not valid YAML"),
    "missing config": (["--config={dir}/absent.yaml"], {}, "absent.yaml"),
    "kubeconfig not YAML": (["--kubeconfig={kubeconfig}"], {"kubeconfig": "clusters: [\n"}, "kubeconfig"),
    "kubeconfig is a directory": (["--kubeconfig={dir}"], {}, "Is a directory"),
    "missing kubeconfig": (["--kubeconfig={dir}/absent"], {}, "absent"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_ERRORS))
def test_configuration_error_exits_2_with_one_line(case: str, apiserver: ApiServerDouble, tmp_path: Path) -> None:
    flags, files, named = CONFIG_ERRORS[case]
    paths = {"dir": str(tmp_path), "kubeconfig": apiserver.write_kubeconfig(tmp_path / "good-kubeconfig")}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths[name] = str(tmp_path / name)
    argv = [f"--kubeconfig={paths['kubeconfig']}", f"--address=127.0.0.1:{free_port()}",
            *(f.format(**paths) for f in flags)]           # a flag given twice: the case's (the last) counts
    done = subprocess.run([*command(), "serve", *argv], capture_output=True, cwd=tmp_path, env=environment(),
                          timeout=START, check=False)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, (done.returncode, lines)
    assert len(lines) == 1 and named in lines[0], lines
    assert lines[0].startswith("koord-scheduler-extender: ")
    assert not apiserver.requests                            # refused before any watch started


@pytest.mark.parametrize("flag", ["--address", "--metrics-address"])
def test_a_taken_port_exits_2_before_any_watch(flag: str, taken_port: int, apiserver: ApiServerDouble,
                                              tmp_path: Path) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    argv = [f"--kubeconfig={kubeconfig}", f"--address=127.0.0.1:{free_port()}", f"{flag}=127.0.0.1:{taken_port}"]
    done = subprocess.run([*command(), "serve", *argv], capture_output=True, cwd=tmp_path, env=environment(),
                          timeout=START, check=False)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2, (done.returncode, lines)
    assert len(lines) == 1 and f"127.0.0.1:{taken_port} ({flag})" in lines[0], lines
    assert not apiserver.requests
