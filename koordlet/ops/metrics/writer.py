"""Families the executor sets (``koordlet/writer/executor.py``): the time of each kernel write it asks for, and each
update's outcome."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from koordlet.ops.metrics.families import Families


class WriterMetrics(Families):
    def _declare_writer(self) -> None:
        self.resource_update_duration_milliseconds = self._upstream("koordlet_resource_update_duration_milliseconds",
                                                                    Histogram)
        self.executor_updates = self._own(
            Counter, "koordlet_executor_updates", "(koordlet-py) kernel file updates by resource (cgroup file or "
            "sysctl name) and outcome: written, missing (file absent: feature or cgroup not there), error_<ERRNO>",
            ["node", "resource", "outcome"])

    def resource_updated(self, cgroup: bool, ok: bool, seconds: float) -> None:
        self.resource_update_duration_milliseconds.labels(
            "cgroup" if cgroup else "default", "success" if ok else "failed").observe(seconds * 1000)
