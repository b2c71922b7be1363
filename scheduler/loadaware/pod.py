"""What LoadAware reads of a pod: its estimated usage per resource (upstream's ``estimator/default_estimator.go``
and Kubernetes' PodRequests / PodLimits), its priority class, whether a DaemonSet owns it, its condition times and
its estimation annotations; and the records the plugin keeps of an incoming and an assigned pod.

Separate because it is pure per-pod reading, done once per pod object; the plugin combines it with the nodes and
their metrics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import KubeQOS
from koordlet.states import decode
from koordlet.states.pod import Pod, kube_qos_of
from scheduler.loadaware.metric import rfc3339
from scheduler.loadaware.names import ANNOTATION_SCALING_FACTORS, CPU, INT64, MEMORY, PodKey, Vec
from scheduler.requests import containers_total

DEFAULT_MILLI_CPU = 250                       # an incoming pod that asks for no cpu is estimated at 250m
DEFAULT_MEMORY = 200 * 1024 * 1024            # ... and at 200 MiB of memory
_DECIMAL = re.compile(r"[+-]?[0-9]{1,19}")   # strconv.ParseInt(s, 10, 64)
_POD_LEVEL = (CPU, MEMORY)                    # resources pod-level spec.resources may set (and hugepages-*)


def go_round(x: float) -> int:
    """Go's math.Round: to the nearest integer, halves away from zero (Python's round() goes to even)."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return t


def _quantity(raw: Any, where: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _section(c: Mapping[str, Any], kind: str, name: str, where: str) -> Fraction:
    raw = ((c.get("resources") or {}).get(kind) or {}).get(name)
    return Fraction(0) if raw is None else _quantity(raw, f"{where}.resources.{kind}.{name}")


def _pod_total(spec: Mapping[str, Any], kind: str, name: str) -> Fraction:
    """Kubernetes' PodRequests / PodLimits (component-helpers, default options) for one resource: the containers
    and the sidecars (restartable init containers) together, at least what any init container needs while it runs
    beside the sidecars started before it; pod-level ``spec.resources`` replace cpu, memory and hugepages-*; the
    overhead is added to requests, and to limits that are set."""
    total = containers_total(
        spec, lambda i, section, c: {name: _section(c, kind, name, f"spec.{section}[{i}]")}).get(name, Fraction(0))
    pod_level = spec.get("resources") or {}
    supported = name in _POD_LEVEL or name.startswith("hugepages-")
    if supported and _pod_level_set(pod_level, kind) and name in (pod_level.get(kind) or {}):
        total = _quantity(pod_level[kind][name], f"spec.resources.{kind}.{name}")
    overhead = (spec.get("overhead") or {}).get(name)
    if overhead is not None and (kind == "requests" or total != 0):
        total += _quantity(overhead, f"spec.overhead.{name}")
    return total


def _pod_level_set(pod_level: Mapping[str, Any], kind: str) -> bool:
    """IsPodLevelRequestsSet for requests; IsPodLevelResourcesSet (requests or limits) for limits."""
    sections = ("requests",) if kind == "requests" else ("requests", "limits")
    return any(r in _POD_LEVEL or str(r).startswith("hugepages-")
               for s in sections for r in (pod_level.get(s) or {}))


def estimate_resource(spec: Mapping[str, Any], name: str, factor: int) -> int:
    """Upstream's estimatedUsedByResource: max(request, limit) × factor / 100 in float64, rounded, capped at the
    limit; a pod that asks for none of cpu or memory (or their batch- twins) is estimated at 250m / 200 MiB."""
    if not name:                 # a priority class with no such resource (koord-free, or batch gpu): nothing asked
        return 0
    request, limit = _pod_total(spec, "requests", name), _pod_total(spec, "limits", name)
    quantity = limit if limit > request else request
    if quantity == 0:
        if name in (CPU, wire.BATCH_CPU):
            return DEFAULT_MILLI_CPU
        if name in (MEMORY, wire.BATCH_MEMORY):
            return DEFAULT_MEMORY
        return 0
    value, cap = (math.ceil(quantity * 1000), math.ceil(limit * 1000)) if name == CPU else \
        (math.ceil(quantity), math.ceil(limit))
    estimated = go_round(float(value) * float(factor) / 100)
    return cap if 0 < cap < estimated else estimated


def priority_class(pod: Mapping[str, Any]) -> str:
    """Upstream's GetPodPriorityClassWithDefault, through the agent's own rule (koordlet.states.pod.Pod): the
    ``koordinator.sh/priority-class`` label, else ``spec.priority``'s range, else from the QoS class (the
    ``koordinator.sh/qosClass`` label, else the Kubernetes class). A ``status.qosClass`` that is absent or not a
    Kubernetes class is computed from the spec, as kubectl does. ValueError when the spec's cpu/memory cannot be
    read for that."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = meta.get("labels")
    priority = spec.get("priority")
    try:
        kube_qos = KubeQOS((pod.get("status") or {}).get("qosClass"))
    except ValueError:
        kube_qos = kube_qos_of(spec)
    return Pod("", "", "", kube_qos, labels=labels if isinstance(labels, Mapping) else {},
               priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
               ).priority_class


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """A DaemonSet owns the pod: LoadAware's filter lets it pass (it must run on every node)."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("kind") == "DaemonSet" for r in refs)


def condition_time(pod: Mapping[str, Any], kind: str) -> float | None:
    """lastTransitionTime of a True condition of that type, or None (absent, not True, no time)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            raw = c.get("lastTransitionTime")
            if c.get("status") != "True" or not isinstance(raw, str) or not raw:
                return None
            return rfc3339(raw, f"status.conditions[{kind}].lastTransitionTime")
    return None


def annotation_seconds(annotations: Mapping[str, Any], key: str) -> int:
    """GetCustomEstimatedSeconds*: a decimal int64, or -1 when absent or not one."""
    raw = annotations.get(key)
    if isinstance(raw, str) and _DECIMAL.fullmatch(raw):
        value = int(raw)
        if INT64[0] <= value <= INT64[1]:
            return value
    return -1


@decode.decoder(ANNOTATION_SCALING_FACTORS)
def custom_factors(raw: str) -> dict[str, int]:
    """The pod's own factors. Upstream takes any int64; a negative factor is refused here (it would make the
    node's estimated usage shrink and push scores past 100)."""
    doc = decode.json_object(ANNOTATION_SCALING_FACTORS, raw)
    return {str(k): decode.integer(ANNOTATION_SCALING_FACTORS, v, str(k), 0, INT64[1]) for k, v in doc.items()}


@dataclass(frozen=True)
class PodInfo:
    """The incoming pod as filter and score need it; ``estimated`` is None when it could not be estimated."""
    prod: bool
    daemonset: bool
    estimated: Vec | None


@dataclass(frozen=True)
class Assigned:
    """One pod of a NodeLoad: upstream's podAssignInfo, reduced to what the sums need."""
    key: PodKey
    prod: bool
    estimated: Vec | None         # None: nothing estimated (all zero, or the pod could not be read)
    assigned_at: float
    deadline: float | None        # forced estimation until then (estimatedSecondsAfter*)
