"""The pod annotations NodeNUMAResource reads: a tenant's ``resource-spec`` (CPU bind and exclusive policies) and
``numa-topology-spec`` (NUMA policy), and an assigned pod's ``resource-status`` (its cpuset and NUMA shares), each
decoded as Go's encoding/json reads it (``apis/extension/numa_aware.go``), with the bounds of
:mod:`koordlet.states.decode`.

Separate because the plugin (the incoming pod) and the node's usage (its assigned pods) both decode them, and
each raises only DecodeError, so the caller decides what a bad one costs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koordlet.base import wire
from koordlet.states import decode
from scheduler.numa.names import (
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_SPEC,
    BIND_POLICIES,
    EXCLUSIVE_POLICIES,
    MAX_LIST_ENTRIES,
    NUMA_EXCLUSIVES,
    NUMA_POLICIES,
)
from scheduler.numa.quantity import quantity_of


def _field(doc: Mapping[str, Any], name: str) -> Any:
    """A field as Go's encoding/json finds it: the exact key, else a key equal to it ignoring case."""
    if name in doc:
        return doc[name]
    folded = name.casefold()
    for k, v in doc.items():
        if str(k).casefold() == folded:
            return v
    return None


def _enum(key: str, doc: Mapping[str, Any], name: str, allowed: Sequence[str]) -> str:
    raw = _field(doc, name)
    if raw is None:
        return ""
    value = decode.string(key, raw, name)
    if value not in allowed:
        raise decode.DecodeError(key, f"{name}: {value!r:.40} is not one of {', '.join(a for a in allowed if a)}")
    return value


@decode.decoder(ANNOTATION_RESOURCE_SPEC)
def resource_spec(annotations: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(requiredCPUBindPolicy, preferredCPUBindPolicy, preferredCPUExclusivePolicy)``; DecodeError when bad."""
    raw = annotations.get(ANNOTATION_RESOURCE_SPEC)
    if raw is None:
        return "", "", ""
    doc = decode.json_object(ANNOTATION_RESOURCE_SPEC, raw)
    key = ANNOTATION_RESOURCE_SPEC
    return (_enum(key, doc, "requiredCPUBindPolicy", BIND_POLICIES),
            _enum(key, doc, "preferredCPUBindPolicy", BIND_POLICIES),
            _enum(key, doc, "preferredCPUExclusivePolicy", EXCLUSIVE_POLICIES))


@decode.decoder(ANNOTATION_NUMA_TOPOLOGY_SPEC)
def numa_topology_spec(annotations: Mapping[str, Any]) -> tuple[str, str]:
    """``(numaTopologyPolicy, singleNUMANodeExclusive)``; DecodeError when bad."""
    raw = annotations.get(ANNOTATION_NUMA_TOPOLOGY_SPEC)
    if raw is None:
        return "", ""
    key = ANNOTATION_NUMA_TOPOLOGY_SPEC
    doc = decode.json_object(key, raw)
    return (_enum(key, doc, "numaTopologyPolicy", NUMA_POLICIES),
            _enum(key, doc, "singleNUMANodeExclusive", NUMA_EXCLUSIVES))


@decode.decoder(wire.ANNOTATION_RESOURCE_STATUS)
def resource_status(annotations: Mapping[str, Any]) -> tuple[frozenset[int], dict[int, dict[str, int]]]:
    """An assigned pod's ``(cpuset, {NUMA node: {resource: milli}})``; DecodeError when bad."""
    raw = annotations.get(wire.ANNOTATION_RESOURCE_STATUS)
    if raw is None:
        return frozenset(), {}
    key = wire.ANNOTATION_RESOURCE_STATUS
    doc = decode.json_object(key, raw)
    cpus = frozenset(decode.cpu_list(key, _field(doc, "cpuset") or "", "cpuset"))
    numa: dict[int, dict[str, int]] = {}
    entries = decode.array(key, _field(doc, "numaNodeResources"), "numaNodeResources", max_items=MAX_LIST_ENTRIES)
    for i, e in enumerate(entries):
        at = f"numaNodeResources[{i}]"
        e = decode.obj(key, e, at, null=False)
        raw_node = _field(e, "node")
        node = decode.integer(key, 0 if raw_node is None else raw_node, f"{at}.node", 0, MAX_LIST_ENTRIES)
        resources = numa.setdefault(node, {})
        for name, q in decode.obj(key, _field(e, "resources"), f"{at}.resources").items():
            resources[name] = resources.get(name, 0) + quantity_of(key, q, f"{at}.resources[{name}]").milli
    return cpus, numa
