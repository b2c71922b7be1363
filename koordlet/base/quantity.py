"""Kubernetes resource quantities ("250m", "16Gi", "1.5", "1e3") parsed exactly (Fraction, no float drift)."""

from __future__ import annotations

import functools
import re
from fractions import Fraction

_SUFFIX: dict[str, int | Fraction] = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_RE = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)")


# Bounds that keep parsing O(len(text)) and the value small enough for any arithmetic done with it. Kubernetes
# itself keeps quantities in int64 (about 9.2e18) of their unit with at most nanoscale; the largest unit is Ei
# (1.15e18). No real resource needs more than a few dozen digits or a decimal exponent beyond ±18; 64 of each is
# far above that and still costs nothing (10**64 is a 213-bit integer).
MAX_DIGITS = 64          # digits in the number, before any exponent or suffix
MAX_EXPONENT = 64        # |e| of an exponent form ("1e10000000" is refused instead of computing 10**10000000)
_MAX_TEXT = MAX_DIGITS + 8     # sign, point, "e", sign, exponent digits, suffix, and leeway
QUANTITY_CACHE = 1024          # distinct quantity strings whose values are kept (least recently used dropped)


def parse_quantity(raw: object) -> Fraction:
    """Value of a quantity in base units; ValueError naming the bad text otherwise (also for more than
    :data:`MAX_DIGITS` digits or an exponent beyond ±:data:`MAX_EXPONENT`)."""
    if isinstance(raw, bool):
        raise ValueError(f"quantity {raw!r}: not a number")
    if isinstance(raw, int):
        if abs(raw) >= 10 ** MAX_DIGITS:
            raise ValueError(f"quantity has more than {MAX_DIGITS} digits")
        return Fraction(raw)
    if type(raw) is str:
        return _parse_string(raw)
    return _parse(raw)


def _parse(raw: object) -> Fraction:
    text = str(raw).strip()
    if len(text) > _MAX_TEXT + MAX_EXPONENT:
        raise ValueError(f"quantity {text[:20]!r}...: longer than any quantity ({len(text)} characters)")
    m = _RE.fullmatch(text)
    if not m:
        raise ValueError(f"quantity {raw!r}: expected a number with an optional suffix like 250m or 16Gi")
    mantissa = m.group(1)
    if sum(c.isdigit() for c in mantissa) > MAX_DIGITS:
        raise ValueError(f"quantity {raw!r}: more than {MAX_DIGITS} digits")
    number = Fraction(mantissa)
    if m.group(2):
        exponent = m.group(2)[1:].lstrip("+-").lstrip("0")
        if len(exponent) > 3 or int(exponent or 0) > MAX_EXPONENT:
            raise ValueError(f"quantity {raw!r}: exponent beyond ±{MAX_EXPONENT}")
        e = int(m.group(2)[1:])
        return number * (Fraction(10 ** e) if e >= 0 else Fraction(1, 10 ** -e))
    return number * _SUFFIX[m.group(3) or ""]


# a cluster's quantities are a few hundred strings ("1", "500m", "4Gi") read over and over (every pod's requests at
# every watch event, bind and estimate); a Fraction is immutable, so the parsed value is shared (3.7 -> 0.2 µs)
_parse_string = functools.lru_cache(maxsize=QUANTITY_CACHE)(_parse)


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
