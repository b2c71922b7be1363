"""The agent as an operator runs it: real processes, real sockets.

- a taken listen port: a clear message, exit code 2, nothing created on disk;
- IPv6: ``[::1]:port`` and ``[::]:port`` (dual-stack: IPv4 clients too) listen and serve;
- ``--log-format json``: every line of a running agent is one JSON object with the message's fields as keys;
- outside a cluster, ``run --once`` and ``report --once`` say to use ``--standalone`` (exit 2, nothing printed on
  stdout) instead of failing on the token file or printing an empty summary;
- a closed stdout (``koordlet doctor | head -3``) ends every command quietly: exit 141, no traceback;
- the start-up log says where the state and the reports go, and (root, standalone: ``make run``) that the agent
  enforces QoS on this host and how to turn that off;
- a running agent's /metrics has every family the alert rules and the dashboard read, the process's own included.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS
from tests.fakehost import CgroupValues, FakeHost
from tests.scrape import Scrape
from tests.unit.test_monitoring import dashboard_queries, rule_expressions, selectors
from tests.waits import wait_for

A = "a" * 64


def free_port(family: socket.AddressFamily = socket.AF_INET) -> int:
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()
    except OSError:
        return 0, ""


class Agent:
    """``koordlet run --standalone`` on a fake cgroup tree, its state under ``tmp``; stderr collected by a thread."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        host = FakeHost(str(tmp / "host"), CgroupVersion.V2, Driver.SYSTEMD)
        host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                     {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
        (tmp / "run").mkdir(exist_ok=True)
        self.cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", "node-a",
                    "--cgroup-root-dir", host.paths.cgroup_root, "--var-run-root-dir", str(tmp / "run"), *args]
        self.env = {**os.environ, "STATE_DIRECTORY": str(tmp / "state")}
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []

    def start(self) -> Agent:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=self.tmp, env=self.env)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.stop()


def run_cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "koordlet", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp, env={**os.environ, "STATE_DIRECTORY": str(tmp / "state"), **(env or {})})


def test_a_taken_port_is_a_clear_error_and_creates_nothing(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        before = sorted(p.name for p in tmp_path.iterdir())
        host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
        made = sorted(p.name for p in tmp_path.iterdir())
        result = run_cli(tmp_path, "run", "--standalone", "--node-name", "n", "--addr", f"127.0.0.1:{port}",
                         "--cgroup-root-dir", host.paths.cgroup_root, "--tsdb-path", str(tmp_path / "cache"))
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{port} (option addr): Address already in use" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    # neither the metric cache given nor the state directory (checkpoints, reports) was created
    assert sorted(p.name for p in tmp_path.iterdir()) == made and "host" in made and not before


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_and_dual_stack_listen_addresses(tmp_path, agents):
    port6 = free_port(socket.AF_INET6)
    only6 = Agent(tmp_path / "a", "--addr", f"[::1]:{port6}").start()
    agents.append(only6)
    assert wait_for(lambda: get(f"http://[::1]:{port6}/healthz")[0] == 200, timeout=30), "\n".join(only6.lines)
    # the server answers as soon as its loop runs; the line saying so is written just after, so wait for it too
    assert wait_for(lambda: only6.logged(f"http serving addr=[::1]:{port6}"), timeout=30), "\n".join(only6.lines)
    port = free_port()
    both = Agent(tmp_path / "b", "--addr", f"[::]:{port}").start()
    agents.append(both)
    assert wait_for(lambda: get(f"http://[::1]:{port}/healthz")[0] == 200, timeout=30), "\n".join(both.lines)
    assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200            # IPv4 clients on the same socket
    # /events stays loopback-only for an IPv4 loopback client arriving as ::ffff:127.0.0.1; it is the audit trail
    # of the agent's kernel writes, so a normal user's agent (no enforcement) has none and no /events
    assert get(f"http://127.0.0.1:{port}/events")[0] == (200 if os.geteuid() == 0 else 404)
    for agent in (only6, both):
        assert agent.stop() == 0


def test_json_logs_are_one_object_per_line_with_the_fields_as_keys(tmp_path, agents):
    port = free_port()
    agent = Agent(tmp_path, "--addr", f"127.0.0.1:{port}", "--log-format", "json").start()
    agents.append(agent)
    assert wait_for(lambda: agent.logged("http serving"), timeout=30), "\n".join(agent.lines)
    assert agent.stop() == 0
    docs = [json.loads(line) for line in agent.lines if line]          # every line parses
    assert docs and all({"ts", "level", "logger", "msg"} <= set(d) for d in docs)
    (serving,) = [d for d in docs if d["msg"].startswith("http serving")]
    assert serving["addr"] == f"127.0.0.1:{port}" and serving["level"] == "info"
    assert serving["logger"] == "koordlet.ops.server"
    (started,) = [d for d in docs if d["msg"].startswith("agent starting")]
    assert started["node"] == "node-a" and started["mode"] == "host"


def test_start_up_log_says_where_state_and_reports_go_and_whether_it_enforces(tmp_path, agents):
    port = free_port()
    agent = Agent(tmp_path, "--addr", f"127.0.0.1:{port}").start()
    agents.append(agent)
    assert wait_for(lambda: agent.logged("http serving"), timeout=30), "\n".join(agent.lines)
    state = tmp_path / "state"
    assert agent.logged(f"agent state metric_cache={state / 'metric-data'} "
                        f"prediction_checkpoints={state / 'prediction-checkpoints'}")
    assert agent.logged(f"reports dir={state / 'reports'} first_in=1m every=1m")
    enforcing = agent.logged("enforcing QoS on this host")
    assert enforcing is (os.geteuid() == 0)
    if enforcing:
        (line,) = [x for x in agent.lines if "enforcing QoS on this host" in x]
        assert " WARNING " in line and "--reconcile-interval-seconds=0" in line
    assert agent.stop() == 0
    quiet = Agent(tmp_path / "off", "--addr", f"127.0.0.1:{free_port()}", "--reconcile-interval-seconds=0").start()
    agents.append(quiet)
    assert wait_for(lambda: quiet.logged("http serving"), timeout=30), "\n".join(quiet.lines)
    assert not quiet.logged("enforcing QoS on this host")


@pytest.mark.parametrize("args", [["run", "--once"], ["report", "--once"]])
def test_one_shot_commands_outside_a_cluster_say_to_use_standalone(tmp_path, args):
    result = run_cli(tmp_path, *args, "--node-name", "n", "--kubelet-token-file", str(tmp_path / "no-token"))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""                                      # no empty summary, no empty report
    assert f"the kubelet token file {tmp_path / 'no-token'} does not exist" in result.stderr
    assert "--standalone" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state").exists()
    # without a node name it is the same advice
    unnamed = run_cli(tmp_path, *args, env={"NODE_NAME": ""})
    assert unnamed.returncode == 2 and "--standalone" in unnamed.stderr


@pytest.mark.parametrize("args,unbuffered", [
    (["version"], True), (["--help"], False), (["doctor"], True), (["doctor"], False), (["topology"], True),
    (["report", "--once", "--standalone"], True), (["run", "--once", "--standalone"], True)],
    ids=["version", "help-buffered", "doctor", "doctor-buffered", "topology", "report-once", "run-once"])
def test_a_closed_stdout_ends_every_command_quietly(tmp_path, args, unbuffered):
    """As ``koordlet doctor | head -3``, with the reader gone before the first write: whether the write fails at
    once (PYTHONUNBUFFERED) or at a flush, the command ends with 141 (as one a closed pipe stopped) and says
    nothing."""
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {A: CgroupValues(cpu_ns=1, anon=60 << 20)})
    flags = [] if args in (["version"], ["--help"]) else ["--cgroup-root-dir", host.paths.cgroup_root]
    if args[0] in ("report", "run"):
        flags += ["--node-name", "node-a", "--var-run-root-dir", str(tmp_path), "--collect-res-used-interval", "0.2"]
    env = {**os.environ, "STATE_DIRECTORY": str(tmp_path / "state")}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "koordlet", *args, *flags], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=tmp_path, env=env)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_a_running_agent_exports_what_the_rules_and_dashboard_read(tmp_path, agents):
    port = free_port()
    agent = Agent(tmp_path, "--addr", f"127.0.0.1:{port}").start()
    agents.append(agent)
    base = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: get(base + "/readyz")[0] == 200, timeout=30), "\n".join(agent.lines)
    scrape = Scrape.get(base + "/metrics")
    exprs, variables = dashboard_queries()
    used = {name for expr in [*rule_expressions().values(), *exprs.values(), *variables.values()]
            for name, _ in selectors(expr.removeprefix("label_values(").rsplit(",", 1)[0]
                                     if expr.startswith("label_values(") else expr)}
    suffixes = {"counter": ("_total", ""), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
                "untyped": ("",), "info": ("_info", "")}

    def family(series: str) -> bool:
        """A family of this type whose series carry this name is on the page. A labelled family with no series
        yet still has its TYPE line; a counter without series cannot show whether it is written Go's way (bare
        name) or prometheus_client's (``_total``), so either is taken then (the unit test checks the exact names)."""
        for name, kind in scrape.types.items():
            if any(series == name + suffix for suffix in suffixes.get(kind, ("",))):
                written = {n for n in scrape.sample_names if n in (name, name + "_total")}
                if kind != "counter" or not written or series in written:
                    return True
        return False

    missing = sorted(n for n in used - {"up"} if not family(n))
    assert missing == []
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_max_fds", "process_threads", "python_gc_collections_total"):
        assert name in scrape.sample_names, name
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in scrape.text.splitlines()
              if line.startswith(("process_threads ", "process_resident_memory_bytes "))}
    assert values["process_threads"] >= 2 and values["process_resident_memory_bytes"] > 10 * 2**20
