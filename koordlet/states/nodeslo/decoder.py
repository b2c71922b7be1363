"""The NodeSLO decoder: a JSON/YAML value overlaid on a typed base (``koordlet.states.nodeslo.schema``).

Go's encoding/json semantics, as upstream gets them by unmarshalling a received section onto a copy of its
defaults (``pkg/koordlet/statesinformer/impl/states_nodeslo.go``, ``mergeNodeSLOSpec``): present keys override,
nested objects merge, arrays and scalars replace, maps merge key by key. The received object is first decoded
into typed Go structs and re-marshalled with ``omitempty``, so an explicit ``null``, an empty list, an empty map
and (for non-pointer strings) ``""`` all behave as absent. With ``check`` the decoder also applies upstream's
validation (the schema's bounds and enums); without it only the type errors Go's ``json.Unmarshal`` itself
rejects.

Beyond upstream: a malformed section (wrong type, out of range, unknown enum) falls back to its base with one
error naming the field path and the problem, and every other section still applies (upstream rejects the whole
ConfigMap key, or silently keeps half-decoded values); a bad element of a list of sections (host applications
with an unknown ``qos`` / ``priority`` / ``cgroupPath.base``) is dropped. Paired limits (``*LowerPercent`` <
``*ThresholdPercent``, ``catRangeStartPercent`` < ``catRangeEndPercent``) are compared after the merge, only when
both are set: the webhook also rejects one of a pair given alone, which would reject upstream's own defaults
(``memoryEvictThresholdPercent`` 70 without a lower bound).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeVar

from koordlet.base.quantity import parse_quantity
from koordlet.states.nodeslo.schema import ABSENT, WireField

log = logging.getLogger(__name__)

__all__ = ["EXT_MAX_DEPTH", "DecodeContext", "show", "decode_value", "decode_obj", "report", "overlay"]

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_T = TypeVar("_T")


@dataclass
class _Err:
    path: str
    problem: str
    section: str | None = None
    dropped: bool = False


class DecodeContext:
    """What decoding one value found: errors (each owned by the section that falls back) and ignored fields."""

    def __init__(self, check: bool) -> None:
        self.check = check               # False: type errors only (what Go's json.Unmarshal itself rejects)
        self.errors: list[_Err] = []
        self.warnings: list[tuple[str, str]] = []        # (path, reason): ignored, not errors

    def bad(self, path: str, problem: str) -> Any:
        self.errors.append(_Err(path, problem))
        return ABSENT

    def claim(self, mark: int, section: str) -> None:
        """Errors since ``mark`` not yet owned by an inner section belong to ``section``."""
        for e in self.errors[mark:]:
            if e.section is None:
                e.section = section


_SHOW_NODES = 256            # a value with more nodes than this is shown by a bounded repr, not json.dumps
_SHOW_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOW_REPR.maxlevel = 3
_SHOW_REPR.maxdict = _SHOW_REPR.maxlist = _SHOW_REPR.maxtuple = _SHOW_REPR.maxset = _SHOW_REPR.maxfrozenset = 4
_SHOW_REPR.maxstring = _SHOW_REPR.maxlong = _SHOW_REPR.maxother = 60
EXT_MAX_DEPTH = 64           # nesting accepted inside spec.extensions.Object (the only raw JSON the spec keeps)


def _nodes_within(v: Any, limit: int) -> bool:
    """Whether ``v`` has at most ``limit`` nodes (values, containers and keys), found by looking at no more."""
    stack, seen = [v], 0
    while stack:
        seen += 1
        if seen > limit:
            return False
        x = stack.pop()
        if isinstance(x, Mapping):
            stack.extend(itertools.islice(itertools.chain.from_iterable(x.items()), limit))
        elif isinstance(x, (list, tuple)):
            stack.extend(x[:limit])
    return True


def _depth_within(v: Any, limit: int) -> bool:
    """Whether ``v`` nests at most ``limit`` lists/objects deep (iterative: a value nested thousands of levels
    deep is answered, not a RecursionError)."""
    stack = [(v, 1)]
    while stack:
        x, level = stack.pop()
        if isinstance(x, Mapping):
            children: Any = x.values()
        elif isinstance(x, (list, tuple)):
            children = x
        else:
            continue
        if level > limit:
            return False
        stack.extend((c, level + 1) for c in children)
    return True


def show(v: Any) -> str:
    """``<kind> <JSON text>`` cut to 60 characters for an error message; costs little whatever the value's size
    or depth (a large value is rendered by a bounded repr instead of JSON)."""
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object",
            type(None): "null"}.get(type(v), type(v).__name__)
    try:
        text = json.dumps(v) if _nodes_within(v, _SHOW_NODES) else _SHOW_REPR.repr(v)
    except (TypeError, ValueError):            # not JSON (a YAML timestamp, bytes), or an int json cannot print
        try:
            text = _SHOW_REPR.repr(v)
        except ValueError:                      # an int of more digits than str() converts
            text = "..."
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"


def decode_value(w: WireField, raw: Any, cur: Any, path: str, ctx: DecodeContext) -> Any:
    kind = w.kind
    if kind == "obj":
        return decode_obj(w.cls, raw, cur, path, ctx)
    if kind == "list":
        return _decode_list(w, raw, path, ctx)
    if kind == "bool":
        if not isinstance(raw, bool):
            return ctx.bad(path, f"expected true or false, got {show(raw)}")
        return raw
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            return ctx.bad(path, f"expected an integer, got {show(raw)}")
        lo, hi = _INT32 if w.int32 else _INT64
        if not lo <= raw <= hi:
            return ctx.bad(path, f"{raw} does not fit in {'int32' if w.int32 else 'int64'}")
        if ctx.check:
            if w.lo is not None and w.hi is not None and not w.lo <= raw <= w.hi:
                return ctx.bad(path, f"must be between {w.lo} and {w.hi}, got {raw}")
            if w.lo is not None and raw < w.lo:
                return ctx.bad(path, f"must be at least {w.lo}, got {raw}")
            if w.hi is not None and raw > w.hi:
                return ctx.bad(path, f"must be at most {w.hi}, got {raw}")
            if w.gt is not None and raw <= w.gt:
                return ctx.bad(path, f"must be greater than {w.gt}, got {raw}")
        return raw
    if kind in ("str", "enum"):
        if not isinstance(raw, str):
            return ctx.bad(path, f"expected a string, got {show(raw)}")
        if raw == "" and w.empty_absent:
            return ABSENT
        if kind == "enum" and ctx.check and raw not in w.enum:
            allowed = ", ".join(repr(e) for e in w.enum)
            return ctx.bad(path, f"unknown value {raw!r:.80}, expected one of {allowed}")
        return raw
    if kind == "quantity":
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            return ctx.bad(path, f"expected a quantity such as \"10G\", got {show(raw)}")
        try:
            parse_quantity(raw)
        except ValueError as e:
            return ctx.bad(path, str(e))
        return str(raw)
    if kind == "intorstr":
        if isinstance(raw, str):
            if ctx.check:
                try:
                    parse_quantity(raw)
                except ValueError as e:
                    return ctx.bad(path, str(e))
            return raw
        if isinstance(raw, bool) or not isinstance(raw, int):
            return ctx.bad(path, f"expected a percent (integer) or a quantity string, got {show(raw)}")
        if not _INT32[0] <= raw <= _INT32[1]:
            return ctx.bad(path, f"{raw} does not fit in int32")
        if ctx.check and not 0 <= raw <= 100:
            return ctx.bad(path, f"an integer is a percentage and must be between 0 and 100, got {raw}")
        return raw
    if kind == "boolmap":
        if not isinstance(raw, Mapping):
            return ctx.bad(path, f"expected an object of name: true|false, got {show(raw)}")
        merged = dict(cur or {})
        ok = True
        for k, v in raw.items():
            if not isinstance(k, str) or not isinstance(v, bool):
                ctx.bad(f"{path}.{k}", f"expected true or false, got {show(v)}")
                ok = False
            else:
                merged[k] = v
        if not ok:
            return ABSENT
        return MappingProxyType(merged) if raw else ABSENT
    if kind == "ext":
        if not isinstance(raw, Mapping):
            return ctx.bad(path, f"expected an object, got {show(raw)}")
        for k in raw:
            if k != "Object":
                ctx.warnings.append((f"{path}.{k}", "unknown field; extensions travel under \"Object\""))
        obj = raw.get("Object")
        if obj is None:
            return ABSENT
        if not isinstance(obj, Mapping):
            return ctx.bad(f"{path}.Object", f"expected an object, got {show(obj)}")
        if not obj:
            return ABSENT
        if not _depth_within(obj, EXT_MAX_DEPTH):     # copied and compared recursively below and later
            return ctx.bad(f"{path}.Object", f"nested deeper than {EXT_MAX_DEPTH} levels")
        merged = dict(cur or {})
        merged.update(copy.deepcopy(dict(obj)))
        return MappingProxyType(merged)
    raise AssertionError(f"unknown field kind {kind}")


def _decode_list(w: WireField, raw: Any, path: str, ctx: DecodeContext) -> Any:
    """Arrays replace the base; an element section that is bad is dropped, a bad plain element fails the list."""
    if not isinstance(raw, list):
        return ctx.bad(path, f"expected a list, got {show(raw)}")
    if not raw:
        return ABSENT
    items = []
    for i, element in enumerate(raw):
        sub = f"{path}[{i}]"
        mark = len(ctx.errors)
        value = decode_obj(w.cls, element, None, sub, ctx)
        if w.cls._section and len(ctx.errors) > mark:
            for e in ctx.errors[mark:]:          # the element is the section: it is dropped, not defaulted
                e.section, e.dropped = sub, True
            continue
        if value is not ABSENT:
            items.append(value)
    return tuple(items)


def decode_obj(cls: Any, raw: Any, cur: Any, path: str, ctx: DecodeContext) -> Any:
    """``raw`` merged onto ``cur`` (or onto an empty ``cls``); ABSENT when rejected, so the caller keeps
    ``cur``: a section with any bad field falls back as a whole."""
    if not isinstance(raw, Mapping):
        return ctx.bad(path, f"expected an object, got {show(raw)}")
    base = cur if cur is not None else cls()
    mark = len(ctx.errors)
    changes: dict[str, Any] = {}
    by_wire = cls._by_wire()
    for key, value in raw.items():
        entry = by_wire.get(key)
        if entry is None:
            ctx.warnings.append((f"{path}.{key}", "unknown field"))
            continue
        if value is None:                      # null is the same as absent (see the module docstring)
            continue
        name, w = entry
        new = decode_value(w, value, getattr(base, name), f"{path}.{key}", ctx)
        if new is not ABSENT:
            changes[name] = new
    out = replace(base, **changes) if changes else base
    if ctx.check and len(ctx.errors) == mark:
        for lower, upper in cls._pairs:
            lv, uv = getattr(out, lower), getattr(out, upper)
            if lv is not None and uv is not None and not lv < uv:
                ctx.bad(f"{path}.{cls._wire_name(lower)}",
                        f"must be less than {cls._wire_name(upper)} ({uv}), got {lv}")
    if cls._section and len(ctx.errors) > mark:
        ctx.claim(mark, path)
        return ABSENT
    return out


def report(ctx: DecodeContext, what: str) -> list[str]:
    """One log line per rejected section (and per ignored field); one error string per problem."""
    for path, reason in ctx.warnings:
        log.warning("%s field ignored path=%s reason=%s", what, path, reason)
    errors: list[str] = []
    by_section: dict[str, list[_Err]] = {}
    for e in ctx.errors:
        if e.section is None:
            e.section = e.path
        by_section.setdefault(e.section, []).append(e)
        outcome = "entry dropped" if e.dropped else f"{e.section} falls back to its defaults"
        errors.append(f"{what}: {e.path}: {e.problem}; {outcome}")
    for section, errs in by_section.items():
        outcome = "entry dropped" if errs[0].dropped else "using its defaults"
        log.error("%s section rejected section=%s problems=%s; %s", what, section,
                  "; ".join(f"{e.path}: {e.problem}" for e in errs), outcome)
    return errors


def overlay(cls: type[_T], raw: Mapping[str, Any], base: _T, path: str) -> tuple[_T, str | None]:
    """``raw`` (a decoded JSON object) overlaid on ``base`` with the NodeSLO decoder's rules and range checks, as
    the pod-level overrides (``koordinator.sh/cpuBurst``, ``memoryQOS``) are: (value, None), or (base, problem)."""
    ctx = DecodeContext(check=True)
    value: _T = decode_obj(cls, raw, base, path, ctx)
    if ctx.errors:
        return base, "; ".join(f"{e.path}: {e.problem}" for e in ctx.errors)
    return value, None
