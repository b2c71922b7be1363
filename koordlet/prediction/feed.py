"""Feeding the peak predictor from the metric cache, as upstream's predict server does every training interval.

Each step trains on the p90 of the last training interval of ``node_cpu_usage`` / ``node_memory_usage`` and of
each pod's ``pod_cpu_usage`` / ``pod_memory_usage`` (pods without samples are left out), then drops models of
pods gone for longer than the model expiration and checkpoints the models due. The checkpoint directory is
restored once at start, so a restart keeps what was learned.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from koordlet.base.diskfull import DiskFull
from koordlet.metriccache import EmptyError, MetricCache
from koordlet.prediction.reclaimable import MIN_PREDICTOR, PodRequest, ReclaimPrediction, predict_each
from koordlet.prediction.server import PeakPredictServer, PodUsage, PredictionConfig, Resources, TrainingSamples, Usage
from koordlet.states.informer import PodMeta

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

TRAIN_AGGREGATION = "p90"


def _p90(cache: MetricCache, cpu: str, memory: str, labels: dict[str, str] | None, start: float,
         end: float) -> tuple[float, float] | None:
    try:
        return (cache.query(cpu, labels, start, end).value(TRAIN_AGGREGATION),
                cache.query(memory, labels, start, end).value(TRAIN_AGGREGATION))
    except EmptyError:
        return None


def training_samples(cache: MetricCache, pods: Iterable[PodMeta], start: float, end: float) -> TrainingSamples:
    """What one training step sees over [start, end]."""
    node = _p90(cache, "node_cpu_usage", "node_memory_usage", None, start, end)
    samples = []
    for meta in pods:
        usage = _p90(cache, "pod_cpu_usage", "pod_memory_usage", {"pod_uid": meta.pod.uid}, start, end)
        if usage is not None:
            samples.append(PodUsage(meta.pod.uid, meta.pod.priority_class, usage[0], usage[1]))
    return TrainingSamples(Usage(*node) if node else None, tuple(samples))


def pod_request(meta: PodMeta) -> PodRequest:
    pod = meta.pod
    return PodRequest(pod.uid, pod.priority_class, pod.cpu_request_milli, pod.memory_request_bytes, pod.created,
                      pod.terminating)


class Prediction:
    """The predictor with its training schedule; ``step`` is called often, it trains when one is due."""

    def __init__(self, cache: MetricCache, config: PredictionConfig, metrics: AgentMetrics | None = None,
                 disk_full: DiskFull | None = None) -> None:
        self._cache = cache
        self._metrics = metrics
        self.config = config
        self.server = PeakPredictServer(config, disk_full)
        self._restored = False
        self._last_train = float("-inf")
        self._lock = threading.Lock()

    def step(self, now: float, pods: tuple[PodMeta, ...]) -> bool:
        """Restore once, then train + gc + checkpoint when a training interval has passed; True if trained."""
        with self._lock:
            if not self._restored:
                self._restored = True
                restored = self.server.restore({m.pod.uid for m in pods})
                if restored:
                    log.info("prediction models restored count=%d dir=%s", restored, self.config.checkpoint_dir)
            if now - self._last_train < self.config.training_interval:
                return False
            self._last_train = now
            self.server.train(now, training_samples(self._cache, pods, now - self.config.training_interval, now))
            self.server.gc(now)
            self.server.checkpoint(now)
            return True

    def reclaimable(self, now: float, allocatable: Resources | None, pods: Iterable[PodMeta]) -> ReclaimPrediction:
        """Prod reclaimable and peak for the pods that had metrics (upstream feeds exactly those)."""
        if allocatable is None:
            return ReclaimPrediction(None, None, "node allocatable unknown")
        each = predict_each(now, allocatable, [pod_request(m) for m in pods], self.server.predict, self.config)
        if self._metrics is not None:     # every predictor's answer, as upstream records them
            for name, p in each.items():
                self._metrics.predicted(name, _cores_bytes(p.reclaimable), _cores_bytes(p.peak))
        return each[MIN_PREDICTOR]


def _cores_bytes(value: Resources | None) -> tuple[float, float] | None:
    return None if value is None else (value.cpu_milli / 1000, float(value.memory_bytes))
