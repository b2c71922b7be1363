"""Gates AuditEvents and AuditEventsHTTPHandler: upstream's audit log (JSON lines in audit-log-dir, rotated at
2 MiB, the disk cap) and its /events reader (size, pageToken, JSON lines or Accept: application/json), as upstream
pkg/koordlet/audit and cmd/koordlet/main.go; the executor's writes and the agent's wiring of both gates."""

from __future__ import annotations

import http.client
import json
import os
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from doubles import fakenvml
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.ops.audit import AuditLog, Event, EventPager, event_of_owner, go_time, trail_source
from koordlet.ops.config import build
from koordlet.ops.server import HttpServer
from koordlet.writer.executor import Executor
from tests.fakehost import FakeHost


def lines(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in open(path).read().splitlines()]


def test_go_time_format(monkeypatch: Any) -> None:
    monkeypatch.setenv("TZ", "UTC")
    import time
    time.tzset()
    try:
        assert go_time(1_700_000_000.5) == "2023-11-14T22:13:20.5Z"
        assert go_time(1_700_000_000.0) == "2023-11-14T22:13:20Z"
        monkeypatch.setenv("TZ", "Asia/Shanghai")
        time.tzset()
        assert go_time(1_700_000_000.25) == "2023-11-15T06:13:20.25+08:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_event_json_is_gos_omitempty() -> None:
    e = event_of_owner(1.0, "pod default/web", "CPUBurst", "update x to 1")
    assert set(e.to_json()) == {"createdAt", "type", "namespace", "name", "reason", "message"}
    assert (e.type, e.namespace, e.name) == ("pod", "default", "web")
    assert event_of_owner(1.0, "qos besteffort", "r", "m").type == "group"
    assert event_of_owner(1.0, "node", "r", "m").to_json().keys() == {"createdAt", "type", "reason", "message"}
    assert event_of_owner(1.0, "weird", "r", "m").type == "unknown"


def test_log_verbosity_rotation_and_disk_cap(tmp_path: Any) -> None:
    log = AuditLog(str(tmp_path / "audit"), max_disk_mb=6, verbose=3, max_file_size=300)
    assert oct(os.stat(tmp_path / "audit").st_mode & 0o777) == "0o755"
    assert not (tmp_path / "audit" / "audit.log").exists()              # the file comes with the first event
    assert log.log(4, Event(1.0, "node", reason="too-verbose")) is False
    for i in range(40):
        assert log.log(3, Event(float(i), "node", reason=f"r{i}", message="x" * 40))
    names = sorted(os.listdir(tmp_path / "audit"))
    assert "audit.log" in names
    rotated = [n for n in names if n.startswith("audit-")]
    assert len(rotated) == log.max_files - 1 == 2                         # 6 MiB / 2 MiB = 3 files in all
    assert all(n.endswith(".log") and n.count("-") == 7 for n in rotated)  # audit-YYYY-MM-DD-hh-mm-ss-n.log
    newest = [e["reason"] for e in log.newest_first()]
    assert newest[0] == "r39" and newest == sorted(newest, key=lambda r: -int(r[1:]))   # newest first, in order
    assert "r0" not in newest                                             # the oldest file was removed
    log.close()
    # verbose 0 keeps everything
    everything = AuditLog(str(tmp_path / "all"), verbose=0)
    assert everything.log(9, Event(1.0, "node"))


def pages(pager: EventPager, size: int, accept: str = "") -> list[list[str]]:
    out = []
    token = ""
    while True:
        page = pager.serve(f"size={size}" + (f"&pageToken={token}" if token else ""), accept)
        assert page.status == 200
        if accept:
            body = json.loads(page.body)
            out.append([e["reason"] for e in body["Events"]])
            token = body["NextPageToken"]
        else:
            out.append([json.loads(line)["reason"] for line in page.body.splitlines()])
            token = dict(page.headers).get("Next-Page-Token", "")
        if not token:
            return out


@pytest.mark.parametrize("accept", ["", "application/json"])
def test_pager_pages_newest_first(tmp_path: Any, accept: str) -> None:
    log = AuditLog(str(tmp_path), max_file_size=250)
    for i in range(7):
        log.log(3, Event(float(i), "node", reason=f"r{i}"))
    pager = EventPager(log.newest_first, max_limit=5)
    assert pages(pager, 3, accept) == [["r6", "r5", "r4"], ["r3", "r2", "r1"], ["r0"]]
    assert pager.readers() == 0                                            # an exhausted reader is dropped


def test_pager_errors_and_reader_limit() -> None:
    events = [{"reason": f"r{i}"} for i in range(10)]
    t = [0.0]
    pager = EventPager(lambda: iter(events), max_readers=2, max_limit=4, clock=lambda: t[0])
    bad = pager.serve("size=5", "")
    assert (bad.status, bad.body) == (400, b"size(5) exceeds the limit(4)\n")
    assert pager.serve("pageToken=nope", "").status == 409
    first = dict(pager.serve("size=1", "").headers)["Next-Page-Token"]
    pager.serve("size=1", "")
    pager.serve("size=1", "")                                             # a third reader: the oldest goes
    assert pager.readers() == 2
    assert pager.serve(f"pageToken={first}", "").body == b"invalid pageToken " + first.encode() + b"\n"
    t[0] += 601                                                           # 10 minutes unused: expired
    assert pager.serve("size=x", "").status == 200                        # not a number: the default size
    assert pager.readers() == 0


def test_executor_writes_are_audit_events(tmp_path: Any) -> None:
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    cg = Cgroups(host.paths.cgroup_root, CgroupVersion.V2, Driver.SYSTEMD)
    log = AuditLog(str(tmp_path / "audit"))
    ex = Executor(cg, audit_log=log, wall=lambda: 1_700_000_000.0)
    path = os.path.join(cg.root, "kubepods.slice", "cpu.weight")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("100\n")
    ex.update([ex.cgroup("kubepods.slice", "cpu.shares", 2048, "qos guaranteed", "cpu-qos")])
    (event,) = lines(tmp_path / "audit" / "audit.log")
    assert event["type"] == "group" and event["name"] == "guaranteed" and event["reason"] == "cpu-qos"
    assert event["message"].startswith(f"update {path} to ")
    assert event["createdAt"] == go_time(1_700_000_000.0)
    ex.update([ex.cgroup("kubepods.slice", "cpu.shares", 2048, "qos guaranteed", "cpu-qos")])
    assert len(lines(tmp_path / "audit" / "audit.log")) == 1              # no write, no event
    # the in-memory trail as upstream events (AuditEvents off, handler on)
    (trail,) = list(trail_source(ex.events)())
    assert trail["type"] == "group" and "(was 100)" in str(trail["message"])


def request(port: int, path: str, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Accept": accept} if accept else {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def agent_for(tmp_path: Any, monkeypatch: Any, gates: dict[str, bool]) -> Any:
    from koordlet.agent import Agent
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    cfg = build(environ={}, hostname=lambda: "n1", flags={
        "standalone": True, "cgroup-root-dir": host.paths.cgroup_root, "sys-root-dir": host.paths.sys_root,
        "proc-root-dir": host.paths.proc_root, "tsdb-path": str(tmp_path / "tsdb"),
        "prediction-checkpoint-filepath": str(tmp_path / "ckpt"), "report-dir": str(tmp_path / "reports"),
        "audit-log-dir": str(tmp_path / "audit"), "enable-nri-runtime-hook": False, "feature-gates": gates})
    return Agent.build(cfg, persist=True, connect=False)


def test_gates_wire_the_log_and_the_handler(tmp_path: Any, monkeypatch: Any) -> None:
    off = agent_for(tmp_path / "off", monkeypatch, {})
    assert off.audit_log is None and off.events_handler() is None
    assert not (tmp_path / "off" / "audit").exists()                       # no AuditEvents: no log dir
    on = agent_for(tmp_path / "on", monkeypatch, {"AuditEvents": True, "AuditEventsHTTPHandler": True})
    assert on.audit_log is not None
    assert on.executor is None or on.executor.audit_log is on.audit_log  # the executor exists as root only
    on.audit_log.log(3, Event(1.0, "node", reason="first"))
    on.audit_log.log(3, Event(2.0, "node", reason="second"))
    handler = on.events_handler()
    srv = HttpServer(("127.0.0.1", 0), CollectorRegistry(), lambda: (True, "ok"), None, events_upstream=handler)
    srv.start()
    try:
        port = srv.address[1]
        status, headers, body = request(port, "/events?size=1")
        assert status == 200 and json.loads(body)["reason"] == "second"
        token = headers["Next-Page-Token"]
        status, _, body = request(port, f"/events?size=1&pageToken={token}", "application/json")
        assert json.loads(body) == {"NextPageToken": token, "Events": [json.loads(
            (tmp_path / "on" / "audit" / "audit.log").read_text().splitlines()[0])]}
        assert request(port, "/events?size=5000")[0] == 400                # audit-max-events-limit 2048
    finally:
        srv.stop()
    # the handler without AuditEvents: the in-memory trail of kernel writes, in upstream's format
    trail = agent_for(tmp_path / "trail", monkeypatch, {"AuditEventsHTTPHandler": True})
    assert trail.audit_log is None
    page = trail.events_handler()("", "application/json")
    assert page[0] == 200 and json.loads(page[2]) == {"NextPageToken": "", "Events": []}
