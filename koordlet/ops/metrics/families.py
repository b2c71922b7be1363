"""What every group of the agent's metrics declares its families into (:class:`Families`): the two registries and
the pages they are served on, every family by name (upstream's built from their table, ours declared by their
group), and the life of their series.

**Series of pods that are gone disappear.** Per-container and per-pod series are removed by their owners when a
container goes (CPI, PSI, cookies), reset and rewritten every cycle (CPU burst, container requests/limits), or,
for series keyed by a pod UID, removed when the pod leaves the informer's list (``pods_synced`` calls
:meth:`Families.forget_pods`). The families upstream keeps in its expiring vectors (``pod_eviction_detail``,
``core_sched_cookie_manage_status``: a counter of an evicted pod would otherwise stay forever) drop a series five
minutes after its last change, as upstream's metric GC does (:meth:`Families.expire`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from koordlet.ops.metrics.exposition import (
    DEFAULT_PATH,
    EXTERNAL_PATH,
    INTERNAL_PATH,
    TableGauge,
    TableHistogram,
    Vector,
)
from koordlet.ops.metrics.upstream import FAILED, POD_UID, SUCCEEDED, UPSTREAM_FAMILIES, Family

EXPIRE_AFTER = 300.0                 # upstream's metric GC: a series of an expiring family lives 5 min unchanged

V = TypeVar("V", Gauge, Counter, Histogram, TableGauge, TableHistogram)
Own = TypeVar("Own", Gauge, Counter, Histogram, TableGauge)


class Families:
    """The registries and families of one agent (tests build many). Upstream keeps two registries and so do we:
    ``internal`` (the agent's own behaviour) and ``external`` (facts for users: resource summary, CPI, PSI,
    resctrl), served as ``/internal-metrics`` and ``/external-metrics`` and merged on ``/metrics`` (:meth:`pages`);
    the merge is also what in-process readers query. Upstream's families are registered first, in their table's
    order; each group then declares its own (:meth:`_own`, all internal) and takes upstream's by name
    (:meth:`_upstream`)."""

    def __init__(self, node: str, clock: Callable[[], float]) -> None:
        self.node = node
        self._clock = clock                  # when expiring series changed (tests pass their own)
        self.internal = CollectorRegistry(auto_describe=True)
        self.external = CollectorRegistry(auto_describe=True)
        # /metrics: both (upstream merges its two gatherers); also what in-process readers query
        self.registry = CollectorRegistry()
        self.registry.register(self.internal)
        self.registry.register(self.external)
        self._vectors: dict[str, Vector] = {}
        for family in UPSTREAM_FAMILIES:
            self._vectors[family.name] = _vector(family, self.internal if family.registry == "internal"
                                                 else self.external)
        self._lock = threading.Lock()
        self._touched: dict[tuple[str, tuple[str, ...]], float] = {}    # expiring series -> last change

    def pages(self) -> dict[str, CollectorRegistry]:
        """What the HTTP server serves, as upstream's koordlet: both registries, and each on its own."""
        return {DEFAULT_PATH: self.registry, INTERNAL_PATH: self.internal, EXTERNAL_PATH: self.external}

    # --- declaring -----------------------------------------------------------------------------------------------

    def _upstream(self, name: str, kind: type[V]) -> V:
        """Upstream's family ``name``, as its table row built it."""
        vector = self._vectors[name]
        assert isinstance(vector, kind), name
        return vector

    def _own(self, kind: type[Own], name: str, documentation: str, labels: Sequence[str], **options: Any) -> Own:
        """One of our families (help text starting "(koordlet-py)"), in the internal registry."""
        vector = kind(name, documentation, labels, registry=self.internal, **options)
        self._vectors[name] = vector
        return vector

    # --- recording shared by the groups --------------------------------------------------------------------------

    def collect_status(self, counter: Counter, ok: bool) -> None:
        """One read of node information (``collect_node_*_info_status``)."""
        counter.labels(self.node, SUCCEEDED if ok else FAILED).inc()

    # --- the life of series --------------------------------------------------------------------------------------

    def forget_pods(self, uids: Iterable[str]) -> None:
        """Remove every series labelled with one of these pod UIDs (the pods are gone)."""
        uids = set(uids)
        for vector in self._pod_vectors():
            names = _label_names(vector)
            at = names.index(POD_UID)
            for values in _children(vector):
                if values[at] in uids:
                    vector.remove(*values)

    def _pod_vectors(self) -> Iterator[Gauge | Counter]:
        """The families set one series at a time that are labelled with a pod UID (the table ones are replaced
        whole by their owner)."""
        for vector in self._vectors.values():
            if isinstance(vector, (Gauge, Counter)) and POD_UID in _label_names(vector):
                yield vector

    def _touch(self, family: str, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._touched[(family, labels)] = self._clock()

    def expire(self, now: float | None = None) -> int:
        """Drop the series of expiring families unchanged for :data:`EXPIRE_AFTER` seconds (upstream's metric
        GC); called by the agent's housekeeping loop. Returns how many went."""
        now = self._clock() if now is None else now
        with self._lock:
            old = [key for key, at in self._touched.items() if now - at >= EXPIRE_AFTER]
            for key in old:
                del self._touched[key]
        for name, labels in old:
            vector = self._vectors[name]
            assert not isinstance(vector, TableGauge | TableHistogram), name   # only series set one by one expire
            try:
                vector.remove(*labels)
            except KeyError:
                pass
        return len(old)


def _vector(family: Family, registry: CollectorRegistry) -> Vector:
    if family.table and family.type == "histogram":
        return TableHistogram(family.name, family.help, family.labels, family.buckets, registry)
    if family.table:
        return TableGauge(family.name, family.help, family.labels, registry)
    if family.type == "gauge":
        return Gauge(family.name, family.help, family.labels, registry=registry)
    if family.type == "counter":
        return Counter(family.name, family.help, family.labels, registry=registry)
    return Histogram(family.name, family.help, family.labels, buckets=family.buckets, registry=registry)


def replace_series(gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
    """Make ``values`` the gauge's whole set of series: the others removed, these set. Unlike ``clear()`` and
    setting again, a scrape in between never sees the family empty."""
    for labels in _children(gauge):
        if labels not in values:
            gauge.remove(*labels)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)


def _label_names(vector: Gauge | Counter) -> list[str]:
    return list(vector._labelnames)      # no public accessor; fixed at construction


def _children(vector: Gauge | Counter) -> list[tuple[str, ...]]:
    """The label values of every series the vector holds (from its samples: the public view)."""
    names = _label_names(vector)
    seen: dict[tuple[str, ...], None] = {}
    for metric in vector.collect():
        for s in metric.samples:
            if s.name.endswith("_created"):
                continue
            seen[tuple(s.labels[n] for n in names)] = None
    return list(seen)
