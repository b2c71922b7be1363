"""The compact binary form of a run of metric cache rollups (:mod:`koordlet.metriccache.rollup`): one blob per
series per roll-up span on disk.

:func:`encode` packs the rollups of one series (typically 60:
an hour) column by column, so that each column's regularity is visible:

* minute gaps, first-point offsets and spans within the minute: varints of
  deltas from the previous rollup; a flags byte per rollup;
* sketch buckets: per rollup the first index as a delta from the previous
  rollup's; a minute of noisy samples (neighbouring buckets) as the counts of
  every index from first to last, adaptively Rice-coded into a bit stream
  (~3 bits an index), any other sketch as index gaps and counts in varints;
* floats (min, max, last, sum): each value's bit pattern as a zigzag delta
  from its predecessor's in the column, cut in byte planes (the high bytes of
  all rows together, then the next, ...).  A minute whose points are all one
  value stores it once.

The structured part is deflated raw (no zlib header); byte planes and Rice
bits that look like noise (the low mantissa bytes of a noisy series) are
stored as they are, since deflate could only expand them.  A CRC-32 closes the
blob, so damage is reported as damage rather than decoded into wrong numbers.

Measured sizes, bytes per rollup (12 h of 1 s samples encoded an hour per
blob; ``tests/unit/test_metriccache_rollup.py`` has the series and checks the
bounds):

* constant series: 0.9
* noisy CPU usage (0.3-2.5 cores over the day, x N(1, 0.08) noise, bursts of
  x1.8, +-3 ms timestamp jitter): 39.0; with noise of 2 / 4 / 15 / 25 %:
  34 / 36 / 43 / 49.  27 of the 39 are the four exact floats, whose low
  mantissa bytes are incompressible noise; the sketch takes ~9.
* memory usage (~200 MB integer bytes moving in 4 KiB pages): 8.6

12 h of 3000 noisy series is 3000 * 720 * 39 B = 84 MB.  In CPython 3.11 on
the development host, per noisy rollup: encoding ~10 us, decoding ~12 us.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from itertools import pairwise

from koordlet.metriccache.rollup import STEP_MS, Rollup
from koordlet.metriccache.sketch import Sketch, bucket

__all__ = ["decode", "encode"]

_VERSION = 1
# Flags byte of a rollup: which sketch parts are present, which floats are stored.
_F_NAN = 0x01
_F_NEG_INF = 0x02
_F_POS_INF = 0x04
_F_ZERO = 0x08
_F_NEG = 0x10
_F_POS = 0x20
_F_FLAT = 0x40  # max and last are bit-identical to min: only min is stored
_F_SUM_IS_MIN = 0x80  # sum is bit-identical to min: not stored
_SPECIALS = (_F_NAN, _F_NEG_INF, _F_POS_INF, _F_ZERO)
_ANY_SPECIAL = _F_NAN | _F_NEG_INF | _F_POS_INF | _F_ZERO
_ANY_COUNT = _ANY_SPECIAL | _F_NEG | _F_POS
_TS_LIMIT = 2**63
_U64 = (1 << 64) - 1
# Bit of the blob's mask saying the Rice bit stream is stored raw (bits 0-31: float planes).
_RICE_RAW = 1 << 32
# Inflating yields at most 1032 bytes per deflated byte (a 258-byte match coded in 2 bits).
_MAX_INFLATE_RATIO = 1032
_CRC = struct.Struct("<I")
_BIG_ENDIAN = sys.byteorder == "big"
# The bucket indexes a sketch can hold: those of the smallest normal float and of the largest.
_MIN_KEY = bucket(sys.float_info.min)
_MAX_KEY = bucket(sys.float_info.max)


def _zigzag(v: int) -> int:
    """Signed to unsigned, small magnitudes to small numbers: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return v * 2 if v >= 0 else -v * 2 - 1


def _unzigzag(u: int) -> int:
    """Inverse of :func:`_zigzag`."""
    return u >> 1 if not u & 1 else -((u + 1) >> 1)


def _put_uints(out: bytearray, values: Sequence[int]) -> None:
    """Append LEB128 varints; a column of small values is one bytes() call."""
    if not values or max(values) < 0x80:
        out += bytes(values)
        return
    for v in values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)


def _float_bits(values: Sequence[float]) -> list[int]:
    """IEEE-754 bit patterns of ``values`` (NaN payloads and -0.0 kept)."""
    raw = array("d", values)
    return array("Q", raw.tobytes()).tolist()


def _is_noise(plane: bytes) -> bool:
    """Whether a byte plane looks uniformly random, so deflate could only expand it.

    It does when it has at least 80 % of the distinct bytes that ``len(plane)``
    uniformly random bytes are expected to show (and more than one).
    """
    k = len(plane)
    distinct = len(set(plane))
    return distinct > 1 and distinct >= 0.8 * 256 * (1.0 - (255 / 256) ** k)


def _put_floats(packed: bytearray, raw: bytearray, bits: Sequence[int]) -> int:
    """Write a float column as byte planes, high byte first, of the deltas of its bit patterns.

    Each value's IEEE bit pattern minus its predecessor's (wrapped to 64 bits,
    zigzagged): close values give leading zero bytes, so the high planes
    deflate to almost nothing.  Planes that look like noise (the low mantissa
    bytes of a noisy series) go to ``raw``, the others to ``packed``
    (deflated); returns the mask of the raw planes, bit ``i`` for the
    ``i``-th plane written.
    """
    prev = 0
    deltas = array("Q")
    for b in bits:
        d = (b - prev) & _U64
        deltas.append(((d << 1) ^ -(d >> 63)) & _U64)  # zigzag of d read as signed
        prev = b
    if _BIG_ENDIAN:
        deltas.byteswap()
    le = deltas.tobytes()
    mask = 0
    for i, byte in enumerate(range(7, -1, -1)):
        plane = le[byte::8]
        if _is_noise(plane):
            mask |= 1 << i
            raw += plane
        else:
            packed += plane
    return mask


def _deltas_first(values: Sequence[int]) -> list[int]:
    """Zigzag delta of each value from its predecessor (the first from 0)."""
    prev = 0
    out = []
    for v in values:
        out.append(_zigzag(v - prev))
        prev = v
    return out


def _check_run(rollups: Sequence[Rollup]) -> None:
    """Refuse what decode could not give back: the run must be one series' minutes in order."""
    prev_start: int | None = None
    for r in rollups:
        start = r.start_ms
        if start % STEP_MS:
            raise ValueError(f"start_ms {start} is not a multiple of {STEP_MS}")
        if prev_start is not None and start <= prev_start:
            raise ValueError(f"rollups not in strictly increasing start_ms order at {start}")
        prev_start = start
        if not start <= r.first_ts <= r.last_ts < start + STEP_MS or not -_TS_LIMIT <= start < _TS_LIMIT - STEP_MS:
            raise ValueError(f"first_ts/last_ts {r.first_ts}/{r.last_ts} outside the minute at {start}")
        s = r.sketch
        if min(s.zeros, s.nans, s.pos_infs, s.neg_infs) < 0 or r.count < 1 or r.count != s.count:
            raise ValueError(f"count {r.count} disagrees with its sketch's {s.count} at {start}")
        for d in (s.positive, s.negative):
            if d and (min(d) < _MIN_KEY or max(d) > _MAX_KEY or min(d.values()) < 1):
                raise ValueError(f"sketch bucket out of range at {start}")


def encode(rollups: Sequence[Rollup]) -> bytes:
    """The compact binary form of a run of rollups of one series (module docstring).

    Raises ValueError if the run is not strictly increasing whole minutes with
    timestamps inside their minute and counts that agree with the sketches.
    Layout: version byte, varints (rollup count, inflated payload size, mask
    of the parts stored raw: float planes, Rice bits), the deflated payload,
    the raw parts, CRC-32 (little-endian) of all that precedes it.
    """
    _check_run(rollups)
    n = len(rollups)
    mins = _float_bits([r.min for r in rollups])
    maxs = _float_bits([r.max for r in rollups])
    lasts = _float_bits([r.last for r in rollups])
    sums = _float_bits([r.sum for r in rollups])

    flags: list[int] = []
    specials: list[int] = []
    stored_max: list[int] = []
    stored_last: list[int] = []
    stored_sum: list[int] = []
    for i, r in enumerate(rollups):
        s = r.sketch
        f = 0
        for bit, c in zip(_SPECIALS, (s.nans, s.neg_infs, s.pos_infs, s.zeros), strict=True):
            if c:
                f |= bit
                specials.append(c - 1)
        if s.negative:
            f |= _F_NEG
        if s.positive:
            f |= _F_POS
        if maxs[i] == mins[i] and lasts[i] == mins[i]:
            f |= _F_FLAT
        else:
            stored_max.append(maxs[i])
            stored_last.append(lasts[i])
        if sums[i] == mins[i]:
            f |= _F_SUM_IS_MIN
        else:
            stored_sum.append(sums[i])
        flags.append(f)

    minutes = [r.start_ms // STEP_MS for r in rollups]
    minute_col = [_zigzag(minutes[0])] if n else []
    minute_col += [b - a - 1 for a, b in pairwise(minutes)]

    packed = bytearray()
    for col in (
        minute_col,
        _deltas_first([r.first_ts - r.start_ms for r in rollups]),
        _deltas_first([r.last_ts - r.first_ts for r in rollups]),
        flags,
        specials,
    ):
        _put_uints(packed, col)
    rice: list[str] = []
    _put_buckets(packed, [r.sketch.negative for r in rollups], rice)
    _put_buckets(packed, [r.sketch.positive for r in rollups], rice)
    raw = bytearray()
    mask = 0
    for i, bits in enumerate((mins, stored_max, stored_last, stored_sum)):
        mask |= _put_floats(packed, raw, bits) << (8 * i)
    tail = _pack_bits("".join(rice))
    if _is_noise(tail):
        mask |= _RICE_RAW
        raw += tail
    else:
        packed += tail

    comp = zlib.compressobj(9, zlib.DEFLATED, -15, 9)
    blob = bytearray([_VERSION])
    _put_uints(blob, (n, len(packed), mask))
    blob += comp.compress(packed)
    blob += comp.flush()
    blob += raw
    blob += _CRC.pack(zlib.crc32(blob))
    return bytes(blob)


def _put_buckets(out: bytearray, stores: Sequence[dict[int, int]], bits: list[str]) -> None:
    """Write one sign's buckets of every rollup that has some.

    Per rollup a size and the first index (zigzag delta from the previous
    rollup's first index).  A row of two or more buckets spanning fewer than
    four indexes per bucket (a minute of noisy samples: counts of neighbouring
    buckets) is *dense*: size ``2 * span + 1``, the Rice parameter of its first
    count, and the count of every index from first to last Rice-coded into
    ``bits`` by :func:`_rice_code` (~3 bits an index, where deflate over a
    byte per count needed ~4).  Any other row is *sparse*: size
    ``2 * (buckets - 1)``, then index gaps minus one and counts minus one as
    varints.  Column order: sizes, firsts, Rice parameters, gaps, counts.
    """
    sizes: list[int] = []
    firsts: list[int] = []
    rice: list[int] = []
    gaps: list[int] = []
    counts: list[int] = []
    for d in stores:
        if not d:
            continue
        keys = sorted(d)
        first = keys[0]
        span = keys[-1] - first
        firsts.append(first)
        k0 = max(0, d[first].bit_length() - 1)
        code = None
        if len(keys) > 1 and span < 4 * len(keys):
            code = _rice_code([d.get(k, 0) for k in range(first, first + span + 1)], k0)
        if code is not None:
            sizes.append(2 * span + 1)
            rice.append(k0)
            bits.append(code)
        else:
            sizes.append(2 * (len(keys) - 1))
            gaps += [b - a - 1 for a, b in pairwise(keys)]
            counts += [d[k] - 1 for k in keys]
    for col in (sizes, _deltas_first(firsts), rice, gaps, counts):
        _put_uints(out, col)


def _next_rice(a: int, b: int) -> int:
    """Rice parameter for a count whose two predecessors in the row are ``a`` and ``b``.

    Neighbouring buckets of a minute hold similar counts, so the parameter
    follows their mean: about log2 of it.  The coders inline it through
    :data:`_RICE_K` for means below its length.
    """
    return max(0, ((a + b + 1) >> 1).bit_length() - 1)


def _rice(c: int, k: int) -> str:
    """The Rice code of ``c`` with parameter ``k``: ``c >> k`` ones, a zero, the low ``k`` bits of ``c``."""
    return "1" * (c >> k) + "0" + (format(c & ((1 << k) - 1), f"0{k}b") if k else "")


_MAX_UNARY = 64
_RICE_K = tuple(_next_rice(m, m) for m in range(256))
# Codes of small counts under small parameters, the common case: _RICE_CODES[k][c].
_RICE_CODES = tuple(tuple(_rice(c, k) for c in range(64)) for k in range(8))


def _rice_code(counts: Sequence[int], k0: int) -> str | None:
    """``counts`` adaptively Rice-coded as a '0'/'1' string, or None if that would be long.

    Each count ``c`` is :func:`_rice` with parameter ``k0`` for the first,
    then :func:`_next_rice` of the two before it.  A count far above its
    neighbours' would need a long run of ones: beyond :data:`_MAX_UNARY` the
    row is left to the sparse form.
    """
    parts = []
    k, b = k0, 0
    table, codes = _RICE_K, _RICE_CODES
    for c in counts:
        if k < 8 and c < 64:
            parts.append(codes[k][c])
        elif c >> k > _MAX_UNARY:
            return None
        else:
            parts.append(_rice(c, k))
        m = (c + b + 1) >> 1
        k = table[m] if m < 256 else _next_rice(c, b)
        b = c
    return "".join(parts)


def _pack_bits(bits: str) -> bytes:
    """A '0'/'1' string as bytes, most significant bit first, zero-padded to a whole byte."""
    if not bits:
        return b""
    bits += "0" * (-len(bits) % 8)
    return int(bits, 2).to_bytes(len(bits) // 8, "big")


class _Reader:
    """Sequential reader over bytes; running out, or a malformed varint, is a ValueError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, k: int) -> bytes:
        """The next ``k`` bytes."""
        pos = self.pos
        if k > len(self.buf) - pos:
            raise ValueError("rollup blob truncated")
        self.pos = pos + k
        return self.buf[pos : pos + k]

    def uints(self, k: int) -> list[int]:
        """``k`` varints (each at least one byte, so ``k`` is bounded by what is left)."""
        buf, pos = self.buf, self.pos
        if k > len(buf) - pos:
            raise ValueError("rollup blob truncated")
        chunk = buf[pos : pos + k]
        if not k or max(chunk) < 0x80:
            self.pos = pos + k
            return list(chunk)
        out = []
        end = len(buf)
        for _ in range(k):
            v = shift = 0
            while True:
                if pos >= end or shift > 63:
                    raise ValueError("rollup blob has a bad varint")
                b = buf[pos]
                pos += 1
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            out.append(v)
        self.pos = pos
        return out

    def floats(self, k: int, mask: int, raw: _Reader) -> list[float]:
        """A float column of ``k`` values written by :func:`_put_floats` with raw-plane ``mask``."""
        le = bytearray(8 * k)
        for i, byte in enumerate(range(7, -1, -1)):
            le[byte::8] = (raw if mask >> i & 1 else self).take(k)
        deltas = array("Q", bytes(le))
        if _BIG_ENDIAN:
            deltas.byteswap()
        acc = 0
        bits = array("Q")
        for z in deltas:
            acc = (acc + ((z >> 1) ^ -(z & 1))) & _U64
            bits.append(acc)
        return array("d", bits.tobytes()).tolist()


_DenseRow = tuple[dict[int, int], int, int, int]  # (dict to fill, first index, span, Rice parameter)


def _read_buckets(rd: _Reader, k: int, dense: list[_DenseRow]) -> list[dict[int, int]]:
    """``k`` bucket dicts written by :func:`_put_buckets`, indexes checked in range.

    Sparse rows come back filled; dense rows empty, listed in ``dense`` for
    :func:`_fill_dense` once the bit stream is reached.
    """
    sizes = rd.uints(k)
    firsts = rd.uints(k)
    rice = rd.uints(sum(s & 1 for s in sizes))
    n_gaps = sum(s >> 1 for s in sizes if not s & 1)
    gaps = rd.uints(n_gaps)
    counts = rd.uints(n_gaps + k - len(rice))
    out = []
    first = g = c = r = 0
    for size, z in zip(sizes, firsts, strict=True):
        first += _unzigzag(z)
        span = size >> 1
        d: dict[int, int] = {}
        if size & 1:
            last = first + span
            dense.append((d, first, span, rice[r]))
            r += 1
        else:
            keys = [first]
            last = first
            for gap in gaps[g : g + span]:
                last += gap + 1
                keys.append(last)
            g += span
            d.update(zip(keys, [n + 1 for n in counts[c : c + span + 1]], strict=True))
            c += span + 1
        if first < _MIN_KEY or last > _MAX_KEY:
            raise ValueError("rollup blob has a sketch bucket out of range")
        out.append(d)
    return out


def _fill_dense(rows: Sequence[_DenseRow], bits: str) -> int:
    """Decode the Rice-coded counts of the dense rows from ``bits``; return the bits used."""
    end = len(bits)
    if sum(span + 1 for _, _, span, _ in rows) > end:
        raise ValueError("rollup blob truncated")
    p = 0
    find, table = bits.find, _RICE_K
    for d, first, span, k0 in rows:
        if k0 > 64:
            raise ValueError("rollup blob has a bad Rice parameter")
        k, b = k0, 0
        for key in range(first, first + span + 1):
            z = find("0", p)
            if z < 0 or z + 1 + k > end:
                raise ValueError("rollup blob truncated")
            if k:
                c = (z - p) << k | int(bits[z + 1 : z + 1 + k], 2)
                p = z + 1 + k
            else:
                c = z - p
                p = z + 1
            if c:
                d[key] = c
            m = (c + b + 1) >> 1
            k = table[m] if m < 256 else _next_rice(c, b)
            b = c
        if first not in d or first + span not in d:
            raise ValueError("rollup blob has a dense sketch row with an empty end")
    return p


def _unpack_bits(data: bytes) -> str:
    """Inverse of :func:`_pack_bits` (padding included)."""
    return format(int.from_bytes(data, "big"), f"0{8 * len(data)}b") if data else ""


def _inflate(blob: bytes) -> tuple[int, int, bytes, bytes]:
    """Check the frame and CRC of a blob; return rollup count, raw-plane mask, payload and raw planes."""
    if len(blob) < 1 + 3 + _CRC.size:
        raise ValueError("rollup blob too short")
    body, crc = blob[: -_CRC.size], _CRC.unpack(blob[-_CRC.size :])[0]
    if zlib.crc32(body) != crc:
        raise ValueError("rollup blob checksum mismatch")
    if body[0] != _VERSION:
        raise ValueError(f"rollup blob version {body[0]} is not {_VERSION}")
    head = _Reader(body, 1)
    n, size, mask = head.uints(3)
    rest = body[head.pos :]
    if size > _MAX_INFLATE_RATIO * len(rest) + 64 or mask >> 33:
        raise ValueError("rollup blob has an impossible header")
    inflater = zlib.decompressobj(-15)
    try:
        payload = inflater.decompress(rest, size + 1)
    except zlib.error as e:
        raise ValueError(f"rollup blob does not inflate: {e}") from None
    if len(payload) != size or not inflater.eof or inflater.unconsumed_tail:
        raise ValueError("rollup blob payload has the wrong size")
    return n, mask, payload, inflater.unused_data


def decode(blob: bytes) -> list[Rollup]:
    """The rollups :func:`encode` packed into ``blob``.

    Raises ValueError (and nothing else) for any blob :func:`encode` did not
    produce: wrong checksum, truncation, bad framing, or contents that break
    the run's invariants (timestamps outside their minute, counts below one,
    bucket indexes outside the float range).  Work and memory are bounded by
    the blob's size.
    """
    n, mask, payload, raw_planes = _inflate(bytes(blob))
    rd = _Reader(payload)
    raw = _Reader(raw_planes)
    minute_col = rd.uints(n)
    first_offs = rd.uints(n)
    spans = rd.uints(n)
    flags = rd.uints(n)
    specials = rd.uints(sum((f & _ANY_SPECIAL).bit_count() for f in flags))
    dense: list[_DenseRow] = []
    negatives = _read_buckets(rd, sum(1 for f in flags if f & _F_NEG), dense)
    positives = _read_buckets(rd, sum(1 for f in flags if f & _F_POS), dense)
    n_full = sum(1 for f in flags if not f & _F_FLAT)
    mins = rd.floats(n, mask, raw)
    maxs = rd.floats(n_full, mask >> 8, raw)
    lasts = rd.floats(n_full, mask >> 16, raw)
    sums = rd.floats(sum(1 for f in flags if not f & _F_SUM_IS_MIN), mask >> 24, raw)
    if mask & _RICE_RAW:
        if rd.pos != len(payload):
            raise ValueError("rollup blob has trailing bytes")
        bits = _unpack_bits(raw_planes[raw.pos :])
    else:
        if raw.pos != len(raw_planes):
            raise ValueError("rollup blob has trailing bytes")
        bits = _unpack_bits(payload[rd.pos :])
    used = _fill_dense(dense, bits)
    if len(bits) - used >= 8 or "1" in bits[used:]:
        raise ValueError("rollup blob has trailing bits")

    out = []
    minute = first_off = span = 0
    it_special, it_neg, it_pos = iter(specials), iter(negatives), iter(positives)
    it_max, it_last, it_sum = iter(maxs), iter(lasts), iter(sums)
    for i in range(n):
        f = flags[i]
        if not f & _ANY_COUNT:
            raise ValueError("rollup blob has a rollup without points")
        minute = _unzigzag(minute_col[0]) if i == 0 else minute + minute_col[i] + 1
        first_off += _unzigzag(first_offs[i])
        span += _unzigzag(spans[i])
        start = minute * STEP_MS
        if first_off < 0 or span < 0 or first_off + span >= STEP_MS or not -_TS_LIMIT <= start < _TS_LIMIT - STEP_MS:
            raise ValueError("rollup blob has a timestamp outside its minute")
        nans, neg_infs, pos_infs, zeros = (next(it_special) + 1 if f & bit else 0 for bit in _SPECIALS)
        sketch = Sketch.restore(
            next(it_pos) if f & _F_POS else {},
            next(it_neg) if f & _F_NEG else {},
            zeros,
            nans,
            pos_infs,
            neg_infs,
        )
        lo = mins[i]
        hi, last = (lo, lo) if f & _F_FLAT else (next(it_max), next(it_last))
        s = lo if f & _F_SUM_IS_MIN else next(it_sum)
        first_ts = start + first_off
        out.append(Rollup(start, sketch.count, s, lo, hi, last, first_ts, first_ts + span, sketch))
    return out
