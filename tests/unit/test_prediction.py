"""Peak prediction: decaying histogram, predict server (training, GC, checkpoints) and the Prod reclaimable math.

Every expected number is derived by hand in the comment next to it.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from koordlet.prediction.histogram import DecayingHistogram, ExponentialBuckets, format_go_time, parse_go_time
from koordlet.prediction.reclaimable import (
    PodRequest,
    ReclaimPrediction,
    combine,
    node_allocatable,
    pod_predictor,
    predict_prod_reclaimable,
    priority_predictor,
)
from koordlet.prediction.server import (
    NODE_KEY,
    PeakPredictServer,
    PodUsage,
    PredictionConfig,
    Resources,
    TrainingSamples,
    Usage,
    node_item_key,
)

# 1.8e9 s = 2027-01-15T08:00:00Z, a whole number of hours (and days) after Go's zero time, so a reference
# timestamp rounded to a 1 h or 12 h half-life lands exactly on it.
T0 = 1_800_000_000.0
HOUR, DAY = 3600.0, 86400.0
GiB = 2**30
G = 1_000_000_000

# Test buckets with easy boundaries: first bucket 1, ratio 2 -> bucket n starts at 2**n - 1:
# [0,1) [1,3) [3,7) [7,15) [15,31) [31,63) [63,127) [127,inf). Count: ceil(log2(100*(2-1)/1 + 1)) + 1 = 8.
SIMPLE = ExponentialBuckets(max_value=100, first_bucket_size=1, ratio=2, epsilon=1e-4)


def simple(half_life: float = HOUR) -> DecayingHistogram:
    return DecayingHistogram(SIMPLE, half_life)


# ---------------------------------------------------------------------------------------------------------------
# histogram


def test_bucket_scheme():
    assert SIMPLE.num_buckets == 8
    assert [SIMPLE.find_bucket(v) for v in (0.0, 0.99, 1.0, 2.9, 3.0, 10.0, 126.0, 1e9)] == [0, 0, 1, 1, 2, 3, 6, 7]
    assert [SIMPLE.bucket_start(b) for b in range(8)] == [0, 1, 3, 7, 15, 31, 63, 127]
    with pytest.raises(ValueError):
        ExponentialBuckets(max_value=100, first_bucket_size=1, ratio=1.0, epsilon=1e-4)


def test_percentiles_are_bucket_ends():
    h = simple()
    assert h.is_empty() and h.percentile(0.95) == 0.0
    h.add_sample(2, 1, T0)       # bucket [1,3)
    h.add_sample(5, 1, T0)       # bucket [3,7)
    h.add_sample(10, 2, T0)      # bucket [7,15), weight 2 -> total 4
    assert not h.is_empty()
    assert h.percentile(0.0) == 3      # first non-empty bucket's end
    assert h.percentile(0.25) == 3     # threshold 1: cumulative 1 at [1,3) reaches it
    assert h.percentile(0.26) == 7     # threshold 1.04: needs [3,7) (cumulative 2)
    assert h.percentile(0.5) == 7      # threshold 2: cumulative 2 at [3,7)
    assert h.percentile(0.95) == 15    # threshold 3.8: only the last bucket [7,15) gets there
    assert h.percentile(1.0) == 15


def test_values_outside_the_range():
    h = simple()
    h.add_sample(0.5, 1, T0)
    assert h.percentile(1.0) == 1          # bucket [0,1) ends at 1
    h = simple()
    h.add_sample(1e6, 1, T0)
    assert h.percentile(0.5) == 127        # the last bucket has no end: its start is returned
    with pytest.raises(ValueError):
        h.add_sample(1, -1, T0)


def test_old_sample_weighs_half_after_one_half_life():
    h = simple(half_life=HOUR)
    h.add_sample(2, 1.0, T0)               # weight 1 × 2**0 = 1 (the reference becomes T0)
    h.add_sample(10, 0.5, T0 + HOUR)       # weight 0.5 × 2**1 = 1: one half-life later, twice as heavy
    # Equal weights, total 2. p50: threshold 1 is met by [1,3) alone -> 3. Had the newer sample been
    # undecayed (0.5) p51 (threshold 0.765) would still be 3; with decay p51 (threshold 1.02) needs [7,15).
    assert h.percentile(0.5) == 3
    assert h.percentile(0.51) == 15


def test_reference_is_rounded_to_half_lives_like_go():
    # Go's time.Round(halfLife) counts from the zero time and rounds halves up.
    h = simple(half_life=HOUR)
    h.add_sample(2, 1, T0 + 1000)          # 1000 s < 30 min -> rounds down to T0
    assert h.reference == T0
    h = simple(half_life=HOUR)
    h.add_sample(2, 1, T0 + 1800)          # exactly half -> rounds up to T0 + 1 h
    assert h.to_checkpoint()["referenceTimestamp"] == "2027-01-15T09:00:00Z"


def test_renormalisation_keeps_weights_finite():
    h = simple(half_life=HOUR)
    h.add_sample(2, 1, T0)
    # 2000 half-lives later: without moving the reference the weight would be 2**2000 (OverflowError in Python,
    # inf in Go). Past 100 half-lives the reference jumps to the new sample's time and the old sample's weight
    # becomes 2**-2000 = 0, below epsilon, so only the new sample is left.
    later = T0 + 2000 * HOUR               # 7,200,000 s = 83 days 8 h after 2027-01-15T08:00Z
    h.add_sample(10, 1, later)
    assert h.percentile(0.0) == 15
    ckpt = h.to_checkpoint()
    assert ckpt["referenceTimestamp"] == "2027-04-08T16:00:00Z"
    assert ckpt["bucketWeights"] == {"3": 10000} and ckpt["totalWeight"] == 1.0


def test_checkpoint_format_and_round_trip():
    h = simple()
    h.add_sample(2, 1, T0)
    h.add_sample(5, 2, T0)
    h.add_sample(10, 5, T0)
    ckpt = json.loads(json.dumps(h.to_checkpoint()))
    # heaviest bucket (weight 5) -> 10000, so the scale is 2000: weights 1, 2, 5 -> 2000, 4000, 10000
    assert ckpt == {"referenceTimestamp": "2027-01-15T08:00:00Z",
                    "bucketWeights": {"1": 2000, "2": 4000, "3": 10000}, "totalWeight": 8.0}
    back = DecayingHistogram.from_checkpoint(SIMPLE, HOUR, ckpt)
    # Loaded weights are w × 8 / 16000 = 1, 2, 5 again, so every percentile agrees.
    ps = [i / 100 for i in range(101)]
    assert [back.percentile(p) for p in ps] == [h.percentile(p) for p in ps]
    assert back.reference == T0
    # The thresholds: cumulative weights 1, 3, 8 of 8 -> p12.5 is 3, p37.5 is 7, above that 15.
    assert (back.percentile(0.125), back.percentile(0.375), back.percentile(0.376)) == (3, 7, 15)


def test_empty_checkpoint_round_trip():
    ckpt = simple().to_checkpoint()
    assert ckpt == {"referenceTimestamp": "0001-01-01T00:00:00Z"}     # Go's zero time; omitempty drops the rest
    back = DecayingHistogram.from_checkpoint(SIMPLE, HOUR, ckpt)
    assert back.is_empty() and back.percentile(0.5) == 0.0


@pytest.mark.parametrize("bad", [
    {"bucketWeights": {"8": 1}, "totalWeight": 1},          # only buckets 0..7 exist
    {"bucketWeights": {"-1": 1}, "totalWeight": 1},
    {"bucketWeights": {"1": 1.5}, "totalWeight": 1},        # not a uint32
    {"bucketWeights": {"1": 2**32}, "totalWeight": 1},
    {"bucketWeights": {"1": 1}, "totalWeight": -1},
    {"bucketWeights": {"1": 1}, "totalWeight": "1"},
    {"referenceTimestamp": "yesterday"},
    ["not", "an", "object"],
])
def test_bad_checkpoint_is_rejected(bad):
    with pytest.raises(ValueError):
        DecayingHistogram.from_checkpoint(SIMPLE, HOUR, bad)


def test_go_time_text():
    assert parse_go_time("2027-01-15T08:00:00Z") == T0
    assert parse_go_time("2027-01-15T16:00:00+08:00") == T0              # same instant, local zone
    assert parse_go_time("2027-01-15T08:00:00.5Z") == T0 + 0.5
    assert parse_go_time("2027-01-15T08:00:00.123456789Z") == pytest.approx(T0 + 0.123456789, abs=1e-6)
    assert format_go_time(T0 + 0.25) == "2027-01-15T08:00:00.25Z"
    with pytest.raises(ValueError):
        parse_go_time("2027-02-30T00:00:00Z")


# ---------------------------------------------------------------------------------------------------------------
# server
#
# Upstream buckets. CPU: bucket n >= 1 starts at 0.025 × (1.05**n − 1) / 0.05 = 0.5 × (1.05**n − 1) cores.
# Memory: bucket n starts at 5 MiB × (1.05**n − 1) / 0.05 = 104857600 × (1.05**n − 1) bytes.
# With one sample, p95 / p98 is the end of the sample's bucket:
#   1.0 core:  bucket floor(log1.05(1.0 × 0.05/0.025 + 1)) = floor(log1.05 3 = 22.52) = 22,
#              end 0.5 × (1.05**23 − 1) = 0.5 × 2.0715238 = 1.0357619 cores -> 1035 m (truncated)
#   2.5 cores: bucket floor(log1.05 6 = 36.72) = 36, end 0.5 × (1.05**37 − 1) = 2.5407035 -> 2540 m
#   0:         bucket 0, end = first bucket size = 0.025 cores -> 25 m, and 5 MiB = 5242880 bytes
#   1 GiB:     bucket floor(log1.05(2**30 × 0.05 / 5 MiB + 1) = log1.05 11.24 = 49.59) = 49,
#              end 104857600 × (1.05**50 − 1) = 104857600 × 10.4673998 = 1097586419.77 -> 1097586419
#   5 GiB:     bucket floor(log1.05(51.2 + 1) = 81.06) = 81, end 104857600 × (1.05**82 − 1) -> 5624717773
ONE_CORE_1GIB = Resources(1035, 1097586419)
IDLE = Resources(25, 5 * 2**20)


def samples(node: Usage | None, *pods: PodUsage) -> TrainingSamples:
    return TrainingSamples(node, tuple(pods))


def two_pods() -> TrainingSamples:
    return samples(Usage(4.0, 8 * GiB), PodUsage("a", "koord-prod", 1.0, 1 * GiB),
                   PodUsage("b", "koord-batch", 0.5, 2 * GiB))


def server(tmp_path, **kw) -> PeakPredictServer:
    return PeakPredictServer(PredictionConfig(checkpoint_dir=str(tmp_path / "ckpt"), **kw))


def test_training_pods_items_and_system(tmp_path):
    s = server(tmp_path)
    assert not s.has_synced and s.predict("a") is None
    s.train(T0, two_pods())
    assert s.has_synced
    assert s.predict("a") == ONE_CORE_1GIB
    assert s.predict(node_item_key("koord-prod")) == ONE_CORE_1GIB        # the prod tier is pod a alone
    # sys = node − all pods = 4 − 1.5 = 2.5 cores, 8 − 3 = 5 GiB
    assert s.predict(node_item_key("sys")) == Resources(2540, 5624717773)
    # classes without pods are trained with 0
    assert s.predict(node_item_key("koord-mid")) == IDLE
    assert s.predict(node_item_key("")) == IDLE
    assert s.predict(NODE_KEY) is not None
    assert s.predict("nobody") is None


def test_system_floors_at_zero_and_needs_the_node(tmp_path):
    s = server(tmp_path)
    s.train(T0, samples(None, PodUsage("a", "koord-prod", 1.0, 1 * GiB)))
    assert s.predict(node_item_key("sys")) is None and s.predict(NODE_KEY) is None
    s.train(T0 + 60, samples(Usage(0.5, 0.5 * GiB), PodUsage("a", "koord-prod", 1.0, 1 * GiB)))
    assert s.predict(node_item_key("sys")) == IDLE       # 0.5 − 1.0 < 0 -> 0


def test_gc_drops_models_not_updated_for_30_minutes(tmp_path):
    s = server(tmp_path)
    s.train(T0, two_pods())
    s.train(T0 + 600, samples(Usage(4.0, 8 * GiB), PodUsage("a", "koord-prod", 1.0, 1 * GiB)))
    assert s.gc(T0 + 1800) == []                           # b: exactly 30 min, not yet "longer than"
    assert s.gc(T0 + 1801) == ["b"]
    assert s.predict("b") is None and s.predict("a") is not None
    assert s.gc(T0 + 600 + 1801) == sorted(["a", NODE_KEY, node_item_key("sys")] +
                                           [node_item_key(c) for c in ("koord-prod", "koord-mid", "koord-batch",
                                                                       "koord-free", "")])


def test_checkpoint_files_interval_and_limit(tmp_path):
    s = server(tmp_path, checkpoint_max_per_step=4)
    assert s.checkpoint(T0) == 0                           # nothing before the first training
    s.train(T0, two_pods())                                # a, b, node, sys and 5 classes = 9 models
    assert [s.checkpoint(T0) for _ in range(4)] == [4, 4, 1, 0]
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert names == sorted(["a", "b", "__node__", "__node-sys__", "__node-koord-prod__", "__node-koord-mid__",
                            "__node-koord-batch__", "__node-koord-free__", "__node-__"])
    assert s.checkpoint(T0 + 599) == 0                     # every model was saved less than 10 min ago
    assert s.checkpoint(T0 + 600) == 4
    doc = json.loads((tmp_path / "ckpt" / "a").read_text())
    assert set(doc) == {"UID", "CPU", "Memory", "LastUpdated"} and doc["UID"] == "a"
    assert doc["LastUpdated"] == "2027-01-15T08:00:00Z"
    # T0 (08:00) rounds to the nearest 12 h multiple, 12:00; the sample 4 h before it weighs 2**(-4/12)
    assert doc["CPU"] == {"referenceTimestamp": "2027-01-15T12:00:00Z",
                          "bucketWeights": {"22": 10000}, "totalWeight": pytest.approx(2 ** (-4 / 12))}


def test_restore_round_trip_drops_unknown_corrupt_and_tmp(tmp_path, caplog):
    first = server(tmp_path)
    for i, cpu in enumerate((1.0, 3.0, 0.2, 7.5)):
        first.train(T0 + 60 * i, samples(Usage(10.0, 16 * GiB), PodUsage("a", "koord-prod", cpu, (i + 1) * GiB),
                                         PodUsage("b", "koord-batch", 0.5, GiB)))
    assert first.checkpoint(T0 + 600) == 9
    ckpt = tmp_path / "ckpt"
    (ckpt / "__node-koord-mid__").write_text('{"UID": "__node-koord-mid__", "CPU": {')     # truncated write
    (ckpt / "a.tmp").write_text("{}")
    caplog.set_level(logging.INFO, logger="koordlet.prediction")

    second = server(tmp_path)
    assert second.restore(known_pod_uids={"a"}) == 7        # 9 saved − b (pod gone) − koord-mid (corrupt)
    for key in ("a", NODE_KEY, node_item_key("sys"), node_item_key("koord-prod")):
        assert second.predict(key) == first.predict(key)
    assert second.predict("b") is None and second.predict(node_item_key("koord-mid")) is None
    assert sorted(os.listdir(ckpt)) == sorted(["a", "__node__", "__node-sys__", "__node-koord-prod__",
                                               "__node-koord-batch__", "__node-koord-free__", "__node-__"])
    corrupt = [r for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(corrupt) == 1 and "__node-koord-mid__" in corrupt[0].getMessage()


def test_restore_missing_or_unreadable_directory_starts_empty(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="koordlet.prediction")
    s = server(tmp_path)
    assert s.restore(known_pod_uids=()) == 0
    assert s.predict(NODE_KEY) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"prediction checkpoints absent, starting empty dir={tmp_path / 'ckpt'}"]
    (tmp_path / "file").write_text("x")
    s = PeakPredictServer(PredictionConfig(checkpoint_dir=str(tmp_path / "file")))
    assert s.restore(known_pod_uids=()) == 0
    assert "unreadable" in caplog.records[-1].getMessage()


def test_restore_reads_upstream_checkpoint_and_gc_waits_for_training(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    # As the Go koordlet's json.Encoder writes it (local-zone timestamps, nanoseconds, metav1.Time seconds).
    (ckpt / "x").write_text(json.dumps({
        "UID": "x",
        "CPU": {"referenceTimestamp": "2027-01-15T16:00:00+08:00", "bucketWeights": {"22": 10000}, "totalWeight": 1},
        "Memory": {"referenceTimestamp": "2027-01-15T08:00:00.000000000Z", "bucketWeights": {"49": 10000},
                   "totalWeight": 1.5},
        "LastUpdated": "2027-01-15T08:00:00Z"}) + "\n")
    s = server(tmp_path)
    assert s.restore(known_pod_uids={"x"}) == 1
    assert s.predict("x") == ONE_CORE_1GIB                 # buckets 22 and 49: see the table above
    assert s.gc(T0 + DAY) == []                            # not synced yet: restored history is kept
    s.train(T0 + DAY, samples(None))
    assert "x" in s.gc(T0 + DAY)                           # last updated a day ago
    assert not (ckpt / "x").exists()


# ---------------------------------------------------------------------------------------------------------------
# reclaimable / peak
#
# Scenario (CPU in milli-cores, memory in bytes, margin 10 %, cold start 24 h), allocatable 8000 m / 16 G:
#   pod  class       age   state        request      prediction (p95 cpu, p98 mem)
#   A    koord-prod  2 d                2000, 4 G    1000, 2 G
#   B    koord-prod  1 h   cold start   1000, 2 G    5000, 9 G (ignored: cold start)
#   C    koord-prod  2 d   terminating  3000, 3 G    100, 0.1 G
#   D    koord-batch 2 d                4000, 4 G    100, 0.1 G (not Prod)
#   E    ""          2 d                 500, 1 G     600, 0.5 G
#   F    koord-prod  2 d                 800, 1 G    none
#   items: sys 500, 1 G; koord-prod 1500, 6 G; "" 400, 0.5 G
AGED = T0 - 2 * DAY
PODS = (PodRequest("A", "koord-prod", 2000, 4 * G, AGED, False),
        PodRequest("B", "koord-prod", 1000, 2 * G, T0 - HOUR, False),
        PodRequest("C", "koord-prod", 3000, 3 * G, AGED, True),
        PodRequest("D", "koord-batch", 4000, 4 * G, AGED, False),
        PodRequest("E", "", 500, 1 * G, AGED, False),
        PodRequest("F", "koord-prod", 800, 1 * G, AGED, False))
PREDICTIONS = {"A": Resources(1000, 2 * G), "B": Resources(5000, 9 * G), "C": Resources(100, G // 10),
               "D": Resources(100, G // 10), "E": Resources(600, G // 2),
               node_item_key("sys"): Resources(500, 1 * G), node_item_key("koord-prod"): Resources(1500, 6 * G),
               node_item_key(""): Resources(400, G // 2)}
ALLOCATABLE = Resources(8000, 16 * G)


def test_pod_predictor_hand_worked():
    got = pod_predictor(T0, ALLOCATABLE, PODS, PREDICTIONS.get)
    # A: peak 1000×1.1 = 1100, 2G×1.1 = 2.2G; lends 2000−1100 = 900, 4G−2.2G = 1.8G
    # B: cold start -> unpredicted += 1000, 2G.   C: terminating -> nothing.   D: not Prod -> nothing.
    # E: peak 660, 0.55G; lends max(500−660, 0) = 0, 1G−0.55G = 0.45G
    # F: no model -> unpredicted += 800, 1G
    # Σpeak = 1760, 2.75G; Σlend = 900, 2.25G; Σunpredicted = 1800, 3G
    # reclaimable = min(8000−1760, 900), min(16G−2.75G, 2.25G) = 900, 2.25G; peak = Σpeak + Σunpredicted
    assert got == ReclaimPrediction(Resources(900, 2_250_000_000), Resources(3560, 5_750_000_000))


def test_pod_predictor_caps_by_allocatable_and_truncates():
    # allocatable 2500 m: 2500 − Σpeak 1760 = 740 < Σlend 900
    got = pod_predictor(T0, Resources(2500, 16 * G), PODS, PREDICTIONS.get)
    assert got.reclaimable == Resources(740, 2_250_000_000)
    # 2 GiB × 1.1 = 2362232012.8 -> truncated to 2362232012; request 3 GiB lends 3221225472 − 2362232012
    pod = PodRequest("p", "koord-prod", 1000, 3 * GiB, AGED, False)
    got = pod_predictor(T0, ALLOCATABLE, [pod], {"p": Resources(1000, 2 * GiB)}.get)
    assert got.peak == Resources(1100, 2362232012)
    assert got.reclaimable == Resources(0, 3 * GiB - 2362232012)       # cpu: max(1000 − 1100, 0) = 0


def test_cold_start_boundary_and_young_terminating_pod():
    pred = {"p": Resources(100, G)}.get
    at_boundary = PodRequest("p", "koord-prod", 1000, 2 * G, T0 - DAY, False)    # exactly 24 h: still cold
    assert pod_predictor(T0, ALLOCATABLE, [at_boundary], pred) == \
        ReclaimPrediction(Resources(0, 0), Resources(1000, 2 * G))
    just_after = PodRequest("p", "koord-prod", 1000, 2 * G, T0 - DAY - 1, False)
    # peak 110, 1.1G; lends 890, 0.9G
    assert pod_predictor(T0, ALLOCATABLE, [just_after], pred) == \
        ReclaimPrediction(Resources(890, 900_000_000), Resources(110, 1_100_000_000))
    # upstream checks the cold start before terminating: a young terminating pod still counts its request
    young_leaving = PodRequest("p", "koord-prod", 1000, 2 * G, T0 - HOUR, True)
    assert pod_predictor(T0, ALLOCATABLE, [young_leaving], pred).peak == Resources(1000, 2 * G)
    idle_tier = {node_item_key(item): Resources(0, 0) for item in ("sys", "koord-prod", "")}.get
    # with a zero tier peak any counted request would be lendable; the terminating pod's is not counted
    assert priority_predictor(ALLOCATABLE, [young_leaving], idle_tier) == \
        ReclaimPrediction(Resources(0, 0), Resources(0, 0))
    assert priority_predictor(ALLOCATABLE, [just_after], idle_tier).reclaimable == Resources(1000, 2 * G)


def test_priority_predictor_hand_worked():
    got = priority_predictor(ALLOCATABLE, PODS, PREDICTIONS.get)
    # peak = (500 + 1500 + 400) × 1.1 = 2640; (1G + 6G + 0.5G) × 1.1 = 8.25G
    # requests of non-terminating Prod/none pods A, B, E, F = 4300, 8G (B counts despite its cold start)
    # reclaimable = min(8000−2640, 4300−2640) = 1660; min(16G−8.25G, max(8G−8.25G, 0)) = 0
    assert got == ReclaimPrediction(Resources(1660, 0), Resources(2640, 8_250_000_000))


def test_combined_is_min_of_reclaimable_and_max_of_peaks():
    got = predict_prod_reclaimable(T0, ALLOCATABLE, PODS, PREDICTIONS.get)
    # pod predictor: 900, 2.25G / peak 3560, 5.75G; priority predictor: 1660, 0 / peak 2640, 8.25G
    assert got == ReclaimPrediction(Resources(900, 0), Resources(3560, 8_250_000_000))
    a = ReclaimPrediction(Resources(900, 3 * G), Resources(100, 5 * G))
    b = ReclaimPrediction(Resources(1000, 2 * G), Resources(200, 4 * G))
    assert combine(a, b) == combine(b, a) == ReclaimPrediction(Resources(900, 2 * G), Resources(200, 5 * G))


def test_errors_leave_fields_empty():
    without_sys = {k: v for k, v in PREDICTIONS.items() if k != node_item_key("sys")}
    got = predict_prod_reclaimable(T0, ALLOCATABLE, PODS, without_sys.get)
    assert got.reclaimable is None and got.peak is None and "__node-sys__" in got.error
    got = predict_prod_reclaimable(T0, None, PODS, PREDICTIONS.get)
    # no allocatable: nothing can be lent, but both peaks exist: max(3560, 2640), max(5.75G, 8.25G)
    assert got.reclaimable is None and got.peak == Resources(3560, 8_250_000_000)
    assert "allocatable" in got.error


def test_a_pod_listed_twice_counts_once():
    twice = (PODS[0], PODS[0])
    # A once: pod predictor lends 900, 1.8G with peak 1100, 2.2G (twice would be 1800, 3.6G / 2200, 4.4G)
    assert pod_predictor(T0, ALLOCATABLE, twice, PREDICTIONS.get) == \
        ReclaimPrediction(Resources(900, 1_800_000_000), Resources(1100, 2_200_000_000))
    # priority: requests 2000 − peak 2640 < 0 -> 0 (twice: 4000 − 2640 = 1360)
    assert priority_predictor(ALLOCATABLE, twice, PREDICTIONS.get).reclaimable == Resources(0, 0)


def test_server_feeds_the_predictor(tmp_path):
    s = server(tmp_path)
    s.train(T0, two_pods())
    pods = [PodRequest("a", "koord-prod", 2000, 2 * GiB, AGED, False)]
    got = predict_prod_reclaimable(T0, Resources(8000, 16 * GiB), pods, s.predict)
    # pod a predicts 1035 m, 1097586419 B (table above) -> peak 1035×1.1 = 1138.5 -> 1138, 1207345060.9 -> 1207345060
    # lends 2000 − 1138 = 862, 2147483648 − 1207345060 = 940138588
    # priority: sys 2540 + prod 1035 + none 25 = 3600 -> ×1.1 = 3960; requests 2000 − 3960 < 0 -> 0
    #           memory 5624717773 + 1097586419 + 5242880 = 6727547072 -> ×1.1 = 7400301779.2 -> 7400301779
    assert got == ReclaimPrediction(Resources(0, 0), Resources(3960, 7400301779))
    assert pod_predictor(T0, Resources(8000, 16 * GiB), pods, s.predict).reclaimable == Resources(862, 940138588)


def test_node_allocatable(caplog):
    status = {"allocatable": {"cpu": "15500m", "memory": "30Gi", "pods": "110"}}
    raw = '{"cpu":"16","memory":"32Gi"}'
    assert node_allocatable({"metadata": {"annotations": {"node.koordinator.sh/raw-allocatable": raw}},
                             "status": status}) == Resources(16000, 32 * GiB)
    assert node_allocatable({"metadata": {}, "status": status}) == Resources(15500, 30 * GiB)
    bad = {"metadata": {"annotations": {"node.koordinator.sh/raw-allocatable": "{not json"}}, "status": status}
    caplog.set_level(logging.WARNING, logger="koordlet.prediction")
    assert node_allocatable(bad) == Resources(15500, 30 * GiB)
    assert node_allocatable(bad) == Resources(15500, 30 * GiB)
    assert len([r for r in caplog.records if "raw-allocatable" in r.getMessage()]) == 1
    assert node_allocatable({"metadata": {}}) is None
    assert node_allocatable({"status": {"allocatable": {"cpu": "100u", "memory": "1.5"}}}) == Resources(1, 2)


def test_checkpoint_write_failure_is_logged_not_raised(tmp_path, caplog):
    (tmp_path / "ckpt").write_text("a file where the directory should be")
    s = server(tmp_path)
    s.train(T0, two_pods())
    assert s.checkpoint(T0) == 0
    assert any("not saved" in r.getMessage() for r in caplog.records)
