"""Upstream's 41 ``koordlet_*`` metric families (koordlet/ops/metrics/upstream.py ``UPSTREAM_FAMILIES``), as a
Prometheus scrape of the agent's HTTP server sees them: name, type and label names, on /metrics and on the one of
/internal-metrics and /external-metrics upstream registers them in; and the rules around them (counters without
``_total``, series of gone pods removed, upstream's five-minute expiry).

The owners' own recording (the executor, the kubelet client, the NodeMetric report, ...) is tested beside each
owner below; the daemon test (tests/integration/test_daemon.py) scrapes a real running agent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.metrics.exposition import exposition
from koordlet.ops.metrics.families import EXPIRE_AFTER
from koordlet.ops.metrics.states import ResourceRow
from koordlet.ops.metrics.upstream import UPSTREAM, UPSTREAM_FAMILIES
from koordlet.ops.server import HttpServer
from tests.scrape import Scrape

N = "node-a"
UID = "6f1c1f63-3c3c-4c4f-9a6e-1d2b3c4d5e6f"
CID = "containerd://" + "c" * 64
POD = SimpleNamespace(uid=UID, name="web", namespace="shop")

# upstream's external registry (pkg/koordlet/metrics/external_metrics.go registers these files' collectors); every
# other file's go to the internal one (internal_metrics.go)
EXTERNAL_FILES = {"resource_summary.go", "cpi.go", "psi.go", "resctrl.go"}
UPSTREAM_FILES = {"common.go", "core_sched.go", "cpi.go", "cpu_burst.go", "cpu_cpuset.go", "cpu_suppress.go",
                  "host_application.go", "kubelet.go", "node_metric.go", "oom_score_adj.go", "prediction.go",
                  "psi.go", "resctrl.go", "resource_executor.go", "resource_summary.go", "runtime_hook.go"}


def populate(m: AgentMetrics) -> None:
    """One series in every upstream family, through the calls their owners make."""
    m.collect_status(m.collect_node_cpu_info_status, True)               # NodeState topology read
    m.collect_status(m.collect_node_numa_info_status, True)
    m.collect_status(m.collect_node_local_storage_info_status, False)    # blkio
    m.evicted("shop", "web", "evicted")                                  # evict
    m.node_used_cpu_cores.labels(N).set(1.5)                             # usage collector
    m.node_used_memory_bytes.labels(N).set(2**30)
    m.container_core_sched_cookie.labels(N, "web", "shop", UID, "app", CID, "group-1", "42").set(1)   # core sched
    m.core_sched_managed("group-1", True)
    m.container_cpi.labels(N, CID, "app", UID, "web", "shop", "cycles").set(1e9)   # CPI collector
    m.container_scaled_cfs_burst_us.replace({(N, "shop", "web", CID, "app"): 100000})   # CPU burst
    m.container_scaled_cfs_quota_us.replace({(N, "shop", "web", CID, "app"): 200000})
    m.share_pools([(0, 1), (4, 5)], [(0, 1, 2), (4, 5)], per_cpu=True)  # NodeState pools
    m.be_suppress_cpu_cores.labels(N, "cpuset").set(2)                   # CPU suppress
    m.be_suppress_ls_used_cpu_cores.labels(N).set(3.5)
    m.be_suppress_be_used_cpu_cores.labels(N).set(0.5)                   # BE collector
    m.host_application_resource_usage.replace({(N, "nginx", "cpu", "koord-prod", "LS"): 0.2})   # hostapp collector
    m.kubelet_request("/pods/", 200, 0.003)                              # kubelet client
    m.node_metric_usages({"cpu": 1.5, "memory": 2.0**30}, {"cpu": 0.5}, {0: ({"cpu": 1.0}, {"memory": 2.0**20})})
    m.oom_score_adj(POD, "app", -998)                                    # NRI oom hook
    m.predicted("minPredictor", (1.5, 2.0**30), (3.0, 2.0**31))          # prediction
    m.container_psi.labels(N, CID, "app", UID, "web", "shop", "cpu", "avg10", "some", "false").set(1.0)
    m.pod_psi.labels(N, UID, "web", "shop", "cpu", "avg10", "some", "false").set(1.0)   # PSI collector
    m.resctrl_llc_occupancy.labels(N, "0", "BE").set(2**20)              # (no resctrl monitor yet)
    m.resctrl_memory_bandwidth.labels(N, "0", "BE", "total").set(2**20)
    m.resource_updated(True, True, 0.00004)                              # executor
    m.node_allocatable({"kubernetes.io/batch-cpu": 50000.0, "kubernetes.io/batch-memory": 2.0**33})   # Node
    m.prod_reclaimable("koord-prod", 1.5, 2.0**30)                       # NodeMetric report
    m.pods_synced([UID], [ResourceRow(UID, "web", "shop", CID, "app", "kubernetes.io/batch-cpu", 1000, 2000)])
    m.runtime_hook("CreateContainer", True, 0.002)                       # NRI plugin
    m.hook_reconciled("pod", ["cpu.cfs_quota_us"], True, 0.0001)         # pod resources strategy


@contextlib.contextmanager
def serving(m: AgentMetrics) -> Iterator[str]:
    srv = HttpServer(("127.0.0.1", 0), m.pages(), lambda: (True, "ok"))
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.address[1]}"
    finally:
        srv.stop()


def test_the_table_is_upstreams_41_families_each_with_its_upstream_file():
    assert len(UPSTREAM_FAMILIES) == 41 and len(UPSTREAM) == 41
    for f in UPSTREAM_FAMILIES:
        assert f.name.startswith("koordlet_") and not f.name.endswith("_total"), f.name
        assert f.source in UPSTREAM_FILES, f
        assert f.upstream_file == f"pkg/koordlet/metrics/{f.source}"
        assert f.registry == ("external" if f.source in EXTERNAL_FILES else "internal"), f
        assert len(set(f.labels)) == len(f.labels), f
        assert bool(f.buckets) == (f.type == "histogram"), f
    # the bucket bounds print as Go's ExponentialBuckets(0.01, 4, 8) and (0.001, 4, 7) do
    hist = UPSTREAM["koordlet_resource_update_duration_milliseconds"]
    assert [repr(b) for b in hist.buckets] == ["0.01", "0.04", "0.16", "0.64", "2.56", "10.24", "40.96", "163.84"]
    assert UPSTREAM["koordlet_kubelet_request_duration_seconds"].buckets == (
        0.001, 0.004, 0.016, 0.064, 0.256, 1.024, 4.096)


def test_a_scrape_shows_every_upstream_family_with_its_type_and_labels_on_the_pages_upstream_serves():
    m = AgentMetrics(N)
    populate(m)
    with serving(m) as base:
        pages = {path: Scrape.get(base + path) for path in ("/metrics", "/internal-metrics", "/external-metrics")}
    problems = [p for f in UPSTREAM_FAMILIES for p in pages["/metrics"].problems(f, series=True)]
    assert problems == []
    for f in UPSTREAM_FAMILIES:
        own, other = ("/internal-metrics", "/external-metrics") if f.registry == "internal" else \
            ("/external-metrics", "/internal-metrics")
        assert pages[own].problems(f, series=True) == [], f.name
        assert f.name not in pages[other].types, f"{f.name} also on {other}"
    # our own families stay, as prometheus_client writes them, on the internal page and /metrics
    for page in ("/metrics", "/internal-metrics"):
        assert pages[page].types["koordlet_loop_errors_total"] == "counter"
        assert pages[page].types["koordlet_collect_cycle_duration_seconds"] == "histogram"
        assert pages[page].types["koordlet_pod_eviction_attempts_total"] == "counter"
    assert "koordlet_loop_errors_total" not in pages["/external-metrics"].types


def test_counters_print_as_gos_client_prints_them():
    m = AgentMetrics(N)
    m.evicted('ns"1', "a\\b\nc", "evicted")
    m.evicted('ns"1', "a\\b\nc", "evicted")
    text = exposition(m.registry).decode()
    assert "# TYPE koordlet_pod_eviction counter\n" in text
    assert 'koordlet_pod_eviction{node="node-a",reason="evicted"} 2.0\n' in text
    assert ('koordlet_pod_eviction_detail{node="node-a",pod_name="a\\\\b\\nc",pod_namespace="ns\\"1",'
            'reason="evicted"} 2.0\n') in text
    scrape = Scrape.of(text)
    assert [p for f in UPSTREAM_FAMILIES for p in scrape.problems(f, series=False)] == []   # no _total, _created
    parsed = scrape.families["koordlet_pod_eviction_detail"]
    assert [s.labels["pod_name"] for s in parsed.samples] == ["a\\b\nc"]   # round-trips through the parser
    # a histogram of upstream's: buckets, count, sum, no _created
    m.resource_updated(False, False, 0.001)
    text = exposition(m.registry).decode()
    assert 'koordlet_resource_update_duration_milliseconds_bucket{le="0.01",status="failed",type="default"} 0.0' \
        in text
    assert "koordlet_resource_update_duration_milliseconds_created" not in text


def test_series_of_pods_that_left_the_list_disappear():
    m = AgentMetrics(N)
    populate(m)
    other = "0e1c1f63-3c3c-4c4f-9a6e-1d2b3c4d5e60"
    m.container_cpi.labels(N, "containerd://x", "app", other, "db", "shop", "cycles").set(1)
    m.pods_synced([UID, other], [ResourceRow(other, "db", "shop", "containerd://x", "app", "kubernetes.io/mid-cpu",
                                             500, 0)])
    get = m.registry.get_sample_value
    assert get("koordlet_container_resource_requests", {"node": N, "resource": "kubernetes.io/mid-cpu",
                                                        "unit": "integer", "pod_uid": other, "pod_name": "db",
                                                        "pod_namespace": "shop", "container_id": "containerd://x",
                                                        "container_name": "app"}) == 500
    # rewritten on every sync: the web pod's batch request went with the sync that did not list it
    assert not [s for s in _samples(m, "koordlet_container_resource_requests") if s.labels["pod_uid"] == UID]
    m.pods_synced([other], [])                # web deleted
    keyed = [f for f in UPSTREAM_FAMILIES if "pod_uid" in f.labels]
    assert {f.name for f in keyed} >= {"koordlet_container_cpi", "koordlet_container_psi", "koordlet_pod_psi",
                                       "koordlet_container_oom_score_adj", "koordlet_container_core_sched_cookie"}
    for f in keyed:
        assert not [s for s in _samples(m, f.name) if s.labels.get("pod_uid") == UID], f.name
    assert [s.labels["pod_uid"] for s in _samples(m, "koordlet_container_cpi")] == [other]
    m.pods_synced([], [])
    assert _samples(m, "koordlet_container_cpi") == []


def test_upstreams_expiring_series_go_five_minutes_after_their_last_change():
    now = [1000.0]
    m = AgentMetrics(N, clock=lambda: now[0])
    m.evicted("shop", "web", "evicted")
    m.core_sched_managed("group-1", False)
    start = now[0]
    assert m.expire(start + EXPIRE_AFTER - 1) == 0
    now[0] = start + EXPIRE_AFTER - 1
    m.evicted("shop", "web", "evicted")       # changed again: its five minutes start over
    assert m.expire(start + EXPIRE_AFTER + 0.5) == 1     # the core sched series
    assert _samples(m, "koordlet_core_sched_cookie_manage_status") == []
    assert len(_samples(m, "koordlet_pod_eviction_detail")) == 1
    assert m.expire(start + 3 * EXPIRE_AFTER) == 1
    assert _samples(m, "koordlet_pod_eviction_detail") == []
    # the node-level total is not per pod: it stays
    assert m.registry.get_sample_value("koordlet_pod_eviction_total", {"node": N, "reason": "evicted"}) == 2


def _samples(m: AgentMetrics, family: str) -> list:
    out = []
    for metric in m.registry.collect():
        if metric.name == family:
            out += [s for s in metric.samples if not s.name.endswith("_created")]
    return out


@pytest.mark.parametrize("event,stage", [("CreateContainer", "PreCreateContainer"),
                                         ("RunPodSandbox", "PreRunPodSandbox"),
                                         ("UpdateContainer", "PreUpdateContainerResources"),
                                         ("RemovePodSandbox", "PreRemoveRunPodSandbox")])
def test_nri_events_map_to_upstreams_hook_stages(event, stage):
    m = AgentMetrics(N)
    m.runtime_hook(event, False, 0.001)
    m.runtime_hook("Synchronize", True, 0.001)       # no upstream stage: not recorded
    got = [s.labels for s in _samples(m, "koordlet_runtime_hook_invoked_duration_milliseconds")
           if s.name.endswith("_count")]
    assert got == [{"node": N, "hook": "koordlet-py", "stage": stage, "status": "failed"}]


def test_a_table_histogram_scrapes_as_prometheus_clients_histogram_of_the_same_observations():
    """TableHistogram against prometheus_client's own Histogram, fed the same observations in the same run: the
    same bucket, count and sum samples for every series (a value on a bucket bound counts in that bucket, as
    ``le`` says), and no ``_created``."""
    from prometheus_client import CollectorRegistry, Histogram

    from koordlet.ops.metrics.exposition import TableHistogram
    from koordlet.ops.metrics.upstream import MILLISECOND_BUCKETS
    ours_registry, peer_registry = CollectorRegistry(), CollectorRegistry()
    ours = TableHistogram("h_ms", "help", ("level", "resource"), MILLISECOND_BUCKETS, ours_registry)
    peer = Histogram("h_ms", "help", ("level", "resource"), buckets=MILLISECOND_BUCKETS, registry=peer_registry)
    groups = [([("pod", "cpu"), ("pod", "memory")], 0.0), ([("pod", "cpu")], MILLISECOND_BUCKETS[2]),
              ([("container", "cpu"), ("pod", "memory")], 7.25), ([("pod", "cpu")], 1e9), ([], 3.0)]
    for series, value in groups:
        ours.observe(series, value)
        for labels in series:
            peer.labels(*labels).observe(value)

    def samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {(s.name, tuple(sorted(s.labels.items())), s.value)
                for m in registry.collect() for s in m.samples if not s.name.endswith("_created")}

    assert samples(ours_registry) == samples(peer_registry)
    assert ours_registry.get_sample_value("h_ms_count", {"level": "pod", "resource": "cpu"}) == 3
    assert ours_registry.get_sample_value("h_ms_bucket", {"level": "pod", "resource": "cpu",
                                                          "le": "+Inf"}) == 3
    assert not any(s.name.endswith("_created") for m in ours_registry.collect() for s in m.samples)
