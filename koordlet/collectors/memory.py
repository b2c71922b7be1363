"""Memory beyond plain usage: cold pages from kidled, and usage including the page cache.

Facts: upstream's ColdPageCollector
(``pkg/koordlet/metricsadvisor/collectors/coldmemoryresource/cold_page_kidled.go``:
``kidledcoldPageCollector.collectColdPageInfo``; gate ``ColdPageCollector``, every 5 s, kidled kernels, cgroup v1
only) and PageCacheCollector (``pkg/koordlet/metricsadvisor/collectors/pagecache/page_cache_collector.go``:
``pageCacheCollector.collectPageCache``; flag ``enable-pagecache-collector``, every 1 s). These series are what
NodeMetric reports under ``nodeMemoryCollectPolicy`` usageWithHotPageCache / usageWithPageCache.
Metric kinds written to the metric cache (bytes):

========================================  ===========================================================
node_memory_cold_page_size                cold bytes of the root memory cgroup's idle_page_stats
node_memory_with_hot_page_usage           (MemTotal − MemFree) × 1024 − cold
pod_memory_cold_page_size                 {pod_uid}
pod_memory_with_hot_page_usage            memory.stat usage with page cache (anon + file) − cold  {pod_uid}
container_memory_cold_page_size / container_memory_with_hot_page_usage             {container_id}
host_application_memory_cold_page_size / host_application_memory_with_hot_page_usage  {host_app_name}
node_memory_usage_with_page_cache         (MemTotal − MemFree) × 1024
pod_memory_usage_with_page_cache          memory.stat anon + file  {pod_uid}
container_memory_usage_with_page_cache    memory.stat anon + file  {container_id}
========================================  ===========================================================

(host_application_memory_usage_with_page_cache comes from the usage collector, every cycle.)

Upstream differences: hot usage is clamped at 0 (upstream subtracts unsigned integers, so a cold count above the
usage read a moment earlier wraps to ~1.8e19); a container is read even when its pod's file failed (upstream
skips the pod's containers), as our usage collector does; without an executor the collector does not turn
kidled on and reports it running only if its scan period is already non-zero (upstream always writes).
"""

from __future__ import annotations

import logging
import os

from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, CgroupVersion, MemoryUsage
from koordlet.host.fs import read_text, vanished
from koordlet.host.kidled import (
    COLD_BOUNDARY,
    IDLE_PAGE_STATS,
    SCAN_PERIOD_SECONDS,
    USE_HIERARCHY,
    cold_bytes,
    kidled_params,
    kidled_supported,
    parse_idle_page_stats,
    read_scan_period,
)
from koordlet.host.paths import HostPaths
from koordlet.host.procfs import read_meminfo
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.writer.executor import Executor, Update

log = logging.getLogger(__name__)

NO_LABELS: tuple[tuple[str, str], ...] = ()
REASON = "cold-page-collector"
NODE_KEY = "<node>"              # LogOnce key of the node-level reading


def node_memory_with_page_cache(paths: HostPaths) -> int:
    """(MemTotal − MemFree) × 1024, ≥ 0: upstream's node usage with page cache (the basis of hot usage too)."""
    meminfo = read_meminfo(paths)
    return max(meminfo["MemTotal"] - meminfo["MemFree"], 0) * 1024


class _Reads:
    """One cycle's bookkeeping of cgroup reads: vanished cgroups counted, other errors logged once per cgroup."""

    def __init__(self, name: str, metrics: AgentMetrics, errors: LogOnce) -> None:
        self.name = name
        self.metrics = metrics
        self.errors = errors
        self.counts = {"vanished": 0, "error": 0, "malformed_line": 0}
        self.seen: set[str] = set()

    def key(self, what: str, rel: str) -> str:
        """The LogOnce key of one file of one cgroup (each file logs its own problem, once)."""
        key = f"{what} {rel or NODE_KEY}"
        self.seen.add(key)
        return key

    def failed(self, key: str, e: Exception, churn: bool = True) -> None:
        """A vanished cgroup (``churn``: pods come and go; gone, or removed mid-read: ENODEV) is counted only;
        anything else is also logged once."""
        if churn and vanished(e):
            self.counts["vanished"] += 1
            return
        self.counts["error"] += 1
        self.errors(key, "%s unreadable error=%s", key, e)

    def done(self) -> None:
        for reason, n in self.counts.items():
            self.metrics.skipped(self.name, reason, n)
        self.errors.keep_only(self.seen)


class ColdPageCollector:
    """Cold page sizes and usage-with-hot-page-cache of the node, pods, containers and host applications.

    ``start()`` once turns kidled on (scan period 5 s, hierarchical accounting) through the executor; the caller
    then runs ``collect`` every 5 s while ``running`` is true and tells the NodeMetric builder the same.
    """
    name = "coldpage"

    def __init__(self, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics,
                 executor: Executor | None = None) -> None:
        self._paths = paths
        self._cgroups = cgroups
        self._metrics = metrics
        self._executor = executor
        self._errors = LogOnce(log)
        self._malformed = LogOnce(log)
        self.running = False

    def supported(self) -> tuple[bool, str]:
        """(supported, where or why not): a kidled kernel with cgroup v1 (v2 has no idle_page_stats)."""
        if self._cgroups.version is not CgroupVersion.V1:
            return False, "kidled is cgroup v1 only"
        return kidled_supported(self._paths)

    def start(self) -> bool:
        """Turn kidled on (once; again only after a failure) and return whether it runs."""
        if self.running:
            return True
        ok, why = self.supported()
        if not ok:
            self._errors("<start>", "cold page collector off: %s", why)
            return False
        if self._executor is not None:
            result = self._executor.update([Update(path, value, "node", REASON, f"kidled.{os.path.basename(path)}")
                                            for path, value in kidled_params(self._paths)])
            if result.failed or result.missing:
                self._errors("<start>", "cold page collector off: cannot set kidled scan_period_in_seconds=%d "
                             "use_hierarchy=%d (see the executor's write errors)", SCAN_PERIOD_SECONDS,
                             USE_HIERARCHY)
                return False
        period = read_scan_period(self._paths)
        if not period:
            self._errors("<start>", "cold page collector off: kidled scan_period_in_seconds=%s (kidled stopped%s)",
                         period, "" if self._executor is not None else "; no executor to start it")
            return False
        self._errors.forget("<start>")
        self.running = True
        log.info("cold page collector started kidled scan_period_in_seconds=%d cold_boundary=%d", period,
                 COLD_BOUNDARY)
        return True

    def _cold(self, rel: str, reads: _Reads) -> int | None:
        """Cold bytes of one memory cgroup; malformed lines are counted (and logged once per cgroup)."""
        key = reads.key(IDLE_PAGE_STATS, rel)
        try:
            stats, skipped = parse_idle_page_stats(read_text(self._cgroups.path("memory", rel, IDLE_PAGE_STATS)))
        except (OSError, ValueError) as e:
            reads.failed(key, e, churn=bool(rel))
            return None
        if skipped:
            reads.counts["malformed_line"] += skipped
            self._malformed(key, "%s: %d malformed lines skipped", key, skipped)
        else:
            self._malformed.forget(key)
        return cold_bytes(stats)

    def _with_page_cache(self, rel: str, reads: _Reads) -> int | None:
        key = reads.key("memory.stat", rel)
        try:
            memory: MemoryUsage = self._cgroups.read_memory(self._cgroups.usage_files(rel))
        except (OSError, ValueError) as e:
            reads.failed(key, e)
            return None
        return memory.with_page_cache

    def _cgroup(self, scope: str, rel: str, labels: tuple[tuple[str, str], ...], now: float,
                reads: _Reads) -> list[Sample]:
        cold = self._cold(rel, reads)
        if cold is None:
            return []
        samples = [Sample(f"{scope}_memory_cold_page_size", labels, now, float(cold))]
        usage = self._with_page_cache(rel, reads)
        if usage is not None:
            samples.append(Sample(f"{scope}_memory_with_hot_page_usage", labels, now, float(max(usage - cold, 0))))
        return samples

    def collect(self, tick: Tick) -> list[Sample]:
        """All cold-page samples of this cycle (kidled started first); never raises (unreadable cgroups are
        counted and skipped)."""
        if self._cgroups.version is not CgroupVersion.V1 or not self.start():
            return []
        now, pods, host_apps = tick.now, tick.pods, tick.host_apps
        reads = _Reads(self.name, self._metrics, self._errors)
        samples: list[Sample] = []
        cold = self._cold("", reads)
        if cold is not None:
            samples.append(Sample("node_memory_cold_page_size", NO_LABELS, now, float(cold)))
            key = reads.key("meminfo", "")
            try:
                used = node_memory_with_page_cache(self._paths)
                samples.append(Sample("node_memory_with_hot_page_usage", NO_LABELS, now, float(max(used - cold, 0))))
            except (OSError, ValueError, KeyError) as e:
                reads.failed(key, e, churn=False)
        for meta in pods:
            samples += self._cgroup("pod", meta.cgroup_dir, (("pod_uid", meta.pod.uid),), now, reads)
            for container, rel in meta.containers:
                samples += self._cgroup("container", rel, (("container_id", container.id),), now, reads)
        for app in host_apps:
            samples += self._cgroup("host_application", app.cgroup_dir, (("host_app_name", app.name),), now, reads)
        self._malformed.keep_only(reads.seen)
        reads.done()
        return samples


class PageCacheCollector:
    """Usage including the page cache of the node, pods and containers (needed by usageWithPageCache)."""
    name = "pagecache"

    def __init__(self, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics) -> None:
        self._paths = paths
        self._cgroups = cgroups
        self._metrics = metrics
        self._errors = LogOnce(log)

    def _read(self, rel: str, reads: _Reads) -> int | None:
        key = reads.key("memory.stat", rel)
        try:
            return self._cgroups.read_memory(self._cgroups.usage_files(rel)).with_page_cache
        except (OSError, ValueError) as e:
            reads.failed(key, e)
            return None

    def collect(self, tick: Tick) -> list[Sample]:
        """Node, pod and container samples; host applications are not read (the usage collector already writes
        host_application_memory_usage_with_page_cache). Never raises."""
        now, pods = tick.now, tick.pods
        reads = _Reads(self.name, self._metrics, self._errors)
        samples: list[Sample] = []
        key = reads.key("meminfo", "")
        try:
            samples.append(Sample("node_memory_usage_with_page_cache", NO_LABELS, now,
                                  float(node_memory_with_page_cache(self._paths))))
        except (OSError, ValueError, KeyError) as e:
            reads.failed(key, e, churn=False)
        for meta in pods:
            value = self._read(meta.cgroup_dir, reads)
            if value is not None:
                samples.append(Sample("pod_memory_usage_with_page_cache", (("pod_uid", meta.pod.uid),), now,
                                      float(value)))
            for container, rel in meta.containers:
                value = self._read(rel, reads)
                if value is not None:
                    samples.append(Sample("container_memory_usage_with_page_cache",
                                          (("container_id", container.id),), now, float(value)))
        reads.done()
        return samples


def _build_cold(ctx: Context) -> ColdPageCollector | None:
    cold = ColdPageCollector(ctx.paths, ctx.cgroups, ctx.metrics, ctx.executor)
    supported, why = cold.supported()
    if not supported:
        log.warning("cold page collector off: %s", why)
        return None
    ctx.node.kidled = cold
    return cold


COLD_PAGES = Plugin("coldpage", _build_cold, gates=("ColdPageCollector",),
                    when=lambda c: c.coldpage_collector_interval > 0, period=lambda c: c.coldpage_collector_interval,
                    probe=host_probe(probes.kidled))
PAGE_CACHE = Plugin("pagecache", lambda ctx: PageCacheCollector(ctx.paths, ctx.cgroups, ctx.metrics),
                    when=lambda c: c.enable_pagecache_collector, period=lambda c: max(c.collect_res_used_interval, 1.0))
