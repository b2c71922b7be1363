"""The one decoder for JSON carried in annotations (pod, node and our own NRT/Device ones).

Pod annotations are written by tenants and read by an agent that runs as root on every node, so every value is
decoded here, with bounds, and fails in one way only: :class:`DecodeError` (a ``ValueError``) naming the
annotation key and what was wrong. The parsers of the individual formats (``resource-status``,
``device-allocated``, ``cpuQOS``, ...) live next to their users and are built from the helpers below; each is
wrapped in :func:`decoder`, so a bug triggered by hostile input surfaces as a DecodeError about that annotation
(the caller then drops that part of that pod) and never as a TypeError or RecursionError that fails a whole
strategy or NRI answer.

Bounds, checked before ``json.loads`` runs:

- **size**: :data:`MAX_BYTES` = 64 KiB of UTF-8. The Kubernetes API server caps *all* annotations of an object
  together at 256 KiB; the largest real value we read (``device-allocated`` of an 8-GPU pod with 8 RDMA VFs, a
  ``resource-status`` with every NUMA node) is a few KiB, so 64 KiB leaves an order of magnitude of headroom
  while bounding the per-cycle cost of one hostile pod (every strategy re-reads annotations every second).
- **nesting**: :data:`MAX_DEPTH` = 32 levels of ``[``/``{``, measured by a linear scan (strings skipped) before
  parsing. The deepest real format (``blkioQOS``: object → blocks → block → ioCfg) is 4 deep. ``json.loads``
  recurses per level and raises RecursionError at about a thousand; the NodeSLO overlay recurses too.
- **numbers**: ``NaN``/``Infinity`` are refused (Go's encoding/json refuses them); integers longer than 4300
  digits are refused by Python itself (and come out here as a DecodeError).

This module sits at the base layer: it imports only the standard library, :mod:`koordlet.base.quantity` and
:mod:`koordlet.host.cgroup`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from fractions import Fraction
from itertools import accumulate
from typing import Any, TypeVar

from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import parse_cpu_list

MAX_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_PROBLEM = 500
MAX_OBJECT_ANNOTATIONS = 256 * 1024     # the API server's cap on one object's annotations, together

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = [0] * 256                        # byte -> depth change
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1

F = TypeVar("F", bound=Callable[..., Any])


class DecodeError(ValueError):
    """A value that cannot be used; ``key`` is the annotation (or label) it came from, ``problem`` what was wrong.

    ``str()`` is ``"<key>: <problem>"``; the problem is cut at :data:`MAX_PROBLEM` characters, as it goes into a log
    line (a value with thousands of bad fields must not make a megabyte one).
    """

    def __init__(self, key: str, problem: str) -> None:
        if len(problem) > MAX_PROBLEM:
            problem = problem[:MAX_PROBLEM - 3] + "..."
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep ``[``/``{`` nest in a JSON text, in linear time (a few regex passes, no recursion). Brackets
    inside strings do not count. Exact when above ``limit``; when the text has at most ``limit`` openers in all,
    their number is returned (an upper bound, enough to accept). Unbalanced text is left for the parser."""
    openers = text.count("[") + text.count("{")
    if openers <= limit:
        return openers
    # escapes first (each backslash takes the next character), then strings, which can then hold no quote:
    # every regex here consumes left to right without backtracking across matches
    bare = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text))).encode("ascii")
    return max(accumulate(map(_STEP.__getitem__, bare)), default=0)       # C loops only: about json.loads' cost


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(key: str, raw: object, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with the bounds above; DecodeError (naming ``key``) for anything that is not a bounded JSON
    text. Cost: O(len(raw)) before the parser runs, and the parser only sees bounded input."""
    if not isinstance(raw, str):
        raise DecodeError(key, f"expected a JSON string, got {type(raw).__name__}")
    if len(raw) > max_bytes or len(raw.encode("utf-8", "surrogatepass")) > max_bytes:
        raise DecodeError(key, f"value is larger than {max_bytes} bytes")
    if nesting_depth(raw, max_depth) > max_depth:
        raise DecodeError(key, f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as e:                # JSONDecodeError, NaN, over-long integers
        raise DecodeError(key, f"not JSON ({e})") from None
    except Exception as e:                 # RecursionError and the like: never past this function
        raise DecodeError(key, f"not decodable ({type(e).__name__}: {e})") from None


CACHE_MAX_TEXT = 4096                    # longer texts are parsed every time: the cache stays ≤ maxsize × 4 KiB
T = TypeVar("T")


def per_text(maxsize: int = 1024) -> Callable[[Callable[[str], T]], Callable[[str], T]]:
    """Remember a pure parser's result per annotation text: the reconciler (every second) and the NRI hooks parse
    the same unchanged annotations of every pod again and again. The result must be immutable; errors are not
    remembered (a bad value is parsed, bounded, each time it is met)."""
    def wrap(fn: Callable[[str], T]) -> Callable[[str], T]:
        remembered = functools.lru_cache(maxsize)(fn)

        @functools.wraps(fn)
        def inner(raw: str) -> T:
            return remembered(raw) if len(raw) <= CACHE_MAX_TEXT else fn(raw)
        return inner
    return wrap


#: (program, annotation key) -> its decoder's qualified name: one decoder per annotation in each program, the agent
#: or the companion scheduler (``scheduler``, which reads more of some annotations than the agent needs)
DECODERS: dict[tuple[str, str], str] = {}


def decoder(key: str) -> Callable[[F], F]:
    """Wrap an annotation parser so that it raises DecodeError about ``key`` and nothing else. Each annotation has
    one decoder in a program: a second function declared for the same key is refused at import (ValueError), so two
    readers of one annotation cannot come to read it two ways."""
    def wrap(fn: F) -> F:
        name = f"{fn.__module__}.{fn.__qualname__}"
        program = "scheduler" if fn.__module__.startswith("scheduler.") else "agent"
        if DECODERS.setdefault((program, key), name) != name:
            raise ValueError(f"{key}: decoded by {DECODERS[program, key]} already; {name} must use it")
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except DecodeError:
                raise
            except ValueError as e:        # a helper's own "this field is wrong"
                raise DecodeError(key, str(e)) from None
            except Exception as e:         # a parser bug must cost only this annotation
                raise DecodeError(key, f"{type(e).__name__}: {e}") from None
        return inner  # type: ignore[return-value]
    return wrap


# --- typed fields ------------------------------------------------------------------------------------------
# ``where`` is the field's path inside the value ("numaNodeResources[0].node"); "" for the value itself.

def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def obj(key: str, value: Any, where: str = "", *, null: bool = True) -> dict[str, Any]:
    """A JSON object; absent/null is ``{}`` when ``null`` (Go's omitempty), anything else is an error."""
    if value is None and null:
        return {}
    if not isinstance(value, dict):
        raise DecodeError(key, f"{_at(where)}expected an object, got {_kind(value)}")
    return value


def array(key: str, value: Any, where: str = "", *, null: bool = True, max_items: int | None = None) -> list[Any]:
    """A JSON list; absent/null is ``[]`` when ``null``; at most ``max_items`` entries when given."""
    if value is None and null:
        return []
    if not isinstance(value, list):
        raise DecodeError(key, f"{_at(where)}expected a list, got {_kind(value)}")
    if max_items is not None and len(value) > max_items:
        raise DecodeError(key, f"{_at(where)}more than {max_items} entries ({len(value)})")
    return value


def integer(key: str, value: Any, where: str = "", lo: int | None = None, hi: int | None = None) -> int:
    """A JSON integer (not a boolean, not a float), optionally within ``lo``..``hi``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(key, f"{_at(where)}expected an integer, got {value!r:.80}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise DecodeError(key, f"{_at(where)}{value} is outside {lo}..{hi}")
    return value


def boolean(key: str, value: Any, where: str = "") -> bool:
    if not isinstance(value, bool):
        raise DecodeError(key, f"{_at(where)}expected a boolean, got {value!r:.80}")
    return value


def string(key: str, value: Any, where: str = "") -> str:
    if not isinstance(value, str):
        raise DecodeError(key, f"{_at(where)}expected a string, got {value!r:.80}")
    return value


def quantity(key: str, value: Any, where: str = "") -> Fraction:
    """A Kubernetes quantity (a string, or a bare JSON number as Quantity.UnmarshalJSON takes it), through the
    bounded :func:`parse_quantity`."""
    if value is None or isinstance(value, (bool, dict, list)):
        raise DecodeError(key, f"{_at(where)}expected a quantity, got {value!r:.80}")
    try:
        return parse_quantity(value)
    except ValueError as e:
        raise DecodeError(key, f"{_at(where)}{e}") from None


def cpu_list(key: str, value: Any, where: str = "") -> list[int]:
    """A kernel cpu list string ("0-3,8"), through the bounded :func:`parse_cpu_list`."""
    text = string(key, value, where)
    try:
        return parse_cpu_list(text)
    except ValueError as e:
        raise DecodeError(key, f"{_at(where)}{text!r:.80} is not a cpu list ({e})") from None


def json_object(key: str, raw: object) -> dict[str, Any]:
    """An annotation that must hold a JSON object."""
    return obj(key, loads(key, raw), null=False)


def json_value(raw: str | None) -> Any:
    """For comparisons only (our own NRT/Device annotations against the live object): the decoded value, or the
    text itself when it is not bounded JSON. Our own annotations (``cpu-topology`` of a large host) can exceed
    MAX_BYTES; the bound here is the API server's for all annotations of an object together."""
    if raw is None:
        return None
    try:
        return loads("", raw, max_bytes=MAX_OBJECT_ANNOTATIONS)
    except DecodeError:
        return raw
