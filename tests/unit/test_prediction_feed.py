"""The predictor fed from a real metric cache: training inputs, schedule, checkpoint across a restart."""

from __future__ import annotations

from koordlet.metriccache import MetricCache, Sample
from koordlet.prediction.feed import Prediction, training_samples
from koordlet.prediction.server import PredictionConfig, Resources, node_item_key
from tests.builders import pod_meta

NOW = 1_800_000_000.0
UID_PROD, UID_BATCH, UID_IDLE = ("00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b",
                                 "00000000-0000-0000-0000-00000000000c")


# created long past the 24 h cold start; one container, c, with these requests
PODS = tuple(pod_meta(uid, name, qos=qos, created="2020-01-01T00:00:00Z",
                      resources={"c": {"requests": {"cpu": cpu, "memory": memory}}})
             for uid, name, qos, cpu, memory in [(UID_PROD, "prod", "Guaranteed", "2", "4Gi"),
                                                 (UID_BATCH, "batch", "BestEffort", "0", "0"),
                                                 (UID_IDLE, "idle", "Burstable", "1", "1Gi")])


def filled_cache() -> MetricCache:
    """60 s of samples: prod pod uses 0.5 cores for 54 s and 1.5 for 6 s (p90 = 0.5, floor(60*0.9)-1 = 53rd),
    1 GiB; batch 0.2 cores; node 1 core, 8 GiB (so sys = 1 − 0.5 − 0.2 = 0.3 cores). The idle pod has no
    samples."""
    cache = MetricCache(None, clock=lambda: NOW)
    samples = []
    for i in range(60):
        ts = NOW - 60 + i + 0.5
        samples += [Sample("pod_cpu_usage", (("pod_uid", UID_PROD),), ts, 0.5 if i < 54 else 1.5),
                    Sample("pod_memory_usage", (("pod_uid", UID_PROD),), ts, 2**30),
                    Sample("pod_cpu_usage", (("pod_uid", UID_BATCH),), ts, 0.2),
                    Sample("pod_memory_usage", (("pod_uid", UID_BATCH),), ts, 2**28),
                    Sample("node_cpu_usage", (), ts, 1.0), Sample("node_memory_usage", (), ts, 8 * 2**30)]
    cache.append(samples)
    return cache


def test_training_samples_are_p90_of_the_interval_and_skip_pods_without_data():
    samples = training_samples(filled_cache(), PODS, NOW - 60, NOW)
    assert samples.node is not None and samples.node.cpu_cores == 1.0
    by_uid = {p.uid: p for p in samples.pods}
    assert set(by_uid) == {UID_PROD, UID_BATCH}
    assert by_uid[UID_PROD].cpu_cores == 0.5 and by_uid[UID_PROD].priority_class == "koord-prod"
    assert by_uid[UID_BATCH].priority_class == "koord-batch"


def test_step_trains_once_per_interval_and_a_restart_keeps_the_model(tmp_path):
    config = PredictionConfig(checkpoint_dir=str(tmp_path), checkpoint_interval=0)
    prediction = Prediction(filled_cache(), config)
    assert prediction.step(NOW, PODS)
    assert not prediction.step(NOW + 30, PODS)               # training interval is 60 s
    peak = prediction.server.predict(UID_PROD)
    assert peak is not None and 500 <= peak.cpu_milli <= 550   # p95 of one 0.5-core sample: its bucket's end
    assert prediction.server.predict(node_item_key("sys")) is not None
    restarted = Prediction(MetricCache(None, clock=lambda: NOW), config)
    restarted.step(NOW + 60, PODS)                           # restores first; trains on an empty cache
    assert restarted.server.predict(UID_PROD) == peak


def test_reclaimable_for_prod_pods_and_unknown_allocatable():
    prediction = Prediction(filled_cache(), PredictionConfig(checkpoint_dir=None))
    prediction.step(NOW, PODS)
    result = prediction.reclaimable(NOW, Resources(4000, 16 * 2**30), PODS[:1])
    assert result.error is None and result.reclaimable is not None
    # pod predictor: 2 cores requested − 0.5 × 1.1 peak ≈ 1.45 reclaimable; priority predictor: 2 − (sys 0.3 +
    # prod 0.5) × 1.1 ≈ 1.12, less since each p95 is its bucket's upper end (buckets grow 5 %). The smaller wins.
    assert 1000 <= result.reclaimable.cpu_milli <= 1150
    assert 880 <= result.peak.cpu_milli <= 1000
    unknown = prediction.reclaimable(NOW, None, PODS)
    assert unknown.reclaimable is None and "allocatable" in unknown.error
