from koordlet.metriccache import MetricCache, Sample
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder, go_duration
from tests.builders import pod_meta

NOW = 1_800_000_000.0
GiB = 2**30


def fill(cache, seconds, step=10.0):
    """node cpu ramps 1..n cores, memory 1 GiB; system = half; pod a constant, pod b absent."""
    samples = []
    n = int(seconds / step)
    for i in range(n):
        ts = NOW - seconds + (i + 1) * step
        samples += [Sample("node_cpu_usage", (), ts, float(i + 1)), Sample("node_memory_usage", (), ts, GiB),
                    Sample("sys_cpu_usage", (), ts, (i + 1) / 2), Sample("sys_memory_usage", (), ts, GiB / 2),
                    Sample("pod_cpu_usage", (("pod_uid", "a"),), ts, 0.25),
                    Sample("pod_memory_usage", (("pod_uid", "a"),), ts, 64 * 2**20)]
    cache.append(samples)
    return n


def test_policy_defaults_minimums_and_errors():
    p, errors = CollectPolicy.from_spec(None)
    assert (p.aggregate_duration, p.report_interval, p.durations) == (300, 60, (300, 600, 1800))
    p, errors = CollectPolicy.from_spec({"metricCollectPolicy": {
        "aggregateDurationSeconds": 10, "reportIntervalSeconds": 5,
        "nodeAggregatePolicy": {"durations": ["1m0s", "2h"]}, "nodeMemoryCollectPolicy": "bogus"}})
    assert p.aggregate_duration == 60 and p.report_interval == 30          # upstream minimums
    assert p.durations == (60, 7200)
    assert p.memory_policy == "usageWithoutPageCache" and "bogus" in errors[0]
    p, errors = CollectPolicy.from_spec({"metricCollectPolicy": {"reportIntervalSeconds": "soon"}})
    assert p.report_interval == 60 and "reportIntervalSeconds" in errors[0]


def test_go_duration():
    assert [go_duration(s) for s in (300, 600, 1800, 3600, 90, 45)] == \
        ["5m0s", "10m0s", "30m0s", "1h0m0s", "1m30s", "45s"]


def test_status_fields_and_cold_start():
    cache = MetricCache(None, clock=lambda: NOW)
    fill(cache, 900)                                   # 15 minutes of data, one point per 10 s
    pods = [pod_meta("b", "idle", phase=None, cgroup_dir="p/b"),
            pod_meta("a", "web", namespace="shop", phase=None, cgroup_dir="p/a")]
    status = NodeMetricBuilder(cache, CollectPolicy()).status(pods, NOW)
    nm = status["nodeMetric"]
    # AVG over [now-300, now] (inclusive, as upstream's querier): the last 31 points, 60..90 cores -> 75
    assert nm["nodeUsage"] == {"resources": {"cpu": "75", "memory": "1Gi"}}
    assert nm["systemUsage"] == {"resources": {"cpu": "37500m", "memory": "512Mi"}}
    durations = [a["duration"] for a in nm["aggregatedNodeUsages"]]
    assert durations == ["5m0s", "10m0s", "30m0s"]
    five, ten, thirty = nm["aggregatedNodeUsages"]
    assert set(five["usage"]) == {"avg", "p50", "p90", "p95", "p99"}   # upstream HEAD sends avg too
    # 31 values 60..90: p50 index floor(31*.5)-1 = 14 -> 74; p90 -> index 26 -> 86; p99 -> index 29 -> 89
    assert five["usage"]["avg"]["resources"]["cpu"] == "75"
    assert five["usage"]["p50"]["resources"]["cpu"] == "74"
    assert five["usage"]["p90"]["resources"]["cpu"] == "86"
    assert five["usage"]["p99"]["resources"]["cpu"] == "89"
    assert ten["usage"]["p50"]["resources"]["cpu"] == "59"         # 61 values 30..90 -> index 29 -> 59
    assert all(v == {} for v in thirty["usage"].values())          # 15 min of data < half of 30 min
    # pods: b has no samples and is dropped; a is reported with its classes
    assert status["podsMetric"] == [{"namespace": "shop", "name": "web", "priority": "koord-prod", "qos": "LS",
                                     "podUsage": {"resources": {"cpu": "250m", "memory": "64Mi"}}}]
    assert status["prodReclaimableMetric"] == {"resource": {}}
    assert status["hostApplicationMetric"] == []
    assert status["updateTime"] == "2027-01-15T08:00:00Z"


def test_prediction_fields_from_the_pods_that_had_metrics():
    from koordlet.prediction.reclaimable import ReclaimPrediction
    from koordlet.prediction.server import Resources
    cache = MetricCache(None, clock=lambda: NOW)
    fill(cache, 900)
    seen = []

    def reclaim(pods):
        seen.extend(m.pod.name for m in pods)
        return ReclaimPrediction(Resources(1500, 2**30), Resources(2500, 3 * 2**30))

    pods = [pod_meta("b", "idle", phase=None, cgroup_dir="p/b"),
            pod_meta("a", "web", namespace="shop", phase=None, cgroup_dir="p/a")]
    status = NodeMetricBuilder(cache, CollectPolicy()).status(pods, NOW, reclaim)
    assert seen == ["web"]                             # "idle" had no samples
    assert status["prodReclaimableMetric"] == {"resource": {"resources": {"cpu": "1500m", "memory": "1Gi"}}}
    assert status["prodPeakMetric"] == {"resource": {"resources": {"cpu": "2500m", "memory": "3Gi"}}}
    failed = NodeMetricBuilder(cache, CollectPolicy()).status(
        [], NOW, lambda pods: ReclaimPrediction(None, None, "no allocatable"))
    assert failed["prodReclaimableMetric"] == {"resource": {}} and "prodPeakMetric" not in failed


def test_empty_cache_gives_empty_maps():
    status = NodeMetricBuilder(MetricCache(None, clock=lambda: NOW), CollectPolicy()).status([], NOW)
    assert status["nodeMetric"]["nodeUsage"] == {}
    assert status["podsMetric"] == []


def numa_samples(node, ts, cpu=None, memory=None):
    lb = (("numa_node_id", str(node)),)
    return ([Sample("node_numa_cpu_usage", lb, ts, cpu)] if cpu is not None else []) + \
        ([Sample("node_numa_memory_usage", lb, ts, memory)] if memory is not None else [])


def test_numa_usages_avg_sorted_and_skipped_without_samples():
    cache = MetricCache(None, clock=lambda: NOW)
    fill(cache, 900)
    samples = []
    for i in range(30):                                  # one point per 10 s over the last 300 s
        ts = NOW - 290 + i * 10
        samples += numa_samples(10, ts, cpu=1.0 + (i % 2), memory=2 * GiB)  # avg 1.5 cores
        samples += numa_samples(2, ts, cpu=0.25, memory=GiB + (i % 2) * GiB)  # avg 1.5 GiB
        samples += numa_samples(0, ts, cpu=0.0, memory=0.0)
        samples += numa_samples(3, ts, memory=GiB)                          # CPU-less node: memory only
    samples += numa_samples(5, NOW - 400, cpu=4.0, memory=GiB)             # only before the window
    samples += numa_samples(5, NOW - 350, cpu=4.0, memory=GiB)
    cache.append(samples)
    nm = NodeMetricBuilder(cache, CollectPolicy(memory_policy="usageWithPageCache")).status([], NOW)["nodeMetric"]
    # numeric order (2 before 10), node 3 lacks CPU samples and node 5 has none in [now-300, now]: both left out;
    # memory is node_numa_memory_usage whatever the memory policy, as upstream
    assert nm["numaUsages"] == [
        {"numaNodeID": 0, "nodeUsage": {"resources": {"cpu": "0", "memory": "0"}}, "systemUsage": {}},
        {"numaNodeID": 2, "nodeUsage": {"resources": {"cpu": "250m", "memory": "1536Mi"}}, "systemUsage": {}},
        {"numaNodeID": 10, "nodeUsage": {"resources": {"cpu": "1500m", "memory": "2Gi"}}, "systemUsage": {}},
    ]
    assert list(nm) == ["nodeUsage", "aggregatedNodeUsages", "systemUsage", "aggregatedSystemUsages",
                        "numaUsages"]


def test_numa_system_usage_is_the_avg_of_the_sys_numa_kinds():
    cache = MetricCache(None, clock=lambda: NOW)
    fill(cache, 300)
    samples = []
    for i in range(30):
        ts = NOW - 290 + i * 10
        for node in (0, 1, 2):
            samples += numa_samples(node, ts, cpu=2.0, memory=4 * GiB)
        lb0, lb1 = (("numa_node_id", "0"),), (("numa_node_id", "1"),)
        samples += [Sample("sys_numa_cpu_usage", lb0, ts, 0.25 + 0.5 * (i % 2)),        # avg 0.5 cores
                    Sample("sys_numa_memory_usage", lb0, ts, GiB + (i % 2) * GiB),     # avg 1.5 GiB
                    Sample("sys_numa_cpu_usage", lb1, ts, 0.125)]                      # node 1: CPU only
    samples.append(Sample("sys_numa_memory_usage", (("numa_node_id", "2"),), NOW - 400, GiB))   # before the window
    cache.append(samples)
    nm = NodeMetricBuilder(cache, CollectPolicy()).status([], NOW)["nodeMetric"]
    # upstream's collectNUMAUsages: system usage only when both sys_numa kinds have samples in the window
    assert [(u["numaNodeID"], u["systemUsage"]) for u in nm["numaUsages"]] == [
        (0, {"resources": {"cpu": "500m", "memory": "1536Mi"}}), (1, {}), (2, {})]


def test_numa_usages_omitted_when_no_node_has_samples():
    cache = MetricCache(None, clock=lambda: NOW)
    fill(cache, 300)
    cache.append(numa_samples(0, NOW - 600, cpu=1.0, memory=GiB) + numa_samples(1, NOW - 10, memory=GiB))
    assert "numaUsages" not in NodeMetricBuilder(cache, CollectPolicy()).status([], NOW)["nodeMetric"]


def memory_policy_cache():
    """cpu for node, pod a and host app nginx; each memory kind a distinct value so the chosen one shows."""
    cache = MetricCache(None, clock=lambda: NOW)
    pod_lb, app_lb = (("pod_uid", "a"),), (("host_app_name", "nginx"),)
    samples = []
    for i in range(30):
        ts = NOW - 290 + i * 10
        samples += [Sample("node_cpu_usage", (), ts, 1.0), Sample("pod_cpu_usage", pod_lb, ts, 0.5),
                    Sample("host_application_cpu_usage", app_lb, ts, 0.25)]
        for scope, labels, base in (("node", (), 1024), ("pod", pod_lb, 64), ("host_application", app_lb, 32)):
            samples += [Sample(f"{scope}_memory_usage", labels, ts, base * 2**20),
                        Sample(f"{scope}_memory_usage_with_page_cache", labels, ts, 3 * base * 2**20),
                        Sample(f"{scope}_memory_with_hot_page_usage", labels, ts, 2 * base * 2**20)]
    cache.append(samples)
    return cache


def memories(builder):
    from koordlet.states.hostapps import HostApp
    status = builder.status([pod_meta("a", "web", phase=None, cgroup_dir="p/a")], NOW,
                            host_apps=[HostApp("nginx", "koord-prod", "LS", "nginx")])
    return (status["nodeMetric"]["nodeUsage"]["resources"]["memory"],
            status["podsMetric"][0]["podUsage"]["resources"]["memory"],
            status["hostApplicationMetric"][0]["usage"]["resources"]["memory"])


def test_hot_page_policy_reports_hot_usage_while_kidled_runs():
    cache = memory_policy_cache()
    hot = CollectPolicy(memory_policy="usageWithHotPageCache")
    running = NodeMetricBuilder(cache, hot, kidled_running=True)
    assert memories(running) == ("2Gi", "128Mi", "64Mi")
    assert running.memory_policy == "usageWithHotPageCache" and running.memory_policy_fallback is None


def test_hot_page_policy_falls_back_without_kidled_for_node_pods_and_host_apps():
    cache = memory_policy_cache()
    stopped = NodeMetricBuilder(cache, CollectPolicy(memory_policy="usageWithHotPageCache"))
    assert memories(stopped) == ("1Gi", "64Mi", "32Mi")                  # usageWithoutPageCache everywhere
    assert stopped.memory_policy == "usageWithoutPageCache"
    assert "kidled" in stopped.memory_policy_fallback and "usageWithoutPageCache" in stopped.memory_policy_fallback


def test_other_policies_ignore_kidled():
    cache = memory_policy_cache()
    for running in (False, True):
        with_cache = NodeMetricBuilder(cache, CollectPolicy(memory_policy="usageWithPageCache"), kidled_running=running)
        assert memories(with_cache) == ("3Gi", "192Mi", "96Mi") and with_cache.memory_policy_fallback is None
        plain = NodeMetricBuilder(cache, CollectPolicy(), kidled_running=running)
        assert memories(plain) == ("1Gi", "64Mi", "32Mi") and plain.memory_policy_fallback is None
