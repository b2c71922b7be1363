"""The peak predict server: one decaying CPU + memory histogram per pod, per priority class and for the system.

Upstream (``pkg/koordlet/prediction/predict_server.go``) trains every ``training_interval`` (1 min) on the latest
usage of each pod that has metrics, of the node, of each priority class (sum of its pods; 0 when it has none)
and of the system remainder (node − all pods, floored at 0). The caller gathers those numbers (upstream uses
the p90 of the last training interval from the metric cache) and hands them to ``train``; this module only keeps
models, so it needs no clock, thread or metric cache and is tested with plain numbers.

Models nobody updated for ``model_expiration`` (30 min) are dropped by ``gc``; ``checkpoint`` saves up to 12
models a step, each at most every 10 minutes, one JSON file per model in upstream's format and directory layout
(``/prediction-checkpoints``, file name = model key), so a node switching between the Go koordlet and this one
keeps its history. ``restore`` reads them back at start-up.

Differences from upstream, on purpose:
* when the node usage is unknown, the ``sys`` model is not trained (upstream trains it with 0);
* a checkpoint stores the model's own last-update time (upstream stores the time of the checkpoint), so the
  expiry of a restored model counts from its last real sample;
* a checkpoint file that does not parse, or whose histograms do not fit the buckets, is dropped whole with one
  log line (upstream keeps a model with an empty histogram for the latter);
* a filesystem without room is one state (the ``checkpoints`` store of the agent's
  :class:`koordlet.base.diskfull.DiskFull`), logged when it begins and ends, not a line per model; the last
  checkpoints stay whole (a half-written ``.tmp`` is removed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.base import wire
from koordlet.base.diskfull import CHECKPOINTS, DiskFull
from koordlet.prediction.histogram import (
    GO_ZERO_TIME,
    DecayingHistogram,
    ExponentialBuckets,
    format_go_time,
    parse_go_time,
)

log = logging.getLogger(__name__)

# predict_server.go: MinSampleWeight 0.1, epsilon = 0.001 × MinSampleWeight, bucket growth 5 %.
EPSILON = 0.001 * 0.1
# CPU in cores: first bucket 0.025 cores, 5 % growth, last bucket starts at >= 1024 cores.
CPU_BUCKETS = ExponentialBuckets(max_value=1024, first_bucket_size=0.025, ratio=1.05, epsilon=EPSILON)
# Memory in bytes: first bucket 5 MiB, 5 % growth, last bucket starts at >= 2 TiB.
MEMORY_BUCKETS = ExponentialBuckets(max_value=2**41, first_bucket_size=5 * 2**20, ratio=1.05, epsilon=EPSILON)
# peak_predictor.go: the peak of a series is its p95 for CPU and its p98 for memory.
CPU_PEAK_PERCENTILE = 0.95
MEMORY_PEAK_PERCENTILE = 0.98

# prediction.go: model keys (and checkpoint file names) for the node and for node-level items.
NODE_KEY = "__node__"
SYSTEM_ITEM = "sys"
# apis/extension/priority.go KnownPriorityClasses, in upstream's order; "" is "no priority class".
KNOWN_PRIORITY_CLASSES = (wire.PRIORITY_PROD, wire.PRIORITY_MID, wire.PRIORITY_BATCH, wire.PRIORITY_FREE,
                          wire.PRIORITY_NONE)
_TMP_SUFFIX = ".tmp"


def node_item_key(item: str) -> str:
    """Model key of a node-level item: ``sys`` or a priority class ("" gives ``__node-__``, as upstream)."""
    return f"__node-{item}__"


@dataclass(frozen=True)
class PredictionConfig:
    """Upstream's defaults (``pkg/koordlet/prediction/config.go``); durations in seconds."""

    checkpoint_dir: str | None = "/prediction-checkpoints"    # None: keep models in memory only
    cold_start: float = 24 * 3600
    safety_margin_percent: int = 10
    memory_half_life: float = 24 * 3600
    cpu_half_life: float = 12 * 3600
    training_interval: float = 60.0
    model_expiration: float = 30 * 60
    checkpoint_interval: float = 10 * 60
    checkpoint_max_per_step: int = 12


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in milli-cores and memory in bytes: the integers NodeMetric quantities are built from."""

    cpu_milli: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_cores: float
    memory_bytes: float


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's latest usage; ``priority_class`` already resolved with upstream's defaulting
    (``koordlet.states.pod.Pod.priority_class``)."""

    uid: str
    priority_class: str
    cpu_cores: float
    memory_bytes: float


@dataclass(frozen=True, slots=True)
class TrainingSamples:
    """What one training step sees: the node's usage (None when it could not be read) and every pod with
    metrics."""

    node: Usage | None
    pods: tuple[PodUsage, ...]


@dataclass
class _Model:
    cpu: DecayingHistogram
    memory: DecayingHistogram
    last_updated: float
    last_checkpointed: float = field(default=GO_ZERO_TIME)


class PeakPredictServer:
    """Keeps the models; safe to call from the training loop and the reporter at once (one lock, held only
    for in-memory work; file I/O happens outside it)."""

    def __init__(self, config: PredictionConfig = PredictionConfig(), disk_full: DiskFull | None = None) -> None:
        self.config = config
        self._models: dict[str, _Model] = {}
        self._lock = threading.Lock()
        self._synced = False
        self._disk_full = disk_full or DiskFull()
        if config.checkpoint_dir is not None:
            self._disk_full.watch(CHECKPOINTS, config.checkpoint_dir, "the models live on in memory and are saved "
                                  "again at their next checkpoint with space")

    @property
    def has_synced(self) -> bool:
        """True once a training step ran: before that, restored models have not been refreshed yet."""
        return self._synced

    def _new_model(self, last_updated: float) -> _Model:
        return _Model(DecayingHistogram(CPU_BUCKETS, self.config.cpu_half_life),
                      DecayingHistogram(MEMORY_BUCKETS, self.config.memory_half_life), last_updated)

    def _update(self, key: str, cpu_cores: float, memory_bytes: float, now: float) -> None:
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = self._new_model(now)
        model.last_updated = now
        model.cpu.add_sample(cpu_cores, 1.0, now)
        model.memory.add_sample(memory_bytes, 1.0, now)

    def train(self, now: float, samples: TrainingSamples) -> None:
        """Add one sample (weight 1) to the model of every pod, every known priority class (0 when no pod of
        it reported, so an idle class decays towards 0) and, when the node usage is known, node and ``sys``."""
        by_class: dict[str, list[float]] = {}
        pods_cpu = pods_memory = 0.0
        with self._lock:
            for pod in samples.pods:
                self._update(pod.uid, pod.cpu_cores, pod.memory_bytes, now)
                total = by_class.setdefault(pod.priority_class, [0.0, 0.0])
                total[0] += pod.cpu_cores
                total[1] += pod.memory_bytes
                pods_cpu += pod.cpu_cores
                pods_memory += pod.memory_bytes
            for cls in KNOWN_PRIORITY_CLASSES:
                cpu, memory = by_class.get(cls, (0.0, 0.0))
                self._update(node_item_key(cls), cpu, memory, now)
            if samples.node is not None:
                self._update(NODE_KEY, samples.node.cpu_cores, samples.node.memory_bytes, now)
                self._update(node_item_key(SYSTEM_ITEM), max(samples.node.cpu_cores - pods_cpu, 0.0),
                             max(samples.node.memory_bytes - pods_memory, 0.0), now)
            self._synced = True

    def predict(self, key: str) -> Resources | None:
        """Peak of a model: p95 CPU in milli-cores and p98 memory in bytes, truncated to integers as upstream's
        quantities are; None when no model has that key."""
        with self._lock:
            model = self._models.get(key)
            if model is None:
                return None
            return Resources(int(model.cpu.percentile(CPU_PEAK_PERCENTILE) * 1000),
                             int(model.memory.percentile(MEMORY_PEAK_PERCENTILE)))

    def gc(self, now: float) -> list[str]:
        """Drop models not updated for longer than ``model_expiration`` (and their checkpoint files); a no-op
        until the first training, so restored history survives until live models were refreshed."""
        if not self._synced:
            return []
        with self._lock:
            expired = sorted(k for k, m in self._models.items() if now - m.last_updated > self.config.model_expiration)
            for key in expired:
                del self._models[key]
        for key in expired:
            log.info("prediction model expired key=%s", key)
            self._remove_file(key)
        return expired

    def checkpoint(self, now: float) -> int:
        """Save the models whose last checkpoint is at least ``checkpoint_interval`` old, oldest first, at most
        ``checkpoint_max_per_step``; each file is written to ``<key>.tmp``, synced and renamed over ``<key>``.
        Returns how many were saved. A write error is logged and the model retried next interval. A full
        filesystem is the ``checkpoints`` state instead, not a line per model: it ends the step (the others would
        not fit either) and leaves the models unsaved due at the next step, so they are saved as soon as there is
        space."""
        directory = self.config.checkpoint_dir
        if directory is None or not self._synced:
            return 0
        with self._lock:
            due = sorted(self._models.items(), key=lambda kv: kv[1].last_checkpointed)
            docs: list[tuple[str, _Model, float, dict[str, Any]]] = []
            for key, model in due:
                if len(docs) >= self.config.checkpoint_max_per_step \
                        or now - model.last_checkpointed < self.config.checkpoint_interval:
                    break
                # LastUpdated is a metav1.Time upstream: RFC 3339 in whole seconds
                docs.append((key, model, model.last_checkpointed,
                             {"UID": key, "CPU": model.cpu.to_checkpoint(), "Memory": model.memory.to_checkpoint(),
                              "LastUpdated": format_go_time(math.floor(model.last_updated))}))
                model.last_checkpointed = now
        saved = 0
        for i, (key, _, _, doc) in enumerate(docs):
            try:
                _check_key(key)
                os.makedirs(directory, exist_ok=True)
                _write_atomically(os.path.join(directory, key), json.dumps(doc, separators=(",", ":")) + "\n")
                saved += 1
            except (OSError, ValueError) as exc:
                if self._disk_full.failed(CHECKPOINTS, exc):
                    with self._lock:
                        for _, model, before, _ in docs[i:]:
                            model.last_checkpointed = before
                    break
                log.warning("prediction checkpoint not saved key=%s dir=%s error=%s", key, directory, exc)
        if saved:
            self._disk_full.wrote(CHECKPOINTS)
        return saved

    def restore(self, known_pod_uids: Collection[str]) -> int:
        """Load the checkpoints at start-up and return how many models came back. Files of pods not in
        ``known_pod_uids``, leftover ``.tmp`` files and corrupt files are deleted (each corrupt file with one
        warning); a missing or unreadable directory logs one line and the server starts empty."""
        directory = self.config.checkpoint_dir
        if directory is None:
            return 0
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            log.info("prediction checkpoints absent, starting empty dir=%s", directory)
            return 0
        except OSError as exc:
            log.warning("prediction checkpoints unreadable, starting empty dir=%s error=%s", directory, exc)
            return 0
        known = set(known_pod_uids) | {NODE_KEY, node_item_key(SYSTEM_ITEM)}
        known |= {node_item_key(cls) for cls in KNOWN_PRIORITY_CLASSES}
        restored, dropped = 0, 0
        for name in names:
            path = os.path.join(directory, name)
            if not os.path.isfile(path):
                continue
            if name.endswith(_TMP_SUFFIX) or name not in known:
                dropped += 1
                self._remove_file(name)
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    model = self._model_from_checkpoint(json.load(f))
            except (OSError, ValueError) as exc:        # json.JSONDecodeError and UnicodeDecodeError included
                log.warning("prediction checkpoint corrupt, dropped path=%s error=%s", path, exc)
                dropped += 1
                self._remove_file(name)
                continue
            with self._lock:
                self._models[name] = model
            restored += 1
        log.info("prediction checkpoints restored dir=%s models=%d dropped=%d", directory, restored, dropped)
        return restored

    def _model_from_checkpoint(self, doc: Any) -> _Model:
        if not isinstance(doc, Mapping):
            raise ValueError("expected a JSON object")
        last = doc.get("LastUpdated")
        return _Model(DecayingHistogram.from_checkpoint(CPU_BUCKETS, self.config.cpu_half_life, doc.get("CPU")),
                      DecayingHistogram.from_checkpoint(MEMORY_BUCKETS, self.config.memory_half_life,
                                                        doc.get("Memory")),
                      GO_ZERO_TIME if last is None else parse_go_time(last))

    def _remove_file(self, name: str) -> None:
        directory = self.config.checkpoint_dir
        if directory is None:
            return
        try:
            _check_key(name)
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("prediction checkpoint not removed name=%s dir=%s error=%s", name, directory, exc)


def _check_key(key: str) -> None:
    """A model key becomes a file name: refuse anything that could leave the checkpoint directory."""
    if not key or "/" in key or "\0" in key or key in (".", ".."):
        raise ValueError(f"model key {key!r}: not usable as a file name")


def _write_atomically(path: str, text: str) -> None:
    """``text`` into ``path`` through ``<path>.tmp`` (synced, renamed over it); a failed write removes the temporary
    file, so the last checkpoint stays whole and a full filesystem gets its space back."""
    tmp = path + _TMP_SUFFIX
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
