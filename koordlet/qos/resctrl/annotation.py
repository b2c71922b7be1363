"""The ``node.koordinator.sh/resctrl`` pod annotation (upstream ``apis/extension/resctrl.go: ResctrlConfig``), checked:
keys matched as Go's encoding/json matches them, ranges and percents in bounds, one error naming the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.base import wire
from koordlet.states import decode
from koordlet.states.decode import decoder


@dataclass(frozen=True)
class PodResctrlConfig:
    """The ``node.koordinator.sh/resctrl`` annotation, checked (values are percents)."""
    llc: tuple[int, int] | None = None
    llc_per_cache: tuple[tuple[int, tuple[int, int]], ...] = ()
    mb: int | None = None
    mb_per_cache: tuple[tuple[int, int], ...] = ()


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go encoding/json field matching: the exact key, else any key equal ignoring case."""
    if name in obj:
        return obj[name]
    folded = name.casefold()
    for key, value in obj.items():
        if key.casefold() == folded:
            return value
    return None


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an integer, got {json.dumps(value)[:80]}")
    return value


def _range(value: Any, where: str) -> tuple[int, int] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"{where} must be [start, end], got {json.dumps(value)[:80]}")
    start, end = _int(value[0], f"{where}[0]"), _int(value[1], f"{where}[1]")
    if not 0 <= start < end <= 100:
        raise ValueError(f"{where} [{start}, {end}] must satisfy 0 <= start < end <= 100")
    return start, end


def _percent(value: Any, where: str) -> int | None:
    if value is None:
        return None
    p = _int(value, where)
    if p == 0:
        return None                     # Go's zero value: not set
    if not 0 < p <= 100:
        raise ValueError(f"{where} {p} must be 1-100")
    return p


@decoder(wire.ANNOTATION_POD_RESCTRL)
def parse_pod_resctrl(raw: str) -> PodResctrlConfig:
    """Parse the annotation (keys matched as Go does: ``llc``/``LLC``, ``mb``/``MB``, ``cacheID``/``cacheid``);
    DecodeError naming the field and the problem."""
    doc = decode.json_object(wire.ANNOTATION_POD_RESCTRL, raw)
    llc = _object(_field(doc, "llc"), "llc")
    mb = _object(_field(doc, "mb"), "mb")
    llc_range = _range(_field(_object(_field(llc, "schemata"), "llc.schemata"), "range"), "llc.schemata.range")
    mb_percent = _percent(_field(_object(_field(mb, "schemata"), "mb.schemata"), "percent"),
                          "mb.schemata.percent")

    def per_cache(section: Mapping[str, Any], name: str) -> list[tuple[int, Mapping[str, Any], str]]:
        items = _field(section, "schemataPerCache")
        if items is None:
            return []
        if not isinstance(items, list):
            raise ValueError(f"{name}.schemataPerCache must be a list")
        out = []
        for i, item in enumerate(items):
            where = f"{name}.schemataPerCache[{i}]"
            obj = _object(item, where)
            cache_id = _field(obj, "cacheID")
            out.append((0 if cache_id is None else _int(cache_id, f"{where}.cacheID"), obj, where))
        return out

    llc_pc = []
    for cache_id, obj, where in per_cache(llc, "llc"):
        r = _range(_field(obj, "range"), f"{where}.range")
        if r is not None:
            llc_pc.append((cache_id, r))
    mb_pc = []
    for cache_id, obj, where in per_cache(mb, "mb"):
        p = _percent(_field(obj, "percent"), f"{where}.percent")
        if p is not None:
            mb_pc.append((cache_id, p))
    return PodResctrlConfig(llc_range, tuple(llc_pc), mb_percent, tuple(mb_pc))
