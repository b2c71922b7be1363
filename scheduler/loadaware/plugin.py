"""koord-scheduler's LoadAwareScheduling plugin (``plugins/loadaware/load_aware.go``, ``pod_assign_cache.go``):
:class:`LoadAware` filters and scores a node by its estimated usage, and :class:`NodeLoad` holds the pods assigned
to one node with their sums against a NodeMetric.

The package's entry point: the extender and the cluster cache call these, and every other module serves them.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.states import decode
from scheduler.loadaware.args import LoadAwareArgs
from scheduler.loadaware.metric import NodeMetricView, nanoseconds, resource_value
from scheduler.loadaware.names import (
    ANNOTATION_RESERVE_POD,
    ANNOTATION_SCALING_FACTORS,
    ANNOTATION_SECONDS_AFTER_INITIALIZED,
    ANNOTATION_SECONDS_AFTER_SCHEDULED,
    ANNOTATION_USAGE_THRESHOLDS,
    CPU,
    MEMORY,
    REASON_AGGREGATED_USAGE,
    REASON_EXPIRED,
    REASON_USAGE,
    PodKey,
    Vec,
)
from scheduler.loadaware.node import AggregatedProfile, NodeState, Profile, custom_thresholds, raw_allocatable
from scheduler.loadaware.pod import (
    Assigned,
    PodInfo,
    annotation_seconds,
    condition_time,
    custom_factors,
    estimate_resource,
    go_round,
    is_daemonset_pod,
    priority_class,
)

log = logging.getLogger(__name__)

MAX_SCORE = 100
MAX_CACHED_NODES = 100_000                    # the node cache is cleared past this (far above any cluster)
_TRANSLATED = {wire.PRIORITY_BATCH: {CPU: wire.BATCH_CPU, MEMORY: wire.BATCH_MEMORY},
               wire.PRIORITY_MID: {CPU: wire.MID_CPU, MEMORY: wire.MID_MEMORY}}


@dataclass(frozen=True)
class LoadTotals:
    """Sums over a node's assigned pods against one NodeMetric (upstream nodeInfo's fields), as vectors over
    :attr:`LoadAware.resources`: prod pods' reported usage (plus systemUsage with prodUsageIncludeSys), the
    estimates that exceed what the report shows for pods it has not caught up with (node and prod), and the sum of
    all full estimates (used when the requested aggregated usage is missing)."""
    prod_usage: Vec
    node_delta: Vec
    prod_delta: Vec
    node_estimated: Vec


@dataclass(frozen=True)
class _MetricVectors:
    node_usage: Vec | None
    system_usage: Vec
    aggregated: Mapping[tuple[str, int], Vec]
    pod_usages: Mapping[PodKey, Vec]


class LoadAware:
    """Filter and score by estimated node usage, as koord-scheduler's LoadAwareScheduling does."""

    def __init__(self, args: LoadAwareArgs) -> None:
        self.args = args
        names = {CPU, MEMORY, *args.usage_thresholds, *args.prod_usage_thresholds, *args.resource_weights,
                 *args.estimated_scaling_factors, *args.supported_resources}
        if args.aggregated is not None:
            names.update(args.aggregated.usage_thresholds)
        self.resources: tuple[str, ...] = tuple(sorted(names))
        weights = self.factor_vec(args.resource_weights)
        # upstream: no weights and no dominant weight disable scoring (every node 0)
        self._weights: Vec | None = None if args.dominant_resource_weight == 0 and not any(weights) else weights
        agg = args.aggregated
        self._profile = Profile(
            self.factor_vec(args.usage_thresholds), self.factor_vec(args.prod_usage_thresholds),
            AggregatedProfile(self.factor_vec(agg.usage_thresholds), agg.usage_aggregation_type,
                              agg.usage_aggregated_duration)
            if agg is not None and agg.usage_thresholds and agg.usage_aggregation_type else None)
        self._nodes: dict[str, NodeState] = {}
        self._last_pod: tuple[Mapping[str, Any], PodInfo] | None = None
        self._warn = LogOnce(log)

    # -- vectors --

    def factor_vec(self, values: Mapping[str, int]) -> Vec:
        """A map over resource names as a vector over :attr:`resources` (names outside them are dropped)."""
        return tuple(values.get(name, 0) for name in self.resources)

    def _add(self, a: Vec, b: Vec) -> Vec:
        """Element-wise sum of two vectors over :attr:`resources` (equal lengths by construction)."""
        return tuple(map(operator.add, a, b))

    # -- estimation --

    def estimate(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """The pod's estimated usage per scaling-factor resource (``estimator/default_estimator.go``:
        ``DefaultEstimator.EstimatePod``): cpu in milli-cores, memory in bytes.
        Batch and mid pods are estimated from their kubernetes.io/batch-* / mid-* resources. ValueError when the
        pod's resources cannot be read."""
        factors: Mapping[str, int] = self.args.estimated_scaling_factors
        meta = pod.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(ANNOTATION_SCALING_FACTORS)
        if self.args.allow_customize_estimation and raw:
            try:
                custom = custom_factors(raw)
            except decode.DecodeError as e:
                self._warn("pod-factors", "pod annotation ignored pod=%s/%s reason=%s", meta.get("namespace"),
                           meta.get("name"), e)
                custom = {}
            if custom:
                factors = {**factors, **custom}
        pclass = priority_class(pod)
        spec = pod.get("spec") or {}
        out = {}
        for name, factor in factors.items():
            real = name if pclass in (wire.PRIORITY_PROD, wire.PRIORITY_NONE) else \
                _TRANSLATED.get(pclass, {}).get(name, "")
            out[name] = estimate_resource(spec, real, factor)
        return out

    def _pod_info(self, pod: Mapping[str, Any]) -> PodInfo:
        """The incoming pod, computed once per pod object (upstream keeps it in the cycle state)."""
        last = self._last_pod
        if last is not None and last[0] is pod:
            return last[1]
        try:
            prod = priority_class(pod) == wire.PRIORITY_PROD
            estimated: Vec | None = self.factor_vec(self.estimate(pod))
        except ValueError as e:
            meta = pod.get("metadata") or {}
            self._warn("pod-estimate", "pod not estimated pod=%s/%s reason=%s", meta.get("namespace"),
                       meta.get("name"), e)
            prod, estimated = False, None
        info = PodInfo(prod, is_daemonset_pod(pod), estimated)
        self._last_pod = (pod, info)
        return info

    def _assigned(self, pod: Mapping[str, Any], assigned_at: float) -> Assigned:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            prod = priority_class(pod) == wire.PRIORITY_PROD
            vec = self.factor_vec(self.estimate(pod))
            estimated = vec if any(vec) else None
            scheduled = condition_time(pod, "PodScheduled")
            timestamp = assigned_at if scheduled is None else scheduled
            deadline = self._deadline(pod, timestamp)
        except ValueError as e:       # the pod still counts as assigned, with nothing estimated (upstream's error path)
            self._warn("pod-estimate", "pod not estimated pod=%s/%s reason=%s", key[0], key[1], e)
            prod, estimated, timestamp, deadline = False, None, assigned_at, None
        return Assigned(key, prod, estimated, timestamp, deadline)

    def _deadline(self, pod: Mapping[str, Any], timestamp: float) -> float | None:
        """Upstream's shouldEstimatePodDeadline: estimation is forced until secondsAfterInitialized past the
        Initialized condition (when the pod is initialized), else secondsAfterPodScheduled past the assignment."""
        after_scheduled = after_initialized = -1
        if self.args.allow_customize_estimation:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            after_scheduled = annotation_seconds(annotations, ANNOTATION_SECONDS_AFTER_SCHEDULED)
            after_initialized = annotation_seconds(annotations, ANNOTATION_SECONDS_AFTER_INITIALIZED)
        if self.args.estimated_seconds_after_pod_scheduled is not None and after_scheduled < 0:
            after_scheduled = self.args.estimated_seconds_after_pod_scheduled
        if self.args.estimated_seconds_after_initialized is not None and after_initialized < 0:
            after_initialized = self.args.estimated_seconds_after_initialized
        if after_initialized > 0:
            initialized = condition_time(pod, "Initialized")
            if initialized is not None:
                return initialized + after_initialized
        if after_scheduled > 0:
            return timestamp + after_scheduled
        return None

    # -- nodes --

    def allocatable(self, node: Mapping[str, Any]) -> dict[str, int]:
        """The node's denominator per resource (upstream's EstimateNode): status.allocatable, overridden per key by
        the ``node.koordinator.sh/raw-allocatable`` annotation (the capacity before amplification)."""
        return dict(zip(self.resources, self._node_state(node).allocatable, strict=True))

    def _node_state(self, node: Mapping[str, Any]) -> NodeState:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        rv = str(meta.get("resourceVersion") or "")
        state = self._nodes.get(name)
        if state is not None and (state.source is node or (rv and state.resource_version == rv)):
            return state
        annotations = meta.get("annotations") or {}
        state = NodeState(node, rv, self._node_allocatable(name, node, annotations),
                          self._node_profile(name, annotations))
        if len(self._nodes) >= MAX_CACHED_NODES:
            self._nodes.clear()
        self._nodes[name] = state
        return state

    def _resource_list(self, values: Mapping[str, Any], where: str, node: str) -> dict[str, int]:
        out = {}
        for res in self.resources:
            if res in values:
                try:
                    out[res] = resource_value(res, decode.quantity(where, values[res], res))
                except ValueError as e:
                    self._warn(f"{node}/{where}/{res}", "node resource ignored node=%s reason=%s", node, e)
        return out

    def _node_allocatable(self, name: str, node: Mapping[str, Any], annotations: Mapping[str, Any]) -> Vec:
        status = (node.get("status") or {}).get("allocatable") or {}
        values = self._resource_list(status, "status.allocatable", name) if isinstance(status, Mapping) else {}
        raw = annotations.get(wire.ANNOTATION_RAW_ALLOCATABLE)
        if raw is not None:
            try:
                values.update(raw_allocatable(raw, self.resources))
            except decode.DecodeError as e:
                self._warn(f"{name}/raw-allocatable", "node annotation ignored node=%s key=%s reason=%s", name,
                           wire.ANNOTATION_RAW_ALLOCATABLE, e)
        return self.factor_vec(values)

    def _node_profile(self, name: str, annotations: Mapping[str, Any]) -> Profile:
        """generateUsageThresholdsFilterProfile: each section the annotation sets replaces the global one."""
        raw = annotations.get(ANNOTATION_USAGE_THRESHOLDS)
        if raw is None:
            return self._profile
        try:
            custom = custom_thresholds(raw)
        except decode.DecodeError as e:
            self._warn(f"{name}/usage-thresholds", "node annotation ignored node=%s key=%s reason=%s", name,
                       ANNOTATION_USAGE_THRESHOLDS, e)
            return self._profile
        agg = custom.aggregated
        if agg is not None and not (agg[0] and agg[1]):
            agg = None
        if not custom.usage and not custom.prod and agg is None:
            return self._profile
        base = self._profile
        return Profile(self.factor_vec(custom.usage) if custom.usage else base.usage,
                       self.factor_vec(custom.prod) if custom.prod else base.prod,
                       base.aggregated if agg is None else AggregatedProfile(self.factor_vec(agg[0]), agg[1], agg[2]))

    # -- metric and load --

    def _metric_vectors(self, metric: NodeMetricView) -> _MetricVectors:
        vec = self.factor_vec
        return _MetricVectors(None if metric.node_usage is None else vec(metric.node_usage),
                              vec(metric.system_usage),
                              {k: vec(v) for k, v in metric.aggregated.items()},
                              {k: vec(v) for k, v in metric.pod_usages.items()})

    def _totals(self, metric: NodeMetricView, vectors: _MetricVectors, pods: Iterable[Assigned]) -> LoadTotals:
        """Upstream's nodeInfo.addPod over every assigned pod."""
        n = len(self.resources)
        include_sys = self.args.prod_usage_include_sys and metric.node_usage is not None
        prod_usage = list(vectors.system_usage) if include_sys else [0] * n
        node_delta, prod_delta, node_estimated = [0] * n, [0] * n, [0] * n
        update = metric.update_time
        horizon = None if update is None else update - metric.report_interval

        def add_delta(total: list[int], e: Vec, u: Vec | None) -> None:
            for i in range(n):
                d = e[i] - (u[i] if u is not None else 0)
                if d > 0:
                    total[i] += d

        for pod in pods:
            u = vectors.pod_usages.get(pod.key)
            active_prod = pod.prod and pod.key in metric.prod_pods
            if active_prod and u is not None:
                for i in range(n):
                    prod_usage[i] += u[i]
            e = pod.estimated
            if e is None:
                continue
            # the report cannot show the pod yet: no usage, assigned within the last report interval, or in its
            # forced-estimation window (a zero Go time stands for a missing updateTime: always before)
            should = (u is None or horizon is None or horizon < pod.assigned_at
                      or (pod.deadline is not None and (update is None or pod.deadline > update)))
            if should:
                add_delta(node_delta, e, u)
            for i in range(n):
                node_estimated[i] += e[i]
            if not pod.prod:
                continue
            if not active_prod and u is not None:
                u, should = None, True
            if should:
                add_delta(prod_delta, e, u)
        return LoadTotals(tuple(prod_usage), tuple(node_delta), tuple(prod_delta), tuple(node_estimated))

    def _existing(self, metric: NodeMetricView, load: NodeLoad, prod: bool, kind: str, duration: float) -> Vec:
        """GetNodeMetricAndEstimatedOfExisting: the node's usage before the incoming pod."""
        vectors, totals = load._derive(metric)
        if prod:
            return self._add(totals.prod_usage, totals.prod_delta)
        if kind:
            usage = vectors.aggregated.get((kind, nanoseconds(duration)))
            if usage is None and nanoseconds(duration) == 0:
                usage = vectors.node_usage
        else:
            usage = vectors.node_usage
        if usage is None:
            return totals.node_estimated
        return self._add(usage, totals.node_delta)

    def expires_at(self, metric: NodeMetricView) -> float:
        """When the NodeMetric counts as expired (``nodeMetricExpirationSeconds`` after its updateTime): minus
        infinity without an updateTime, infinity when expiry is off. The one instant the plugin's answers for a
        node change with time alone, so the extender can remember them until then."""
        expiration = self.args.node_metric_expiration_seconds
        if metric.update_time is None:
            return -math.inf
        return metric.update_time + expiration if expiration > 0 else math.inf

    def _expired(self, metric: NodeMetricView, now: float) -> bool:
        return now >= self.expires_at(metric)

    # -- filter and score --

    def filter(self, pod: Mapping[str, Any], node: Mapping[str, Any], metric: NodeMetricView | None,
               load: NodeLoad, now: float) -> str | None:
        """None when the node passes; otherwise the reason, worded as upstream (``load_aware.go: Plugin.Filter``)."""
        info = self._pod_info(pod)
        if info.daemonset:
            return None
        state = self._node_state(node)
        profile = state.profile
        prod_pod = any(profile.prod) and info.prod
        aggregated = profile.aggregated if not prod_pod else None
        if prod_pod:
            thresholds = profile.prod
        elif aggregated is not None:
            thresholds = aggregated.thresholds
        else:
            thresholds = profile.usage
        if not any(thresholds):
            return None
        if metric is None:            # no agent on the node: load-aware placement is an optimization, let it pass
            return None
        if self.args.filter_expired_node_metrics and self._expired(metric, now):
            return None if self.args.enable_schedule_when_node_metrics_expired else REASON_EXPIRED
        if metric.node_usage is None:
            return None
        estimated = self._existing(metric, load, prod_pod, aggregated.kind if aggregated else "",
                                   aggregated.duration if aggregated else 0.0)
        if info.estimated is not None:
            estimated = self._add(estimated, info.estimated)
        for i, threshold in enumerate(thresholds):
            total = state.allocatable[i]
            if threshold == 0 or total == 0:
                continue
            if go_round(estimated[i] / total * 100) > threshold:
                reason = REASON_AGGREGATED_USAGE if aggregated is not None else REASON_USAGE
                return reason.format(self.resources[i])
        return None

    def score(self, pod: Mapping[str, Any], node: Mapping[str, Any], metric: NodeMetricView | None,
              load: NodeLoad, now: float) -> int:
        """0..100, not normalized (``load_aware.go: Plugin.Score``); 0 without a fresh NodeMetric."""
        weights = self._weights
        if weights is None or metric is None:
            return 0
        info = self._pod_info(pod)
        state = self._node_state(node)
        prod_pod = self.args.score_according_prod_usage and info.prod
        agg = self.args.aggregated
        kind, duration = ((agg.score_aggregation_type, agg.score_aggregated_duration)
                          if not prod_pod and agg is not None and agg.score_aggregation_type else ("", 0.0))
        if self._expired(metric, now) or metric.node_usage is None or info.estimated is None:
            return 0
        used = self._add(self._existing(metric, load, prod_pod, kind, duration), info.estimated)
        return _score(self.args.dominant_resource_weight, weights, used, state.allocatable)


def _score(dominant_weight: int, weights: Vec, used: Vec, allocatable: Vec) -> int:
    """loadAwareSchedulingScorer: the weighted mean of each resource's least-used score, the dominant weight
    applied to the lowest of them; int64 arithmetic (scores and weights are non-negative, so // truncates)."""
    node_score, weight_sum = 0, 0
    dominant = MAX_SCORE if dominant_weight else 0
    if dominant_weight:
        weight_sum = dominant_weight
    for weight, u, capacity in zip(weights, used, allocatable, strict=True):
        score = 0 if capacity == 0 or u > capacity else (capacity - u) * MAX_SCORE // capacity
        node_score += score * weight
        weight_sum += weight
        dominant = min(dominant, score)
    node_score += dominant * dominant_weight
    return node_score // weight_sum if weight_sum > 0 else 0


class NodeLoad:
    """The pods assigned to one node (upstream's pod assign cache, for one node), owned by the caller.

    Each pod is estimated once, when it is added; the sums against a NodeMetric are computed on first use after
    a change (an added or removed pod, or a new NodeMetricView) and then reused by every filter and score.
    """

    def __init__(self, plugin: LoadAware) -> None:
        self._plugin = plugin
        self._pods: dict[str, Assigned] = {}
        self._generation = 0
        self._derived: tuple[NodeMetricView, int, _MetricVectors, LoadTotals] | None = None

    def add(self, pod: Mapping[str, Any], assigned_at: float) -> bool:
        """Add (or replace, by uid) a pod bound or assumed to this node; whether that changed what the node
        counts (the watch's copy of a pod this scheduler assumed usually does not). ``assigned_at`` is when this
        scheduler assumed it; the pod's PodScheduled condition time wins when it has one. A terminated pod
        (Succeeded or Failed) is removed instead; koord-scheduler's reserve pods are not counted. ValueError
        without a uid."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ValueError("pod has no metadata.uid")
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return self.remove(uid)
        if (meta.get("annotations") or {}).get(ANNOTATION_RESERVE_POD) == "true":
            return False
        assigned = self._plugin._assigned(pod, assigned_at)
        if self._pods.get(uid) == assigned:
            return False
        self._pods[uid] = assigned
        self._generation += 1
        return True

    def remove(self, uid: str) -> bool:
        """Forget a pod; whether it was counted."""
        if self._pods.pop(uid, None) is None:
            return False
        self._generation += 1
        return True

    def __len__(self) -> int:
        return len(self._pods)

    def totals(self, metric: NodeMetricView) -> LoadTotals:
        """The sums over this node's pods against ``metric``."""
        return self._derive(metric)[1]

    def _derive(self, metric: NodeMetricView) -> tuple[_MetricVectors, LoadTotals]:
        cached = self._derived
        if cached is not None and cached[0] is metric:
            if cached[1] == self._generation:
                return cached[2], cached[3]
            vectors = cached[2]
        else:
            vectors = self._plugin._metric_vectors(metric)
        totals = self._plugin._totals(metric, vectors, self._pods.values())
        self._derived = (metric, self._generation, vectors, totals)
        return vectors, totals
