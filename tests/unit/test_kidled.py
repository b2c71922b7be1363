"""kidled's idle_page_stats parsing, the cold page and page cache collectors on fake cgroup trees, and the kidled
switches written through a real executor."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from koordlet.collectors.memory import ColdPageCollector, PageCacheCollector
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.kidled import (
    BUCKETS,
    COLD_ROWS,
    ROWS,
    IdlePageStats,
    cold_bytes,
    kidled_params,
    kidled_supported,
    parse_idle_page_stats,
    read_scan_period,
    scan_period_path,
    use_hierarchy_path,
)
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.hostapps import HostApp
from koordlet.writer.executor import Executor
from tests.builders import pod_meta
from tests.fakehost import CgroupValues, FakeHost

A, B = "a" * 64, "b" * 64
MiB = 2**20

LEGEND = """#
#   _-----=> clean/dirty
#  / _----=> swap/file
# | / _---=> evict/unevict
# || / _--=> inactive/active
# ||| / _-=> slab
# |||| /
# |||||             [1,2)          [2,5)         [5,15)        [15,30)        [30,60)       [60,120)      """ \
    "[120,240)     [240,+inf)"


def idle_page_stats(rows: dict[str, list[int]] | None = None, scan_period: int = 5) -> str:
    """memory.idle_page_stats as the kernel prints it: 6 header lines, 8 legend lines, 17 rows of 8 counts
    (rows not given are all zero); ends with a newline like every kernel file."""
    rows = rows or {}
    head = (f"# version: 1.0\n# page_scans: 24\n# slab_scans: 0\n# scan_period_in_seconds: {scan_period}\n"
            f"# use_hierarchy: 1\n# buckets: 1,2,5,15,30,60,120,240\n{LEGEND}\n")
    body = "".join(f"  {name}" + "".join(f"{v:>15}" for v in rows.get(name, [0] * 8)) + "\n" for name in ROWS)
    return head + body


# a realistic node: every row busy; the cold rows have pages in every bucket
REAL = {
    "csei": [2613248, 4657152, 18182144, 293683200, 0, 0, 0, 0],
    "dsei": [2568192, 5140480, 15306752, 48648192, 0, 7 * MiB, 0, 0],          # anon: never cold
    "cfei": [2633728, 4640768, 66531328, 340172800, 1 * MiB, 2 * MiB, 3 * MiB, 4 * MiB],
    "dfei": [0, 0, 4096, 0, 4096, 8192, 0, 4096],
    "cfui": [0, 0, 0, 0, 0, 0, 16 * MiB, 0],
    "dfui": [0, 0, 0, 0, 0, 4096, 0, 0],
    "csea": [765952, 1044480, 3784704, 52834304, 0, 0, 0, 0],
    "cfea": [9273344, 16609280, 152109056, 315121664, 0, 32 * MiB, 0, 64 * MiB],   # active file: never cold
    "slab": [0, 0, 0, 0, 0, 0, 0, 128 * MiB],
}
REAL_COLD = (2 + 3 + 4) * MiB + 8192 + 4096 + 16 * MiB + 4096      # buckets [60,120) and above of the cold rows


def test_the_kernel_layout_parses_every_row_and_header():
    text = idle_page_stats(REAL)
    assert len(text.rstrip("\n").split("\n")) == 31                    # upstream's exact-format check
    stats, skipped = parse_idle_page_stats(text)
    assert skipped == 0
    assert (stats.version, stats.page_scans, stats.slab_scans, stats.scan_period_in_seconds,
            stats.use_hierarchy) == ("1.0", 24, 0, 5, 1)
    assert stats.buckets == BUCKETS
    assert list(stats.rows) == list(ROWS)
    assert stats.rows["cfei"] == tuple(REAL["cfei"])
    assert stats.rows["slab"][7] == 128 * MiB


def test_cold_bytes_are_inactive_file_rows_from_bucket_five():
    stats, _ = parse_idle_page_stats(idle_page_stats(REAL))
    assert cold_bytes(stats) == REAL_COLD
    # [30,60) (index 4) is not cold; active file, anon and slab never are
    assert cold_bytes(stats, boundary=4) == REAL_COLD + 1 * MiB + 4096
    assert cold_bytes(IdlePageStats(rows=dict.fromkeys(ROWS, (0, 0, 0, 0, 0, 1, 0, 0)))) == len(COLD_ROWS)


def test_upstream_test_file_with_go_indentation():
    """Upstream's own fixture (a Go raw string indented by a tab): 120 s scans, no cold pages yet."""
    text = "\n\t".join(idle_page_stats({"cfei": [2633728, 4640768, 66531328, 340172800, 0, 0, 0, 0]},
                                       scan_period=120).rstrip("\n").split("\n"))
    stats, skipped = parse_idle_page_stats(text)
    assert skipped == 0 and stats.scan_period_in_seconds == 120 and cold_bytes(stats) == 0


@pytest.mark.parametrize("bad", [
    "  cfui  0 0 0 0 0 9999 0",                   # 7 counts for 8 buckets
    "  cfui  0 0 0 0 0 9999 0 0 0",               # 9 counts
    "  cfui  0 0 0 0 0 -9999 0 0",                # negative
    "  cfui  0 0 0 0 0 9e99 0 0",                 # not an integer
    "  cfxx  0 0 0 0 0 9999 0 0",                 # unknown row
    "          0  0 0 0 0 9999 0 0",              # name lost (upstream's invalid fixture)
    "  cfei  0 0 0 0 0 9999 0 0",                 # duplicate of a row already read
    "# page_scans: many",                         # header with an unparsable value
])
def test_malformed_lines_are_skipped_and_counted(bad):
    lines = idle_page_stats(REAL).split("\n")
    lines.insert(20, bad)
    stats, skipped = parse_idle_page_stats("\n".join(lines))
    assert skipped == 1
    assert cold_bytes(stats) == REAL_COLD                     # the bad line contributed nothing
    assert "cfxx" not in stats.rows


def test_malformed_rows_replace_good_ones_and_are_counted():
    text = idle_page_stats(REAL).replace("  cfui", "  cfui  junk", 1).replace("  dfui", "  dfui 1 2", 1)
    stats, skipped = parse_idle_page_stats(text)
    assert skipped == 2 and "cfui" not in stats.rows and "dfui" not in stats.rows
    assert cold_bytes(stats) == REAL_COLD - 16 * MiB - 4096


@pytest.mark.parametrize("text", ["", "# version: 1.0\n# buckets: 1,2,5,15,30,60,120,240\n",
                                  idle_page_stats().replace("  c", "  x").replace("  d", "  y"),
                                  "\n".join(f"  {r} 1 2 3" for r in ROWS)])
def test_no_usable_inactive_file_row_is_an_error(text):
    with pytest.raises(ValueError):
        parse_idle_page_stats(text)


def test_support_check_and_params_on_fake_sysfs(tmp_path):
    host = FakeHost(str(tmp_path))
    ok, why = kidled_supported(host.paths)
    assert not ok and "scan_period_in_seconds" in why
    host._write(scan_period_path(host.paths), "0\n")
    ok, why = kidled_supported(host.paths)
    assert not ok and "use_hierarchy" in why                 # both switches are needed
    host._write(use_hierarchy_path(host.paths), "0\n")
    assert kidled_supported(host.paths)[0]
    assert read_scan_period(host.paths) == 0
    assert kidled_params(host.paths) == ((scan_period_path(host.paths), "5"), (use_hierarchy_path(host.paths), "1"))
    assert scan_period_path(host.paths) == str(tmp_path / "sys/kernel/mm/kidled/scan_period_in_seconds")


# --- collectors ---------------------------------------------------------------------------------------------------

def kidled_host(tmp_path, version=CgroupVersion.V1):
    host = FakeHost(str(tmp_path), version, Driver.CGROUPFS)
    host._write(scan_period_path(host.paths), "0\n")
    host._write(use_hierarchy_path(host.paths), "0\n")
    host.set_meminfo(total_kb=8 * 2**20, available_kb=6 * 2**20, free_kb=5 * 2**20)   # 3 GiB used with cache
    cg = Cgroups(host.paths.cgroup_root, version, Driver.CGROUPFS)
    return host, cg


def write_stats(host, rel, text):
    host._write(os.path.join(host.paths.cgroup_root, "memory", rel, "memory.idle_page_stats"), text)


def cold_rows(cold: int) -> dict[str, list[int]]:
    """Rows whose cold bytes are ``cold``, with noise everywhere that must not count."""
    return {"cfei": [MiB, MiB, MiB, MiB, MiB, cold - 4096, 0, 0], "dfei": [0, 0, 0, 0, 0, 0, 0, 4096],
            "cfea": [0, 0, 0, 0, 0, 50 * MiB, 0, 0], "csei": [0, 0, 0, 0, 0, 0, 0, 70 * MiB]}


def pods_and_apps(host, cg):
    host.add_pod(KubeQOS.BURSTABLE, "u-ls", CgroupValues(anon=200 * MiB, active_file=30 * MiB, inactive_file=70 * MiB),
                 {A: CgroupValues(anon=150 * MiB, inactive_file=50 * MiB)})
    host.add_pod(KubeQOS.BESTEFFORT, "u-be", CgroupValues(anon=10 * MiB, inactive_file=MiB),
                 {B: CgroupValues(anon=10 * MiB)})
    host.set_cgroup("host-latency-sensitive/nginx", CgroupValues(anon=40 * MiB, inactive_file=60 * MiB))
    ls = pod_meta("u-ls", "web", containers={"app": A}, layout=cg.layout)
    be = pod_meta("u-be", "batch", qos="BestEffort", containers={"job": B}, layout=cg.layout)
    app = HostApp("nginx", "koord-prod", "LS", "host-latency-sensitive/nginx")
    return (ls, be), [app]


def by_name(samples):
    return {(s.name, s.labels): s.value for s in samples}


def skipped(metrics, collector, reason):
    return metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "n1", "collector": collector, "reason": reason}) or 0


def test_cold_page_samples_for_node_pods_containers_and_host_apps(tmp_path):
    host, cg = kidled_host(tmp_path)
    pods, apps = pods_and_apps(host, cg)
    write_stats(host, "", idle_page_stats(cold_rows(1024 * MiB)))
    write_stats(host, cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"), idle_page_stats(cold_rows(60 * MiB)))
    write_stats(host, host.container_dir(KubeQOS.BURSTABLE, "u-ls", A), idle_page_stats(cold_rows(20 * MiB)))
    write_stats(host, "host-latency-sensitive/nginx", idle_page_stats(cold_rows(500 * MiB)))  # > its usage
    # u-be and its container have no idle_page_stats (created before kidled ran): skipped, not an error
    metrics = AgentMetrics("n1")
    s = by_name(ColdPageCollector(host.paths, cg, metrics, Executor(cg)).collect(Tick(100.0, pods, apps)))
    assert s == {
        ("node_memory_cold_page_size", ()): 1024 * MiB,
        ("node_memory_with_hot_page_usage", ()): 3 * 2**30 - 1024 * MiB,     # (total − free) × 1024 − cold
        ("pod_memory_cold_page_size", (("pod_uid", "u-ls"),)): 60 * MiB,
        ("pod_memory_with_hot_page_usage", (("pod_uid", "u-ls"),)): (200 + 30 + 70 - 60) * MiB,
        ("container_memory_cold_page_size", (("container_id", A),)): 20 * MiB,
        ("container_memory_with_hot_page_usage", (("container_id", A),)): (150 + 50 - 20) * MiB,
        ("host_application_memory_cold_page_size", (("host_app_name", "nginx"),)): 500 * MiB,
        ("host_application_memory_with_hot_page_usage", (("host_app_name", "nginx"),)): 0,   # clamped at 0
    }
    assert skipped(metrics, "coldpage", "vanished") == 2
    assert skipped(metrics, "coldpage", "error") == 0


def test_malformed_lines_in_a_cgroup_are_counted_and_logged_once(tmp_path, caplog):
    host, cg = kidled_host(tmp_path)
    pods, _ = pods_and_apps(host, cg)
    rel = cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls")
    write_stats(host, "", idle_page_stats(cold_rows(MiB)))
    write_stats(host, rel, idle_page_stats(cold_rows(60 * MiB)) + "  cfei garbage\n  bogus 1 2 3 4 5 6 7 8\n")
    write_stats(host, host.container_dir(KubeQOS.BURSTABLE, "u-ls", A), "# version: 1.0\n")   # nothing usable
    metrics = AgentMetrics("n1")
    coll = ColdPageCollector(host.paths, cg, metrics, Executor(cg))
    with caplog.at_level(logging.WARNING, "koordlet.collectors"):
        for now in (100.0, 105.0):
            s = by_name(coll.collect(Tick(now, pods[:1])))
    assert s[("pod_memory_cold_page_size", (("pod_uid", "u-ls"),))] == 60 * MiB     # the good rows still count
    assert ("container_memory_cold_page_size", (("container_id", A),)) not in s
    assert skipped(metrics, "coldpage", "malformed_line") == 4                      # 2 lines × 2 cycles
    assert skipped(metrics, "coldpage", "error") == 2                               # the container, each cycle
    logged = [r.getMessage() for r in caplog.records]
    assert sum("2 malformed lines skipped" in m and rel in m for m in logged) == 1
    assert sum("no usable inactive file row" in m for m in logged) == 1


def test_unreadable_node_file_does_not_stop_pods(tmp_path):
    host, cg = kidled_host(tmp_path)
    pods, _ = pods_and_apps(host, cg)
    write_stats(host, cg.layout.pod_dir(KubeQOS.BURSTABLE, "u-ls"), idle_page_stats(cold_rows(60 * MiB)))
    os.remove(host.paths.proc("meminfo"))
    metrics = AgentMetrics("n1")
    s = by_name(ColdPageCollector(host.paths, cg, metrics, Executor(cg)).collect(Tick(100.0, pods)))
    assert not any(name.startswith("node_") for name, _ in s)        # root file absent: an error, not churn
    assert s[("pod_memory_cold_page_size", (("pod_uid", "u-ls"),))] == 60 * MiB
    assert skipped(metrics, "coldpage", "error") == 1
    write_stats(host, "", idle_page_stats(cold_rows(MiB)))
    s = by_name(ColdPageCollector(host.paths, cg, metrics, Executor(cg)).collect(Tick(100.0, ())))
    assert s == {("node_memory_cold_page_size", ()): MiB}            # meminfo gone: no hot usage
    assert skipped(metrics, "coldpage", "error") == 2


def test_start_writes_kidled_switches_through_the_executor(tmp_path):
    host, cg = kidled_host(tmp_path)
    ex = Executor(cg)
    coll = ColdPageCollector(host.paths, cg, AgentMetrics("n1"), ex)
    assert coll.supported() == (True, os.path.dirname(scan_period_path(host.paths)))
    assert not coll.running
    assert coll.start() is True and coll.running
    assert Path(scan_period_path(host.paths)).read_text() == "5"
    assert Path(use_hierarchy_path(host.paths)).read_text() == "1"
    assert [(os.path.basename(str(e["file"])), e["old"], e["new"], e["reason"]) for e in ex.events()] == [
        ("scan_period_in_seconds", "0", "5", "cold-page-collector"), ("use_hierarchy", "0", "1", "cold-page-collector")]
    assert coll.start() is True and len(ex.events()) == 2           # once


def test_start_fails_when_a_switch_cannot_be_written(tmp_path):
    host, cg = kidled_host(tmp_path)
    os.remove(use_hierarchy_path(host.paths))
    os.mkdir(use_hierarchy_path(host.paths))                        # exists (supported) but not writable: EISDIR
    coll = ColdPageCollector(host.paths, cg, AgentMetrics("n1"), Executor(cg))
    assert coll.supported()[0]
    assert coll.start() is False and not coll.running


def test_start_without_executor_only_reports_what_runs(tmp_path):
    host, cg = kidled_host(tmp_path)
    coll = ColdPageCollector(host.paths, cg, AgentMetrics("n1"))
    assert coll.start() is False                                     # scan period 0: kidled stopped, not touched
    assert Path(scan_period_path(host.paths)).read_text() == "0\n"
    host._write(scan_period_path(host.paths), "120\n")               # someone else runs kidled
    assert coll.start() is True


def test_unsupported_without_kidled_and_on_cgroup_v2(tmp_path):
    host = FakeHost(str(tmp_path / "plain"))
    coll = ColdPageCollector(host.paths, Cgroups.detect(host.paths), AgentMetrics("n1"), None)
    assert coll.supported()[0] is False and coll.start() is False
    host, cg = kidled_host(tmp_path / "v2", CgroupVersion.V2)
    write_stats(host, "", idle_page_stats(cold_rows(MiB)))
    ex = Executor(cg)
    coll = ColdPageCollector(host.paths, cg, AgentMetrics("n1"), ex)
    assert coll.supported() == (False, "kidled is cgroup v1 only")
    assert coll.start() is False and ex.events() == []               # nothing written
    assert coll.collect(Tick(100.0, ())) == []


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
def test_page_cache_samples(tmp_path, version):
    host, cg = kidled_host(tmp_path, version)
    pods, apps = pods_and_apps(host, cg)
    metrics = AgentMetrics("n1")
    s = by_name(PageCacheCollector(host.paths, cg, metrics).collect(Tick(100.0, pods, apps)))
    assert s == {
        ("node_memory_usage_with_page_cache", ()): 3 * 2**30,
        ("pod_memory_usage_with_page_cache", (("pod_uid", "u-ls"),)): 300 * MiB,
        ("container_memory_usage_with_page_cache", (("container_id", A),)): 200 * MiB,
        ("pod_memory_usage_with_page_cache", (("pod_uid", "u-be"),)): 11 * MiB,
        ("container_memory_usage_with_page_cache", (("container_id", B),)): 10 * MiB,
    }
    host.remove(host.container_dir(KubeQOS.BESTEFFORT, "u-be", B))
    s = by_name(PageCacheCollector(host.paths, cg, metrics).collect(Tick(101.0, pods)))
    assert ("container_memory_usage_with_page_cache", (("container_id", B),)) not in s
    assert ("pod_memory_usage_with_page_cache", (("pod_uid", "u-be"),)) in s
    assert skipped(metrics, "pagecache", "vanished") == 1
