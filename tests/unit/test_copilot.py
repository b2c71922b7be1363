"""The YARN Copilot client (states/copilot.py) against the copilot double (doubles/copilot.py) over a real unix
socket: what it reads of the published ContainerInfo, what it asks and reads back when it evicts, and the bad
answers a broken peer gives (garbage, huge lists, deep nesting, a slow or silent socket, another status), each
costing one CopilotError or one entry, never more."""

from __future__ import annotations

import json
import time

import pytest

from doubles.copilot import CopilotDouble, container_id, decimal_si
from koordlet.states.copilot import (
    MAX_CONTAINERS,
    CopilotClient,
    CopilotError,
    parse_containers,
    parse_released,
)
from koordlet.states.pod import Resources

TS = 1700000000000
YARN_DIR = "kubepods/besteffort/hadoop-yarn"


@pytest.fixture
def double(tmp_path):
    with CopilotDouble(str(tmp_path / "run" / "yarn-copilot.sock")) as d:
        yield d


def client(double: CopilotDouble, **kw) -> CopilotClient:
    return CopilotClient(double.socket_path, **kw)


def test_decimal_si_writes_quantities_as_go():
    assert [decimal_si(v) for v in (0, 2, 1000, 1536 << 20, 1024 << 20, 10**9)] == \
        ["0", "2", "1k", "1610612736", "1073741824", "1G"]


def test_lists_the_containers_as_batch_resources(double):
    am = double.add(container_id(TS, 1, 1, 1), 1, 1024, f"{YARN_DIR}/{container_id(TS, 1, 1, 1)}")
    task = double.add(container_id(TS, 1, 1, 2), 2, 1536, f"/{YARN_DIR}/{container_id(TS, 1, 1, 2)}")
    double.add(container_id(TS, 1, 1, 3), 1, 512, "x").state = "DONE"          # final: not listed
    containers, problems = client(double).containers()
    assert problems == {}
    assert [(c.name, c.uid, c.cgroup_dir) for c in containers] == [
        (am.id, am.id, am.cgroup_dir), (task.id, task.id, task.cgroup_dir)]
    assert containers[1].resources == Resources(batch_cpu_request=2000, batch_cpu_limit=2000,
                                                batch_memory_request=1536 << 20, batch_memory_limit=1536 << 20)
    assert double.requests[-1][:2] == ("GET", "/v1/containers")


def test_kill_by_resource_takes_the_newest_non_am_containers(double):
    double.add(container_id(TS, 1, 1, 1), 1, 1024, "a", created=100.0)           # the AM: never taken
    double.add(container_id(TS, 1, 1, 2), 1, 1024, "b", created=200.0)
    double.add(container_id(TS, 1, 1, 3), 1, 2048, "c", created=300.0)
    double.add(container_id(TS, 1, 1, 4), 2, 1024, "d", created=400.0)           # the newest
    released = client(double).kill_by_resource(0, 1500 << 20)
    assert double.killed == [container_id(TS, 1, 1, 4), container_id(TS, 1, 1, 3)]
    assert released == {"kubernetes.io/batch-cpu": 3000, "kubernetes.io/batch-memory": 3072 << 20}
    method, path, body = double.requests[-1]
    assert (method, path) == ("POST", "/v1/killContainersByResource")
    assert json.loads(body) == {"resources": {"kubernetes.io/batch-cpu": "0",
                                              "kubernetes.io/batch-memory": str(1500 << 20)}}
    # only the AM and the oldest task left: all there is goes, never the AM
    assert client(double).kill_by_resource(10_000, 0) == {"kubernetes.io/batch-cpu": 1000,
                                                         "kubernetes.io/batch-memory": 1024 << 20}
    assert [c.id for c in double.listed()] == [container_id(TS, 1, 1, 1)]


@pytest.mark.parametrize("body,problem", [
    (b"{not json", "not JSON"),
    (b'{"items": []}', "expected a list"),
    (b"\xff\xfe", "codec"),
    (b"[" * 50 + b"]" * 50, "nested deeper"),
    (json.dumps([{"name": f"c{i}", "uid": f"c{i}", "cgroupDir": "d"} for i in range(MAX_CONTAINERS + 1)]).encode(),
     f"more than {MAX_CONTAINERS} entries"),
])
def test_an_unusable_listing_is_one_error(double, body, problem):
    double.raw_body = body
    with pytest.raises(CopilotError, match=problem):
        client(double).containers()


def test_a_null_listing_is_no_containers():
    assert parse_containers(b"null") == ([], {})


def test_a_bad_entry_costs_only_itself():
    good = {"name": "container_1_0001_01_000002", "uid": "container_1_0001_01_000002", "cgroupDir": "d",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    entries = [good,
               {**good, "name": "bad-dir", "uid": "bad-dir", "cgroupDir": 7},
               {**good, "name": "bad-cpu", "uid": "bad-cpu", "resources": {"requests": {"cpu": "lots"}}},
               {**good, "name": "../../etc", "uid": "x"},
               {**good, "name": "empty-dir", "uid": "empty-dir", "cgroupDir": ""},
               {**good, "name": "twice"},                                  # the good one's uid again
               "not an object"]
    containers, problems = parse_containers(json.dumps(entries).encode())
    assert [c.name for c in containers] == ["container_1_0001_01_000002"]
    assert sorted(problems) == ["#6", "../../etc", "bad-cpu", "bad-dir", "empty-dir", "twice"]
    assert "cgroupDir: expected a string" in problems["bad-dir"]
    assert "listed twice" in problems["twice"]
    assert containers[0].resources.batch_memory_limit == 1 << 30 and containers[0].resources.batch_cpu_limit == 1000


def test_released_answer():
    assert parse_released(b'{"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "1Gi", "cpu": "9"}') \
        == {"kubernetes.io/batch-cpu": 1500, "kubernetes.io/batch-memory": 1 << 30}
    assert parse_released(b"{}") == {}
    for bad in (b"[]", b"{", b'{"kubernetes.io/batch-memory": "-1"}', b'{"kubernetes.io/batch-cpu": {}}'):
        with pytest.raises(CopilotError):
            parse_released(bad)


def test_an_answer_larger_than_the_bound_is_refused(double):
    double.raw_body = b" " * 100_000 + b"[]"
    with pytest.raises(CopilotError, match="larger than 65536 bytes"):
        client(double, max_body=65536).containers()
    assert client(double).containers() == ([], {})            # the default bound reads it


@pytest.mark.parametrize("knob,value", [("stall_seconds", 5.0), ("trickle_seconds", 0.05)])
def test_a_slow_copilot_costs_at_most_the_timeout(double, knob, value):
    double.add(container_id(TS, 1, 1, 2), 1, 1024, "d")
    setattr(double, knob, value)
    started = time.monotonic()
    with pytest.raises(CopilotError, match="no complete answer within 0.5s"):
        client(double, timeout=0.5).containers()
    assert time.monotonic() - started < 2.0


def test_status_hang_up_and_no_socket_are_errors(double, tmp_path):
    double.error_status = 400
    with pytest.raises(CopilotError, match="status 400"):
        client(double).containers()
    double.error_status = None
    double.hang_up = True
    with pytest.raises(CopilotError, match="not an HTTP answer"):
        client(double).kill_by_resource(1000, 0)
    with pytest.raises(CopilotError, match="No such file"):
        CopilotClient(str(tmp_path / "absent.sock")).containers()


def test_the_other_routes_of_the_published_api(double):
    """What the double serves beyond what the agent asks: the whole published API."""
    double.add(container_id(TS, 2, 1, 2), 1, 1024, "d")
    status, value = double.serve("GET", "/health", b"")
    assert (status, value) == (200, "ok")
    assert double.serve("GET", "/information", b"") == (200, {"name": "yarn", "version": "v1"})
    status, info = double.serve("GET", f"/v1/container?containerID={container_id(TS, 2, 1, 2)}", b"")
    assert status == 200 and info["namespace"] == "yarn" and info["hostNetwork"] is True and info["priority"] == 1
    assert double.serve("GET", "/v1/container?containerID=nope", b"")[0] == 400
    status, killed = double.serve("POST", "/v1/killContainer",
                                  json.dumps({"containerID": container_id(TS, 2, 1, 2)}).encode())
    assert status == 200 and [i["name"] for i in killed["items"]] == [container_id(TS, 2, 1, 2)]
    assert double.listed() == []
