"""Compact encodings of one series' points over one block: the timestamp column and the value column.

The metric cache holds ~3,000 samples a second on a node of 500 containers; raw, a sample costs 16 bytes (an int64
millisecond timestamp and a float64). Both columns compress well once they are columns:

* **Timestamps** are sampled every second with a few milliseconds of jitter: their delta-of-delta is small, and
  zigzag-encoded (sign in the lowest bit) it leaves seven of eight bytes zero. Series sampled in the same ticks have
  the same column, and the cache shares one encoded blob between them.
* **Values** of one series repeat themselves: the same value (an idle container's CPU, a limit), the same high bytes
  (memory in pages), a few decimals (PSI in hundredths). A constant column is stored as its one value; a decimal
  column as its integers (``m / 10**k``), when that is smaller; any other as its float64 bytes.

Both are byte-shuffled (all first bytes, then all second bytes, ...) so the bytes that repeat lie together, and
deflated (raw deflate, no zlib header or checksum: a chunk is ~100 points and the header would be a tenth of it).
Everything is done by C loops of the standard library (``map`` over ``operator``, slicing, zlib); no Python loop
per point. Values are not delta- or XOR-coded: undoing that costs every query ~10 µs a chunk, and the shuffle gets
nearly the same size. Measured figures are in bench/RESULTS.md (``metriccache_compact``).

A blob is self-describing through its first byte (the format); ``n`` (the point count) is kept beside it by the
caller. Decoding checks every length against ``n`` and never allocates more than ``8 * n`` bytes per column, so a
damaged blob is a :class:`ValueError`, never a crash or a huge allocation.
"""

from __future__ import annotations

import operator
import sys
import zlib
from array import array
from itertools import accumulate, chain, repeat
from typing import Any

__all__ = ["MAX_POINTS", "decode_ts", "decode_vals", "encode_ts", "encode_vals", "raw"]

#: The most points one chunk may hold (a decoding bound, far above a block's ~120 points).
MAX_POINTS = 1 << 20

_SHUFFLED = 0        # format byte: zigzag delta-of-delta (timestamps) or float64 (values), shuffled, raw deflate
_PLAIN = 1           # format byte: little-endian int64 timestamps as they are, raw deflate (deltas overflow int64)
_DECIMAL = 2         # format byte: values as integers m / 10^k, then k, the int64 m, shuffled, raw deflate
_RAW = 3             # format byte: little-endian int64 or float64 as they are (a head row: written often, kept briefly)
_CONST = 4           # format byte: one float64, the value of every point (an idle container's CPU, a limit)
_SCALES = tuple(10.0 ** k for k in range(10))
_LIMIT = 1 << 62     # magnitude bound of a zigzagged delta-of-delta and of a decimal's integer
_BIG_ENDIAN = sys.byteorder == "big"
_LEVEL = 6


def raw(column: array[int] | array[float]) -> bytes:
    """A column as it is, little-endian, with no compression: for the heads' rows on disk, written at every flush
    and replaced by the chunk within minutes, where encoding would cost more than the bytes it saves."""
    if _BIG_ENDIAN:
        column = array(column.typecode, column)
        column.byteswap()
    return bytes((_RAW,)) + column.tobytes()


def _from_raw(body: bytes, n: int, typecode: str) -> array[Any]:
    if len(body) != 8 * n:
        raise ValueError(f"raw chunk column of {len(body)} bytes, expected {8 * n}")
    out = array(typecode)
    out.frombytes(body)
    if _BIG_ENDIAN:
        out.byteswap()
    return out


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data, _LEVEL, -15)


def _inflate(blob: bytes, size: int) -> bytes:
    """Raw-inflate ``blob`` to exactly ``size`` bytes; ValueError when it is not exactly that."""
    d = zlib.decompressobj(-15)
    try:
        out = d.decompress(blob, size)
        if d.unconsumed_tail or not d.eof:
            raise ValueError(f"chunk column does not inflate to {size} bytes")
    except zlib.error as e:
        raise ValueError(f"chunk column damaged: {e}") from e
    if len(out) != size:
        raise ValueError(f"chunk column inflates to {len(out)} bytes, expected {size}")
    return out


def _shuffle(words: array[int]) -> bytes:
    if _BIG_ENDIAN:
        words = array("Q", words)
        words.byteswap()
    b = words.tobytes()
    return b"".join(b[i::8] for i in range(8))


def _unshuffle(data: bytes, n: int) -> array[int]:
    out = bytearray(8 * n)
    for i in range(8):
        out[i::8] = data[i * n : (i + 1) * n]
    words = array("Q")
    words.frombytes(out)
    if _BIG_ENDIAN:
        words.byteswap()
    return words


def encode_ts(ts: array[int]) -> bytes:
    """The timestamp column (int64 ms, any order): first value, first delta, then delta-of-deltas, zigzagged."""
    n = len(ts)
    if n == 0:
        return bytes((_SHUFFLED,))
    deltas = list(map(operator.sub, ts, chain((0,), ts)))       # ts[0], ts[1]-ts[0], ...
    dod = list(map(operator.sub, deltas, chain((0,), deltas)))  # deltas[0], deltas[1]-deltas[0], ...
    if min(dod) < -_LIMIT or max(dod) >= _LIMIT:
        raw = array("q", ts)
        if _BIG_ENDIAN:
            raw.byteswap()
        return bytes((_PLAIN,)) + _deflate(raw.tobytes())
    return bytes((_SHUFFLED,)) + _deflate(_shuffle(_zigzag(dod)))


def decode_ts(blob: bytes, n: int) -> array[int]:
    """Inverse of :func:`encode_ts`; ValueError on a damaged blob or a wrong ``n``."""
    fmt, body = _header(blob, n)
    if fmt == _RAW:
        return _from_raw(body, n, "q")
    if fmt == _PLAIN:
        out = array("q")
        out.frombytes(_inflate(body, 8 * n))
        if _BIG_ENDIAN:
            out.byteswap()
        return out
    words = _unshuffle(_inflate(body, 8 * n), n) if n else array("Q")
    try:
        return array("q", accumulate(accumulate(_unzigzag(words))))
    except OverflowError as e:
        raise ValueError(f"chunk timestamps out of range: {e}") from e


def encode_vals(vals: array[float]) -> bytes:
    """The value column (float64): one value when all are the same; else the float64 bytes byte-shuffled, or, when
    every value is an integer number of 10^-k (k <= 9) and the division gives back the very same float (memory in
    bytes, PSI averages in hundredths), those integers byte-shuffled, whichever deflates smaller.

    No delta or XOR between neighbours: undoing one is a Python-level pass over the column (~10 µs a chunk, what
    every query of a chunk would pay), while the shuffle alone already lines up the bytes that repeat."""
    if not vals:
        return bytes((_SHUFFLED,))
    first = vals[:1]
    if vals.tobytes() == first.tobytes() * len(vals):
        return bytes((_CONST,)) + raw(first)[1:]
    words = array("Q")
    words.frombytes(vals.tobytes())
    best = bytes((_SHUFFLED,)) + _deflate(_shuffle(words))
    scaled = _as_decimals(vals)
    if scaled is not None:
        k, ints = scaled
        decimal = bytes((_DECIMAL, k)) + _deflate(_shuffle(array("Q", array("q", ints).tobytes())))
        if len(decimal) < len(best):
            best = decimal
    return best


def _as_decimals(vals: array[float]) -> tuple[int, list[int]] | None:
    """(k, integers m) with m / 10**k == the values bit for bit, for the smallest such k <= 9; None when none.

    The first values' shortest decimal forms (``repr``) give the first k worth trying, so a column of noisy
    floats (17 significant digits) is refused after one look."""
    k = max(map(_decimals, vals[:4]))
    while k < len(_SCALES):
        scale = _SCALES[k]
        try:
            ints = list(map(round, map(operator.mul, vals, repeat(scale))))
        except (OverflowError, ValueError):           # inf, nan
            return None
        if array("d", map(operator.truediv, ints, repeat(scale))).tobytes() == vals.tobytes():
            if min(ints) < -_LIMIT or max(ints) >= _LIMIT:
                return None
            return k, ints
        k += 1
    return None


def _decimals(v: float) -> int:
    """Digits after the decimal point in the shortest form of ``v`` (``repr``); a large number for nan/inf."""
    r = repr(v)
    mantissa, _, exponent = r.partition("e")
    _, dot, frac = mantissa.partition(".")
    if not dot and not mantissa.lstrip("-").isdigit():
        return len(_SCALES)                           # nan, inf
    places = 0 if frac in ("", "0") else len(frac)
    return max(0, places - int(exponent or 0))


def _zigzag(values: list[int]) -> array[int]:
    """Signed integers of magnitude below 2^62 -> unsigned, the sign in the lowest bit (small stays small)."""
    return array("Q", map(operator.xor, map(operator.lshift, values, repeat(1)),
                          map(operator.rshift, values, repeat(63))))


def _unzigzag(words: array[int]) -> map[int]:
    return map(operator.xor, map(operator.rshift, words, repeat(1)), map(operator.neg, map(operator.and_, words,
                                                                                            repeat(1))))


def decode_vals(blob: bytes, n: int) -> array[float]:
    """Inverse of :func:`encode_vals`; ValueError on a damaged blob or a wrong ``n``."""
    fmt, body = _header(blob, n)
    if fmt == _RAW:
        return _from_raw(body, n, "d")
    if fmt == _CONST:
        return _from_raw(body, 1, "d") * n
    out = array("d")
    if fmt == _DECIMAL:
        if not body or body[0] >= len(_SCALES):
            raise ValueError("chunk decimal column without a valid scale")
        k = body[0]
        ints = array("q")
        if n:
            ints.frombytes(_unshuffle(_inflate(body[1:], 8 * n), n).tobytes())
        if k == 0:
            return array("d", map(float, ints))
        return array("d", map(operator.truediv, ints, repeat(_SCALES[k])))
    if fmt != _SHUFFLED:
        raise ValueError(f"chunk value column of unknown format {fmt}")
    if n:
        out.frombytes(_unshuffle(_inflate(body, 8 * n), n).tobytes())
    return out


def _header(blob: bytes, n: int) -> tuple[int, bytes]:
    if not 0 <= n <= MAX_POINTS:
        raise ValueError(f"chunk of {n} points (at most {MAX_POINTS})")
    if not blob:
        raise ValueError("empty chunk column")
    fmt = blob[0]
    if fmt not in (_SHUFFLED, _PLAIN, _DECIMAL, _RAW, _CONST):
        raise ValueError(f"chunk column of unknown format {fmt}")
    if n == 0:
        if len(blob) != 1:
            raise ValueError("chunk column of 0 points with a body")
        return fmt, b""
    return fmt, blob[1:]
