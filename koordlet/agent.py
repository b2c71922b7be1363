"""The daemon: builds the node state and the enabled components from the registries, runs them, stops them.

What runs is decided by the registries (koordlet.qos.STRATEGIES, koordlet.collectors.COLLECTORS,
koordlet.reporters.REPORTS, koordlet.services.SERVICES); this module only wires the shared pieces (host paths,
cgroups, metrics, metric cache, node state, executor) and supervises the loops (koordlet.component.Loops):

- ``pods`` (informer syncs) and one ``watch-*`` per API object (in a cluster), ``pleg`` (inotify), ``yarn`` (the
  YARN Copilot agent's containers, when its socket is configured);
- one loop per enabled collector, at its period; its samples go to the metric cache;
- ``qos``: the reconciler, every reconcile interval or when nudged (root only);
- ``report``: every enabled report on its schedule, plus the node state's slow re-reads and the prediction step;
- ``gpu``-style background loops of components that have one (``run(stop)``);
- the services (NRI plugin, PodResources proxy) and the HTTP server.

The calling thread does housekeeping (metric cache flush/trim) and waits for the stop event; every loop waits on
the same event, so SIGTERM ends the agent well inside 2 s, and the metric cache is flushed before exit.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from koordlet import collectors, qos, reporters, services
from koordlet.base.diskfull import DiskFull
from koordlet.base.gcfreeze import FreezeAfterFullCollection
from koordlet.base.logutil import LogOnce
from koordlet.component import (
    Collector,
    Context,
    Loops,
    Plugin,
    Report,
    StartupError,
    Tick,
    Verdict,
    assess,
    build_enabled,
    running_as_root,
    spread,
)
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.host.sdnotify import Notifier
from koordlet.metriccache import MetricCache, Sample
from koordlet.ops.audit import AuditLog, EventPager, trail_source
from koordlet.ops.config import Config
from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.server import EventsHandler, HttpServer
from koordlet.prediction.feed import Prediction
from koordlet.prediction.server import PredictionConfig
from koordlet.reporters.files import report_objects, write_yaml_atomic
from koordlet.states.cluster import Cluster, ClusterError
from koordlet.states.copilot import CopilotClient
from koordlet.states.informer import PodMeta, PodsInformer, metas_from_objects, resource_rows
from koordlet.states.nodeslo.file import NodeSLOFile
from koordlet.states.nodestate import NodeState, NodeView
from koordlet.states.pleg import Pleg
from koordlet.states.runtimepods import RuntimePods
from koordlet.states.standalone import StandalonePodSource
from koordlet.states.yarn import YarnContainers

if TYPE_CHECKING:
    from koordlet.qos.reconciler import Reconciler
    from koordlet.services import Service
    from koordlet.states.kubeapi import KubeApi
    from koordlet.states.kubelet import KubeletClient
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

__all__ = ["Agent", "StartupError"]

TRIM_INTERVAL = 60.0
REPORT_BACKOFF_START = 5.0       # first retry after a failed report; doubles up to the report interval
REPORT_TICK = 0.5
NRI_VIEW_MAX_AGE = 1.0           # enforcement off: the NRI hooks' view is rebuilt at most this often
YARN_PERIOD = 1.0                # the copilot's containers are listed this often when collection is off


@runtime_checkable
class Background(Protocol):
    """A component with a loop of its own besides its period (the GPU XID watch)."""

    def run(self, stop: threading.Event) -> None: ...


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None: ...


@dataclass
class _Schedule:
    """When a periodic report runs next; a failure brings the retry forward, with doubling backoff."""

    next_at: float
    backoff: float = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def done(self, now: float, interval: float) -> None:
        self.backoff = 0.0
        self.next_at = now + interval

    def failed(self, now: float, interval: float) -> None:
        self.backoff = min(max(self.backoff * 2, REPORT_BACKOFF_START), interval)
        self.next_at = now + self.backoff


def kubelet_client(config: Config, metrics: AgentMetrics | None = None) -> KubeletClient:
    from koordlet.states.kubelet import KubeletClient
    insecure = config.kubelet_insecure_tls
    return KubeletClient(config.kubelet_address, config.kubelet_read_only_port if insecure else config.kubelet_port,
                         https=not insecure, token_path=None if insecure else config.kubelet_token_file,
                         timeout=config.kubelet_sync_timeout, metrics=metrics)


def pod_source(config: Config, cgroups: Cgroups, kubelet: KubeletClient | None,
               api: KubeApi | None, runtime: RuntimePods | None = None) -> Callable[[], list[PodMeta]]:
    """The configured pod source as a callable returning PodMeta (kubelet, API server, or standalone, which
    also takes what the runtime tells the NRI plugin)."""
    if config.pod_source == "standalone":
        return StandalonePodSource(cgroups, config.pods_file, runtime)
    bad = LogOnce(log, logging.ERROR)
    if config.pod_source == "kubelet":
        assert kubelet is not None
        return lambda: metas_from_objects(kubelet.get_pods(), cgroups.layout, bad)
    from koordlet.states.apiserver import ApiServerPodSource
    if api is None:
        raise StartupError("pod-source=apiserver needs the API server (not available in standalone mode)")
    source = ApiServerPodSource(api, config.node_name)
    return lambda: metas_from_objects(source.list_pods(), cgroups.layout, bad)


def yarn_containers(config: Config, cgroups: Cgroups) -> YarnContainers | None:
    """The YARN Copilot agent's containers of this node when its socket is configured (evict-by-copilot-endpoint,
    or evict-by-copilot-agent), else None."""
    if not config.evict_by_copilot_endpoint:
        return None
    client = CopilotClient(config.evict_by_copilot_endpoint)
    return YarnContainers(client.containers, cgroups,
                          (config.evict_by_copilot_pod_label_key, config.evict_by_copilot_pod_label_value),
                          config.evict_by_copilot_endpoint)


@dataclass
class Agent:
    ctx: Context
    collectors: list[tuple[Plugin[Collector], Collector]] = field(default_factory=list)
    reports: list[tuple[Plugin[Report], Report]] = field(default_factory=list)
    services: list[tuple[Plugin[Service], Service]] = field(default_factory=list)
    reconciler: Reconciler | None = None               # QoS strategies (None: enforcement off)
    loops: Loops | None = None                         # while running
    audit_log: AuditLog | None = None                  # upstream's audit log (gate AuditEvents)
    _nri_view: tuple[float, NodeView | None] = (float("-inf"), None)
    _bad: LogOnce = field(default_factory=lambda: LogOnce(log, logging.ERROR))

    # --- shared pieces -------------------------------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self.ctx.config

    @property
    def cgroups(self) -> Cgroups:
        return self.ctx.cgroups

    @property
    def metrics(self) -> AgentMetrics:
        return self.ctx.metrics

    @property
    def cache(self) -> MetricCache:
        return self.ctx.cache

    @property
    def node(self) -> NodeState:
        return self.ctx.node

    @property
    def informer(self) -> PodsInformer:
        return self.ctx.node.informer

    @property
    def executor(self) -> Executor | None:
        return self.ctx.executor

    # --- build ---------------------------------------------------------------------------------------------------

    @classmethod
    def build(cls, config: Config, *, persist: bool = True, connect: bool = True) -> Agent:
        """Everything wired, nothing started. ``connect=False`` skips the API server (``koordlet report``);
        ``persist=False`` keeps the metric cache in memory and touches no checkpoint on disk."""
        paths = HostPaths.from_config(config)
        try:
            cgroups = Cgroups.detect(paths, config.cgroup_driver)
        except OSError as e:
            raise StartupError(f"cgroup-root-dir {config.cgroup_root_dir}: {e.strerror or e}") from None
        metrics = AgentMetrics(config.node_name)
        disk_full = DiskFull()          # one state per store that has no room: the gauge and /readyz read it
        try:
            cache = MetricCache(config.tsdb_path if persist else None, retention=config.tsdb_retention_duration,
                                memory_window=config.metric_cache_memory_window, max_bytes=config.tsdb_max_bytes,
                                disk_full=disk_full)
        except OSError as e:
            raise StartupError(f"tsdb-path {config.tsdb_path}: {e.strerror or e}") from None
        try:
            cluster = Cluster.connect(config) if connect and not config.standalone else None
        except ClusterError as e:
            raise StartupError(str(e)) from None
        kubelet = kubelet_client(config, metrics) if config.pod_source == "kubelet" else None
        runtime_pods = RuntimePods()
        informer = PodsInformer(pod_source(config, cgroups, kubelet, cluster.api if cluster else None, runtime_pods),
                                config.kubelet_sync_interval, config.pod_source)
        informer.on_error.append(metrics.pod_sync_errors.labels(config.node_name, config.pod_source).inc)
        informer.on_sync.append(lambda: metrics.pods_synced((m.pod.uid for m in informer.pods),
                                                            resource_rows(informer.pods)))
        slo_file = NodeSLOFile(config.nodeslo_file, config.node_name) if config.nodeslo_file else None
        node = NodeState(config, paths, cgroups, informer, cluster=cluster, kubelet=kubelet,
                         slo_file=slo_file, runtime_pods=runtime_pods, metrics=metrics,
                         yarn=yarn_containers(config, cgroups))
        # a one-shot run must not touch the daemon's checkpoints (restore deletes those of unknown pods)
        checkpoints = config.prediction_checkpoint_filepath if persist else ""
        prediction = Prediction(cache, PredictionConfig(
            checkpoint_dir=checkpoints or None, cold_start=config.prediction_cold_start_duration,
            safety_margin_percent=config.prediction_safety_margin_percent,
            memory_half_life=config.prediction_memory_histogram_decay_halflife,
            cpu_half_life=config.prediction_cpu_histogram_decay_halflife,
            training_interval=config.prediction_training_interval,
            model_expiration=config.prediction_model_expiration_duration,
            checkpoint_interval=config.prediction_model_checkpoint_interval,
            checkpoint_max_per_step=config.prediction_model_checkpoint_max_per_step), metrics, disk_full)
        ctx = Context(config, paths, cgroups, metrics, cache, node, prediction, persist=persist, disk_full=disk_full)
        agent = cls(ctx)
        ctx.view = agent.nri_view
        if config.gate("AuditEvents") and persist:
            try:
                agent.audit_log = AuditLog(config.audit_log_dir, config.audit_max_disk_space_mb, config.audit_verbose,
                                           disk_full=disk_full)
            except OSError as e:      # upstream exits too (klog.Fatalf) when it cannot make the directory
                raise StartupError(f"audit-log-dir {config.audit_log_dir}: {e.strerror or e}") from None
        if config.reconcile_interval_seconds > 0 and running_as_root():
            from koordlet.qos.reconciler import Reconciler
            from koordlet.writer.executor import Executor
            ctx.executor = Executor(cgroups, metrics, force_refresh=config.resource_force_update_seconds,
                                    audit_log=agent.audit_log)
            strategies = [s for _, s in build_enabled(qos.STRATEGIES, ctx)]
            agent.reconciler = Reconciler(ctx.executor, strategies, metrics, config.reconcile_interval_seconds)
            ctx.nudge = agent.reconciler.nudge
        agent.collectors = build_enabled(collectors.COLLECTORS, ctx)
        agent.reports = build_enabled(reporters.REPORTS, ctx)
        agent.services = build_enabled(services.SERVICES, ctx)
        return agent

    def component_names(self) -> list[str]:
        strategies = [s.name for s in self.reconciler.strategies] if self.reconciler else []
        return strategies + [p.name for p, _ in self.collectors] + [p.name for p, _ in self.reports] + \
            [p.name for p, _ in self.services]

    # --- what the components see ---------------------------------------------------------------------------------

    def nri_view(self) -> NodeView | None:
        """What the NRI hooks decide from: the reconciler's latest view (no extra work on the container path);
        with enforcement off, a view built at most once per second."""
        if self.reconciler is not None:
            return self.reconciler.last_view
        now = time.monotonic()
        if now - self._nri_view[0] >= NRI_VIEW_MAX_AGE:
            self._nri_view = (now, self.node.view())
        return self._nri_view[1]

    def tick(self, stop: threading.Event | None = None) -> Tick:
        return Tick(time.time(), self.node.pods, self.node.host_apps(), stop or threading.Event())

    # --- one cycle (also used by `run --once` and `report --once`) ---------------------------------------------

    def collect(self, collector: Collector, stop: threading.Event | None = None) -> list[Sample]:
        """One run of one collector, its samples appended to the metric cache."""
        samples = collector.collect(self.tick(stop))
        self.cache.append(samples)
        return samples

    def collect_once(self) -> list[Sample]:
        """One run of the main cycle's collectors (usage, GPUs): what ``run --once`` prints."""
        samples: list[Sample] = []
        for plugin, collector in self.collectors:
            if plugin.primary:
                samples += self.collect(collector)
        return samples

    def report_objects(self) -> dict[str, dict[str, Any]]:
        """File name -> object, for the standalone sink and ``koordlet report``."""
        return report_objects(self.ctx, self._bad)

    def write_reports(self) -> None:
        """Standalone sink: what would be sent to the API server, as files under report-dir."""
        for name, obj in self.report_objects().items():
            write_yaml_atomic(self.config.report_dir, name, obj)

    def events_handler(self) -> EventsHandler | None:
        """Upstream's /events (gate AuditEventsHTTPHandler) over the audit log, or, with AuditEvents off, over the
        executor's in-memory trail (upstream's handler answers nothing then); None without the gate."""
        cfg = self.config
        if not cfg.gate("AuditEventsHTTPHandler"):
            return None
        executor = self.executor
        if self.audit_log is not None:
            source: Callable[[], Iterable[dict[str, object]]] = self.audit_log.newest_first
        elif executor is not None:
            source = trail_source(executor.events)
        else:
            source = list
        pager = EventPager(source, max_readers=cfg.audit_max_concurrent_readers,
                           max_limit=cfg.audit_max_events_limit)

        def serve(query: str, accept: str) -> tuple[int, str, bytes, tuple[tuple[str, str], ...]]:
            page = pager.serve(query, accept)
            return page.status, page.content_type, page.body, page.headers
        return serve

    # --- daemon ----------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, on_ready: Callable[[], object] | None = None,
            notifier: Notifier | None = None) -> None:
        """Run until ``stop`` is set; returns after threads are joined and the cache is flushed. ``notifier``: the
        service manager (systemd ``Type=notify``): READY=1 once serving, WATCHDOG=1 and STATUS= from
        :meth:`verdict` every housekeeping tick, STOPPING=1 when ``stop`` is set."""
        cfg = self.config
        notifier = notifier or Notifier(None)
        log.info("agent starting node=%s mode=%s pod_source=%s cgroup=v%d driver=%s root=%s components=%s",
                 cfg.node_name, cfg.agent_mode, cfg.pod_source, int(self.cgroups.version),
                 self.cgroups.layout.driver.value, self.cgroups.root, ",".join(self.component_names()))
        if not running_as_root():
            log.warning("running as uid=%d, not root: enforcement is off, the agent only collects and reports",
                        os.geteuid())
        loops = self.loops = Loops(stop, self.metrics)
        server = HttpServer(cfg.addr, self.metrics.pages(), self.ready,
                            self.executor.events if self.executor is not None else None, health=self.health,
                            events_upstream=self.events_handler())  # without the gate /events: loopback only
        pleg = self._start_pleg()
        # progress stamps of the loops that do not return (component.assess): the informer after each sync, good
        # or failed; the report loop each tick; the reconciler each cycle
        loops.forever("pods", self.informer.run, period=cfg.kubelet_sync_interval)
        self.informer.on_sync.append(functools.partial(loops.beat, "pods"))
        self.informer.on_error.append(functools.partial(loops.beat, "pods", False))
        loops.forever("report", self._report_loop, period=self._report_period())
        for watcher in self.node.cluster.watchers if self.node.cluster else ():
            loops.forever(f"watch-{watcher.what}", watcher.run)
        if self.node.yarn is not None:        # its own loop: a slow copilot delays nothing else
            loops.every("yarn", cfg.collect_res_used_interval or YARN_PERIOD, self.node.yarn.refresh)
        if cfg.collect_res_used_interval <= 0:
            log.warning("collect-res-used-interval=0: usage collection is disabled")
        periods = [plugin.period(cfg) if plugin.period else 0.0 for plugin, _ in self.collectors]
        qos_period = [cfg.reconcile_interval_seconds] if self.reconciler is not None else []
        # the collectors and the reconcile each start at their own point of their period (component.spread)
        offsets = iter(spread([period for period in periods if period > 0] + qos_period))
        for (collector_plugin, collector), period in zip(self.collectors, periods, strict=True):
            if period > 0:
                loops.every(collector_plugin.name, period, functools.partial(self.collect, collector, stop),
                            next(offsets))
            if isinstance(collector, Background):
                loops.forever(f"{collector_plugin.name}-watch", collector.run)
        if self.reconciler is not None:
            reconciler, offset = self.reconciler, next(offsets)
            loops.forever("qos", lambda s: reconciler.run(s, self.node.view, functools.partial(loops.beat, "qos"),
                                                          offset),
                          period=cfg.reconcile_interval_seconds)
        self.informer.sync()
        # long-lived objects out of the cyclic collector's way, so a full collection walks only what churns
        # (koordlet/base/gcfreeze.py)
        gc_policy = FreezeAfterFullCollection()
        gc_policy.install()
        loops.start()
        started = []
        for service_plugin, service in self.services:
            try:
                service.start()
                started.append(service)
            except Exception as e:     # the agent's other work goes on (Multus keeps the kubelet's socket...)
                log.error("service not started name=%s error=%s", service_plugin.name, e)
        self._set_gauges()
        self._set_cache_gauges()
        server.start()
        if on_ready:
            on_ready()
        notifier.ready(self.status())
        last_flush = last_trim = time.monotonic()
        # the housekeeping tick also pings the watchdog: a stuck housekeeping thread stops the pings too
        tick = min(cfg.metric_cache_flush_interval, 1.0, notifier.watchdog_interval or 1.0)
        try:
            while not stop.wait(tick):
                now = time.monotonic()
                verdict = self.verdict()
                notifier.alive(verdict.progressing, self.status(verdict))
                self._set_gauges()
                if now - last_flush >= cfg.metric_cache_flush_interval:
                    self._housekeep(self.cache.flush, "flush")
                    last_flush = now
                if now - last_trim >= TRIM_INTERVAL:
                    self._housekeep(self.cache.trim, "trim")
                    self._set_cache_gauges()
                    last_trim = now
        finally:
            notifier.stopping("stopping: flushing the metric cache")
            server.stop()
            for service in started:
                self._housekeep(service.stop, "service stop")
            if self.reconciler is not None:
                self.reconciler.nudge()          # ends its wait; it sees stop and returns
            if pleg:
                pleg.stop()
            for watcher in self.node.cluster.watchers if self.node.cluster else ():
                watcher.stop()
            loops.join(timeout=1.5)
            for _, collector in self.collectors:
                if isinstance(collector, Closeable):
                    self._housekeep(collector.close, f"close {collector.name}")
            self._housekeep(self.cache.close, "close")
            if self.audit_log is not None:
                self._housekeep(self.audit_log.close, "audit log close")
            gc_policy.uninstall()
            gc.unfreeze()                        # an embedding process (the tests) gets its objects back
            log.info("agent stopped node=%s", cfg.node_name)

    def _set_gauges(self) -> None:
        """The agent's own state gauges (pods known, series in memory, stores without room) and the expiry of
        upstream's expiring series, by the housekeeping loop."""
        self.metrics.pods.labels(self.metrics.node, self.config.pod_source).set(len(self.informer.pods))
        self.metrics.metric_cache_series.labels(self.metrics.node).set(self.cache.series_count())
        self.metrics.storage(self.ctx.disk_full.states())
        self.metrics.expire()

    def _set_cache_gauges(self) -> None:
        """What the metric cache holds in memory, after each trim (a walk over every series: once a minute)."""
        points, nbytes = self.cache.memory_usage()
        self.metrics.metric_cache_points.labels(self.metrics.node).set(points)
        self.metrics.metric_cache_point_bytes.labels(self.metrics.node).set(nbytes)
        held, holds = self.cache.history()
        self.metrics.metric_cache_history_seconds.labels(self.metrics.node, "held").set(held)
        if holds is not None:
            self.metrics.metric_cache_history_seconds.labels(self.metrics.node, "capacity").set(holds)

    def _report_loop(self, stop: threading.Event) -> None:
        """Every report on its schedule, and the slow refreshes (host topology, RDMA, NodeSLO file, prediction).

        A failed report is retried sooner than its period (5 s doubling up to the period) and logged once; the
        recovery is logged too. Reports are rebuilt from the metric cache each time, so nothing collected
        during an API server outage is lost: the first report after it covers the whole window.
        """
        start = time.monotonic()
        schedules = [_Schedule(start + report.interval() if report.wait_first else start)
                     for _, report in self.reports]
        while not stop.wait(REPORT_TICK):
            self._step("node refresh", self.node.refresh)
            self._step("prediction", lambda: self.ctx.prediction.step(time.time(), self.informer.pods))
            now = time.monotonic()
            for (_, report), schedule in zip(self.reports, schedules, strict=True):
                if schedule.due(now) and self._step(f"ready {report.kind}", report.ready):
                    self._report(schedule, report, stop)
            if self.loops is not None:
                self.loops.beat("report")

    def _report_period(self) -> float:
        """The report loop's period for its stall deadline: its slowest duty (the longest report interval, the
        prediction training, the host topology re-read), since one tick may carry any of them, each with its
        own API timeouts."""
        periods = [REPORT_TICK, self.config.prediction_training_interval, self.config.collect_node_cpu_info_interval]
        for _, report in self.reports:
            try:
                periods.append(report.interval())
            except Exception:   # an interval that needs what is not there yet: the other duties set the period
                continue
        return max(periods)

    def _step(self, what: str, action: Callable[[], object]) -> bool:
        """One part of the report loop; a failure (a full disk for checkpoints) must not stop the others."""
        try:
            result = bool(action())
        except Exception as e:
            self._bad(what, "%s failed error=%s", what, e)
            return False
        self._bad.forget(what)
        return result

    def _report(self, schedule: _Schedule, report: Report, stop: threading.Event) -> None:
        from koordlet.states.kubeapi import ApiError
        kind, now = report.kind, time.monotonic()
        try:
            interval = report.interval()
            result = report.send(stop)
        except Exception as e:
            schedule.failed(now, report.interval())
            self.metrics.reports.labels(self.metrics.node, kind, "failed").inc()
            if isinstance(e, ApiError):
                self._bad(f"report {kind}", "report failed kind=%s error=%s; retrying in %.0fs", kind, e,
                          schedule.backoff)
            elif self._bad(f"report {kind}", "report failed kind=%s error=%s", kind, e):
                log.debug("report failure detail kind=%s", kind, exc_info=True)
            return
        schedule.done(now, interval)
        self.metrics.reports.labels(self.metrics.node, kind, result).inc()
        if self._bad.forget(f"report {kind}"):
            log.info("report recovered kind=%s result=%s", kind, result)
        elif result in ("created", "updated") and kind in ("noderesourcetopology", "device"):
            log.info("report kind=%s result=%s", kind, result)

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

    # --- what the agent says about itself (component.assess: one rule for all three) -----------------------------

    def verdict(self) -> Verdict:
        """Health, readiness and the watchdog from the loops' progress stamps, now."""
        required = [("pods", f"pod sync from {self.config.pod_source}")]
        if self.config.collect_res_used_interval > 0:
            required.append(("usage", "collection cycle"))
        return assess(self.loops.states() if self.loops is not None else [], required)

    def ready(self) -> tuple[bool, str]:
        """/readyz: pods synced and usage collected, each within its loop's deadline (not only once). A store
        without room is said in the body but does not make the agent unready: it still collects (the metric cache
        keeps its memory window), enforces and serves; only what it writes to disk waits."""
        verdict = self.verdict()
        return verdict.ready, self._with_storage(verdict.readiness)

    def health(self) -> tuple[bool, str]:
        """/healthz: no loop stuck past its deadline, none failing again and again."""
        verdict = self.verdict()
        return verdict.healthy, verdict.health

    def status(self, verdict: Verdict | None = None) -> str:
        """systemd's STATUS= line: the verdict and the pod count."""
        verdict = verdict or self.verdict()
        return self._with_storage(f"{verdict.status}; pods: {len(self.informer.pods)} ({self.config.pod_source})")

    def _with_storage(self, text: str) -> str:
        """``text``, then the stores that have no room, if any."""
        full = self.ctx.disk_full.summary()
        return f"{text}; {full}" if full else text
