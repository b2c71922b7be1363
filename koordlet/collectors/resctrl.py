"""Resctrl monitoring: LLC occupancy and memory bandwidth of the class groups (gate ``ResctrlCollector``).

Facts: upstream ``pkg/koordlet/metricsadvisor/collectors/resctrl/resctrl_collector.go`` and
``pkg/koordlet/resourceexecutor/resctrl.go``:

- It runs when the gate **and** the option ``enable-resctrl-collector`` are on (upstream needs both) and the CPU
  is an Intel or AMD one with allocation (``cat_l3``, ``mba``) and monitoring (``cqm_llc``, ``cqm_occup_llc``,
  ``cqm_mbm_total``, ``cqm_mbm_local``), every ``resctrl-collector-interval`` (10 s).
- Each run first checks that resctrl is mounted (the root ``schemata`` reads and names its resources); then, for
  the class groups ``LSR``, ``LS``, ``BE`` in that order, it reads ``mon_data/mon_L3_<id>/llc_occupancy`` and
  ``mbm_local_bytes`` / ``mbm_total_bytes`` per L3 domain. A group without ``mon_data`` (the resctrl strategy has
  not made it) is skipped, as is its bandwidth when its occupancy cannot be read (upstream's order).
- Samples: ``resctrl_resource_llc{qos, cache_id}`` and ``resctrl_resource_mb{qos, cache_id, resctrl_mb_type}``
  (the event name: ``mbm_local_bytes`` / ``mbm_total_bytes``); Prometheus ``koordlet_resctrl_llc_occupancy{node,
  cache_id, qos}`` and ``koordlet_resctrl_memory_bandwidth{node, cache_id, qos, mb_type}``. As upstream the
  bandwidth values are the kernel's byte counters as read (they only grow; a rate is ``rate()`` away).

Differences, each an upstream defect: the kernel prints each value with a newline, which upstream's ParseUint
refuses, so upstream stores nothing on a real kernel: the value is stripped here; a domain that prints
``Unavailable`` is left out instead of failing the whole group; upstream's MB sample carries a ``resctrl_type``
property its schema lacks and is never stored: here it is stored under the declared schema; the series of a
group or domain that is gone are removed (upstream keeps them forever).
"""

from __future__ import annotations

import logging

from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick
from koordlet.host.cgroup import Cgroups
from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths
from koordlet.host.resctrl import (
    LLC_OCCUPANCY,
    MBM_LOCAL,
    MBM_TOTAL,
    monitoring_supported,
    parse_schemata,
    read_monitor,
)
from koordlet.metriccache import Sample
from koordlet.ops.config import Config
from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

CLASS_GROUPS = ("LSR", "LS", "BE")            # upstream's order (extension.QoSLSR, QoSLS, QoSBE)
MB_EVENTS = (MBM_LOCAL, MBM_TOTAL)


class ResctrlCollector:
    name = "resctrl-collector"

    def __init__(self, root: str, metrics: AgentMetrics) -> None:
        self._root = root
        self._metrics = metrics
        self._bad = LogOnce(log, logging.INFO)
        self._llc: set[tuple[str, ...]] = set()        # Prometheus series written last run
        self._mb: set[tuple[str, ...]] = set()

    def collect(self, tick: Tick) -> list[Sample]:
        try:
            if not parse_schemata(read_text(f"{self._root}/schemata")):
                raise ValueError("no resource line")
        except (OSError, ValueError) as e:     # not mounted (yet): the resctrl strategy mounts it
            self._bad("mount", "resctrl collector idle: %s/schemata unreadable (%s)", self._root, e)
            self._expire(set(), set())
            return []
        self._bad.forget("mount")
        samples: list[Sample] = []
        llc_seen: set[tuple[str, ...]] = set()
        mb_seen: set[tuple[str, ...]] = set()
        node = self._metrics.node
        for qos in CLASS_GROUPS:
            try:
                llc = read_monitor(self._root, qos, LLC_OCCUPANCY)
            except (OSError, ValueError) as e:
                self._bad(qos, "resctrl group %s: llc occupancy not read (%s)", qos, e)
                continue
            for cache_id, value in sorted(llc.items()):
                cid = str(cache_id)
                samples.append(Sample("resctrl_resource_llc", (("cache_id", cid), ("qos", qos)), tick.now, value))
                self._metrics.resctrl_llc_occupancy.labels(node, cid, qos).set(value)
                llc_seen.add((node, cid, qos))
            try:
                mb = {event: read_monitor(self._root, qos, event) for event in MB_EVENTS}
            except (OSError, ValueError) as e:
                self._bad(qos, "resctrl group %s: memory bandwidth not read (%s)", qos, e)
                continue
            self._bad.forget(qos)
            for event, values in mb.items():
                for cache_id, value in sorted(values.items()):
                    cid = str(cache_id)
                    samples.append(Sample("resctrl_resource_mb", (("cache_id", cid), ("qos", qos),
                                                                  ("resctrl_mb_type", event)), tick.now, value))
                    self._metrics.resctrl_memory_bandwidth.labels(node, cid, qos, event).set(value)
                    mb_seen.add((node, cid, qos, event))
        self._expire(llc_seen, mb_seen)
        return samples

    def _expire(self, llc: set[tuple[str, ...]], mb: set[tuple[str, ...]]) -> None:
        """Remove the series of groups and domains not read this run (a group removed, resctrl unmounted)."""
        for labels in self._llc - llc:
            self._metrics.resctrl_llc_occupancy.remove(*labels)
        for labels in self._mb - mb:
            self._metrics.resctrl_memory_bandwidth.remove(*labels)
        self._llc, self._mb = llc, mb


def _probe(config: Config, paths: HostPaths, cgroups: Cgroups) -> tuple[bool, str]:
    if not config.enable_resctrl_collector:
        return False, "option enable-resctrl-collector is off (upstream needs it with the gate)"
    return monitoring_supported(paths)


def _build(ctx: Context) -> ResctrlCollector | None:
    ok, why = monitoring_supported(ctx.paths)
    if not ok:
        log.info("resctrl collector not started: %s", why)
        return None
    return ResctrlCollector(ctx.paths.sys_fs("resctrl"), ctx.metrics)


PLUGIN = Plugin("resctrl-collector", _build, gates=("ResctrlCollector",), when=lambda c: c.enable_resctrl_collector,
                period=lambda c: c.resctrl_collector_interval, probe=_probe)
