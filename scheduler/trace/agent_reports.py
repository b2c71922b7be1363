"""Nodes read back from the agent's own reports: :func:`read_report_dir` reads what ``koordlet report --once -o
yaml|json`` prints (several documents, or a JSON List) or what its standalone sink writes into ``report-dir``
(``nodemetric.yaml``, ``noderesourcetopology.yaml``, ``device.yaml``), any number of nodes, in one directory or its
subdirectories.

Separate because it is the one input that is not the trace: real machines, described by the agent itself, placed
beside (or instead of) the trace's nodes.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from koordlet.base import wire
from koordlet.base.quantity import milli, parse_quantity
from koordlet.base.yamlfile import loads_yaml
from koordlet.states.kubeapi import DEVICES, NODE_METRICS, NODE_RESOURCE_TOPOLOGIES
from scheduler.trace.cluster import DEVICE_KIND, node_json

NRT_KIND, NODE_METRIC_KIND = "NodeResourceTopology", "NodeMetric"
# koord-manager copies these Device labels onto the Node (pkg/slo-controller/noderesource/plugins/gpudeviceresource)
NODE_LABELS_FROM_DEVICE = (wire.LABEL_GPU_VENDOR, wire.LABEL_GPU_MODEL, wire.LABEL_GPU_DRIVER_VERSION)
_REPORT_SUFFIXES = (".yaml", ".yml", ".json")
_DOCUMENT_START = re.compile(r"^---(?=\s|$)", re.MULTILINE)
_REPORT_KINDS = {DEVICE_KIND: DEVICES.api_version, NRT_KIND: NODE_RESOURCE_TOPOLOGIES.api_version,
                 NODE_METRIC_KIND: NODE_METRICS.api_version}


def _documents(path: str) -> list[Any]:
    """Every document of a YAML stream (``report --once`` separates them with ``---`` lines), each read with the
    agent's bounded loader; a JSON List's items count as documents."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"report {path}: not UTF-8 text: {e.reason}") from None
    out: list[Any] = []
    for n, chunk in enumerate(_DOCUMENT_START.split(text), start=1):
        doc = loads_yaml(chunk, f"report {path} (document {n})")
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        elif doc is not None:
            out.append(doc)
    return out


def _zone_totals(nrt: Mapping[str, Any], where: str) -> tuple[dict[str, int], dict[str, int]]:
    """Allocatable and capacity of cpu (milli) and memory (bytes) summed over the NUMA zones."""
    allocatable = {"cpu": 0, "memory": 0}
    capacity = {"cpu": 0, "memory": 0}
    seen = set()
    for zone in nrt.get("zones") or []:
        if not isinstance(zone, Mapping) or zone.get("type") != "Node":
            continue
        for r in zone.get("resources") or []:
            name = r.get("name") if isinstance(r, Mapping) else None
            if name not in allocatable:
                continue
            try:
                for into, key in ((allocatable, "allocatable"), (capacity, "capacity")):
                    raw = r.get(key, r.get("allocatable"))
                    into[name] += milli(raw) if name == "cpu" else math.ceil(parse_quantity(raw))
            except ValueError as e:
                raise ValueError(f"{where}: zone {zone.get('name')} {name}: {e}") from None
            seen.add(name)
    missing = sorted(set(allocatable) - seen)
    if missing:
        raise ValueError(f"{where}: no {' or '.join(missing)} in any zone of type Node")
    return allocatable, capacity


def read_report_dir(path: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(Node, Device or None) per node name, sorted by name, from the agent's report objects under ``path``.

    The Node's cpu and memory are the NodeResourceTopology's zones summed (allocatable and capacity), its labels
    the Device's vendor, model and driver labels (what koord-manager copies) and its ``nvidia.com/gpu`` the healthy
    GPUs; the Device is returned as reported (None when the node has none). NodeMetrics are accepted and not used.
    Every node needs a NodeResourceTopology; an object of another kind, one without a name, or a second object of
    the same kind for a node is a ValueError naming the file.
    """
    if not os.path.isdir(path):
        raise ValueError(f"report directory {path}: not a directory")
    found: dict[str, dict[str, tuple[Mapping[str, Any], str]]] = {}
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for file in sorted(files):
            if file.startswith(".") or not file.endswith(_REPORT_SUFFIXES):
                continue                          # the sink's temporary files, anything not a report
            full = os.path.join(root, file)
            for n, obj in enumerate(_documents(full), start=1):
                where = f"report {full} (object {n})"
                kind = obj.get("kind") if isinstance(obj, Mapping) else None
                if kind not in _REPORT_KINDS or obj.get("apiVersion") != _REPORT_KINDS[kind]:
                    raise ValueError(f"{where}: not an object the agent reports (kinds "
                                     f"{', '.join(_REPORT_KINDS)}), got kind {kind!r:.40}")
                name = (obj.get("metadata") or {}).get("name")
                if not isinstance(name, str) or not name:
                    raise ValueError(f"{where}: {kind} without metadata.name")
                earlier = found.setdefault(name, {}).get(kind)
                if earlier is not None:
                    raise ValueError(f"{where}: a second {kind} for node {name} (the first in {earlier[1]})")
                found[name][kind] = (obj, where)
    out: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for name in sorted(found):
        objects = found[name]
        if NRT_KIND not in objects:
            raise ValueError(f"report directory {path}: node {name} has no NodeResourceTopology (its cpu and memory "
                             "come from the zones; the agent reports it unless node-topology-sync-interval is 0)")
        nrt, where = objects[NRT_KIND]
        allocatable, capacity = _zone_totals(nrt, where)
        device = dict(objects[DEVICE_KIND][0]) if DEVICE_KIND in objects else None
        labels: dict[str, str] = {}
        gpus = 0
        if device is not None:
            device_labels = (device.get("metadata") or {}).get("labels") or {}
            labels = {k: str(device_labels[k]) for k in NODE_LABELS_FROM_DEVICE if k in device_labels}
            gpus = sum(1 for d in (device.get("spec") or {}).get("devices") or []
                       if isinstance(d, Mapping) and d.get("type") == wire.DEVICE_GPU and d.get("health") is True)
        out.append((node_json(name, allocatable["cpu"], allocatable["memory"], gpus, labels,
                              (capacity["cpu"], capacity["memory"])), device))
    return out
