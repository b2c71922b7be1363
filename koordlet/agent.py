"""The daemon: wires host, states, collectors, metric cache and HTTP together and runs them.

Threads: ``pods`` (informer syncs), ``pleg`` (inotify), ``collect`` (one usage cycle per interval),
``http``; the calling thread does housekeeping (metric cache flush/trim) and waits for a stop signal.
Stopping sets one event; every loop waits on it, so SIGTERM ends the agent well inside 2 s and the metric
cache is flushed before exit.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from koordlet.collectors.usage import CycleResult, UsageCollection
from koordlet.config import Config
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.logutil import LogOnce
from koordlet.metriccache import MetricCache
from koordlet.metrics import AgentMetrics
from koordlet.reporters.files import write_yaml_atomic
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder, node_metric_object
from koordlet.server import HttpServer
from koordlet.states.informer import PodMeta, PodsInformer, metas_from_objects
from koordlet.states.pleg import Pleg
from koordlet.states.standalone import StandalonePodSource

log = logging.getLogger("koordlet")

TRIM_INTERVAL = 60.0


class StartupError(RuntimeError):
    """The agent cannot start with this configuration on this host (the message says what to fix)."""


def pod_source(config: Config, cgroups: Cgroups) -> Callable[[], list[PodMeta]]:
    """The configured pod source as a callable returning PodMeta (kubelet, API server, or standalone)."""
    if config.pod_source == "standalone":
        return StandalonePodSource(cgroups, config.pods_file)
    bad = LogOnce(log, logging.ERROR)
    if config.pod_source == "kubelet":
        from koordlet.states.kubelet import KubeletClient
        insecure = config.kubelet_insecure_tls
        client = KubeletClient(config.kubelet_address,
                               config.kubelet_read_only_port if insecure else config.kubelet_port,
                               https=not insecure, token_path=None if insecure else config.kubelet_token_file,
                               timeout=config.kubelet_sync_timeout)
        return lambda: metas_from_objects(client.get_pods(), cgroups.layout, bad)
    from koordlet.states.apiserver import ApiServerError, ApiServerPodSource
    try:
        api = ApiServerPodSource(config.node_name, config.kubeconfig or None, config.kubelet_sync_timeout)
    except ApiServerError as e:
        raise StartupError(f"pod-source=apiserver: {e}") from None
    return lambda: metas_from_objects(api.list_pods(), cgroups.layout, bad)


@dataclass
class Agent:
    config: Config
    paths: HostPaths
    cgroups: Cgroups
    metrics: AgentMetrics
    cache: MetricCache
    informer: PodsInformer
    collection: UsageCollection
    collecting: bool = False          # set after the first completed collection cycle (readiness)

    def node_metric(self, now: float | None = None) -> dict:
        """The NodeMetric object this agent would report now (status built from the metric cache)."""
        policy, _ = CollectPolicy.from_spec(None)
        status = NodeMetricBuilder(self.cache, policy).status(self.informer.pods, time.time() if now is None
                                                              else now)
        return node_metric_object(self.config.node_name, {}, status)

    def write_reports(self) -> None:
        """Standalone sink: what would be sent to the API server, as files under report-dir."""
        write_yaml_atomic(self.config.report_dir, "nodemetric.yaml", self.node_metric())

    @classmethod
    def build(cls, config: Config, *, persist: bool = True) -> "Agent":
        paths = HostPaths.from_config(config)
        try:
            cgroups = Cgroups.detect(paths, config.cgroup_driver)
        except OSError as e:
            raise StartupError(f"cgroup-root-dir {config.cgroup_root_dir}: {e.strerror or e}") from None
        metrics = AgentMetrics(config.node_name)
        try:
            cache = MetricCache(config.tsdb_path if persist else None, retention=config.tsdb_retention_duration,
                                memory_window=config.metric_cache_memory_window, max_bytes=config.tsdb_max_bytes)
        except OSError as e:
            raise StartupError(f"tsdb-path {config.tsdb_path}: {e.strerror or e}") from None
        informer = PodsInformer(pod_source(config, cgroups), config.kubelet_sync_interval, config.pod_source)
        informer.on_error.append(metrics.pod_sync_errors.labels(config.node_name, config.pod_source).inc)
        collection = UsageCollection(paths, cgroups, metrics, interval=config.collect_res_used_interval,
                                     outdated=config.collect_sys_metric_outdated_interval)
        return cls(config, paths, cgroups, metrics, cache, informer, collection)

    # --- one cycle (also used by `run --once`) -----------------------------------------------------------

    def collect_once(self) -> CycleResult:
        pods = self.informer.pods
        result = self.collection.run(pods)
        self.cache.append(result.samples)
        self.metrics.pods.labels(self.metrics.node, self.config.pod_source).set(len(pods))
        self.metrics.metric_cache_series.labels(self.metrics.node).set(self.cache.series_count())
        return result

    # --- daemon ----------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, on_ready: Callable[[], None] | None = None) -> None:
        """Run until ``stop`` is set; returns after threads are joined and the cache is flushed."""
        cfg = self.config
        log.info("agent starting node=%s mode=%s pod_source=%s cgroup=v%d driver=%s root=%s", cfg.node_name,
                 cfg.agent_mode, cfg.pod_source, int(self.cgroups.version), self.cgroups.layout.driver.value,
                 self.cgroups.root)
        if os.geteuid() != 0:
            log.warning("running as uid=%d, not root: enforcement is off, the agent only collects and reports",
                        os.geteuid())
        server = HttpServer(cfg.addr, self.metrics.registry, self.ready)
        pleg = self._start_pleg()
        threads = [threading.Thread(target=self.informer.run, args=(stop,), name="pods", daemon=True)]
        if cfg.collect_res_used_interval > 0:
            threads.append(threading.Thread(target=self._collect_loop, args=(stop,), name="collect",
                                            daemon=True))
        else:
            log.warning("collect-res-used-interval=0: usage collection is disabled")
        self.informer.sync()
        for t in threads:
            t.start()
        server.start()
        if on_ready:
            on_ready()
        last_flush = last_trim = last_report = time.monotonic()
        report_interval = CollectPolicy().report_interval
        try:
            while not stop.wait(min(cfg.metric_cache_flush_interval, 1.0)):
                now = time.monotonic()
                if cfg.report_dir and now - last_report >= report_interval:
                    self._housekeep(self.write_reports, "report")
                    last_report = now
                if now - last_flush >= cfg.metric_cache_flush_interval:
                    self._housekeep(self.cache.flush, "flush")
                    last_flush = now
                if now - last_trim >= TRIM_INTERVAL:
                    self._housekeep(self.cache.trim, "trim")
                    last_trim = now
        finally:
            server.stop()
            if pleg:
                pleg.stop()
            for t in threads:
                t.join(timeout=1.5)
            self._housekeep(self.cache.close, "close")
            log.info("agent stopped node=%s", cfg.node_name)

    def _housekeep(self, action: Callable[[], None], what: str) -> None:
        try:
            action()
        except Exception as e:  # a full disk must not stop collection
            log.error("housekeeping %s failed error=%s", what, e)

    def _start_pleg(self) -> Pleg | None:
        try:
            pleg = Pleg(self.cgroups, self.informer.on_pleg)
        except OSError as e:
            log.warning("pleg unavailable error=%s; new pods are seen at the next periodic sync", e)
            return None
        self.informer.on_sync.append(pleg.rearm)
        pleg.start()
        return pleg

    def _collect_loop(self, stop: threading.Event) -> None:
        interval = self.config.collect_res_used_interval
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                self.collect_once()
                self.collecting = True
            except Exception:  # a collector bug must not end collection
                log.exception("collection cycle failed")
            next_tick += interval
            delay = next_tick - time.monotonic()
            if delay < 0:             # overran: skip missed ticks instead of bursting
                next_tick = time.monotonic()
                delay = 0
            if stop.wait(delay):
                return

    def ready(self) -> tuple[bool, str]:
        if not self.informer.synced.is_set():
            return False, f"pods not synced yet from {self.config.pod_source}"
        if self.config.collect_res_used_interval > 0 and not self.collecting:
            return False, "no collection cycle completed yet"
        return True, "ok"
