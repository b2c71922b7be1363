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


_DECIMAL_SUFFIX = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_milli(milli: int) -> str:
    """A DecimalSI quantity from milli-units, in Kubernetes' canonical form ("1250m", "2", "12k").

    The canonical form uses the largest power-of-1000 suffix that keeps the number an integer, which is what
    ``resource.NewMilliQuantity(v, DecimalSI).String()`` prints upstream.
    """
    sign, m = ("-", -milli) if milli < 0 else ("", milli)
    if m % 1000:
        return f"{sign}{m}m"
    value, exp = m // 1000, 0
    while value and value % 1000 == 0 and exp < 18:
        value //= 1000
        exp += 3
    return f"{sign}{value}{_DECIMAL_SUFFIX[exp]}"


def format_bytes(n: int) -> str:
    """A BinarySI quantity in canonical form ("4Gi", "1536Ki", "1234567"), as ``NewQuantity(n, BinarySI)``.

    Below 1024 in magnitude Kubernetes switches to the decimal form, so 1000 prints as "1k".
    """
    if -1024 < n < 1024:
        return format_milli(n * 1000)
    sign, value = ("-", -n) if n < 0 else ("", n)
    exp = 0
    while value % 1024 == 0 and exp < 6:
        value //= 1024
        exp += 1
    return f"{sign}{value}{_BINARY_SUFFIX[exp]}"
