"""The agent process's own families: its start time, its loops' failures, the metric cache's memory, its stores
without room, and the process's own metrics (:func:`register_process_collectors`): prometheus_client's ``process_*``
(CPU seconds, resident and virtual memory, open and maximum fds, start time), ``python_gc_*`` (collections, collected
and uncollectable objects per generation) and ``python_info``, plus ``process_threads``; in the internal registry, so
the operator's alerts on the agent's CPU, memory, fds and threads have something to read (deploy/monitoring/)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from koordlet.ops.metrics.families import Families


class _ThreadsCollector:
    """``process_threads``: the OS threads of this process (``Threads:`` of ``/proc/self/status``), the one process
    fact prometheus_client's ProcessCollector leaves out (the Rust client's process collector has it under this
    name). Every Python thread is one; a leak shows here before it shows in memory."""

    def __init__(self, proc: str = "/proc") -> None:
        self._status = f"{proc}/self/status"

    def collect(self) -> Iterable[Metric]:
        try:
            with open(self._status, "rb") as f:
                for line in f:
                    if line.startswith(b"Threads:"):
                        yield GaugeMetricFamily("process_threads", "(koordlet-py) OS threads of the agent process",
                                                value=float(line.split()[1]))
                        return
        except OSError:          # no procfs (not Linux): the family is absent, as ProcessCollector's are
            return


def register_process_collectors(registry: CollectorRegistry) -> None:
    """The process's own metrics into ``registry`` (each registry of each AgentMetrics: tests build many)."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(_ThreadsCollector())


class ProcessMetrics(Families):
    def _declare_process(self) -> None:
        """Last of the groups: the process collectors follow every family."""
        self.start_time = self._upstream("koordlet_start_time", Gauge)
        # the agent's loops (component.py)
        self.loop_errors = self._own(
            Counter, "koordlet_loop_errors", "(koordlet-py) steps of an agent loop that raised, by loop (the loop "
            "goes on)", ["node", "loop"])
        # the metric cache, as the agent's housekeeping reads it (agent.py)
        self.metric_cache_series = self._own(
            Gauge, "koordlet_metric_cache_series", "(koordlet-py) time series held in memory by the metric cache",
            ["node"])
        self.metric_cache_points = self._own(
            Gauge, "koordlet_metric_cache_points", "(koordlet-py) samples held in memory by the metric cache", ["node"])
        self.metric_cache_point_bytes = self._own(
            Gauge, "koordlet_metric_cache_point_bytes", "(koordlet-py) bytes of the metric cache's sample buffers in "
            "memory (raw heads and compressed chunks)", ["node"])
        self.metric_cache_history_seconds = self._own(
            Gauge, "koordlet_metric_cache_history_seconds", "(koordlet-py) seconds of history the metric cache holds "
            "on disk: now (held), and what its max_bytes holds at the rate seen, up to the retention (capacity; "
            "absent until roll-ups have run ten minutes)", ["node", "kind"])
        # the agent's stores on disk (base/diskfull.py), as the housekeeping reads them
        self.storage_full = self._own(
            Gauge, "koordlet_storage_full", "(koordlet-py) 1 while a store of the agent cannot be written for lack of "
            "space (ENOSPC, SQLITE_FULL): metriccache (the metric cache's history), reports (the standalone report "
            "files), checkpoints (the prediction checkpoints), audit (upstream's audit log)", ["node", "store"])
        register_process_collectors(self.internal)
        self.start_time.labels(self.node).set_to_current_time()

    def storage(self, full: Mapping[str, bool]) -> None:
        """Whether each store the agent writes has no room (``DiskFull.states()``)."""
        for store, is_full in full.items():
            self.storage_full.labels(self.node, store).set(1 if is_full else 0)
