"""The agent's metrics as Prometheus reads them: the text format, and the two family kinds that keep their series as
plain data instead of one prometheus_client child each (:class:`TableGauge`, :class:`TableHistogram`).

**Counters without ``_total``.** Go's client exposes a counter under the name it was given
(``# TYPE koordlet_pod_eviction counter`` / ``koordlet_pod_eviction{...} 1``); prometheus_client always adds
``_total`` (and a ``_created`` series). Upstream's counters are still ordinary prometheus_client ``Counter`` s here
(so in-process readers such as ``registry.get_sample_value`` see ``<name>_total``), and :func:`exposition`, which
the HTTP server uses instead of ``generate_latest``, writes the upstream families as Go does: counters under their
bare name, no ``_created`` series for any upstream family. Our own families keep prometheus_client's rendering
(``koordlet_loop_errors_total``...), so nothing that already scrapes them changes.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from koordlet.ops.metrics.upstream import UPSTREAM

INTERNAL_PATH, EXTERNAL_PATH, DEFAULT_PATH = "/internal-metrics", "/external-metrics", "/metrics"


class _One:
    """One family as a collector, for ``generate_latest``."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return (self._metric,)


# prometheus_client's value formatting (untyped there), so these counters print as every other series does
_format: Callable[[float], str] = floatToGoString


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _bare_counter(metric: Metric) -> bytes:
    """A counter as Go's client writes it: the family and its samples under the bare name, no ``_created``."""
    name = metric.name
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {doc}\n", f"# TYPE {name} counter\n"]
    for s in metric.samples:
        if s.name != name + "_total":
            continue
        labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(s.labels.items()))
        lines.append(f"{name}{{{labels}}} {_format(s.value)}\n" if labels else f"{name} {_format(s.value)}\n")
    return "".join(lines).encode()


def exposition(registry: Collector) -> bytes:
    """The Prometheus text format (0.0.4) of ``registry``, with upstream's families as upstream's Go client writes
    them (see the module docstring); everything else exactly as ``generate_latest`` writes it."""
    out: list[bytes] = []
    for metric in registry.collect():
        if metric.name not in UPSTREAM or metric.type == "gauge":
            out.append(generate_latest(_One(metric)))
        elif metric.type == "counter":
            out.append(_bare_counter(metric))
        else:
            trimmed = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            trimmed.samples = [s for s in metric.samples if s.name != metric.name + "_created"]
            out.append(generate_latest(_One(trimmed)))
    return b"".join(out)


class TableGauge:
    """A gauge family only ever set whole (:meth:`replace`, directly or through a :class:`GaugeCycle`), kept as one
    dict of label values -> value and turned into samples when collected. prometheus_client keeps a child
    ``Gauge`` per series (its own lock, value holder and label dict: about 700 bytes), which for families of every
    container, rewritten at every pod sync or cycle, was most of the agent's per-container metric state. Scrapes
    and ``get_sample_value`` see an ordinary gauge; a scrape sees the last whole set, never part of one."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._values: Mapping[tuple[str, ...], float] = {}
        registry.register(self)

    def replace(self, values: Mapping[tuple[str, ...], float]) -> None:
        """Make ``values`` (label values in ``labelnames`` order -> value) the family's whole set of series."""
        self._values = {labels: float(value) for labels, value in values.items()}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self._values.items():
            family.add_metric(labels, value)
        return (family,)


class TableHistogram:
    """A histogram family whose observations come in groups: several series observed with one value (the periodic
    reconcile times each pod once and observes that time under every resource it decided, ~1,000 observations a
    second at 250 pods). Each series is one list of per-bucket counts and the sum; a group costs one bucket search
    and one list increment per series, where prometheus_client's children cost a lock, a search and two value
    updates per observation. Scrapes and ``get_sample_value`` see an ordinary histogram without ``_created`` (as
    upstream's Go client writes one)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        bounds = [float(b) for b in buckets]
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._les = tuple(_format(b) for b in bounds)
        self._series: dict[tuple[str, ...], list[float]] = {}    # label values -> per-bucket counts, then the sum
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, series: Iterable[tuple[str, ...]], value: float) -> None:
        """One observation of ``value`` in each of ``series`` (label values in ``labelnames`` order)."""
        at = bisect.bisect_left(self._bounds, value)
        width = len(self._bounds)
        with self._lock:
            for key in series:
                row = self._series.get(key)
                if row is None:
                    row = self._series[key] = [0.0] * (width + 1)
                row[at] += 1
                row[width] += value

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            rows = [(key, list(row)) for key, row in self._series.items()]
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, row in rows:
            cumulative = list(itertools.accumulate(row[:-1]))
            family.add_metric(list(key), list(zip(self._les, cumulative, strict=True)), row[-1])
        return (family,)


class GaugeCycle:
    """The series one cycle sets on a gauge family, published together at the end of the cycle as the family's
    whole set: the series of the previous cycle that this one did not set are gone. Clearing the gauge first and
    refilling it as the cycle goes (what this replaces) let a scrape between the two see a family with some or
    none of its series; here a scrape sees the previous cycle's set or this one's. One writer per family (the
    strategy or collector that owns it)."""

    def __init__(self, gauge: TableGauge) -> None:
        self._gauge = gauge
        self._values: dict[tuple[str, ...], float] = {}

    def set(self, labels: tuple[str, ...], value: float) -> None:
        self._values[labels] = value

    def publish(self) -> None:
        """Make this cycle's series the family's, and start the next cycle empty."""
        self._gauge.replace(self._values)
        self._values = {}


Vector = Gauge | Counter | Histogram | TableGauge | TableHistogram
