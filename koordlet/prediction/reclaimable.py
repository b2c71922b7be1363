"""How much of the Prod tier's requests the node can lend out, and the node's predicted Prod peak.

Upstream's ``ProdReclaimablePredictor`` (``pkg/koordlet/prediction/peak_predictor.go``) runs two predictors over the
pods that had metrics in the report window and takes the element-wise minimum of their reclaimable results (and the
maximum of their peaks), so the answer is only as optimistic as the more careful of the two:
* the pod predictor sums, pod by pod, ``request − peak`` where the pod's own model predicts its peak;
* the priority predictor compares the summed requests with the predicted peak of the whole Prod tier plus the
  system, which catches pods whose peaks never coincide.

Only pods whose priority class is ``koord-prod`` or none (``""``) take part. A peak is the model's p95 CPU /
p98 memory times (1 + safety margin), truncated to integers as upstream's quantities are. The result feeds
NodeMetric ``status.prodReclaimableMetric.resource`` and ``status.prodPeakMetric.resource``.

One difference from upstream, on purpose: upstream stops feeding a pod to the priority predictor when the pod
predictor has no model for it (the first predictor's error short-circuits the second), so that pod's request is
missing from the Prod request sum while its usage is in the Prod tier's model. Here every Prod pod reaches
both predictors; the pod predictor still counts such a pod as unpredicted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import milli, parse_quantity
from koordlet.prediction.server import SYSTEM_ITEM, PredictionConfig, Resources, node_item_key
from koordlet.states import decode

log = logging.getLogger(__name__)
_warn_once = LogOnce(log)      # the Node is re-read every report; a bad field is reported when it changes

# peak_predictor.go isPriorityClassReclaimableForProd.
RECLAIMABLE_PRIORITY_CLASSES = (wire.PRIORITY_PROD, wire.PRIORITY_NONE)

_DEFAULTS = PredictionConfig()
Predict = Callable[[str], Resources | None]


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod as the predictors see it.

    Requests are upstream's ``GetPodRequest`` (max of the summed containers and each init container, plus
    overhead), CPU as milli-cores rounded up and memory in bytes. ``terminating`` is true when the pod has a
    deletionTimestamp or its phase is Succeeded or Failed. ``created`` is the creationTimestamp in Unix seconds.
    """

    uid: str
    priority_class: str
    cpu_request_milli: int
    memory_request_bytes: int
    created: float
    terminating: bool

    @property
    def request(self) -> Resources:
        return Resources(self.cpu_request_milli, self.memory_request_bytes)


@dataclass(frozen=True, slots=True)
class ReclaimPrediction:
    """``reclaimable`` / ``peak`` are None when they could not be computed; ``error`` then says why.

    Upstream sends ``prodReclaimableMetric`` as ``{"resource": {}}`` when reclaimable is None and omits
    ``prodPeakMetric`` when peak is None.
    """

    reclaimable: Resources | None
    peak: Resources | None
    error: str | None = None


def _add(a: Resources, b: Resources) -> Resources:
    return Resources(a.cpu_milli + b.cpu_milli, a.memory_bytes + b.memory_bytes)


def _min(a: Resources, b: Resources) -> Resources:
    return Resources(min(a.cpu_milli, b.cpu_milli), min(a.memory_bytes, b.memory_bytes))


def _max(a: Resources, b: Resources) -> Resources:
    return Resources(max(a.cpu_milli, b.cpu_milli), max(a.memory_bytes, b.memory_bytes))


def _floor_sub(a: Resources, b: Resources) -> Resources:
    """a − b per resource, never below 0."""
    return Resources(max(a.cpu_milli - b.cpu_milli, 0), max(a.memory_bytes - b.memory_bytes, 0))


def _with_margin(peak: Resources, safety_margin_percent: int) -> Resources:
    """Upstream's MultiplyMilliQuant / MultiplyQuant: value × (100 + margin) / 100 in float64, truncated."""
    ratio = (100 + safety_margin_percent) / 100
    return Resources(int(peak.cpu_milli * ratio), int(peak.memory_bytes * ratio))


def node_allocatable(node: Mapping[str, Any]) -> Resources | None:
    """The allocatable the predictors cap against, from a Kubernetes Node object: the
    ``node.koordinator.sh/raw-allocatable`` annotation (a JSON ResourceList) when present and valid, else
    ``status.allocatable``; None when neither exists. A resource missing from the list counts as 0."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(wire.ANNOTATION_RAW_ALLOCATABLE)
    if raw is not None:
        try:
            return _resources_of(decode.json_object(wire.ANNOTATION_RAW_ALLOCATABLE, raw))
        except ValueError as exc:
            _warn_once("raw-allocatable", "node annotation ignored key=%s reason=%s",
                       wire.ANNOTATION_RAW_ALLOCATABLE, exc)
    allocatable = (node.get("status") or {}).get("allocatable")
    if not isinstance(allocatable, dict):
        return None
    try:
        return _resources_of(allocatable)
    except ValueError as exc:
        _warn_once("allocatable", "node status.allocatable ignored reason=%s", exc)
        return None


def _resources_of(resource_list: Mapping[str, Any]) -> Resources:
    memory = parse_quantity(resource_list.get("memory", 0))
    return Resources(milli(resource_list.get("cpu", 0)), -((-memory.numerator) // memory.denominator))


def _reclaimable_pods(pods: Iterable[PodRequest]) -> list[PodRequest]:
    """The Prod (or unclassed) pods, each UID once: upstream rejects a pod it has already seen."""
    seen: set[str] = set()
    out = []
    for pod in pods:
        if pod.priority_class in RECLAIMABLE_PRIORITY_CLASSES and pod.uid not in seen:
            seen.add(pod.uid)
            out.append(pod)
    return out


def pod_predictor(now: float, allocatable: Resources | None, pods: Iterable[PodRequest], predict: Predict,
                  cold_start: float = _DEFAULTS.cold_start,
                  safety_margin_percent: int = _DEFAULTS.safety_margin_percent) -> ReclaimPrediction:
    """Per-pod prediction. A pod no older than ``cold_start``, or without a model, may not lend anything and
    counts its whole request towards the peak; a terminating pod (checked after the cold start, as upstream)
    is ignored; any other pod lends ``max(request − peak, 0)`` and contributes its peak.

    reclaimable = min(allocatable − Σpeak (≥ 0), Σlendable); peak = Σpeak + Σunpredicted requests.
    """
    zero = Resources(0, 0)
    lendable, peaks, unpredicted = zero, zero, zero
    for pod in _reclaimable_pods(pods):
        if now - pod.created <= cold_start:
            unpredicted = _add(unpredicted, pod.request)
            continue
        if pod.terminating:
            continue
        predicted = predict(pod.uid)
        if predicted is None:
            unpredicted = _add(unpredicted, pod.request)
            continue
        peak = _with_margin(predicted, safety_margin_percent)
        peaks = _add(peaks, peak)
        lendable = _add(lendable, _floor_sub(pod.request, peak))
    peak_total = _add(peaks, unpredicted)
    if allocatable is None:
        return ReclaimPrediction(None, peak_total, "pod predictor: node allocatable unknown")
    return ReclaimPrediction(_min(_floor_sub(allocatable, peaks), lendable), peak_total)


def priority_predictor(allocatable: Resources | None, pods: Iterable[PodRequest], predict: Predict,
                       safety_margin_percent: int = _DEFAULTS.safety_margin_percent) -> ReclaimPrediction:
    """Tier prediction. peak = (sys + koord-prod + none item peaks) × (1 + margin); the request sum covers
    every non-terminating Prod pod, cold-start ones included.

    reclaimable = min(allocatable − peak (≥ 0), max(Σrequests − peak, 0)).
    """
    predicted = Resources(0, 0)
    for item in (SYSTEM_ITEM, *RECLAIMABLE_PRIORITY_CLASSES):
        item_peak = predict(node_item_key(item))
        if item_peak is None:
            return ReclaimPrediction(None, None, f"priority predictor: no model for {node_item_key(item)}")
        predicted = _add(predicted, item_peak)
    peak = _with_margin(predicted, safety_margin_percent)
    requests = Resources(0, 0)
    for pod in _reclaimable_pods(pods):
        if not pod.terminating:
            requests = _add(requests, pod.request)
    if allocatable is None:
        return ReclaimPrediction(None, peak, "priority predictor: node allocatable unknown")
    return ReclaimPrediction(_min(_floor_sub(allocatable, peak), _floor_sub(requests, peak)), peak)


def combine(a: ReclaimPrediction, b: ReclaimPrediction) -> ReclaimPrediction:
    """Upstream's minPredictor: reclaimable = element-wise min, peak = element-wise max; either side missing
    makes that field missing."""
    reclaimable = None if a.reclaimable is None or b.reclaimable is None else _min(a.reclaimable, b.reclaimable)
    peak = None if a.peak is None or b.peak is None else _max(a.peak, b.peak)
    errors = [e for e in (a.error, b.error) if e]
    return ReclaimPrediction(reclaimable, peak, "; ".join(errors) or None)


# upstream's predictor names (GetPredictorName), the ``predictor`` label of koordlet_node_predicted_resource_*
POD_PREDICTOR, PRIORITY_PREDICTOR, MIN_PREDICTOR = \
    "podReclaimablePredictor", "priorityReclaimablePredictor", "minPredictor"


def predict_each(now: float, allocatable: Resources | None, pods: Iterable[PodRequest], predict: Predict,
                 config: PredictionConfig = _DEFAULTS) -> dict[str, ReclaimPrediction]:
    """Each predictor's answer by upstream's predictor name; :data:`MIN_PREDICTOR` is the one reported."""
    pods = list(pods)
    by_pod = pod_predictor(now, allocatable, pods, predict, config.cold_start, config.safety_margin_percent)
    by_priority = priority_predictor(allocatable, pods, predict, config.safety_margin_percent)
    return {POD_PREDICTOR: by_pod, PRIORITY_PREDICTOR: by_priority, MIN_PREDICTOR: combine(by_pod, by_priority)}


def predict_prod_reclaimable(now: float, allocatable: Resources | None, pods: Iterable[PodRequest],
                             predict: Predict, config: PredictionConfig = _DEFAULTS) -> ReclaimPrediction:
    """The numbers for ``prodReclaimableMetric`` and ``prodPeakMetric``; ``predict`` is
    ``PeakPredictServer.predict``."""
    return predict_each(now, allocatable, pods, predict, config)[MIN_PREDICTOR]
