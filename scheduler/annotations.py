"""The annotations the extender writes, byte for byte as koord-scheduler's Go code marshals them.

Go's ``encoding/json`` writes struct fields in declaration order, map keys sorted, no spaces, and escapes ``<``,
``>``, ``&``, U+2028 and U+2029; quantities are strings in canonical form (``resource.Quantity.String()``): bytes
(gpu-memory) in BinarySI, everything else in DecimalSI. ``DeviceAllocation`` is ``{minor, resources, id
(omitempty), extension (omitempty): {vfs (omitempty): [{minor (omitempty), busID (omitempty)}]}}``
(``apis/extension/device_share.go: DeviceAllocation``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from koordlet.base.quantity import format_bytes, format_milli
from koordlet.states.deviceallocation import DeviceAllocation
from scheduler.devices import NodeDevices
from scheduler.requests import MEMORY, value

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(value: Any) -> str:
    """``json.Marshal`` of a value built from dicts in Go field order (map keys must already be sorted)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def quantity(name: str, v: Fraction) -> str:
    n = value(v)
    return format_bytes(n) if name == MEMORY else format_milli(n * 1000)


def _allocation(a: DeviceAllocation, device_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {"minor": a.minor,
                           "resources": {k: quantity(k, a.resources[k]) for k in sorted(a.resources)}}
    if device_id:
        out["id"] = device_id
    if a.vfs:
        vfs = []
        for vf in a.vfs:
            entry: dict[str, Any] = {}
            if vf.minor:
                entry["minor"] = vf.minor
            if vf.bus_id:
                entry["busID"] = vf.bus_id
            vfs.append(entry)
        out["extension"] = {"vfs": vfs}
    return out


def format_device_allocated(result: Mapping[str, list[DeviceAllocation]], nd: NodeDevices | None = None) -> str:
    """The ``scheduling.koordinator.sh/device-allocated`` value; ids are taken from the node's Device CR (set at
    PreBind upstream) when ``nd`` is given, else kept from the allocations."""
    doc = {}
    for dtype in sorted(result):
        entries = []
        for a in result[dtype]:
            device = nd.device(dtype, a.minor) if nd is not None else None
            entries.append(_allocation(a, device.id if device is not None and device.id else a.id))
        doc[dtype] = entries
    return go_json(doc)
