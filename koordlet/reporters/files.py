"""Standalone sink: the objects that would be sent to the API server, written as YAML files under report-dir
every report interval (the NodeMetric spec's, or its default).

Each file is replaced atomically (write a temporary file in the same directory, fsync, rename), so a reader
never sees half a report. A filesystem without room keeps the last files whole: the report is the ``reports``
store of the agent's :class:`koordlet.base.diskfull.DiskFull` (one state, logged when it begins and ends), counted
as ``no_space`` and tried again at the next interval.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import yaml

from koordlet.base.diskfull import REPORTS
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin
from koordlet.reporters import device, nodemetric, nrt

log = logging.getLogger(__name__)

# libyaml's emitter when PyYAML has it: the same document (the same text but for where very long escaped strings
# wrap) in a fifth of the time of the pure-Python one (a 250-pod NodeMetric: ~40 ms against ~10 ms, every report)
_DUMPER: type[yaml.CSafeDumper] | type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def write_yaml_atomic(directory: str, name: str, obj: Any) -> str:
    os.makedirs(directory, mode=0o755, exist_ok=True)
    path = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.dump(obj, f, Dumper=_DUMPER, sort_keys=False, default_flow_style=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def report_objects(ctx: Context, bad: LogOnce) -> dict[str, dict[str, Any]]:
    """File name -> object, for the standalone sink and ``koordlet report``: the NodeMetric always, the
    NodeResourceTopology unless its sync interval is 0, the Device with the Accelerators gate."""
    builders: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("nodemetric.yaml", lambda: nodemetric.node_metric(ctx, bad))]
    if ctx.config.node_topology_sync_interval > 0:
        builders.append(("noderesourcetopology.yaml", lambda: nrt.node_object(ctx)))
    if ctx.config.gate("Accelerators"):
        builders.append(("device.yaml", lambda: device.device_object(ctx)))
    return {name: build() for name, build in builders}


class FilesReport:
    kind = "files"
    wait_first = True

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._bad = LogOnce(log, logging.ERROR)
        self._written = False      # the first write is logged (where the files are), the others are not
        ctx.disk_full.watch(REPORTS, ctx.config.report_dir, "the report files keep their last content; they are "
                            "written again at the next interval with space")

    def interval(self) -> float:
        return nodemetric.collect_policy(self._ctx, self._bad).report_interval

    def ready(self) -> bool:
        return True

    def send(self, stop: threading.Event) -> str:
        names = []
        for name, obj in report_objects(self._ctx, self._bad).items():
            try:
                write_yaml_atomic(self._ctx.config.report_dir, name, obj)
            except OSError as e:
                if self._ctx.disk_full.failed(REPORTS, e):
                    return "no_space"
                raise
            names.append(name)
        self._ctx.disk_full.wrote(REPORTS)
        if not self._written:
            self._written = True
            log.info("first reports written dir=%s files=%s; rewritten every %.0fs",
                     os.path.abspath(self._ctx.config.report_dir), ",".join(names), self.interval())
        return "written"


PLUGIN = Plugin("files", FilesReport, when=lambda c: bool(c.report_dir))
