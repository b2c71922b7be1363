"""Kubernetes resource quantities ("250m", "16Gi", "1.5", "1e3") parsed exactly (Fraction, no float drift)."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_RE = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)")


def parse_quantity(raw: object) -> Fraction:
    """Value of a quantity in base units; ValueError naming the bad text otherwise."""
    if isinstance(raw, bool):
        raise ValueError(f"quantity {raw!r}: not a number")
    if isinstance(raw, int):
        return Fraction(raw)
    text = str(raw).strip()
    m = _RE.fullmatch(text)
    if not m:
        raise ValueError(f"quantity {raw!r}: expected a number with an optional suffix like 250m or 16Gi")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def milli(raw: object) -> int:
    """Quantity × 1000 rounded up, as Kubernetes' MilliValue (cpu "250m" -> 250, "1" -> 1000)."""
    q = parse_quantity(raw) * 1000
    return -((-q.numerator) // q.denominator)
