"""The pod annotation ``scheduling.koordinator.sh/device-allocated``: which devices koord-scheduler gave a pod.

Format (reference/scheduler.md §2.1): ``{"<type>": [{"minor": int, "resources": {name: quantity}, "id": str,
"extension": {"vfs": [{"minor": int, "busID": str}]}}]}``, per-card resources, quantities as Kubernetes strings
("16Gi", "100"). Deprecated ``kubernetes.io/gpu*`` / ``kubernetes.io/rdma`` names are read as their
``koordinator.sh/`` twins, as the scheduler's transformers do. A malformed value raises ValueError naming the
field; callers log it against the pod and treat the pod as having no allocation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from koordlet import wire
from koordlet.quantity import parse_quantity

_DEPRECATED_PREFIX, _PREFIX = "kubernetes.io/", "koordinator.sh/"
_DEPRECATED = ("gpu", "gpu-core", "gpu-memory", "gpu-memory-ratio", "rdma", "fpga")


@dataclass(frozen=True)
class VirtualFunction:
    minor: int
    bus_id: str


@dataclass(frozen=True)
class DeviceAllocation:
    type: str
    minor: int
    id: str = ""
    resources: Mapping[str, Fraction] = field(default_factory=dict)
    vfs: tuple[VirtualFunction, ...] = ()


def resource_name(name: str) -> str:
    """The current name of a device resource (deprecated ``kubernetes.io/`` names read as ``koordinator.sh/``)."""
    if name.startswith(_DEPRECATED_PREFIX) and name[len(_DEPRECATED_PREFIX):] in _DEPRECATED:
        return _PREFIX + name[len(_DEPRECATED_PREFIX):]
    return name


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    """A JSON object field; absent/null is empty (Go's omitempty), anything else but an object is an error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def parse_device_allocated(raw: str) -> dict[str, list[DeviceAllocation]]:
    """Device type -> allocations, in annotation order. ValueError with the offending field on bad input."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{wire.ANNOTATION_DEVICE_ALLOCATED}: not JSON ({e.msg} at {e.pos})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{wire.ANNOTATION_DEVICE_ALLOCATED}: expected an object, got {type(doc).__name__}")
    out: dict[str, list[DeviceAllocation]] = {}
    for dtype, entries in doc.items():
        where = f"{wire.ANNOTATION_DEVICE_ALLOCATED}[{dtype}]"
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ValueError(f"{where}: expected a list, got {type(entries).__name__}")
        allocations = []
        for i, entry in enumerate(entries):
            at = f"{where}[{i}]"
            if not isinstance(entry, dict):
                raise ValueError(f"{at}: expected an object")
            resources: dict[str, Fraction] = {}
            for name, qty in _object(entry.get("resources"), f"{at}.resources").items():
                try:
                    resources[resource_name(name)] = parse_quantity(qty)
                except ValueError as e:
                    raise ValueError(f"{at}.resources[{name}]: {e}") from None
            raw_vfs = _object(entry.get("extension"), f"{at}.extension").get("vfs") or []
            if not isinstance(raw_vfs, list):
                raise ValueError(f"{at}.extension.vfs: expected a list, got {type(raw_vfs).__name__}")
            vfs = tuple(VirtualFunction(_int(vf.get("minor", 0), f"{at}.extension.vfs.minor"),
                                        str(vf.get("busID", "")))
                        for vf in raw_vfs if isinstance(vf, dict))
            allocations.append(DeviceAllocation(str(dtype), _int(entry.get("minor", 0), f"{at}.minor"),
                                                str(entry.get("id", "")), resources, vfs))
        out[str(dtype)] = allocations
    return out
