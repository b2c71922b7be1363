"""Quantities as Go's ``resource.Quantity`` carries them: a value in milli-units and the format it was parsed with.

The resource-status annotation prints quantities with their Go format: a quantity keeps the format it was parsed
with (the pod's request, the NRT's allocatable), so "8Gi" prints "8Gi" and "8G" prints "8G". Separate because the
NRT, the pods' annotations, the scores and the allocation all carry quantities this way, and the agent's own
``koordlet.base.quantity`` knows values only, not formats.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from koordlet.base.quantity import format_bytes, format_milli
from koordlet.states import decode
from scheduler.numa.names import CPU

DECIMAL_SI, _BINARY_SI, _DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_BINARY_SUFFIX = re.compile(r"[KMGTPE]i$")
_EXPONENT = re.compile(r"[eE][+-]?\d+$")
_EXPONENT_SUFFIX = {"m": "e-3", "k": "e3", "M": "e6", "G": "e9", "T": "e12", "P": "e15", "E": "e18"}


class Quantity(NamedTuple):
    """A quantity: its value in milli-units and the Go format it prints in."""

    milli: int
    fmt: str = DECIMAL_SI


ZERO = Quantity(0)


def ceil_milli(v: Fraction) -> int:
    """A value in milli-units, rounded up (``Quantity.MilliValue()``)."""
    q = v * 1000
    return -((-q.numerator) // q.denominator)


def value_of(milli: int) -> int:
    """``Quantity.Value()``: base units, rounded up."""
    return -((-milli) // 1000)


def format_of(raw: object) -> str:
    """The format Go's ``ParseQuantity`` gives a quantity written as ``raw``."""
    text = str(raw).strip()
    if _BINARY_SUFFIX.search(text):
        return _BINARY_SI
    if _EXPONENT.search(text):
        return _DECIMAL_EXPONENT
    return DECIMAL_SI


def quantity_of(key: str, raw: Any, where: str) -> Quantity:
    """``raw`` parsed with its format; DecodeError naming ``key`` and ``where`` when it is not a quantity."""
    return Quantity(ceil_milli(decode.quantity(key, raw, where)), format_of(raw))


def canonical(q: Quantity) -> str:
    """``Quantity.String()``: BinarySI only for whole values of at least 1024, otherwise DecimalSI (or the exponent
    form of DecimalExponent)."""
    if q.fmt == _BINARY_SI and q.milli % 1000 == 0 and abs(q.milli) >= 1024 * 1000:
        return format_bytes(q.milli // 1000)
    text = format_milli(q.milli)
    if q.fmt == _DECIMAL_EXPONENT and text[-1:] in _EXPONENT_SUFFIX:
        return text[:-1] + _EXPONENT_SUFFIX[text[-1]]
    return text


def framework_unit(name: str, milli: int) -> int:
    """The scheduler framework's unit of a resource: milli-cores for cpu, base units (bytes, counts) otherwise."""
    return milli if name == CPU else value_of(milli)


def framework_units(resources: Mapping[str, Quantity] | Mapping[str, int]) -> dict[str, int]:
    """Milli-unit values (or quantities) in framework units."""
    return {k: framework_unit(k, v.milli if isinstance(v, Quantity) else v) for k, v in resources.items()}
