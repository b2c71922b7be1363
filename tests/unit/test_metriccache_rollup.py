"""Rollups of the metric cache's disk tier: summarising, the sketch, the binary form, and aggregation over them.

The accuracy contract under test: from rollups (with or without raw points) ``count`` and ``last`` are exact,
``avg`` exact up to float rounding, and each percentile within ``RELATIVE_ACCURACY`` (1 %) of the exact answer.
"""

from __future__ import annotations

import functools
import math
import random
import struct
import sys
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from koordlet.metriccache import rollup_codec as R
from koordlet.metriccache.aggregate import AggregateResult, percentile
from koordlet.metriccache.rollup import STEP_MS, Rollup, summarize, total
from koordlet.metriccache.rollup_codec import decode, encode
from koordlet.metriccache.sketch import RELATIVE_ACCURACY, Sketch

H12_S = 12 * 3600
BASE_MS = 1_700_000_000_000 // STEP_MS * STEP_MS
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def same_rollup(a: Rollup, b: Rollup) -> bool:
    """Field-by-field equality with floats compared by bit pattern (NaN payloads, -0.0)."""
    return (
        (a.start_ms, a.count, a.first_ts, a.last_ts) == (b.start_ms, b.count, b.first_ts, b.last_ts)
        and all(bits(getattr(a, f)) == bits(getattr(b, f)) for f in ("sum", "min", "max", "last"))
        and a.sketch == b.sketch
    )


def same_run(a: list[Rollup], b: list[Rollup]) -> bool:
    return len(a) == len(b) and all(same_rollup(x, y) for x, y in zip(a, b, strict=True))


def go_sorted(values: list[float]) -> list[float]:
    """Values in Go's sort.Float64s order: NaN first, then ascending."""
    nans = [v for v in values if math.isnan(v)]
    return nans + sorted(v for v in values if not math.isnan(v))


def within(answer: float, exact: float) -> bool:
    """The sketch's contract for one answer."""
    if math.isnan(exact):
        return math.isnan(answer)
    if math.isinf(exact) or exact == 0.0:
        return answer == exact
    if abs(exact) < sys.float_info.min:
        return answer == 0.0
    return abs(answer - exact) <= RELATIVE_ACCURACY * abs(exact)


# ---------------------------------------------------------------------------
# Realistic 12 h series, 1 sample a second
# ---------------------------------------------------------------------------


@functools.cache
def cpu_series(seed: int = 1, noise: float = 0.08) -> tuple[list[int], list[float]]:
    """CPU usage in cores: 0.3 at night to 2.5 at the peak, multiplicative noise, bursts, +-3 ms jitter."""
    rnd = random.Random(seed)
    ts: list[int] = []
    vals: list[float] = []
    burst = 0
    for s in range(H12_S):
        level = 0.3 + 2.2 * (0.5 - 0.5 * math.cos(2 * math.pi * s / H12_S))
        if not burst and rnd.random() < 0.002:
            burst = rnd.randint(5, 60)
        if burst:
            level *= 1.8
            burst -= 1
        vals.append(max(0.0, level * rnd.gauss(1.0, noise)))
        ts.append(BASE_MS + 437 + s * 1000 + rnd.randint(-3, 3))
    return ts, vals


@functools.cache
def memory_series(seed: int = 2) -> tuple[list[int], list[float]]:
    """Memory usage in bytes: ~200 MB moving by whole 4 KiB pages."""
    rnd = random.Random(seed)
    v = 200_000_000 // 4096 * 4096
    ts: list[int] = []
    vals: list[float] = []
    for s in range(H12_S):
        if rnd.random() < 0.3:
            v += 4096 * rnd.randint(-3, 4)
        ts.append(BASE_MS + 120 + s * 1000 + rnd.randint(-3, 3))
        vals.append(float(v))
    return ts, vals


@functools.cache
def constant_series() -> tuple[list[int], list[float]]:
    return [BASE_MS + s * 1000 for s in range(H12_S)], [1.5] * H12_S


def bytes_per_rollup(ts: list[int], vals: list[float]) -> float:
    rollups = summarize(ts, vals)
    blobs = [encode(rollups[i : i + 60]) for i in range(0, len(rollups), 60)]
    assert [r for b in blobs for r in decode(b)] == rollups
    return sum(map(len, blobs)) / len(rollups)


@pytest.mark.parametrize(
    ("series", "bound"),
    [(constant_series, 1.5), (cpu_series, 40.0), (memory_series, 12.0)],
    ids=["constant", "noisy-cpu", "memory"],
)
def test_encoded_size_per_rollup(series, bound) -> None:
    assert bytes_per_rollup(*series()) <= bound


# ---------------------------------------------------------------------------
# Accuracy against the exact answer from raw points
# ---------------------------------------------------------------------------


def exact_and_rolled(ts: list[int], vals: list[float], lo: int, hi: int, raw_from: int):
    """The window [lo, hi) exactly, and as rollups below ``raw_from`` plus raw points from it."""
    window = [(t, v) for t, v in zip(ts, vals, strict=True) if lo <= t < hi]
    exact = AggregateResult([t for t, _ in window], [v for _, v in window])
    old = [(t, v) for t, v in window if t < raw_from]
    new = [(t, v) for t, v in window if t >= raw_from]
    rollups = summarize([t for t, _ in old], [v for _, v in old])
    rolled = AggregateResult([t for t, _ in new], [v for _, v in new], rollups)
    return exact, rolled


@pytest.mark.parametrize("hours", [1, 6, 12])
@pytest.mark.parametrize("raw_minutes", [0, 30])
@pytest.mark.parametrize("series", [cpu_series, memory_series], ids=["cpu", "memory"])
def test_rollup_aggregates_match_raw_within_the_bound(series, hours, raw_minutes) -> None:
    ts, vals = series()
    hi = BASE_MS + H12_S * 1000
    lo = hi - hours * 3600 * 1000
    exact, rolled = exact_and_rolled(ts, vals, lo, hi, hi - raw_minutes * STEP_MS)
    assert rolled.count() == exact.count() > 0
    assert rolled.value("count") == exact.value("count")
    assert rolled.value("last") == exact.value("last")
    assert rolled.time_range() == exact.time_range()
    assert math.isclose(rolled.value("avg"), exact.value("avg"), rel_tol=1e-12)
    for kind in PERCENTILES:
        got, want = rolled.value(kind), exact.value(kind)
        assert abs(got - want) <= RELATIVE_ACCURACY * abs(want), (kind, got, want)


def test_percentiles_of_decoded_hours_stay_within_the_bound_in_every_window() -> None:
    """Sliding windows of 1 h at every 17th minute over stored (encoded, decoded) hours."""
    ts, vals = cpu_series()
    rollups = [r for i in range(0, 720, 60) for r in decode(encode(summarize(ts, vals)[i : i + 60]))]
    for start in range(0, len(rollups) - 60, 17):
        part = rollups[start : start + 60]
        lo, hi = part[0].start_ms, part[-1].start_ms + STEP_MS
        raw = [v for t, v in zip(ts, vals, strict=True) if lo <= t < hi]
        rolled = AggregateResult((), (), part)
        for p in PERCENTILES.values():
            want = percentile(raw, p)
            assert abs(rolled.value(f"p{round(p * 100)}") - want) <= RELATIVE_ACCURACY * want


# ---------------------------------------------------------------------------
# Sketch
# ---------------------------------------------------------------------------

SPECIALS = [
    0.0, -0.0, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, -5e-324,
    sys.float_info.max, -sys.float_info.max, sys.float_info.min, -sys.float_info.min, 1.0, -1.0,
]  # fmt: skip
any_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIALS))


def sketch_of(values: list[float]) -> Sketch:
    s = Sketch()
    s.add_many(values)
    return s


@given(st.lists(any_float, min_size=1, max_size=200))
def test_every_rank_is_answered_within_the_bound(values) -> None:
    s = sketch_of(values)
    exact = go_sorted(values)
    assert s.count == len(values)
    for idx, want in enumerate(exact):
        assert within(s.quantile_at_rank(idx), want), (idx, want, s.quantile_at_rank(idx))


@given(st.floats(min_value=sys.float_info.min, max_value=sys.float_info.max))
def test_one_value_bound_holds_over_the_whole_float_range(x) -> None:
    for v in (x, -x):
        s = Sketch()
        s.add(v)
        assert abs(s.quantile_at_rank(0) - v) <= RELATIVE_ACCURACY * abs(v)


def test_special_values_rank_like_go_and_answer_exactly() -> None:
    s = sketch_of([1.0, math.nan, -math.inf, math.inf, -0.0, 5e-324, -2.0])
    answers = [s.quantile_at_rank(i) for i in range(s.count)]
    assert math.isnan(answers[0])
    assert answers[1] == -math.inf
    assert within(answers[2], -2.0)
    assert answers[3:5] == [0.0, 0.0]  # -0.0 and the subnormal share the zero bucket
    assert within(answers[5], 1.0)
    assert answers[6] == math.inf
    assert (s.nans, s.neg_infs, s.pos_infs, s.zeros) == (1, 1, 1, 2)
    with pytest.raises(IndexError):
        s.quantile_at_rank(s.count)
    with pytest.raises(IndexError):
        s.quantile_at_rank(-1)


@given(*[st.lists(any_float, max_size=60)] * 3)
def test_merge_is_commutative_associative_and_equals_adding_everything(a, b, c) -> None:
    sa, sb, sc = sketch_of(a), sketch_of(b), sketch_of(c)
    ab = sa.copy()
    ab.merge(sb)
    ba = sb.copy()
    ba.merge(sa)
    assert ab == ba
    ab_c = ab.copy()
    ab_c.merge(sc)
    bc = sb.copy()
    bc.merge(sc)
    a_bc = sa.copy()
    a_bc.merge(bc)
    assert ab_c == a_bc == sketch_of(a + b + c)
    assert ab_c.count == len(a) + len(b) + len(c)
    assert sa == sketch_of(a)  # merging into a copy left the original alone


# ---------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------


@st.composite
def points(draw, max_size: int = 150) -> tuple[list[int], list[float]]:
    """Points over a few minutes with gaps between them, in any order, with timestamp ties and repeated values."""
    base = draw(st.sampled_from([BASE_MS, 0, -7 * STEP_MS]))
    minutes = draw(st.lists(st.integers(0, 5000), min_size=1, max_size=6, unique=True))
    pool = draw(st.lists(any_float, min_size=1, max_size=3))
    value = st.one_of(st.sampled_from(pool), any_float)
    offset = st.one_of(st.integers(0, STEP_MS - 1), st.sampled_from([0, 1, 30_000, STEP_MS - 1]))
    pts = draw(st.lists(st.tuples(st.sampled_from(minutes), offset, value), max_size=max_size))
    return [base + m * STEP_MS + o for m, o, _ in pts], [v for _, _, v in pts]


@given(points())
def test_summarize_matches_a_direct_computation(series) -> None:
    ts, vals = series
    rollups = summarize(ts, vals)
    groups: dict[int, list[tuple[int, float]]] = {}
    for t, v in zip(ts, vals, strict=True):
        groups.setdefault(t // STEP_MS * STEP_MS, []).append((t, v))
    assert [r.start_ms for r in rollups] == sorted(groups)
    for r in rollups:
        pts = groups[r.start_ms]
        vs = [v for _, v in pts]
        numbers = [v for v in vs if not math.isnan(v)]
        newest = max(t for t, _ in pts)
        assert r.count == len(pts) == r.sketch.count
        assert (r.first_ts, r.last_ts) == (min(t for t, _ in pts), newest)
        assert bits(r.last) == bits([v for t, v in pts if t == newest][-1])  # later arrival wins a tie
        assert bits(r.sum) == bits(total(vs))
        if numbers:
            assert (r.min, r.max) == (min(numbers), max(numbers))
        else:
            assert math.isnan(r.min) and math.isnan(r.max)
        assert r.sketch == sketch_of(vs)


def test_summarize_sorted_and_shuffled_input_agree() -> None:
    ts, vals = cpu_series()
    ts, vals = ts[:600], vals[:600]
    order = list(range(600))
    random.Random(3).shuffle(order)
    assert summarize([ts[i] for i in order], [vals[i] for i in order]) == summarize(ts, vals)


def test_sum_survives_what_fsum_refuses() -> None:
    (r,) = summarize([0, 1, 2], [1e308, 1e308, -1e308])
    assert r.sum == math.inf
    (r,) = summarize([0, 1], [math.inf, -math.inf])
    assert math.isnan(r.sum)


def test_summarize_rejects_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        summarize([1, 2], [1.0])


# ---------------------------------------------------------------------------
# Encoding round trip and damage
# ---------------------------------------------------------------------------


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(points(max_size=300))
def test_encode_decode_round_trip_is_bit_exact(series) -> None:
    rollups = summarize(*series)
    assert same_run(decode(encode(rollups)), rollups)


def test_round_trip_of_long_runs_gaps_and_single_points() -> None:
    ts, vals = cpu_series()
    # a series that stops for 2 h and resumes, then samples once a minute
    keep = [i for i, t in enumerate(ts) if not BASE_MS + 3_600_000 <= t < BASE_MS + 3 * 3_600_000]
    keep = [i for i in keep if ts[i] < BASE_MS + 5 * 3_600_000 or i % 60 == 0]
    rollups = summarize([ts[i] for i in keep], [vals[i] for i in keep])
    assert any(r.count == 1 for r in rollups)
    assert decode(encode(rollups)) == rollups
    assert decode(encode([])) == []


def test_round_trip_of_dense_sketches_with_large_and_uneven_counts() -> None:
    """10 Hz samples (counts well above the Rice tables) and a count far above its neighbours'."""
    ts = [BASE_MS + i * 100 for i in range(6000)]
    vals = [1.0 + (i % 7) * 0.01 for i in range(6000)]
    rollups = summarize(ts, vals)
    assert decode(encode(rollups)) == rollups
    lopsided = summarize([BASE_MS + i for i in range(5003)], [1.0, 1.05, 1.1] + [1.03] * 5000)
    assert decode(encode(lopsided)) == lopsided


@functools.cache
def sample_blob() -> bytes:
    """Ten minutes of CPU samples with every special value, negatives, and a single-point minute."""
    ts, vals = cpu_series()
    ts, vals = ts[:600], vals[:600]
    vals[100], vals[200], vals[250], vals[300] = math.nan, -math.inf, math.inf, 0.0
    vals[310:330] = [-v for v in vals[310:330]]
    return encode(summarize(ts + [BASE_MS + 20 * STEP_MS], vals + [4.0]))


def test_every_truncation_and_bit_flip_is_a_value_error() -> None:
    blob = sample_blob()
    for end in range(len(blob)):
        with pytest.raises(ValueError):
            decode(blob[:end])
    for i in range(len(blob)):
        for bit in (0, 3, 7):
            damaged = bytearray(blob)
            damaged[i] ^= 1 << bit
            with pytest.raises(ValueError):
                decode(bytes(damaged))


@given(st.binary(max_size=400))
def test_garbage_is_a_value_error(data) -> None:
    with pytest.raises(ValueError):
        decode(data)


def signed(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def reframe(n: int, mask: int, payload: bytes, raw: bytes = b"", size: int | None = None) -> bytes:
    """A blob around an arbitrary payload, with a valid checksum: what a bug (not disk damage) could write."""
    head = bytearray([R._VERSION])
    R._put_uints(head, (n, len(payload) if size is None else size, mask))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    return signed(bytes(head) + comp.compress(payload) + comp.flush() + raw)


@settings(max_examples=400)
@given(
    st.sampled_from(["payload", "raw", "n", "mask"]),
    st.integers(0, 10**6),
    st.integers(0, 255),
    st.sampled_from(["set", "insert", "delete"]),
)
def test_checksummed_nonsense_decodes_to_valid_rollups_or_value_error(where, pos, byte, how) -> None:
    n, mask, payload, raw = R._inflate(sample_blob())
    parts = {"payload": bytearray(payload), "raw": bytearray(raw)}
    if where in parts:
        buf = parts[where]
        i = pos % (len(buf) + 1)
        if how == "set" and i < len(buf):
            buf[i] = byte
        elif how == "insert":
            buf.insert(i, byte)
        elif i < len(buf):
            del buf[i]
    elif where == "n":
        n = pos % (2 * n + 2)
    else:
        mask ^= 1 << (pos % 33)
    try:
        rollups = decode(reframe(n, mask, bytes(parts["payload"]), bytes(parts["raw"])))
    except ValueError:
        return
    # whatever decode accepts is a well-formed run: encode takes it back unchanged
    assert same_run(decode(encode(rollups)), rollups)


def uints(*values: int) -> bytes:
    out = bytearray()
    R._put_uints(out, values)
    return bytes(out)


# Hand-made payloads of one rollup at minute 0: columns minute, offset, span, flags, [specials],
# [buckets: sizes, firsts, Rice parameters, gaps, counts], the min's 8 byte planes (0.0), [Rice bits].
FLAT = R._F_FLAT | R._F_SUM_IS_MIN  # min is the only float stored
MIN_0 = bytes(8)
ONE_ZERO = uints(0, 0, 0, R._F_ZERO | FLAT, 0) + MIN_0
DENSE_1_1 = uints(0, 0, 0, R._F_POS | FLAT, 2 * 1 + 1, 0, 0) + MIN_0  # counts of buckets 0 and 1 in Rice bits


def test_hand_made_payloads_decode() -> None:
    (r,) = decode(reframe(1, 0, ONE_ZERO))
    assert (r.start_ms, r.count, r.sum, r.min, r.max, r.last, r.sketch.zeros) == (0, 1, 0.0, 0.0, 0.0, 0.0, 1)
    (r,) = decode(reframe(1, 0, DENSE_1_1 + b"\xa0"))  # "10" "10": 1 and 1
    assert r.sketch.positive == {0: 1, 1: 1}


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (signed(bytes([R._VERSION + 1]) + sample_blob()[1:-4]), "version"),
        (reframe(1, 0, b"", size=10**6), "impossible header"),
        (signed(bytes([R._VERSION]) + uints(1, 8, 0) + b"\x07" * 8), "does not inflate"),
        (reframe(1, 0, ONE_ZERO, size=len(ONE_ZERO) - 1), "wrong size"),
        (reframe(1, 0, ONE_ZERO, size=len(ONE_ZERO) + 5), "wrong size"),
        (reframe(1, 0, ONE_ZERO, raw=b"\x00"), "trailing bytes"),
        (reframe(1, 0, ONE_ZERO + b"\x01"), "trailing bits"),
        (reframe(2, 0, ONE_ZERO), "truncated"),
        (reframe(1, 0, uints(0, 0, 0, FLAT) + MIN_0), "without points"),
        (reframe(1, 0, uints(0, R._zigzag(STEP_MS), 0, R._F_ZERO | FLAT, 0) + MIN_0), "outside its minute"),
        (reframe(1, 0, uints(0, 0, 0, R._F_POS | FLAT, 0, R._zigzag(R._MAX_KEY + 1), 0) + MIN_0), "out of range"),
        (reframe(1, 0, DENSE_1_1), "truncated"),
        (reframe(1, 0, DENSE_1_1 + b"\xff"), "truncated"),  # no terminating zero
        (reframe(1, 0, DENSE_1_1 + b"\x40"), "empty end"),  # "0" "10": 0 and 1
        (reframe(1, 0, DENSE_1_1 + b"\xa1"), "trailing bits"),
        (reframe(1, 0, b"\x80" * 10 + b"\x01" + ONE_ZERO[1:]), "bad varint"),  # over 64 bits
        (reframe(1, 0, b"\x80"), "bad varint"),  # runs off the end
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_framing_and_content_errors_behind_a_valid_checksum(blob, message) -> None:
    with pytest.raises(ValueError, match=message):
        decode(blob)


def test_encode_refuses_runs_decode_could_not_give_back() -> None:
    a, b = summarize([BASE_MS + 5, BASE_MS + STEP_MS + 5], [1.0, 2.0])
    with pytest.raises(ValueError, match="increasing"):
        encode([b, a])
    with pytest.raises(ValueError, match="increasing"):
        encode([a, a])
    bad = summarize([BASE_MS + 5], [1.0])[0]
    bad.start_ms += 1
    with pytest.raises(ValueError, match="multiple"):
        encode([bad])
    bad = summarize([BASE_MS + 5], [1.0])[0]
    bad.last_ts = BASE_MS + STEP_MS
    with pytest.raises(ValueError, match="outside the minute"):
        encode([bad])
    bad = summarize([BASE_MS + 5], [1.0])[0]
    bad.count = 2
    with pytest.raises(ValueError, match="disagrees"):
        encode([bad])
    bad = summarize([BASE_MS + 5], [1.0])[0]
    bad.sketch.positive = {R._MAX_KEY + 1: 1}
    with pytest.raises(ValueError, match="out of range"):
        encode([bad])


# ---------------------------------------------------------------------------
# AggregateResult over rollups
# ---------------------------------------------------------------------------


@given(points(max_size=80))
def test_no_rollups_is_exactly_the_raw_behaviour(series) -> None:
    ts, vals = series
    assume(not any(math.isnan(v) for v in vals))  # Python's sorted() is ill-defined with NaN
    plain, explicit = AggregateResult(ts, vals), AggregateResult(ts, vals, ())
    assert (len(plain), plain.count(), plain.time_range(), plain.values()) == (
        len(explicit), explicit.count(), explicit.time_range(), explicit.values()
    )  # fmt: skip
    for kind in ("avg", "p50", "p90", "p95", "p99", "last", "count"):
        assert outcome(plain.value, kind) == outcome(explicit.value, kind)


def outcome(f, *args) -> tuple[str, int]:
    """A call's result as (exception type name, 0) or ("", float bits), to compare outcomes exactly."""
    try:
        return "", bits(f(*args))
    except (ValueError, OverflowError) as e:
        return type(e).__name__, 0


def test_aggregates_over_rollups_and_raw_points() -> None:
    old_ts = [BASE_MS + 1000, BASE_MS + 2000, BASE_MS + STEP_MS + 500]
    old_vals = [1.0, 3.0, 5.0]
    res = AggregateResult([BASE_MS + 3 * STEP_MS], [7.0], summarize(old_ts, old_vals))
    assert len(res) == res.count() == 4
    assert res.value("count") == 4.0
    assert res.value("avg") == 4.0
    assert res.value("last") == 7.0
    assert res.time_range() == (3 * STEP_MS - 1000) / 1000
    assert res.values() == [7.0]  # the raw points only
    assert within(res.value("p50"), 3.0)  # floor(4 * 0.5) - 1 = rank 1
    assert within(res.value("p99"), 5.0)
    only_rollups = AggregateResult((), (), summarize([BASE_MS], [2.5]))
    assert only_rollups.value("last") == only_rollups.value("avg") == 2.5
    assert only_rollups.time_range() == 0.0


def test_last_prefers_raw_points_then_later_rollups_on_a_tie() -> None:
    (a,) = summarize([BASE_MS + 10], [1.0])
    (b,) = summarize([BASE_MS + 10], [2.0])  # another series' rollup of the same minute
    assert AggregateResult((), (), [a, b]).value("last") == 2.0
    assert AggregateResult((), (), [b, a]).value("last") == 1.0
    assert AggregateResult([BASE_MS + 10], [3.0], [a, b]).value("last") == 3.0
    assert AggregateResult([BASE_MS + 9], [3.0], [a, b]).value("last") == 2.0


def test_nan_ranks_first_over_rollups() -> None:
    rollups = summarize([BASE_MS + i for i in range(4)], [math.nan, math.nan, 1.0, 2.0])
    res = AggregateResult((), (), rollups)
    assert math.isnan(res.value("p50"))  # rank 1 of 4
    assert within(res.value("p99"), 1.0)  # rank 2 of 4
    assert math.isnan(res.value("avg"))
