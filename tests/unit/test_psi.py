import logging
import os

import pytest

from koordlet.collectors.psi import PSICollector
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.psi import PSI, ZERO_LINE, PSILine, cgroup_psi, node_psi, parse_pressure, read_pressure
from koordlet.ops.metrics import AgentMetrics
from tests.builders import host_paths, pod_meta
from tests.fakehost import CgroupValues, FakeHost

A, B, C = "a" * 64, "b" * 64, "c" * 64


def kernel_file(some: tuple[float, float, float, int], full: tuple[float, float, float, int] | None) -> str:
    """A pressure file exactly as the kernel prints it (psi_show: "%s avg10=%lu.%02lu ... total=%llu\\n")."""
    line = lambda kind, v: f"{kind} avg10={v[0]:.2f} avg60={v[1]:.2f} avg300={v[2]:.2f} total={v[3]}\n"  # noqa: E731
    return line("some", some) + (line("full", full) if full is not None else "")


# --- parser ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    (kernel_file((1.5, 2.25, 3.0, 123), (0.5, 0.75, 1.0, 45)),
     PSI(PSILine(1.5, 2.25, 3.0, 123), PSILine(0.5, 0.75, 1.0, 45), True)),
    # cpu.pressure of kernels before 5.13 has no full line
    (kernel_file((10.0, 20.0, 30.0, 999), None), PSI(PSILine(10.0, 20.0, 30.0, 999), ZERO_LINE, False)),
    # runs of spaces/tabs, blank lines and no trailing newline are tolerated
    ("\n  some  avg10=0.01\tavg60=0.02 avg300=0.03   total=4\n\nfull avg10=100.00 avg60=0.00 avg300=0.00 total=5",
     PSI(PSILine(0.01, 0.02, 0.03, 4), PSILine(100.0, 0.0, 0.0, 5), True)),
    (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", PSI(ZERO_LINE, ZERO_LINE, False)),
], ids=["some+full", "some-only", "whitespace", "bytes"])
def test_parse_pressure(text, want):
    assert parse_pressure(text) == want


@pytest.mark.parametrize("text, fragment", [
    ("", "no 'some' line"),
    ("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "no 'some' line"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nwhat avg10=1 avg60=1 avg300=1 total=1\n",
     "'what avg10=1 avg60=1 avg300=1 total=1': unknown prefix 'what'"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00\n", "'some avg10=0.00 avg60=0.00 avg300=0.00': expected"),
    ("some avg60=0.00 avg10=0.00 avg300=0.00 total=0\n", "expected 'some avg10=F"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0 extra=1\n", "expected"),
    ("some avg10=x avg60=0.00 avg300=0.00 total=0\n", "value is not a number"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=1.5\n", "value is not a number"),
    ("some avg10=nan avg60=0.00 avg300=0.00 total=0\n", "out of range"),
    ("some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n", "out of range"),
    ("some avg10=0.00 avg60=-1 avg300=0.00 total=0\n", "out of range"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", "out of range"),
    ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
     "second 'some' line"),
], ids=["empty", "full-only", "unknown-prefix", "missing-field", "wrong-order", "extra-field", "not-float",
        "float-total", "nan", "over-100", "negative", "negative-total", "duplicate"])
def test_parse_pressure_malformed(text, fragment):
    with pytest.raises(ValueError) as e:
        parse_pressure(text)
    assert fragment in str(e.value)


def test_read_pressure_names_the_file(tmp_path):
    p = tmp_path / "cpu.pressure"
    p.write_text("some avg10=bad avg60=0 avg300=0 total=0\n")
    with pytest.raises(ValueError, match=f"^{p}: PSI line 'some avg10=bad"):
        read_pressure(str(p))
    with pytest.raises(FileNotFoundError):
        read_pressure(str(tmp_path / "gone"))


# --- fake hosts --------------------------------------------------------------------------------------------

NODE = {"cpu": ((1.0, 2.0, 3.0, 10), (0.5, 0.5, 0.5, 5)), "memory": ((4.0, 5.0, 6.0, 20), (7.0, 8.0, 9.0, 30)),
        "io": ((0.25, 0.0, 0.0, 40), (0.0, 0.0, 0.13, 50))}


def write_pressure(host: FakeHost, rel: str, cpu=(1.0, 2.0, 3.0, 1), cpu_full=(0.5, 0.6, 0.7, 1),
                   mem=(4.0, 5.0, 6.0, 2), io=(7.0, 8.0, 9.0, 3), raw: dict[str, str] | None = None) -> None:
    """The three pressure files of a cgroup, where the kernel puts them (v1: cpuacct; v2: the unified dir)."""
    base = (os.path.join(host.paths.cgroup_root, "cpuacct", rel) if host.version is CgroupVersion.V1
            else os.path.join(host.paths.cgroup_root, rel))
    texts = {"cpu.pressure": kernel_file(cpu, cpu_full), "memory.pressure": kernel_file(mem, (mem[0] / 2, 0, 0, 1)),
             "io.pressure": kernel_file(io, (io[0] / 2, 0, 0, 1))}
    texts.update(raw or {})
    for name, text in texts.items():
        with open(os.path.join(base, name), "w") as f:
            f.write(text)


def write_node(host: FakeHost, files=NODE) -> None:
    os.makedirs(host.paths.proc("pressure"), exist_ok=True)
    for name, (some, full) in files.items():
        with open(host.paths.proc("pressure", name), "w") as f:
            f.write(kernel_file(some, full))


@pytest.fixture(params=[(CgroupVersion.V1, Driver.CGROUPFS), (CgroupVersion.V2, Driver.SYSTEMD)],
                ids=["v1-cgroupfs", "v2-systemd"])
def setup(request, tmp_path):
    version, driver = request.param
    host = FakeHost(str(tmp_path), version, driver)
    cg = Cgroups.detect(host.paths)
    assert cg.version is version and cg.layout.driver is driver
    metrics = AgentMetrics("n1")
    return host, cg, metrics, PSICollector(host.paths, cg, metrics)


def make_pods(host, cg, with_pressure=True):
    """web (Burstable, containers app=A, side=B) and db (Guaranteed, container main=C) with pressure files."""
    write_pressure(host, cg.layout.qos_dir(KubeQOS.GUARANTEED))
    host.add_pod(KubeQOS.BURSTABLE, "u-web", containers={A: CgroupValues(), B: CgroupValues()})
    host.add_pod(KubeQOS.GUARANTEED, "u-db", containers={C: CgroupValues()})
    web = pod_meta("u-web", "web", namespace="ns1", qos="Burstable", containers={"app": A, "side": B}, layout=cg.layout)
    db = pod_meta("u-db", "db", namespace="ns2", qos="Guaranteed", containers={"main": C}, layout=cg.layout)
    if with_pressure:
        write_pressure(host, web.cgroup_dir, cpu=(11.0, 12.0, 13.0, 1), cpu_full=None)   # older kernel: no cpu full
        write_pressure(host, web.containers[0][1], cpu=(21.0, 22.0, 23.0, 1))
        write_pressure(host, web.containers[1][1], cpu=(31.0, 32.0, 33.0, 1))
        write_pressure(host, db.cgroup_dir, mem=(41.0, 42.0, 43.0, 1))
        write_pressure(host, db.containers[0][1], io=(51.0, 52.0, 53.0, 1))
    return web, db


def by_key(samples):
    out = {(s.name, s.labels): s.value for s in samples}
    assert len(out) == len(samples), "duplicate series in one cycle"
    return out


def psi_labels(degree, resource, **ids):
    return tuple(sorted({**ids, "psi_degree": degree, "psi_precision": "10", "psi_resource": resource}.items()))


def gauge(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, {"node": "n1", **labels})


def skipped(metrics, reason):
    return gauge(metrics, "koordlet_collect_skipped_total", collector="psi", reason=reason) or 0.0


def test_collect_pods_containers_and_node(setup):
    host, cg, metrics, coll = setup
    write_node(host)
    web, db = make_pods(host, cg)
    assert coll.supported()[0] and coll.node_supported()[0] and coll.cgroup_supported()[0]
    got = by_key(coll.collect(Tick(100.0, (web, db))))
    # 2 pods × 7 + 3 containers × 7 + node: 3 some + 3 full
    assert len(got) == 2 * 7 + 3 * 7 + 6
    # pod: avg10 of some and full per resource; cpu full absent in the file → stored 0 and flagged unsupported
    assert got[("pod_psi", psi_labels("some", "cpu", pod_uid="u-web"))] == 11.0
    assert got[("pod_psi", psi_labels("full", "cpu", pod_uid="u-web"))] == 0.0
    assert got[("pod_psi", psi_labels("some", "mem", pod_uid="u-web"))] == 4.0
    assert got[("pod_psi", psi_labels("full", "mem", pod_uid="u-web"))] == 2.0
    assert got[("pod_psi", psi_labels("some", "io", pod_uid="u-web"))] == 7.0
    assert got[("pod_psi_cpu_full_supported", (("pod_uid", "u-web"),))] == 0.0
    assert got[("pod_psi_cpu_full_supported", (("pod_uid", "u-db"),))] == 1.0
    assert got[("pod_psi", psi_labels("some", "mem", pod_uid="u-db"))] == 41.0
    assert got[("pod_psi", psi_labels("full", "cpu", pod_uid="u-db"))] == 0.5
    # containers
    assert got[("container_psi", psi_labels("some", "cpu", pod_uid="u-web", container_id=A))] == 21.0
    assert got[("container_psi", psi_labels("some", "cpu", pod_uid="u-web", container_id=B))] == 31.0
    assert got[("container_psi", psi_labels("some", "io", pod_uid="u-db", container_id=C))] == 51.0
    assert got[("container_psi", psi_labels("full", "io", pod_uid="u-db", container_id=C))] == 25.5
    assert got[("container_psi_cpu_full_supported", (("container_id", A), ("pod_uid", "u-web")))] == 1.0
    # node (ours)
    assert got[("node_psi", psi_labels("some", "mem"))] == 4.0
    assert got[("node_psi", psi_labels("full", "io"))] == 0.0
    assert got[("node_psi", psi_labels("full", "cpu"))] == 0.5
    assert all(s.ts == 100.0 for s in coll.collect(Tick(100.0, (web, db))))

    # Prometheus: avg10/60/300; full rows only where the kernel has them; cpu_full_supported per row's resource
    pod = dict(pod_uid="u-web", pod_name="web", pod_namespace="ns1")
    assert gauge(metrics, "koordlet_pod_psi", **pod, psi_resource_type="cpu", psi_precision="avg60",
                 psi_degree="some", cpu_full_supported="false") == 12.0
    assert gauge(metrics, "koordlet_pod_psi", **pod, psi_resource_type="cpu", psi_precision="avg10",
                 psi_degree="full", cpu_full_supported="false") is None
    assert gauge(metrics, "koordlet_pod_psi", **pod, psi_resource_type="mem", psi_precision="avg300",
                 psi_degree="some", cpu_full_supported="true") == 6.0
    ctr = dict(container_id=C, container_name="main", pod_uid="u-db", pod_name="db", pod_namespace="ns2")
    assert gauge(metrics, "koordlet_container_psi", **ctr, psi_resource_type="io", psi_precision="avg300",
                 psi_degree="some", cpu_full_supported="true") == 53.0
    assert gauge(metrics, "koordlet_container_psi", **ctr, psi_resource_type="io", psi_precision="avg10",
                 psi_degree="full", cpu_full_supported="true") == 25.5
    assert gauge(metrics, "koordlet_node_psi", psi_resource_type="cpu", psi_precision="avg300",
                 psi_degree="some") == 3.0
    assert gauge(metrics, "koordlet_node_psi", psi_resource_type="io", psi_precision="avg300",
                 psi_degree="full") == 0.13
    assert skipped(metrics, "vanished") == skipped(metrics, "error") == 0


def test_gauges_of_a_pod_that_went_away_are_removed(setup, caplog):
    host, cg, metrics, coll = setup
    web, db = make_pods(host, cg)
    coll.collect(Tick(1.0, (web, db)))
    web_row = dict(pod_uid="u-web", pod_name="web", pod_namespace="ns1", psi_resource_type="mem",
                   psi_precision="avg10", psi_degree="some", cpu_full_supported="true")
    side_row = dict(container_id=B, container_name="side", pod_uid="u-web", pod_name="web", pod_namespace="ns1",
                    psi_resource_type="cpu", psi_precision="avg10", psi_degree="some", cpu_full_supported="true")
    assert gauge(metrics, "koordlet_pod_psi", **web_row) == 4.0
    assert gauge(metrics, "koordlet_container_psi", **side_row) == 31.0

    # the pod is deleted: its dirs vanish while the informer still lists it (read → vanished, no warning) ...
    host.remove(web.containers[0][1])
    host.remove(web.containers[1][1])
    host.remove(web.cgroup_dir)
    with caplog.at_level(logging.INFO, logger="koordlet"):
        got = by_key(coll.collect(Tick(2.0, (web, db))))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert skipped(metrics, "vanished") == 3
    assert not any(dict(k[1]).get("pod_uid") == "u-web" for k in got)
    assert gauge(metrics, "koordlet_pod_psi", **web_row) is None
    assert gauge(metrics, "koordlet_container_psi", **side_row) is None
    # ... and then it leaves the informer: nothing of it is left on /metrics, the other pod is untouched
    coll.collect(Tick(3.0, (db,)))
    text = "\n".join(f"{s.name}{s.labels}" for m in metrics.registry.collect() for s in m.samples
                     if "psi" in s.name)
    assert "u-web" not in text and "u-db" in text
    assert gauge(metrics, "koordlet_pod_psi", pod_uid="u-db", pod_name="db", pod_namespace="ns2",
                 psi_resource_type="mem", psi_precision="avg10", psi_degree="some", cpu_full_supported="true") == 41.0


def test_full_line_appearing_changes_the_label_set_without_leaving_the_old_one(setup):
    host, cg, metrics, coll = setup
    web, db = make_pods(host, cg)
    coll.collect(Tick(1.0, (web, db)))
    row = dict(pod_uid="u-web", pod_name="web", pod_namespace="ns1", psi_resource_type="cpu",
               psi_precision="avg10", psi_degree="some")
    assert gauge(metrics, "koordlet_pod_psi", **row, cpu_full_supported="false") == 11.0
    write_pressure(host, web.cgroup_dir, cpu=(11.0, 12.0, 13.0, 1))       # now with a full line
    coll.collect(Tick(2.0, (web, db)))
    assert gauge(metrics, "koordlet_pod_psi", **row, cpu_full_supported="false") is None
    assert gauge(metrics, "koordlet_pod_psi", **row, cpu_full_supported="true") == 11.0


def test_malformed_file_is_counted_and_logged_once(setup, caplog):
    host, cg, metrics, coll = setup
    web, db = make_pods(host, cg)
    write_pressure(host, web.containers[0][1], raw={"memory.pressure": "some avg10=oops\n"})
    with caplog.at_level(logging.WARNING, logger="koordlet"):
        for t in (1.0, 2.0, 3.0):
            got = by_key(coll.collect(Tick(t, (web, db))))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert web.containers[0][1] in warnings[0] and "memory.pressure" in warnings[0] and "oops" in warnings[0]
    assert skipped(metrics, "error") == 3
    assert not any(dict(k[1]).get("container_id") == A for k in got)          # all three files or nothing
    assert got[("container_psi", psi_labels("some", "cpu", pod_uid="u-web", container_id=B))] == 31.0
    assert got[("pod_psi", psi_labels("some", "cpu", pod_uid="u-web"))] == 11.0


def test_without_cgroup_pressure_files_pods_are_skipped_and_supported_says_why(setup, caplog):
    host, cg, metrics, coll = setup
    web, db = make_pods(host, cg, with_pressure=False)
    for name in ("cpu.pressure", "memory.pressure", "io.pressure"):
        os.remove(cg.path("cpuacct", cg.layout.qos_dir(KubeQOS.GUARANTEED), name))
    ok, why = coll.cgroup_supported()
    assert not ok
    kubepods_cpu = cg.path("cpuacct", cg.layout.qos_dir(KubeQOS.GUARANTEED), "cpu.pressure")
    assert kubepods_cpu in why
    if cg.version is CgroupVersion.V1:
        assert "cgroup v1" in why and "Anolis" in why
    assert coll.supported() == (False, f"node: {coll.node_supported()[1]}; pods: {why}")
    assert "absent" in coll.node_supported()[1]
    with caplog.at_level(logging.INFO, logger="koordlet"):
        for t in (1.0, 2.0, 3.0):
            assert coll.collect(Tick(t, (web, db))) == []
    assert len(caplog.records) == 1 and "PSI unavailable" in caplog.records[0].getMessage()
    assert skipped(metrics, "vanished") == skipped(metrics, "error") == 0     # not counted as churn

    # the node part alone works; and pod PSI starts once kubepods has the files (no restart)
    write_node(host)
    assert coll.supported()[0] and not coll.cgroup_supported()[0]
    assert {s.name for s in coll.collect(Tick(4.0, (web, db)))} == {"node_psi"}
    make_pods(host, cg)
    assert {s.name for s in coll.collect(Tick(5.0, (web, db)))} >= {"node_psi", "pod_psi", "container_psi"}


def test_v1_pressure_files_live_under_cpuacct(tmp_path):
    """On v1 the files are read from cpuacct only: the same files under cpu do not count."""
    host = FakeHost(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
    cg = Cgroups.detect(host.paths)
    rel = host.add_pod(KubeQOS.BURSTABLE, "u1")
    for name in ("cpu.pressure", "memory.pressure", "io.pressure"):
        with open(cg.path("cpu", rel, name), "w") as f:
            f.write(kernel_file((1, 1, 1, 1), None))
    with pytest.raises(FileNotFoundError):
        cgroup_psi(cg, rel)
    write_pressure(host, rel, cpu=(9.0, 9.0, 9.0, 9))
    assert cgroup_psi(cg, rel)["cpu"].some == PSILine(9.0, 9.0, 9.0, 9)


# --- the real kernel ---------------------------------------------------------------------------------------

REAL = host_paths()


def test_real_node_pressure_files():
    if not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("kernel without /proc/pressure")
    try:
        first = node_psi(REAL)
    except OSError as e:
        pytest.skip(f"PSI disabled: {e}")
    # make some io stall-free work so the second read is later; totals are cumulative µs and never go back
    with open("/proc/self/stat", "rb") as f:
        f.read()
    second = node_psi(REAL)
    assert set(first) == {"cpu", "mem", "io"}
    for res in first:
        a, b = first[res], second[res]
        for line in (a.some, a.full, b.some, b.full):
            assert all(0.0 <= v <= 100.0 for v in (line.avg10, line.avg60, line.avg300))
        assert b.some.total >= a.some.total and b.full.total >= a.full.total
        assert a.full_supported == b.full_supported
        if a.full_supported:
            assert a.full.total <= a.some.total     # all tasks stalled implies some task stalled
    assert first["mem"].full_supported and first["io"].full_supported
    metrics = AgentMetrics("n1")
    coll = PSICollector(REAL, Cgroups("/sys/fs/cgroup", CgroupVersion.V1, Driver.CGROUPFS), metrics)
    assert coll.node_supported()[0]
    samples = [s for s in coll.collect(Tick(1.0, ())) if s.name == "node_psi"]
    assert {dict(s.labels)["psi_resource"] for s in samples} == {"cpu", "mem", "io"}
    assert gauge(metrics, "koordlet_node_psi", psi_resource_type="mem", psi_precision="avg300",
                 psi_degree="some") is not None
