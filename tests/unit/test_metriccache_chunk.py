"""The metric cache's chunk encodings: every column comes back bit for bit, whatever its values and timestamps, and a
damaged blob is a ValueError; the memory tier built on them answers like raw points, stays at about a byte a sample
on an idle node and shares timestamp columns between series sampled together."""

from __future__ import annotations

import math
import random
import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordlet.metriccache import MetricCache, Sample, labels
from koordlet.metriccache.chunk import decode_ts, decode_vals, encode_ts, encode_vals, raw
from koordlet.metriccache.series import BLOCK_MS

T0_MS = 1_700_000_000_000
HOUR_MS = 3_600_000

floats = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.sampled_from(
    [0.0, -0.0, math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, 2.2250738585072014e-308, 0.1, 12_582_912.0])


def bits(vals: array[float]) -> bytes:
    return vals.tobytes()


@st.composite
def timestamps(draw: st.DrawFn) -> array[int]:
    """1 s sampling with jitter, plus what goes wrong: late and out-of-order points, duplicates, the wall clock
    stepping back or forward by an hour, a series that stops and resumes, arbitrary int64 values."""
    n = draw(st.integers(0, 300))
    t = draw(st.integers(-(2**62), 2**62)) if draw(st.booleans()) else T0_MS
    out = array("q")
    for _ in range(n):
        event = draw(st.sampled_from(["tick"] * 6 + ["late", "dup", "back", "forward", "gap", "any"]))
        if event == "tick":
            t += 1000 + draw(st.integers(-5, 5))
        elif event == "late":
            t -= draw(st.integers(1, 120_000))
        elif event == "back":
            t -= HOUR_MS
        elif event == "forward":
            t += HOUR_MS
        elif event == "gap":
            t += draw(st.integers(60_000, 10 * HOUR_MS))
        elif event == "any":
            t = draw(st.integers(-(2**63), 2**63 - 1))
        t = max(-(2**63), min(2**63 - 1, t))
        out.append(t)
    return out


@st.composite
def value_columns(draw: st.DrawFn) -> array[float]:
    kind = draw(st.sampled_from(["any", "run", "decimal", "integers"]))
    n = draw(st.integers(0, 300))
    if kind == "any":
        return array("d", draw(st.lists(floats, min_size=n, max_size=n)))
    if kind == "run":
        return array("d", [draw(floats)] * n)
    if kind == "decimal":
        k = draw(st.integers(0, 12))
        return array("d", [m / 10**k for m in draw(st.lists(st.integers(-(10**15), 10**15), min_size=n,
                                                              max_size=n))])
    return array("d", [float(m) for m in draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n))])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timestamps())
def test_property_timestamps_round_trip(ts: array[int]) -> None:
    assert decode_ts(encode_ts(ts), len(ts)) == ts
    assert decode_ts(raw(ts), len(ts)) == ts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value_columns())
def test_property_values_round_trip_bit_for_bit(vals: array[float]) -> None:
    assert bits(decode_vals(encode_vals(vals), len(vals))) == bits(vals)
    assert bits(decode_vals(raw(vals), len(vals))) == bits(vals)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 5000))
def test_property_garbage_is_a_value_error(blob: bytes, n: int) -> None:
    for decode in (decode_ts, decode_vals):
        try:
            out = decode(blob, n)
        except ValueError:
            continue
        assert len(out) == n


@settings(max_examples=300, deadline=None)
@given(value_columns(), st.data())
def test_property_damaged_blob_is_a_value_error_or_the_right_length(vals: array[float], data: st.DataObject) -> None:
    blob = bytearray(encode_vals(vals))
    i = data.draw(st.integers(0, len(blob) - 1))
    blob[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(blob)))
    for damaged in (bytes(blob), bytes(blob[:cut])):
        for n in (len(vals), len(vals) + 1):
            try:
                out = decode_vals(damaged, n)
            except ValueError:
                continue
            assert len(out) == n


def test_a_wrong_point_count_is_refused_and_decoding_never_allocates_past_it() -> None:
    vals = array("d", [0.5] * 100)
    rng = random.Random(1)
    blob = encode_vals(array("d", [rng.random() for _ in range(100)]))
    for n in (99, 101, 10**6, 2**40, -1):
        with pytest.raises(ValueError):
            decode_vals(blob, n)
    assert len(decode_vals(encode_vals(vals), 100)) == 100
    # a deflate bomb (a huge run of zeros) claiming 10 points stops at 80 bytes
    bomb = bytes((0,)) + __import__("zlib").compress(bytes(10**7), 9, -15)
    with pytest.raises(ValueError):
        decode_vals(bomb, 10)


def test_sizes_of_the_columns_an_agent_writes() -> None:
    """A block of 120 1 s points: constant values and integer bytes are tiny, PSI-like hundredths small, noisy
    floats stay within their raw 8 bytes (what no lossless encoding can beat)."""
    rng = random.Random(7)
    ts = array("q", [T0_MS + 1000 * i + rng.randint(-4, 4) for i in range(120)])
    assert len(encode_ts(ts)) < 1.2 * 120                     # jitter of a few ms: ~1 byte a point, shared
    columns = {
        "idle": (array("d", [0.0] * 120), 0.1),
        "memory": (array("d", [float(200_000_000 + 4096 * (i // 10)) for i in range(120)]), 0.5),
        "hundredths": (array("d", [rng.randint(0, 300) / 100 for _ in range(120)]), 2.0),
        "noisy": (array("d", [rng.uniform(0.3, 2.5) for _ in range(120)]), 8.0),
    }
    for name, (vals, per_point) in columns.items():
        assert len(encode_vals(vals)) <= per_point * 120, name


def test_memory_tier_answers_like_raw_points_and_shares_timestamp_columns() -> None:
    """Ten series sampled in the same ticks for 20 minutes with jittered timestamps, out-of-order and late points:
    every window answers the same points as the raw list, and the sealed blocks share one timestamp blob a tick."""
    rng = random.Random(3)
    clock = [T0_MS / 1000]
    cache = MetricCache(None, memory_window=3600, clock=lambda: clock[0])
    raw_points: dict[str, list[tuple[int, float]]] = {f"p{i}": [] for i in range(10)}
    for k in range(1200):
        clock[0] = T0_MS / 1000 + k + rng.uniform(0, 0.004)
        batch = []
        for pod, pts in raw_points.items():
            v = 0.0 if pod == "p0" else rng.choice([rng.random(), float(rng.randint(0, 10**9)), 1.25])
            t = clock[0] - (rng.uniform(1, 200) if rng.random() < 0.01 else 0)     # a late point now and then
            batch.append(Sample("cpu", labels(pod=pod), t, v))
            pts.append((round(t * 1000), v))
        cache.append(batch)
        if k % 10 == 9:
            cache.flush()
    cache.trim()
    assert cache.memory_usage()[0] == 12_000
    for pod, pts in raw_points.items():
        for _ in range(20):
            lo = T0_MS + rng.randint(-10_000, 1_300_000)
            hi = lo + rng.randint(0, 400_000)
            want = sorted((t, v) for t, v in pts if lo <= t <= hi)
            res = cache.query("cpu", {"pod": pod}, lo / 1000, hi / 1000)
            assert sorted(zip(res._ts, res._vals, strict=True)) == want
    series = [cache._series[("cpu", labels(pod=f"p{i}"))] for i in range(10)]
    assert len(series[0].c_n) >= 1200 * 1000 // BLOCK_MS - 1
    shared = {id(b) for s in series for b in s.c_ts}
    assert len(shared) < sum(len(s.c_ts) for s in series)      # timestamp blobs shared between series


def test_idle_node_holds_about_a_byte_a_sample() -> None:
    """The bench/agent_soak.py node (sleeping containers: CPU 0, memory constant): 30 minutes of 1 s samples of
    200 series, sealed as the agent seals them, cost under 2 bytes a sample held, counted from the buffers."""
    clock = [T0_MS / 1000]
    cache = MetricCache(None, memory_window=1800, clock=lambda: clock[0])
    for k in range(1800):
        clock[0] = T0_MS / 1000 + k + (k * 7919 % 5) / 1000
        cache.append([Sample("container_cpu_usage" if i % 2 else "container_memory_usage",
                             labels(container_id=f"c{i}"), clock[0], 0.0 if i % 2 else 12_582_912.0)
                      for i in range(200)])
        if k % 10 == 9:
            cache.flush()
        if k % 60 == 59:
            cache.trim()
    held, nbytes = cache.memory_usage()
    assert held >= 200 * 1700
    assert nbytes / held < 2.0
    assert struct.calcsize("qd") * held / nbytes > 8          # at least 8x smaller than two raw columns
