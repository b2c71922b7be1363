"""Families the reports and prediction set (``koordlet/reporters/``, ``koordlet/prediction/``): each report attempt,
the usages and reclaimable the NodeMetric report reported, each predictor's answer."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge

from koordlet.ops.metrics.families import Families, replace_series
from koordlet.ops.metrics.upstream import UNIT_BYTE, UNIT_CORE


class ReportMetrics(Families):
    def _declare_reports(self) -> None:
        # the report loop (agent.py)
        self.reports = self._own(
            Counter, "koordlet_report", "(koordlet-py) report attempts by kind (nodemetric, noderesourcetopology, "
            "files) and result (updated, created, unchanged, absent, failed, no_space: no room for the files...)",
            ["node", "kind", "result"])
        # the NodeMetric report (reporters/nodemetric.py)
        self.node_metric_node_usage = self._upstream("koordlet_node_metric_node_usage", Gauge)
        self.node_metric_system_usage = self._upstream("koordlet_node_metric_system_usage", Gauge)
        self.node_metric_numa_node_usage = self._upstream("koordlet_node_metric_numa_node_usage", Gauge)
        self.node_metric_numa_system_usage = self._upstream("koordlet_node_metric_numa_system_usage", Gauge)
        self.node_priority_resource_reclaimable = self._upstream("koordlet_node_priority_resource_reclaimable", Gauge)
        self.node_resource_priority_reclaimable_status = self._upstream(
            "koordlet_node_resource_priority_reclaimable_status", Gauge)
        # prediction (prediction/feed.py)
        self.node_predicted_resource_reclaimable = self._upstream("koordlet_node_predicted_resource_reclaimable",
                                                                  Gauge)
        self.node_predicted_resource_peak = self._upstream("koordlet_node_predicted_resource_peak", Gauge)

    def node_metric_usages(self, node: Mapping[str, float], system: Mapping[str, float],
                           numa: Mapping[int, tuple[Mapping[str, float], Mapping[str, float]]]) -> None:
        """The usages of the NodeMetric status just built (resource -> cpu cores / memory bytes; per NUMA node:
        (node usage, system usage)); they replace the last ones, so a NUMA node that dropped out goes."""
        def series(values: Mapping[str, float], *extra: str) -> dict[tuple[str, ...], float]:
            return {(self.node, *extra, resource, UNIT_CORE if resource == "cpu" else UNIT_BYTE): value
                    for resource, value in values.items()}

        numa_node: dict[tuple[str, ...], float] = {}
        numa_system: dict[tuple[str, ...], float] = {}
        for numa_id, (on_node, on_system) in numa.items():
            numa_node.update(series(on_node, str(numa_id)))
            numa_system.update(series(on_system, str(numa_id)))
        replace_series(self.node_metric_node_usage, series(node))
        replace_series(self.node_metric_system_usage, series(system))
        replace_series(self.node_metric_numa_node_usage, numa_node)
        replace_series(self.node_metric_numa_system_usage, numa_system)

    def prod_reclaimable(self, priority: str, cpu_cores: float | None, memory_bytes: float | None) -> None:
        """The NodeMetric report's reclaimable of one priority; None = the prediction failed (0 and status 1)."""
        failed = cpu_cores is None or memory_bytes is None
        self.node_priority_resource_reclaimable.labels(self.node, priority, "cpu", UNIT_CORE).set(cpu_cores or 0)
        self.node_priority_resource_reclaimable.labels(self.node, priority, "memory", UNIT_BYTE).set(
            memory_bytes or 0)
        self.node_resource_priority_reclaimable_status.labels(self.node, priority).set(1 if failed else 0)

    def predicted(self, predictor: str, reclaimable: tuple[float, float] | None,
                  peak: tuple[float, float] | None) -> None:
        """One predictor's answer ((cpu cores, memory bytes), None when it had none)."""
        for gauge, value in ((self.node_predicted_resource_reclaimable, reclaimable),
                             (self.node_predicted_resource_peak, peak)):
            if value is not None:
                gauge.labels(self.node, predictor, "cpu", UNIT_CORE).set(value[0])
                gauge.labels(self.node, predictor, "memory", UNIT_BYTE).set(value[1])
