"""What an operator sees of the command line and the log: help with defaults, each command's help listing only the
options it reads, the JSON log format, IPv6 listen addresses. The daemon-level checks (a taken port, IPv6 sockets, JSON
lines of a running agent, one-shot commands outside a cluster) are in tests/integration/test_operator_surface.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import threading
from typing import Any

import pytest

from doubles import fakenvml
from koordlet import cli
from koordlet.base.logutil import JsonFormatter, message_fields
from koordlet.cli import COMMAND_OPTIONS, _parser
from koordlet.host.cgroup import CgroupVersion, Driver
from koordlet.ops.config import Config, ConfigError, build
from koordlet.ops.options import OPTIONS
from koordlet.ops.values import go_duration, parse_addr
from tests.fakehost import FakeHost


def help_of(command: str) -> str:
    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command].format_help()      # type: ignore[attr-defined]


def flags_of(command: str) -> set[str]:
    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {s[2:] for a in sub.choices[command]._actions for s in a.option_strings  # type: ignore[attr-defined]
            if s.startswith("--")}


def test_run_help_shows_every_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")       # no wrapping inside a help text
    lines: dict[str, str] = {}                 # "--name" -> its whole entry
    name = ""
    for line in help_of("run").splitlines():
        if line.startswith("  -"):
            name = line.split()[0]
            lines[name] = line
        elif name and line.startswith("   "):
            lines[name] += " " + line.strip()
    for option in OPTIONS:
        assert "(default: " in lines[f"--{option.name}"], option.name
    assert "(default: 10s)" in lines["--kubelet-sync-interval"]
    assert "(default: 12h)" in lines["--tsdb-retention-duration"]
    assert "(default: 100Mi)" in lines["--tsdb-max-bytes"]
    assert "(default: :9316; --standalone: 127.0.0.1:9316)" in lines["--addr"]
    assert "/host-cgroup/ with agent-mode daemonset, /sys/fs/cgroup/ in host mode" in lines["--cgroup-root-dir"]
    assert "host mode: <state dir>/metric-data" in lines["--tsdb-path"]
    assert "(default: text)" in lines["--log-format"]


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (0.1, "100ms"), (1, "1s"), (90, "1m30s"), (43200, "12h"),
                                          (3600 + 1.5, "1h1.5s")])
def test_durations_print_as_go_prints_them(seconds, text):
    from koordlet.ops.values import parse_duration
    assert go_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


def test_one_shot_commands_list_only_their_options():
    for command in ("doctor", "topology", "report"):
        flags = flags_of(command)
        assert flags & {o.name for o in OPTIONS} == set(COMMAND_OPTIONS[command] or ()), command
        assert not {"addr", "tsdb-path", "kubeconfig", "v"} & flags, command   # the daemon's, upstream's klog
    assert "feature-gates" not in flags_of("topology") and "tsdb-retention-duration" not in flags_of("doctor")
    assert {o.name for o in OPTIONS} <= flags_of("run") and "v" in flags_of("run")


class Recording:
    """A Config that notes every option read through it (``gate()`` reads feature-gates)."""

    def __init__(self, config: Config, seen: set[str]) -> None:
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str) -> Any:
        self._seen.add("feature-gates" if name == "gate" else name.replace("_", "-"))
        return getattr(self._config, name)


@pytest.mark.parametrize("command", ["doctor", "topology", "report"])
def test_each_command_lists_every_option_it_reads(command, tmp_path, monkeypatch):
    """Run the command on a fake host with the default gates and with every gate on, noting which options it
    reads: each must be one of its flags."""
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))    # whatever a component writes, not in /var/lib
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    seen: set[str] = set()
    for gates in ({}, {"AllAlpha": True, "AllBeta": True}):
        config = build(environ={}, flags={
            "standalone": True, "node-name": "n", "cgroup-root-dir": host.paths.cgroup_root,
            "proc-root-dir": host.paths.proc_root, "sys-root-dir": host.paths.sys_root,
            "sys-fs-root-dir": host.paths.sys_fs_root, "var-run-root-dir": str(tmp_path / "run"),
            "collect-res-used-interval": 0.1, "report-dir": str(tmp_path / "reports"), "feature-gates": gates})
        recording: Any = Recording(config, seen)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            if command == "doctor":
                cli.cmd_doctor(recording)
            elif command == "topology":
                cli.cmd_topology(recording, "table")
            else:
                cli.cmd_report(recording, "yaml")
    names = {o.name for o in OPTIONS}
    assert seen & names, "nothing recorded"
    assert sorted(seen & names - flags_of(command)) == []


def test_parse_addr_reads_ipv6_as_go_does():
    assert parse_addr(":9316") == ("", 9316)
    assert parse_addr("127.0.0.1:9316") == ("127.0.0.1", 9316)
    assert parse_addr("[::]:9316") == ("::", 9316)
    assert parse_addr("[::1]:19316") == ("::1", 19316)
    assert parse_addr("[fe80::1%eth0]:9316") == ("fe80::1%eth0", 9316)
    for bad, why in (("::1:9316", "brackets"), ("[::1]", r"\[ipv6\]:port"), ("[nope]:9316", "not an IPv6"),
                     ("9316", "host:port"), ("[::1]:0", "port")):
        with pytest.raises(ValueError, match=why):
            parse_addr(bad)
    with pytest.raises(ConfigError, match="addr"):
        cli._config(_parser().parse_args(["run", "--standalone", "--addr", "::1:9316"]))


def test_json_log_lines_carry_the_messages_fields():
    record = logging.LogRecord("koordlet.agent", logging.WARNING, __file__, 1,
                               "report failed kind=%s error=%s; retrying in %.0fs", ("nodemetric", "HTTP 503 x", 5.0),
                               None)
    doc = json.loads(JsonFormatter().format(record))
    assert doc["level"] == "warning" and doc["logger"] == "koordlet.agent"
    assert doc["msg"] == "report failed kind=nodemetric error=HTTP 503 x; retrying in 5s"
    assert doc["kind"] == "nodemetric" and doc["error"] == "HTTP 503 x"
    assert doc["ts"].endswith("Z") and "T" in doc["ts"]
    # a field named like one of the line's own keys stays in msg only
    clash = logging.LogRecord("x", logging.INFO, __file__, 1, "odd level=9 msg=hi node=n", (), None)
    doc = json.loads(JsonFormatter().format(clash))
    assert doc["level"] == "info" and doc["msg"] == "odd level=9 msg=hi node=n" and doc["node"] == "n"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "step failed loop=qos", (), sys.exc_info())
    doc = json.loads(JsonFormatter().format(failed))
    assert "RuntimeError: boom" in doc["exc"] and doc["loop"] == "qos"
    assert "\n" not in JsonFormatter().format(failed)             # one line, whatever the traceback
    assert message_fields("evict pod=a/b reason='low memory' result=evicted") == {
        "pod": "a/b", "reason": "low memory", "result": "evicted"}


def test_the_first_standalone_report_write_is_logged_once(tmp_path, monkeypatch, caplog):
    """`make run` says when the first reports appear and where: the files report logs its first write."""
    from koordlet.agent import Agent
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    config = build(environ={}, flags={
        "standalone": True, "node-name": "n", "cgroup-root-dir": host.paths.cgroup_root,
        "proc-root-dir": host.paths.proc_root, "sys-root-dir": host.paths.sys_root,
        "sys-fs-root-dir": host.paths.sys_fs_root, "var-run-root-dir": str(tmp_path / "run"),
        "report-dir": str(tmp_path / "reports"), "reconcile-interval-seconds": 0})
    agent = Agent.build(config, persist=False)
    (files,) = [r for _, r in agent.reports if r.kind == "files"]
    caplog.set_level(logging.INFO, logger="koordlet.reporters.files")
    assert files.send(threading.Event()) == "written" and files.send(threading.Event()) == "written"
    (line,) = [r.getMessage() for r in caplog.records if "reports written" in r.getMessage()]
    assert line.startswith(f"first reports written dir={tmp_path / 'reports'} files=nodemetric.yaml,")
    assert line.endswith("rewritten every 60s")
    assert sorted(p.name for p in (tmp_path / "reports").iterdir())[:2] == ["device.yaml", "nodemetric.yaml"]
