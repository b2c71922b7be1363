"""scheduler.loadaware against koord-scheduler's own test cases (pkg/scheduler/plugins/loadaware at a7a1b76b).

The tables below port the inputs and expected outputs of upstream's load_aware_test.go (TestFilterExpiredNodeMetric,
TestEnableScheduleWhenNodeMetricsExpired, TestFilterUsage, TestScore), estimator/default_estimator_test.go,
pod_assign_cache_test.go and helper_test.go; the ids are upstream's case names. Upstream's fixtures are kept:
nodes with 96 cpu / 512Gi allocatable, NodeMetrics reported now with a 60 s interval, pods in TestFilterUsage
scheduled 10 s ago. Times are relative to a fixed NOW; nothing asserts a wall-clock time.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from functools import partial

import pytest

from koordlet.base import wire
from koordlet.metriccache import MetricCache, Sample
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder
from scheduler.loadaware.args import AggregatedArgs, LoadAwareArgs
from scheduler.loadaware.metric import parse_node_metric
from scheduler.loadaware.names import (
    ANNOTATION_RESERVE_POD,
    ANNOTATION_SCALING_FACTORS,
    ANNOTATION_SECONDS_AFTER_INITIALIZED,
    ANNOTATION_SECONDS_AFTER_SCHEDULED,
    ANNOTATION_USAGE_THRESHOLDS,
    REASON_EXPIRED,
)
from scheduler.loadaware.plugin import LoadAware, NodeLoad
from tests.builders import pod_object

NOW = 1_800_000_000.0
Gi, Mi = 2**30, 2**20
NODE = "test-node-1"
PROD, MID, BATCH = 9999, 7999, 5000          # upstream's PriorityProdValueMax, PriorityMidValueMax, BatchValueMin


def ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def asks(req: dict[str, str] | None = None, lim: dict[str, str] | None = None) -> dict[str, dict]:
    """The resources of a pod's one container, main, as upstream's st.MakePod() adds it: only when it asks for
    anything."""
    resources = {k: v for k, v in (("requests", req), ("limits", lim)) if v}
    return {"main": resources} if resources else {}


def scheduled_at(t: float) -> dict[str, str]:
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(t)}


def initialized_at(t: float, status: str = "True") -> dict[str, str]:
    return {"type": "Initialized", "status": status, "lastTransitionTime": ts(t)}


def owned_by(kind: str) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "o"}


# a pod as upstream's st.MakePod() builds it: no status.qosClass (computed from the spec), no container statuses
pod = partial(pod_object, qos=None, phase=None, statuses=False)


def node(name=NODE, *, cpu="96", memory="512Gi", annotations=None, rv=None):
    allocatable = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    meta = {"name": name, **({"annotations": annotations} if annotations else {}),
            **({"resourceVersion": rv} if rv else {})}
    return {"metadata": meta, "status": {"allocatable": allocatable}}


def res(cpu=None, memory=None, **extra):
    out = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    out.update({k.replace("_", "-").replace("kubernetes-io-", "kubernetes.io/"): v for k, v in extra.items()})
    return out


def metric(*, update=NOW, interval=60, usage=None, system=None, aggregated=(), pods=(), name=NODE):
    """A NodeMetric; ``usage`` None leaves status.nodeMetric out; ``aggregated`` is [(duration, {type: {..}})];
    ``pods`` is [(namespace, name, priority, {resources})]."""
    status = {}
    if update is not None:
        status["updateTime"] = ts(update)
    if usage is not None:
        info = {"nodeUsage": {"resources": usage}}
        if system is not None:
            info["systemUsage"] = {"resources": system}
        if aggregated:
            info["aggregatedNodeUsages"] = [
                {"duration": d, "usage": {t: ({"resources": r} if r is not None else {}) for t, r in u.items()}}
                for d, u in aggregated]
        status["nodeMetric"] = info
    if pods:
        status["podsMetric"] = [None if p is None else
                                {"namespace": p[0], "name": p[1], **({"priority": p[2]} if p[2] else {}),
                                 **({"podUsage": {"resources": p[3]}} if p[3] else {})} for p in pods]
    spec = {} if interval is None else {"metricCollectPolicy": {"reportIntervalSeconds": interval}}
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
            "spec": spec, "status": status}


def vec(plugin, **values):
    return plugin.factor_vec(values)


# --- TestFilterExpiredNodeMetric, TestEnableScheduleWhenNodeMetricsExpired -----------------------------------------

@pytest.mark.parametrize("enable, update, want", [
    pytest.param(None, NOW, None, id="filter healthy nodeMetrics"),
    pytest.param(None, None, REASON_EXPIRED, id="filter unhealthy nodeMetric with nil updateTime"),
    pytest.param(None, NOW - 180, REASON_EXPIRED, id="filter unhealthy nodeMetric with expired updateTime"),
    pytest.param(True, None, None, id="enable scheduling when nodeMetric with nil updateTime"),
    pytest.param(True, NOW - 180, None, id="enable scheduling when nodeMetric with expired updateTime"),
    pytest.param(False, None, REASON_EXPIRED, id="disable scheduling when nodeMetric with nil updateTime"),
    pytest.param(False, NOW - 180, REASON_EXPIRED, id="disable scheduling when nodeMetric with expired updateTime"),
    pytest.param(None, NOW - 179, None, id="one second before expiry"),
])
def test_filter_expired_node_metric(enable, update, want):
    doc = {} if enable is None else {"enableScheduleWhenNodeMetricsExpired": enable}
    plugin = LoadAware(LoadAwareArgs.from_config(doc))
    bare = {"metadata": {"name": NODE}}                        # upstream's node has no allocatable
    view = parse_node_metric(metric(update=update))
    assert plugin.filter({}, bare, view, NodeLoad(plugin), NOW) == want


def test_usage_percent_rounds_halves_up_as_go():
    """64.5% is 65% (Go's math.Round), over a threshold of 64; Python's round() would say 64."""
    plugin = LoadAware(LoadAwareArgs.from_config({"usageThresholds": {"cpu": 64}}))
    view = parse_node_metric(metric(usage=res("395m", "0")))
    assert plugin.filter({}, node(cpu="1"), view, NodeLoad(plugin), NOW) == "node(s) cpu usage exceed threshold"
    assert plugin.filter({}, node(cpu="1001m"), view, NodeLoad(plugin), NOW) is None


def test_expiry_off_and_custom_expiration():
    view = parse_node_metric(metric(update=NOW - 500, usage=res("95", "1Gi")))
    off = LoadAware(LoadAwareArgs.from_config({"filterExpiredNodeMetrics": False}))
    assert off.filter({}, node(), view, NodeLoad(off), NOW) == "node(s) cpu usage exceed threshold"
    longer = LoadAware(LoadAwareArgs.from_config({"nodeMetricExpirationSeconds": 600}))
    assert longer.filter({}, node(), view, NodeLoad(longer), NOW) == "node(s) cpu usage exceed threshold"
    assert longer.filter({}, node(), view, NodeLoad(longer), NOW + 100) == REASON_EXPIRED


# --- TestFilterUsage ------------------------------------------------------------------------------------------------

PROD_PODS_METRIC = [("default", "prod-pod-1", "koord-prod", res("30", "200Gi")),
                    ("default", "prod-pod-2", "koord-prod", res("33", "300Gi"))]
TWO_PROD_PODS = [pod("uid-default-prod-pod-1", "prod-pod-1", priority=PROD),
                 pod("uid-default-prod-pod-2", "prod-pod-2", priority=PROD)]
P95_70 = [("5m0s", {"p95": res("70", "256Gi")})]

FILTER_CASES = [
    pytest.param(dict(metric=metric(usage=res("60", "256Gi"))), None, id="filter normal usage"),
    pytest.param(dict(metric=None), None, id="filter node missing NodeMetrics"),
    pytest.param(dict(metric=metric(usage=res("70", "256Gi"))), "node(s) cpu usage exceed threshold",
                 id="filter exceed cpu usage"),
    pytest.param(dict(args={"aggregated": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95",
                                           "usageAggregatedDuration": "5m"}},
                      metric=metric(usage=res("30", "100Gi"), aggregated=P95_70)),
                 "node(s) cpu aggregated usage exceed threshold", id="filter exceed p95 cpu usage"),
    pytest.param(dict(metric=metric(usage=res("30", "500Gi"))), "node(s) memory usage exceed threshold",
                 id="filter exceed memory usage"),
    pytest.param(dict(custom={"usageThresholds": {"memory": 60}}, metric=metric(usage=res("30", "316Gi"))),
                 "node(s) memory usage exceed threshold", id="filter exceed memory usage by custom usage thresholds"),
    pytest.param(dict(custom={"aggregatedUsage": {"usageThresholds": {"cpu": 60}, "usageAggregationType": "p95",
                                                  "usageAggregatedDuration": "5m0s"}},
                      metric=metric(usage=res("30", "100Gi"), aggregated=P95_70)),
                 "node(s) cpu aggregated usage exceed threshold", id="filter exceed p95 cpu usage by custom usage"),
    pytest.param(dict(args={"usageThresholds": {"memory": 0}}, metric=metric(usage=res("30", "500Gi"))), None,
                 id="disable filter exceed memory usage"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 100, "memory": 100}},
                      metric=metric(usage=res("63", "500Gi"), pods=PROD_PODS_METRIC), pods=TWO_PROD_PODS), None,
                 id="prod usage filter is not enabled by default"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 100, "memory": 100},
                            "prodUsageThresholds": {"cpu": 50, "memory": 100}},
                      metric=metric(usage=res("63", "500Gi"), pods=PROD_PODS_METRIC), pods=TWO_PROD_PODS,
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD)),
                 "node(s) cpu usage exceed threshold", id="filter prod cpu usage"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 100, "memory": 100},
                            "prodUsageThresholds": {"cpu": 100, "memory": 50}},
                      metric=metric(usage=res("63", "500Gi"), pods=PROD_PODS_METRIC), pods=TWO_PROD_PODS,
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD)),
                 "node(s) memory usage exceed threshold", id="filter prod memory usage"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 100, "memory": 100},
                            "prodUsageThresholds": {"cpu": 100, "memory": 100}},
                      custom={"prodUsageThresholds": {"cpu": 100, "memory": 50}},
                      metric=metric(usage=res("63", "500Gi"), pods=PROD_PODS_METRIC), pods=TWO_PROD_PODS,
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD)),
                 "node(s) memory usage exceed threshold",
                 id="filter prod memory usage with custom usage configuration"),
    pytest.param(dict(metric=metric(usage=res("70", "256Gi")),
                      test_pod=pod("uid-default-test-pod", "test-pod", priority=PROD, owners=[owned_by("DaemonSet")])),
                 None, id="filter daemonset pod exceed cpu usage"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 100},
                            "prodUsageThresholds": {"cpu": 60, "memory": 100}},
                      metric=metric(usage=res("53", "500Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi")),
                                          ("default", "prod-pod-2", "koord-prod", res("23", "200Gi"))]),
                      pods=TWO_PROD_PODS, test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD,
                                                       resources=asks(req=res("20", "100Gi")))),
                 "node(s) cpu usage exceed threshold", id="filter prod cpu usage with new pod request configuration"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 100},
                            "prodUsageThresholds": {"cpu": 60, "memory": 100}},
                      metric=metric(usage=res("53", "300Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi")),
                                          ("default", "prod-pod-2", "", res("23", "200Gi"))]),
                      pods=TWO_PROD_PODS,
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=MID,
                                   resources=asks(req={wire.MID_CPU: "12k", wire.MID_MEMORY: "100Gi"}))),
                 "node(s) cpu usage exceed threshold", id="filter mid cpu usage with new pod request configuration"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 85},
                            "prodUsageThresholds": {"cpu": 60, "memory": 80}},
                      metric=metric(usage=res("53", "300Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi")),
                                          ("default", "prod-pod-2", "koord-prod", res("23", "200Gi"))]),
                      pods=TWO_PROD_PODS, test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD,
                                                       resources=asks(req=res("1", "165Gi")))),
                 "node(s) memory usage exceed threshold", id="filter memory usage with new pod request configuration"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 85},
                            "prodUsageThresholds": {"cpu": 60, "memory": 80}},
                      metric=metric(usage=res("53", "300Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi")),
                                          ("default", "prod-pod-2", "", res("23", "200Gi"))]),
                      pods=TWO_PROD_PODS,
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=MID,
                                   resources=asks(req={wire.MID_CPU: "1k", wire.MID_MEMORY: "200Gi"}))),
                 "node(s) memory usage exceed threshold",
                 id="filter mid memory usage with new pod request configuration"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 85},
                            "prodUsageThresholds": {"cpu": 60, "memory": 70}},
                      metric=metric(usage=res("53", "300Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi"))]),
                      pods=[pod("uid-default-prod-pod-1", "prod-pod-1", priority=PROD),
                            pod("uid-default-prod-pod-2", "prod-pod-2", priority=PROD,
                                resources=asks(req=res("1", "200Gi")))],
                      test_pod=pod("uid-default-prod-pod-3", "prod-pod-3", priority=PROD,
                                   resources=asks(req=res("1", "200Gi")))),
                 "node(s) memory usage exceed threshold", id="filter prod memory usage with assignedCache pod"),
    pytest.param(dict(args={"usageThresholds": {"cpu": 65, "memory": 85},
                            "prodUsageThresholds": {"cpu": 60, "memory": 70}},
                      metric=metric(usage=res("33", "110Gi"),
                                    pods=[("default", "prod-pod-1", "koord-prod", res("30", "100Gi"))]),
                      pods=[pod("uid-default-prod-pod-1", "prod-pod-1", priority=PROD),
                            pod("uid-default-mid-pod-2", "mid-pod-2", priority=MID,
                                resources=asks(req={wire.MID_CPU: "20k", wire.MID_MEMORY: "200Gi"}))],
                      test_pod=pod("uid-default-mid-pod-3", "mid-pod-3", priority=MID,
                                   resources=asks(req={wire.MID_CPU: "20k", wire.MID_MEMORY: "200Gi"}))),
                 "node(s) cpu usage exceed threshold", id="filter mid cpu usage with assignedCache pod"),
]


@pytest.mark.parametrize("case, want", FILTER_CASES)
def test_filter_usage(case, want):
    plugin = LoadAware(LoadAwareArgs.from_config({"filterExpiredNodeMetrics": False, **case.get("args", {})}))
    custom = case.get("custom")
    target = node(annotations={ANNOTATION_USAGE_THRESHOLDS: json.dumps(custom)} if custom else None)
    load = NodeLoad(plugin)
    for p in case.get("pods", ()):
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(NOW - 10)}]
        load.add(p, NOW)
    view = None if case["metric"] is None else parse_node_metric(case["metric"])
    assert plugin.filter(case.get("test_pod", {}), target, view, load, NOW) == want


# --- TestScore ------------------------------------------------------------------------------------------------------

BIG = asks(req=res("16", "32Gi"), lim=res("16", "32Gi"))            # 16 cores, 32Gi, requested and limited
TEST_POD = {"uid": "uid-default-test-pod-1", "name": "test-pod-1", "resources": BIG}    # the pod to place


P95_SCORE = {"aggregated": {"scoreAggregationType": "p95", "scoreAggregatedDuration": "5m"}}

SCORE_CASES = [
    pytest.param(dict(pod={}, metric=metric(update=NOW - 180, usage={})), 0, id="score node with expired nodeMetric"),
    pytest.param(dict(metric=metric(usage={})), 90, id="score empty node"),
    pytest.param(dict(metric=None), 0, id="score node missing NodeMetrics"),
    pytest.param(dict(metric=metric(usage=res("32", "10Gi"))), 72, id="score load node"),
    pytest.param(dict(args=P95_SCORE,
                      metric=metric(usage=res("0", "0Gi"), aggregated=[
                          ("5m0s", {"p95": res("32", "10Gi"), "p99": res("50", "70Gi")})])),
                 72, id="score load node with p95"),
    pytest.param(dict(args=P95_SCORE, metric=metric(usage=res("0", "0Gi"))), 90,
                 id="score load node with p95 but have not reported usage"),
    pytest.param(dict(args=P95_SCORE,
                      assigned=[(pod("uid-default-assigned-pod-1", "assigned-pod-1", resources=BIG), NOW - 600)],
                      metric=metric(usage=res("0", "0Gi"), pods=[("default", "assigned-pod-1", "", res("1", "1Gi"))])),
                 81, id="score load node with p95 but have not reported usage and have assigned pods"),
    pytest.param(dict(assigned=[(pod("uid-default-assigned-pod-1", "assigned-pod-1", resources=BIG), NOW)],
                      metric=metric(usage=res("32", "10Gi"))), 63,
                 id="score load node with just assigned pod"),
    pytest.param(dict(assigned=[(pod("uid-default-assigned-pod-1", "assigned-pod-1", resources=BIG), NOW)],
                      metric=metric(update=NOW - 10, usage=res("32", "10Gi"))),
                 63, id="score load node with just assigned pod where after updateTime"),
    pytest.param(dict(assigned=[(pod("uid-default-assigned-pod-1", "assigned-pod-1", resources=BIG), NOW - 10)],
                      metric=metric(usage=res("32", "10Gi"))), 63,
                 id="score load node with just assigned pod where before updateTime"),
    pytest.param(dict(pod=pod("uid-default-test-pod-1", "test-pod-1", priority=BATCH,
                              resources=asks(req={wire.BATCH_CPU: "16000", wire.BATCH_MEMORY: "32Gi"},
                                             lim={wire.BATCH_CPU: "16000", wire.BATCH_MEMORY: "32Gi"})),
                      metric=metric(usage={})), 90, id="score batch Pod"),
    pytest.param(dict(args={"scoreAccordingProdUsage": True},
                      pod=pod("uid-default-prod-pod-1", "prod-pod-1", priority=PROD,
                              resources=asks(req=res("16000", "32Gi"), lim=res("16000", "32Gi"))),
                      assigned=[(pod("uid-default-assign-prod-pod-1", "assign-prod-pod-1", priority=PROD,
                                     resources=BIG), NOW)],
                      metric=metric(usage={}, pods=[("default", "assign-prod-pod-1", "koord-prod",
                                                     res("30", "100Gi"))])),
                 38, id="score prod Pod"),
    pytest.param(dict(pod=pod("uid-default-test-pod-1", "test-pod-1",
                              resources=asks(req=res("8", "16Gi"), lim=res("16", "32Gi"))),
                      metric=metric(usage={})), 90, id="score request less than limit"),
    pytest.param(dict(args={"dominantResourceWeight": 10}, metric=metric(usage={})), 85, id="score with drf"),
    pytest.param(dict(pod=pod("uid-default-test-pod-1", "test-pod-1", containers={"main": "c1"}),
                      metric=metric(usage={})), 99, id="score empty pod"),
]


@pytest.mark.parametrize("case, want", SCORE_CASES)
def test_score(case, want):
    plugin = LoadAware(LoadAwareArgs.from_config(case.get("args", {})))
    load = NodeLoad(plugin)
    for p, at in case.get("assigned", ()):
        load.add(p, at)
    view = None if case["metric"] is None else parse_node_metric(case["metric"])
    assert plugin.score(case.get("pod", pod(**TEST_POD)), node(), view, load, NOW) == want


def test_score_zero_without_weights_and_prefers_the_emptier_node():
    view = parse_node_metric(metric(usage={}))
    off = LoadAware(LoadAwareArgs(resource_weights={}))
    assert off.score(pod(**TEST_POD), node(), view, NodeLoad(off), NOW) == 0
    plugin = LoadAware(LoadAwareArgs())
    busy = parse_node_metric(metric(usage=res("60", "300Gi")))
    assert plugin.score(pod(**TEST_POD), node(), busy, NodeLoad(plugin), NOW) < plugin.score(pod(**TEST_POD), node(),
                                                                                          view, NodeLoad(plugin), NOW)


# --- estimator/default_estimator_test.go ----------------------------------------------------------------------------

GUARANTEED = {"resources": asks(req=res("4", "8Gi"), lim=res("4", "8Gi"))}
ESTIMATE_CASES = [
    pytest.param(pod("uid-default-p", "p", containers={"main": "c1"}), None, False, {"cpu": 250, "memory": 200 * Mi},
                 id="estimate empty pod"),
    pytest.param(pod("uid-default-p", "p", **GUARANTEED), None, False, {"cpu": 3400, "memory": 6012954214},
                 id="estimate guaranteed pod"),
    pytest.param(pod("uid-default-p", "p", resources=asks(req=res("4", "8Gi"), lim=res("8", "8Gi"))), None, False,
                 {"cpu": 6800, "memory": 6012954214}, id="estimate burstable pod"),
    pytest.param(pod("uid-default-p", "p", **GUARANTEED), {"cpu": 110}, False, {"cpu": 4000, "memory": 6012954214},
                 id="estimate guaranteed pod and zoomed cpu factors"),
    pytest.param(pod("uid-default-p", "p", **GUARANTEED), {"memory": 110}, False, {"cpu": 3400, "memory": 8589934592},
                 id="estimate guaranteed pod and zoomed memory factors"),
    pytest.param(pod("uid-default-p", "p", priority=BATCH, labels={wire.LABEL_QOS_CLASS: "BE"},
                     resources=asks(req={wire.BATCH_CPU: "4000", wire.BATCH_MEMORY: "8Gi"},
                                    lim={wire.BATCH_CPU: "4000", wire.BATCH_MEMORY: "8Gi"})),
                 None, False, {"cpu": 3400, "memory": 6012954214}, id="estimate Batch pod"),
    pytest.param(pod("uid-default-p", "p", priority=PROD, labels={wire.LABEL_QOS_CLASS: "LS"},
                     resources=asks(req=res("4", "8Gi"))),
                 {"cpu": 80, "memory": 80}, False, {"cpu": 3200, "memory": 6871947674},
                 id="estimate pod only has request"),
    pytest.param(pod("uid-default-p", "p", priority=PROD, labels={wire.LABEL_QOS_CLASS: "LS"},
                     annotations={ANNOTATION_SCALING_FACTORS: '{"cpu":100}'}, resources=asks(req=res("4", "8Gi"))),
                 {"cpu": 80, "memory": 80}, True, {"cpu": 4000, "memory": 6871947674},
                 id="estimate pod with customized factors"),
    # beyond upstream's table: the floors apply to batch resources too, not to mid ones; koord-free asks nothing
    pytest.param(pod("uid-default-p", "p", priority=BATCH, containers={"main": "c1"}), None, False,
                 {"cpu": 250, "memory": 200 * Mi}, id="batch pod without batch resources gets the floors"),
    pytest.param(pod("uid-default-p", "p", priority=MID, resources=asks(req=res("4", "8Gi"))), None, False,
                 {"cpu": 0, "memory": 0}, id="mid pod reads only mid resources, without floors"),
    pytest.param(pod("uid-default-p", "p", priority=3500, resources=asks(req=res("4", "8Gi"))), None, False,
                 {"cpu": 0, "memory": 0}, id="free pod has no resources to estimate"),
    pytest.param(pod("uid-default-p", "p", resources=asks(req=res("100", "100Gi"), lim=res("4", "8Gi"))),
                 {"cpu": 85, "memory": 70}, False, {"cpu": 4000, "memory": 8 * Gi}, id="capped at the limit"),
    pytest.param(pod("uid-default-p", "p", priority=PROD, annotations={ANNOTATION_SCALING_FACTORS: '{"cpu":100}'},
                     resources=asks(req=res("4", "8Gi"))),
                 None, False, {"cpu": 3400, "memory": 6012954214},
                 id="customized factors need allowCustomizeEstimation"),
    pytest.param(pod("uid-default-p", "p", resources=asks(req=res("5m", "5"))), {"cpu": 50, "memory": 50}, False,
                 {"cpu": 3, "memory": 3}, id="halves round away from zero as Go's math.Round"),
    pytest.param(pod("uid-default-p", "p", priority=PROD, annotations={ANNOTATION_SCALING_FACTORS: '{"cpu":-100}'},
                     resources=asks(req=res("4", "8Gi"))),
                 None, True, {"cpu": 3400, "memory": 6012954214}, id="negative customized factor ignored"),
]


@pytest.mark.parametrize("p, factors, customize, want", ESTIMATE_CASES)
def test_estimate_pod(p, factors, customize, want):
    merged = {"cpu": 85, "memory": 70, **(factors or {})}     # upstream's defaulting fills the missing keys
    plugin = LoadAware(LoadAwareArgs(estimated_scaling_factors=merged, allow_customize_estimation=customize))
    assert plugin.estimate(p) == want


def test_estimate_sidecars_init_containers_and_overhead():
    plugin = LoadAware(LoadAwareArgs(estimated_scaling_factors={"cpu": 100, "memory": 100}))
    p = pod("uid-default-p", "p", resources=asks(req=res("1", "1Gi")))
    p["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": res("500m", "512Mi")}},
        {"name": "init", "resources": {"requests": res("3", "1Gi")}}]       # runs beside the sidecar: 3.5 cores
    p["spec"]["overhead"] = res("100m", "0")
    assert plugin.estimate(p) == {"cpu": 3600, "memory": Gi + 512 * Mi}


@pytest.mark.parametrize("annotation, want", [
    pytest.param(None, {"cpu": 32000}, id="estimate empty node"),
    pytest.param('{"cpu":28,"memory":"32Gi"}', {"cpu": 28000, "memory": 32 * Gi},
                 id="estimate node with original allocatable"),
    pytest.param('{"cpu":32,"memory":"42Gi"}', {"cpu": 32000, "memory": 42 * Gi},
                 id="estimate node with original allocatable and sames"),
])
def test_estimate_node(annotation, want):
    plugin = LoadAware(LoadAwareArgs())
    target = node(memory=None if annotation is None else "42Gi", cpu="32",
                  annotations={wire.ANNOTATION_RAW_ALLOCATABLE: annotation} if annotation else None)
    assert plugin.allocatable(target) == {"memory": 0, **want}


def test_raw_allocatable_decides_the_verdict_and_a_bad_one_is_ignored(caplog):
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("60", "1Gi")))
    assert plugin.filter({}, node(), view, NodeLoad(plugin), NOW) is None                      # 63% of 96
    smaller = node(annotations={wire.ANNOTATION_RAW_ALLOCATABLE: '{"cpu":"80"}'})
    assert plugin.filter({}, smaller, view, NodeLoad(plugin), NOW) == "node(s) cpu usage exceed threshold"
    with caplog.at_level(logging.WARNING, logger="scheduler.loadaware"):
        broken = node(annotations={wire.ANNOTATION_RAW_ALLOCATABLE: '{"cpu": [80]}'})
        assert plugin.filter({}, broken, view, NodeLoad(plugin), NOW) is None
    assert "raw-allocatable" in caplog.text and NODE in caplog.text


# --- pod_assign_cache_test.go ---------------------------------------------------------------------------------------

def hundred():
    plugin = LoadAware(LoadAwareArgs(estimated_scaling_factors={"cpu": 100, "memory": 100}))
    return plugin, NodeLoad(plugin), parse_node_metric(metric(update=None, interval=None))


FLOORS = {"cpu": 250, "memory": 200 * Mi}


@pytest.mark.parametrize("p, size, node_delta, prod_delta", [
    pytest.param(pod("uid-default-test", "test", phase="Failed"), 0, {}, {}, id="add terminated pod"),
    pytest.param(pod("uid-default-test", "test", phase="Running"), 1, FLOORS, {},
                 id="add scheduled running pod without resources"),
    pytest.param(pod("uid-default-test", "test", resources=asks(req=res("1", "4Gi"))), 1,
                 {"cpu": 1000, "memory": 4 * Gi}, {"cpu": 1000, "memory": 4 * Gi}, id="add prod pod"),
    pytest.param(pod("uid-default-test", "test", priority=7500,
                     resources=asks(req={wire.MID_CPU: "1k", wire.MID_MEMORY: "4Gi"})), 1,
                 {"cpu": 1000, "memory": 4 * Gi}, {}, id="add non prod pod"),
    pytest.param(pod("uid-default-test-reservation", "test-reservation", annotations={ANNOTATION_RESERVE_POD: "true"},
                     phase="Running"), 0, {}, {},
                 id="add reserve pod - should be skipped"),
])
def test_assign_cache_on_add(p, size, node_delta, prod_delta):
    plugin, load, view = hundred()
    load.add(p, NOW)
    assert len(load) == size
    totals = load.totals(view)
    assert totals.node_delta == vec(plugin, **node_delta) == totals.node_estimated
    assert totals.prod_delta == vec(plugin, **prod_delta)


def test_assign_cache_on_update():
    plugin, load, view = hundred()
    load.add(pod("uid-default-test", "test", phase="Running"), NOW)
    load.add(pod("uid-default-test", "test", phase="Failed"), NOW)                        # "update terminated pod"
    assert len(load) == 0 and load.totals(view).node_estimated == vec(plugin)
    load.add(pod("uid-default-test", "test", phase="Running", conditions=[scheduled_at(NOW - 5)]), NOW)
    # "update pod resources"
    load.add(pod("uid-default-test", "test", phase="Running", resources=asks(req=res("1", "4Gi"))), NOW)
    totals = load.totals(view)
    assert len(load) == 1
    assert totals.node_delta == totals.prod_delta == totals.node_estimated == vec(plugin, cpu=1000, memory=4 * Gi)
    load.remove("uid-default-test")
    load.remove("uid-default-test")                                             # removing twice is harmless
    assert len(load) == 0 and load.totals(view).node_delta == vec(plugin)


def test_assign_cache_on_delete():
    """Upstream's TestPodAssignCache_OnDelete: which pods count towards prod usage, node delta and prod delta."""
    plugin = LoadAware(LoadAwareArgs(estimated_scaling_factors={"cpu": 50, "memory": 50}))
    view = parse_node_metric(metric(update=None, interval=None, usage=res("70", "280Gi"), pods=[
        ("default", "prod-0", "koord-prod", res("50", "200Gi")), ("default", "prod-1", "koord-prod", res("1", "6Gi")),
        ("default", "prod-2", "koord-prod", res("4", "2Gi")), ("default", "prod-3", "koord-mid", res("3", "6Gi")),
        ("default", "mid-1", "koord-mid", res("1", "6Gi")), ("default", "mid-2", "koord-mid", res("4", "2Gi")),
        ("default", "mid-3", "koord-prod", res("3", "6Gi"))]))
    load = NodeLoad(plugin)
    mid = {wire.MID_CPU: "4k", wire.MID_MEMORY: "8Gi"}
    pods = [pod("1", "prod-1", resources=asks(req=res("4", "8Gi"))),
            pod("2", "prod-2", resources=asks(req=res("4", "8Gi"))),
            pod("3", "prod-3", resources=asks(req=res("4", "8Gi"))),
            pod("4", "mid-1", priority=7500, resources=asks(req=mid)),
            pod("5", "mid-2", priority=7500, resources=asks(req=mid)),
            pod("6", "mid-3", priority=7500, resources=asks(req=mid))]
    for p in pods:
        load.add(p, NOW)
    totals = load.totals(view)
    assert totals.prod_usage == vec(plugin, cpu=5000, memory=8 * Gi)
    assert totals.node_delta == vec(plugin, cpu=2000, memory=4 * Gi)
    assert totals.prod_delta == vec(plugin, cpu=3000, memory=6 * Gi)
    assert totals.node_estimated == vec(plugin, cpu=12000, memory=24 * Gi)
    for uid in "123456":
        load.remove(uid)
    totals = load.totals(view)
    assert len(load) == 0
    assert totals.prod_usage == totals.node_delta == totals.prod_delta == totals.node_estimated == vec(plugin)


@pytest.mark.parametrize("args, p, deadline", [
    pytest.param({}, pod("uid-default-pod", "pod", conditions=[scheduled_at(NOW - 60)]), None, id="disabled"),
    pytest.param({"estimated_seconds_after_pod_scheduled": 180},
                 pod("uid-default-pod", "pod", conditions=[scheduled_at(NOW - 60)]), NOW + 120,
                 id="enabled for pod scheduled"),
    pytest.param({"estimated_seconds_after_pod_scheduled": 180, "estimated_seconds_after_initialized": 10},
                 pod("uid-default-pod", "pod", conditions=[scheduled_at(NOW - 60), initialized_at(NOW - 30)]), NOW - 20,
                 id="disabled pod scheduled when pod initialized"),
    pytest.param({"estimated_seconds_after_initialized": 180},
                 pod("uid-default-pod", "pod", conditions=[initialized_at(NOW - 60)]), NOW + 120,
                 id="enabled for pod initialized"),
    pytest.param({"estimated_seconds_after_initialized": 180},
                 pod("uid-default-pod", "pod", conditions=[initialized_at(NOW - 60, "False")]), None,
                 id="disabled for pod initialized when condition is not satisfied"),
    pytest.param({"allow_customize_estimation": True},
                 pod("uid-default-pod", "pod", annotations={ANNOTATION_SECONDS_AFTER_SCHEDULED: "180"},
                     conditions=[scheduled_at(NOW - 60)]), NOW + 120,
                 id="after pod scheduled from metadata"),
    pytest.param({"allow_customize_estimation": True},
                 pod("uid-default-pod", "pod", annotations={ANNOTATION_SECONDS_AFTER_INITIALIZED: "180"},
                     conditions=[initialized_at(NOW - 60)]),
                 NOW + 120, id="after initialized from metadata"),
    pytest.param({}, pod("uid-default-pod", "pod", annotations={ANNOTATION_SECONDS_AFTER_SCHEDULED: "180"},
                         conditions=[scheduled_at(NOW - 60)]), None,
                 id="metadata ignored without allowCustomizeEstimation"),
])
def test_should_estimate_pod_deadline(args, p, deadline):
    """Upstream checks shouldEstimatePodDeadline's result; here its effect: a pod the report already shows (assigned
    60 s ago, report interval 0) still counts its estimate above its usage exactly while updateTime < deadline."""
    plugin = LoadAware(LoadAwareArgs(estimated_scaling_factors={"cpu": 100, "memory": 100}, **args))
    p["spec"]["containers"] = [{"name": "main", "resources": {"requests": res("1", "1Gi")}}]
    load = NodeLoad(plugin)
    load.add(p, NOW - 60)

    def delta(update):
        view = parse_node_metric(metric(update=update, interval=0, usage={},
                                        pods=[("default", "pod", "", res("100m", "100Mi"))]))
        return load.totals(view).node_delta

    counted = vec(plugin, cpu=900, memory=Gi - 100 * Mi)
    if deadline is None:
        assert delta(NOW - 59) == delta(NOW + 1000) == vec(plugin)
    else:
        assert delta(deadline - 1) == counted
        assert delta(deadline) == vec(plugin)


def test_pods_assigned_after_the_last_report_are_counted():
    """A pod scheduled within the report interval before updateTime is not fully in the report yet: its estimate
    beyond its reported usage is added; one scheduled earlier is taken at its reported usage."""
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("40", "100Gi"), pods=[("default", "web", "", res("1", "1Gi"))]))
    beyond = {"cpu": 13600 - 1000, "memory": 24051816858 - Gi}      # 16 cores × 85%, 32Gi × 70%, less the usage
    for scheduled, extra in ((NOW - 10, beyond), (NOW - 60, {}), (NOW - 120, {})):     # strictly after NOW - 60
        load = NodeLoad(plugin)
        load.add(pod("uid-default-web", "web", resources=BIG, conditions=[scheduled_at(scheduled)]), NOW)
        assert load.totals(view).node_delta == vec(plugin, **extra), scheduled
    # 40 + 12.6 + 13.6 cores of 96 is 69% > 65%; 40 + 13.6 is 56%
    fresh, old = NodeLoad(plugin), NodeLoad(plugin)
    fresh.add(pod("uid-default-web", "web", resources=BIG, conditions=[scheduled_at(NOW - 10)]), NOW)
    old.add(pod("uid-default-web", "web", resources=BIG, conditions=[scheduled_at(NOW - 120)]), NOW)
    assert plugin.filter(pod(**TEST_POD), node(), view, fresh, NOW) == "node(s) cpu usage exceed threshold"
    assert plugin.filter(pod(**TEST_POD), node(), view, old, NOW) is None


def test_assigned_at_is_used_without_a_pod_scheduled_condition():
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage={}, pods=[("default", "web", "", res("1", "1Gi"))]))
    recent, earlier = NodeLoad(plugin), NodeLoad(plugin)
    recent.add(pod("uid-default-web", "web", resources=BIG), NOW - 10)
    earlier.add(pod("uid-default-web", "web", resources=BIG), NOW - 120)
    assert recent.totals(view).node_delta[0] == 12600 and earlier.totals(view).node_delta[0] == 0
    earlier.add(pod("uid-default-web", "web", resources=BIG, conditions=[scheduled_at(NOW - 10)]),
                NOW - 120)                                                      # the condition wins
    assert earlier.totals(view).node_delta[0] == 12600


@pytest.mark.parametrize("args, prod_usage", [
    pytest.param(LoadAwareArgs(estimated_scaling_factors={}), {"cpu": 50000, "memory": 200 * Gi},
                 id="disable estimator"),
])
def test_node_metric_disable_estimator(args, prod_usage):
    plugin = LoadAware(args)
    view = parse_node_metric(metric(update=None, interval=None, usage=res("72", "280Gi"), pods=[
        None, ("", "invalid", "", None), ("default", "prod-1", "koord-prod", res("50", "200Gi")),
        ("default", "mid-1", "koord-mid", res("20", "75Gi"))]))
    load = NodeLoad(plugin)
    load.add(pod("1", "prod-1", resources=asks(req=res("40", "160Gi"))), NOW)
    load.add(pod("2", "mid-1", priority=7500, resources=asks(req={wire.MID_CPU: "4k", wire.MID_MEMORY: "8Gi"})), NOW)
    totals = load.totals(view)
    assert totals.prod_usage == vec(plugin, **prod_usage)
    assert totals.node_estimated == totals.node_delta == vec(plugin)          # nothing estimated
    assert set(view.pod_usages) == {("default", "prod-1"), ("default", "mid-1")}


def test_node_metric_prod_usage_include_sys():
    plugin = LoadAware(LoadAwareArgs(prod_usage_include_sys=True))
    view = parse_node_metric(metric(interval=180, usage=res("2", "4Gi"), system=res("2", "4Gi"), aggregated=[
        ("1m0s", {"avg": res("1", "2Gi"), "p90": res("2", "4Gi")}),
        ("1h0m0s", {"avg": res("500m", "1Gi"), "p90": res("1500m", "3Gi")})]))
    assert view.update_time == NOW and view.report_interval == 180
    assert dict(view.node_usage) == {"cpu": 2000, "memory": 4 * Gi}
    assert NodeLoad(plugin).totals(view).prod_usage == vec(plugin, cpu=2000, memory=4 * Gi)
    minute, hour = 60 * 10**9, 3600 * 10**9
    assert {k: dict(v) for k, v in view.aggregated.items()} == {
        ("avg", 0): {"cpu": 500, "memory": Gi}, ("p90", 0): {"cpu": 1500, "memory": 3 * Gi},
        ("avg", minute): {"cpu": 1000, "memory": 2 * Gi}, ("p90", minute): {"cpu": 2000, "memory": 4 * Gi},
        ("avg", hour): {"cpu": 500, "memory": Gi}, ("p90", hour): {"cpu": 1500, "memory": 3 * Gi}}


# --- helper_test.go: TestGetTargetAggregatedUsage -----------------------------------------------------------------

@pytest.mark.parametrize("usage, aggregated, duration, want", [
    pytest.param({}, [("5m0s", {"p95": {"cpu": "30"}}), ("10m0s", {"p95": {"cpu": "50"}}), ("15m0s", {"p95": None})],
                 0, {"cpu": 50000}, id="Valid AggregatedNodeUsages and aggregatedDuration is nil"),
    pytest.param({}, [("5m0s", {"p95": {"cpu": "30"}}), ("10m0s", {"p95": {"cpu": "50"}}),
                      ("15m0s", {"p95": {"cpu": "70"}})],
                 300, {"cpu": 30000}, id="aggregatedDuration is not nil and matches a duration"),
    pytest.param({"cpu": "30"}, [("5m0s", {"p95": None})], 0, {"cpu": 30000},
                 id="NodeUsage contains a valid resource list and AggregatedNodeUsages is empty"),
    pytest.param({"cpu": "30"}, [("5m0s", {"p95": {"cpu": "40"}})], 600, None, id="explicit duration not reported"),
])
def test_target_aggregated_usage(usage, aggregated, duration, want):
    view = parse_node_metric(metric(usage=usage, aggregated=aggregated))
    got = view.aggregated_usage("p95", duration)
    assert (None if got is None else dict(got)) == want


def test_missing_aggregated_duration_falls_back_to_full_estimates():
    """Filter with an aggregated duration the report lacks: upstream sums the full estimates of the node's pods."""
    plugin = LoadAware(LoadAwareArgs.from_config({"aggregated": {
        "usageThresholds": {"cpu": 30}, "usageAggregationType": "p95", "usageAggregatedDuration": "30m"}}))
    view = parse_node_metric(metric(usage=res("90", "1Gi"), aggregated=[("5m0s", {"p95": res("90", "1Gi")})]))
    load = NodeLoad(plugin)
    assert plugin.filter(pod(**TEST_POD), node(), view, load, NOW) is None               # 13.6 of 96 cores: 14%
    load.add(pod("uid-default-a", "a", resources=BIG, conditions=[scheduled_at(NOW - 3600)]), NOW)
    load.add(pod("uid-default-b", "b", resources=BIG, conditions=[scheduled_at(NOW - 3600)]), NOW)
    assert plugin.filter(pod(**TEST_POD), node(), view, load, NOW) == "node(s) cpu aggregated usage exceed threshold"


# --- node annotation ------------------------------------------------------------------------------------------------

def test_malformed_usage_thresholds_annotation_is_ignored_and_logged_once(caplog):
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("70", "1Gi")))                  # 73% cpu: over the global 65
    with caplog.at_level(logging.WARNING, logger="scheduler.loadaware"):
        for rv in ("1", "2", "2"):
            bad = node(annotations={ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 90'}, rv=rv)
            assert plugin.filter({}, bad, view, NodeLoad(plugin), NOW) == "node(s) cpu usage exceed threshold"
            assert plugin.score({}, bad, view, NodeLoad(plugin), NOW) > 0
    warnings = [r for r in caplog.records if ANNOTATION_USAGE_THRESHOLDS in r.getMessage()]
    assert len(warnings) == 1 and NODE in warnings[0].getMessage()


@pytest.mark.parametrize("annotation, want", [
    pytest.param({"usageThresholds": {"cpu": 90}}, None, id="override passes the node"),
    pytest.param({"UsageThresholds": {"cpu": 90}}, None, id="keys match case-insensitively as Go's json"),
    pytest.param({"usageThresholds": {"cpu": "90"}}, "node(s) cpu usage exceed threshold",
                 id="a wrong type voids the whole annotation"),
    pytest.param({"usageThresholds": {}}, "node(s) cpu usage exceed threshold", id="an empty section keeps the global"),
    pytest.param({"aggregatedUsage": {"usageThresholds": {"cpu": 90}}}, "node(s) cpu usage exceed threshold",
                 id="aggregated section without a type is ignored"),
    pytest.param({"usageThresholds": {"memory": 90}}, None, id="a present section replaces the global one whole"),
    pytest.param({"usageThresholds": {"gpu": 90}}, None, id="resources outside the args are dropped"),
    pytest.param(None, "node(s) cpu usage exceed threshold", id="null object"),
])
def test_usage_thresholds_annotation(annotation, want):
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("70", "1Gi")))
    target = node(annotations={ANNOTATION_USAGE_THRESHOLDS: json.dumps(annotation)})
    assert plugin.filter({}, target, view, NodeLoad(plugin), NOW) == want


def test_node_changes_are_seen():
    """The per-node cache follows the node object: a new object (or resourceVersion) is read again."""
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("70", "1Gi")))
    load = NodeLoad(plugin)
    assert plugin.filter({}, node(rv="1"), view, load, NOW) == "node(s) cpu usage exceed threshold"
    relaxed = node(rv="2", annotations={ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 90}}'})
    assert plugin.filter({}, relaxed, view, load, NOW) is None
    assert plugin.filter({}, node(), view, load, NOW) == "node(s) cpu usage exceed threshold"


def test_load_changes_are_seen():
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("40", "1Gi")))
    load = NodeLoad(plugin)
    incoming = pod(**TEST_POD)
    assert plugin.filter(incoming, node(), view, load, NOW) is None
    load.add(pod("uid-default-a", "a", resources=BIG), NOW)
    assert plugin.filter(incoming, node(), view, load, NOW) == "node(s) cpu usage exceed threshold"
    load.remove("uid-default-a")
    assert plugin.filter(incoming, node(), view, load, NOW) is None
    newer = parse_node_metric(metric(usage=res("60", "1Gi")))
    assert plugin.filter(incoming, node(), newer, load, NOW) == "node(s) cpu usage exceed threshold"


# --- bad input --------------------------------------------------------------------------------------------------------

def test_unreadable_pods_cost_only_themselves():
    plugin = LoadAware(LoadAwareArgs())
    view = parse_node_metric(metric(usage=res("10", "1Gi")))
    broken = pod("uid-default-broken", "broken", resources=asks(req={"cpu": "lots"}))
    with pytest.raises(ValueError, match="spec.containers"):
        plugin.estimate(broken)
    load = NodeLoad(plugin)
    load.add(broken, NOW)
    assert len(load) == 1 and load.totals(view).node_estimated == vec(plugin)
    assert plugin.filter(broken, node(), view, load, NOW) is None
    assert plugin.score(broken, node(), view, load, NOW) == 0
    with pytest.raises(ValueError, match="uid"):
        load.add({"metadata": {"name": "x"}}, NOW)


@pytest.mark.parametrize("change, where", [
    (lambda m: m["status"]["podsMetric"][0]["podUsage"]["resources"].update(cpu="many"),
     "status.podsMetric[0].podUsage.resources.cpu"),
    (lambda m: m["status"].update(updateTime="yesterday"), "status.updateTime"),
    (lambda m: m["spec"]["metricCollectPolicy"].update(reportIntervalSeconds="60"),
     "spec.metricCollectPolicy.reportIntervalSeconds"),
    (lambda m: m["status"]["nodeMetric"].update(aggregatedNodeUsages=[{"duration": "soon", "usage": {}}]),
     "aggregatedNodeUsages[0].duration"),
    (lambda m: m["status"]["nodeMetric"]["nodeUsage"]["resources"].update(memory="-1Gi"), "negative"),
    (lambda m: m["status"].update(podsMetric={"a": 1}), "status.podsMetric"),
])
def test_parse_node_metric_names_the_bad_field(change, where):
    doc = metric(usage=res("1", "1Gi"), pods=[("default", "a", "", res("1", "1Gi"))])
    change(doc)
    with pytest.raises(ValueError, match=f"NodeMetric {NODE}") as e:
        parse_node_metric(doc)
    assert where in str(e.value)


def test_parses_the_agents_own_report():
    """The agent's NodeMetric (koordlet.reporters.nodemetric) is what the extender reads in production."""
    cache = MetricCache(None, clock=lambda: NOW)
    cache.append([s for i in range(100) for s in (Sample("node_cpu_usage", (), NOW - i * 10, 4.0),
                                                    Sample("node_memory_usage", (), NOW - i * 10, 8 * Gi))])
    status = NodeMetricBuilder(cache, CollectPolicy()).status([], NOW)
    view = parse_node_metric({"metadata": {"name": NODE}, "spec": {}, "status": status})
    assert view.update_time == NOW and dict(view.node_usage) == {"cpu": 4000, "memory": 8 * Gi}
    assert dict(view.aggregated_usage("p95", 300)) == {"cpu": 4000, "memory": 8 * Gi}
    assert view.aggregated_usage("p95", 0) == view.aggregated_usage("p95", 1800)


# --- args -----------------------------------------------------------------------------------------------------------

def test_args_defaults_are_upstreams():
    args = LoadAwareArgs.from_config({})
    assert args == LoadAwareArgs()
    assert (args.filter_expired_node_metrics, args.node_metric_expiration_seconds,
            args.enable_schedule_when_node_metrics_expired) == (True, 180, False)
    assert dict(args.resource_weights) == {"cpu": 1, "memory": 1}
    assert dict(args.usage_thresholds) == {"cpu": 65, "memory": 95}
    assert dict(args.estimated_scaling_factors) == {"cpu": 85, "memory": 70}
    assert dict(args.prod_usage_thresholds) == {} and args.aggregated is None


def test_args_from_config():
    args = LoadAwareArgs.from_config({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "LoadAwareSchedulingArgs",
        "estimatedScalingFactors": {"cpu": 90, "nvidia.com/gpu": 50}, "dominantResourceWeight": 10,
        "usageThresholds": {}, "prodUsageThresholds": {"cpu": 55}, "estimatedSecondsAfterPodScheduled": 30,
        "aggregated": {"usageThresholds": {"cpu": 70}, "usageAggregationType": "p95",
                       "usageAggregatedDuration": "5m", "scoreAggregationType": "avg"},
        "supportedResources": ["ephemeral-storage"]})
    assert dict(args.estimated_scaling_factors) == {"cpu": 90, "memory": 70, "nvidia.com/gpu": 50}
    assert dict(args.resource_weights) == {}                   # the dominant weight alone scores
    assert dict(args.usage_thresholds) == {"cpu": 65, "memory": 95}
    assert args.aggregated == AggregatedArgs({"cpu": 70}, "p95", 300.0, "avg", 0.0)
    assert args.estimated_seconds_after_pod_scheduled == 30
    assert LoadAware(args).resources == ("cpu", "ephemeral-storage", "memory", "nvidia.com/gpu")


@pytest.mark.parametrize("doc, named", [
    ({"usageThreshold": {"cpu": 60}}, "usageThreshold"),
    ({"usageThresholds": {"cpu": 150}}, "usageThresholds.cpu"),
    ({"usageThresholds": {"cpu": "60"}}, "usageThresholds.cpu"),
    ({"resourceWeights": {"cpu": 0}}, "resourceWeights.cpu"),
    ({"resourceWeights": {"nvidia.com/gpu": 1}}, "nvidia.com/gpu"),
    ({"estimatedScalingFactors": {"memory": 0}}, "estimatedScalingFactors.memory"),
    ({"dominantResourceWeight": 101}, "dominantResourceWeight"),
    ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds"),
    ({"filterExpiredNodeMetrics": "yes"}, "filterExpiredNodeMetrics"),
    ({"aggregated": {"usageAggregationType": "p42"}}, "aggregated.usageAggregationType"),
    ({"aggregated": {"usageAggregatedDuration": "-5m"}}, "aggregated.usageAggregatedDuration"),
    ({"aggregated": {"scoreAggregatedDuration": 300}}, "aggregated.scoreAggregatedDuration"),
    ({"aggregated": {"usageThresholds": {"cpu": 60}, "window": "5m"}}, "window"),
    ({"kind": "DeviceShareArgs"}, "kind"),
    ({"supportedResources": "gpu"}, "supportedResources"),
])
def test_args_errors_name_the_key(doc, named):
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        LoadAwareArgs.from_config(doc)
