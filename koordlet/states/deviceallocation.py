"""The pod annotation ``scheduling.koordinator.sh/device-allocated``: which devices koord-scheduler gave a pod.

Format (``apis/extension/device_share.go: DeviceAllocations``): ``{"<type>": [{"minor": int, "resources": {name:
quantity}, "id": str, "extension": {"vfs": [{"minor": int, "busID": str}]}}]}``, per-card resources, quantities as
Kubernetes strings ("16Gi", "100"). Deprecated ``kubernetes.io/gpu*`` / ``kubernetes.io/rdma`` names are read as their
``koordinator.sh/`` twins, as the scheduler's transformers do. A malformed value raises DecodeError naming the field;
callers log it against the pod and treat the pod as having no allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from koordlet.base import wire
from koordlet.states import decode
from koordlet.states.decode import decoder

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


@decoder(wire.ANNOTATION_DEVICE_ALLOCATED)
def parse_device_allocated(raw: str) -> dict[str, list[DeviceAllocation]]:
    """Device type -> allocations, in annotation order. DecodeError with the offending field on bad input."""
    key = wire.ANNOTATION_DEVICE_ALLOCATED
    doc = decode.json_object(key, raw)
    out: dict[str, list[DeviceAllocation]] = {}
    for dtype, entries in doc.items():
        if entries is None:
            continue
        allocations = []
        for i, entry in enumerate(decode.array(key, entries, f"[{dtype}]", null=False)):
            at = f"[{dtype}][{i}]"
            entry = decode.obj(key, entry, at, null=False)
            resources: dict[str, Fraction] = {}
            for name, qty in decode.obj(key, entry.get("resources"), f"{at}.resources").items():
                resources[resource_name(name)] = decode.quantity(key, qty, f"{at}.resources[{name}]")
            extension = decode.obj(key, entry.get("extension"), f"{at}.extension")
            raw_vfs = decode.array(key, extension.get("vfs") or None, f"{at}.extension.vfs")
            vfs = tuple(VirtualFunction(decode.integer(key, vf.get("minor", 0), f"{at}.extension.vfs.minor"),
                                        str(vf.get("busID", "")))
                        for vf in raw_vfs if isinstance(vf, dict))
            allocations.append(DeviceAllocation(str(dtype), decode.integer(key, entry.get("minor", 0), f"{at}.minor"),
                                                str(entry.get("id", "")), resources, vfs))
        out[str(dtype)] = allocations
    return out
