"""The agent's own Prometheus metrics, in per-agent registries (tests build their own agent or ``AgentMetrics``).

Three kinds of families live here:

- **Upstream's 41 ``koordlet_*`` families** (pkg/koordlet/metrics/*.go of koordinator-sh/koordinator), listed once
  in :data:`.upstream.UPSTREAM_FAMILIES` with their type, label names, registry and the upstream file they come
  from. A scrape sees upstream's exact name, type and label names (the table test checks every one), on the page
  of upstream's registry (:class:`.families.Families`: ``/internal-metrics`` or ``/external-metrics``, both merged
  on ``/metrics``), with upstream's counters written as Go writes them (:mod:`.exposition`).
- **Our own families** (help text starting "(koordlet-py)"), all in the internal registry.
- **The process's own** (:mod:`.process`): ``process_*``, ``python_gc_*``, ``python_info`` and ``process_threads``.

Each family is declared beside the methods that record it, in the group of the agent that sets it: the collectors
(:mod:`.collection`), the node state (:mod:`.states`), the reports and prediction (:mod:`.reports`), the executor
(:mod:`.writer`), the QoS strategies (:mod:`.qos`), the services (:mod:`.services`) and the process itself
(:mod:`.process`). :class:`AgentMetrics` is all of them, so the one object a component is given reaches every
family, and its constructor is the one place that registers them, in a fixed order, for exposition.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from koordlet.ops.metrics.collection import CollectionMetrics
from koordlet.ops.metrics.process import ProcessMetrics
from koordlet.ops.metrics.qos import QoSMetrics
from koordlet.ops.metrics.reports import ReportMetrics
from koordlet.ops.metrics.services import ServiceMetrics
from koordlet.ops.metrics.states import StateMetrics
from koordlet.ops.metrics.writer import WriterMetrics


class AgentMetrics(CollectionMetrics, StateMetrics, ReportMetrics, WriterMetrics, QoSMetrics, ServiceMetrics,
                   ProcessMetrics):
    """Every family of one agent: upstream's (registered first, in their table's order), then each group's own,
    then the process's collectors."""

    def __init__(self, node: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(node, clock)
        self._declare_collection()
        self._declare_states()
        self._declare_reports()
        self._declare_writer()
        self._declare_qos()
        self._declare_services()
        self._declare_process()
