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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from koordlet.collectors.usage import CycleResult, UsageCollection
from koordlet.config import Config
from koordlet.host.cgroup import Cgroups, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.host.topology import Topology, read_topology
from koordlet.logutil import LogOnce
from koordlet.metriccache import MetricCache
from koordlet.metrics import AgentMetrics
from koordlet.prediction.feed import Prediction
from koordlet.prediction.reclaimable import node_allocatable
from koordlet.prediction.server import PredictionConfig, Resources
from koordlet.reporters import nrt
from koordlet.reporters.files import write_yaml_atomic
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder, node_metric_object
from koordlet.server import HttpServer
from koordlet.states.hostapps import HostApp, resolve_host_apps
from koordlet.states.informer import PodMeta, PodsInformer, metas_from_objects
from koordlet.states.nodeslo import NodeSLOFile, NodeSLOSpec, merge_node_slo_spec, node_slo_from_object
from koordlet.states.pleg import Pleg
from koordlet.states.standalone import StandalonePodSource

if TYPE_CHECKING:
    from koordlet.collectors.cpi import CPICollector
    from koordlet.collectors.memory import ColdPageCollector, PageCacheCollector
    from koordlet.collectors.psi import PSICollector
    from koordlet.collectors.gpu import GpuDevices
    from koordlet.executor import Executor
    from koordlet.host.rdma import RdmaDevice
    from koordlet.qos import NodeView
    from koordlet.qos.reconciler import Reconciler
    from koordlet.kubeapi import KubeApi
    from koordlet.podresources.proxy import ProxyServer
    from koordlet.reporters.cluster import NodeMetricStatusWriter, ObjectWriter
    from koordlet.states.kubelet import KubeletClient
    from koordlet.states.watcher import ObjectWatcher
    from nri_plugin.plugin import NRIPlugin

log = logging.getLogger("koordlet")

TRIM_INTERVAL = 60.0
TOPOLOGY_REFRESH = 60.0          # host topology re-read (upstream's node info collector period)
KUBELET_CONFIG_REFRESH = 60.0    # kubelet /configz re-read
REPORT_BACKOFF_START = 5.0       # first retry after a failed report; doubles up to the report interval
REPORT_TICK = 0.5


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


class StartupError(RuntimeError):
    """The agent cannot start with this configuration on this host (the message says what to fix)."""


def kubelet_client(config: Config) -> "KubeletClient":
    from koordlet.states.kubelet import KubeletClient
    insecure = config.kubelet_insecure_tls
    return KubeletClient(config.kubelet_address, config.kubelet_read_only_port if insecure else config.kubelet_port,
                         https=not insecure, token_path=None if insecure else config.kubelet_token_file,
                         timeout=config.kubelet_sync_timeout)


def pod_source(config: Config, cgroups: Cgroups, kubelet: "KubeletClient | None",
               api: "KubeApi | None") -> Callable[[], list[PodMeta]]:
    """The configured pod source as a callable returning PodMeta (kubelet, API server, or standalone)."""
    if config.pod_source == "standalone":
        return StandalonePodSource(cgroups, config.pods_file)
    bad = LogOnce(log, logging.ERROR)
    if config.pod_source == "kubelet":
        assert kubelet is not None
        return lambda: metas_from_objects(kubelet.get_pods(), cgroups.layout, bad)
    from koordlet.states.apiserver import ApiServerPodSource
    if api is None:
        raise StartupError("pod-source=apiserver needs the API server (not available in standalone mode)")
    source = ApiServerPodSource(api, config.node_name)
    return lambda: metas_from_objects(source.list_pods(), cgroups.layout, bad)


def build_enforcement(config: Config, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics, cache: MetricCache,
                      topology: Topology, cluster: "Cluster | None") -> tuple["Executor", "Reconciler"]:
    """The executor and the strategies the feature gates enable, in the reconciler's order."""
    from koordlet.executor import Executor
    from koordlet.qos.cpu_qos import CPUQOS
    from koordlet.qos.pod_resources import PodResources
    from koordlet.qos.reconciler import Reconciler
    executor = Executor(cgroups, metrics, force_refresh=config.resource_force_update_seconds)
    strategies: list[Any] = []
    if config.gate("CPUSetAllocator") or config.gate("BatchResource"):
        strategies.append(PodResources(cpuset=config.gate("CPUSetAllocator"), batch=config.gate("BatchResource")))
    if config.gate("GroupIdentity") or config.gate("CoreSched"):
        strategies.append(CPUQOS(cgroups, paths))
    if config.gate("RdtResctrl"):
        from koordlet.qos.resctrl import Resctrl
        strategies.append(Resctrl(paths, metrics, pod_level=config.gate("Resctrl")))
    if config.gate("CoreSched"):
        from koordlet.host.coresched import CoreSchedKernel
        from koordlet.qos.core_sched import CoreSched
        strategies.append(CoreSched(CoreSchedKernel(), paths, metrics))
    interval = config.collect_res_used_interval
    if config.gate("BECPUSuppress") and interval > 0:
        from koordlet.qos.cpu_suppress import CPUSuppress
        strategies.append(CPUSuppress(cache, interval, metrics, be_cpu_manager=config.gate("BECPUManager")))
    if config.gate("CPUBurst") and interval > 0:
        from koordlet.qos.cpu_burst import CPUBurst
        strategies.append(CPUBurst(cache, interval, metrics, reconcile_interval=config.reconcile_interval_seconds))
    memory_total = sum(n.mem_total_bytes for n in topology.nodes if not n.gpu_memory)
    if config.gate("CgroupReconcile"):
        from koordlet.qos.memory_qos import MemoryQOS
        strategies.append(MemoryQOS(memory_total))
    evict_gates = {g for g in ("BECPUEvict", "CPUEvict", "BEMemoryEvict", "MemoryEvict", "CPUAllocatableEvict",
                               "MemoryAllocatableEvict") if config.gate(g)}
    if evict_gates and interval > 0:
        from koordlet.qos.evict import Evictor
        strategies.append(Evictor(cache, interval, metrics, gates=evict_gates, api=cluster.api if cluster else None,
                                  node_name=config.node_name, kill_standalone=config.evict_standalone_kill))
    if config.gate("BlkIOReconcile"):
        from koordlet.qos.blkio import BlkIO
        strategies.append(BlkIO(paths, metrics))
    if config.gate("TCNetworkQoS") or config.gate("TerwayQoS"):
        from koordlet.qos.net_qos import NetQOS
        strategies.append(NetQOS(paths, metrics, tc=config.gate("TCNetworkQoS"), terway=config.gate("TerwayQoS"),
                                 terway_dir=config.terway_qos_dir))
    if config.gate("SystemConfig"):
        from koordlet.qos.system_config import SystemConfig
        strategies.append(SystemConfig(paths, memory_total // 1024))
    return executor, Reconciler(executor, strategies, metrics, config.reconcile_interval_seconds)


def build_nri(config: Config, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics,
              agent: "Agent") -> "NRIPlugin":
    """The NRI plugin with hooks owning what the feature gates give the agent (the reconciler's rules)."""
    from hami_bridge.inject import HostLayout
    from nri_plugin.hooks import HookFeatures, Hooks
    from nri_plugin.plugin import NRIPlugin, PluginSettings, resolve_socket
    socket = resolve_socket(config.runtime_hooks_nri_socket_path, paths.var_run_root)
    try:
        settings = PluginSettings(socket_path=socket, name=config.runtime_hooks_nri_plugin_name,
                                  index=config.runtime_hooks_nri_plugin_index,
                                  hook_budget=config.runtime_hooks_nri_hook_budget,
                                  backoff_max=config.runtime_hooks_nri_backoff_cap)
    except ValueError as e:
        raise StartupError(str(e)) from None
    features = HookFeatures(cpuset=config.gate("CPUSetAllocator"), batch=config.gate("BatchResource"),
                            group_identity=config.gate("GroupIdentity"), resctrl=config.gate("RdtResctrl"),
                            resctrl_pods=config.gate("Resctrl"), core_sched=config.gate("CoreSched"),
                            oom_score_adj=config.gate("OOMScoreAdj"), gpu_env=config.gate("GPUEnvInject"),
                            rdma_devices=config.gate("RDMADeviceInject"))
    kubepods = cgroups.layout.qos_dir(KubeQOS.GUARANTEED)
    reconciler = agent.reconciler
    hooks = Hooks(features, cgroups.layout, agent.nri_view, executor=agent.executor,
                  bvt=cgroups.has_file("cpu", kubepods, "cpu.bvt_warp_ns"), resctrl_root=paths.sys_fs("resctrl"),
                  nudge=reconciler.nudge if reconciler is not None else None,
                  hami=HostLayout(libvgpu=config.hami_core_library_directory_path), host=paths)
    return NRIPlugin(settings, hooks, metrics)


def kubelet_pod_resources_socket(config: Config) -> str:
    return os.path.join(config.var_lib_kubelet_dir, "pod-resources", "kubelet.sock")


def build_pod_resources_proxy(config: Config, metrics: AgentMetrics, informer: PodsInformer) -> "ProxyServer":
    """The kubelet PodResources API on our socket, with koordinator's device allocations (for Multus-CNI)."""
    from koordlet.podresources.proxy import PodResourcesProxy, ProxyServer
    from koordlet.podresources.upstream import KubeletPodResources
    proxy = PodResourcesProxy(KubeletPodResources(kubelet_pod_resources_socket(config)), lambda: informer.pods,
                              metrics, sync_pods=informer.sync_now, timeout=config.kubelet_sync_timeout)
    return ProxyServer(proxy, config.pod_resources_proxy_path, metrics)


@dataclass
class Cluster:
    """The agent's link to the API server: watches of this node's objects and the report writers."""

    api: "KubeApi"
    node: "ObjectWatcher"
    node_slo: "ObjectWatcher"
    node_metric: "ObjectWatcher"
    nrt: "ObjectWatcher"
    node_metric_writer: "NodeMetricStatusWriter"
    nrt_writer: "ObjectWriter"
    device: "ObjectWatcher | None" = None          # with the Accelerators gate
    device_writer: "ObjectWriter | None" = None

    @classmethod
    def connect(cls, config: Config) -> "Cluster":
        from koordlet import kubeapi
        from koordlet.reporters.cluster import NodeMetricStatusWriter, ObjectWriter
        from koordlet.states.watcher import ObjectWatcher
        try:
            api = kubeapi.KubeApi(config.kubeconfig or None, timeout=max(config.kubelet_sync_timeout, 5.0),
                                  qps=config.kube_api_qps, burst=config.kube_api_burst)
        except kubeapi.ConfigError as e:
            raise StartupError(f"API server: {e} (use --standalone to run without a cluster)") from None
        name = config.node_name
        node_metric = ObjectWatcher(api, kubeapi.NODE_METRICS, name)
        topology = ObjectWatcher(api, kubeapi.NODE_RESOURCE_TOPOLOGIES, name)
        device = ObjectWatcher(api, kubeapi.DEVICES, name) if config.gate("Accelerators") else None
        return cls(api, ObjectWatcher(api, kubeapi.NODES, name), ObjectWatcher(api, kubeapi.NODE_SLOS, name),
                   node_metric, topology, NodeMetricStatusWriter(api, node_metric, name),
                   ObjectWriter(api, topology, kubeapi.NODE_RESOURCE_TOPOLOGIES), device,
                   ObjectWriter(api, device, kubeapi.DEVICES) if device else None)

    @property
    def watchers(self) -> "list[ObjectWatcher]":
        return [self.node, self.node_slo, self.node_metric, self.nrt] + ([self.device] if self.device else [])


@dataclass
class Agent:
    config: Config
    paths: HostPaths
    cgroups: Cgroups
    metrics: AgentMetrics
    cache: MetricCache
    informer: PodsInformer
    collection: UsageCollection
    topology: Topology
    prediction: Prediction
    cluster: Cluster | None = None                    # None: standalone (reports go to report-dir only)
    kubelet: "KubeletClient | None" = None            # for /configz (and pods, with pod-source=kubelet)
    slo_file: NodeSLOFile | None = None               # standalone NodeSLO (nodeslo-file)
    gpus: "GpuDevices | None" = None                  # with the Accelerators gate
    rdma: "list[RdmaDevice] | None" = None            # with the RDMADevices gate (re-read with the topology)
    executor: "Executor | None" = None                # the only kernel writer (None: enforcement off)
    reconciler: "Reconciler | None" = None            # QoS strategies (None: enforcement off)
    nri: "NRIPlugin | None" = None                    # NRI plugin (enable-nri-runtime-hook, root only)
    pod_resources: "ProxyServer | None" = None        # PodResources proxy for Multus (gate PodResourcesProxy)
    cpi: "CPICollector | None" = None                 # gate CPICollector
    cold_pages: "ColdPageCollector | None" = None     # gate ColdPageCollector (kidled kernels, cgroup v1)
    page_cache: "PageCacheCollector | None" = None    # enable-pagecache-collector
    psi: "PSICollector | None" = None                 # gate PSICollector
    collecting: bool = False          # set after the first completed collection cycle (readiness)
    _kubelet_config: tuple[float, nrt.KubeletCPUConfig | None] = (float("-inf"), None)
    _bad: LogOnce = field(default_factory=lambda: LogOnce(log, logging.ERROR))
    _slo: tuple[Any, NodeSLOSpec, list[HostApp]] | None = None
    _pools: tuple[Any, dict[str, Any]] | None = None
    _nri_view: "tuple[float, NodeView | None]" = (float("-inf"), None)

    # --- what the agent knows about its node ------------------------------------------------------------

    def node_info(self) -> nrt.NodeInfo:
        """This node's Node object as the reports need it (name only without a cluster or before the watch)."""
        obj = self.cluster.node.object if self.cluster else None
        return nrt.NodeInfo.from_object(obj) if obj else nrt.NodeInfo(self.config.node_name)

    def collect_policy(self) -> CollectPolicy:
        """The NodeMetric spec's collect policy over the defaults (bad fields logged once, defaults kept)."""
        obj = self.cluster.node_metric.object if self.cluster else None
        policy, errors = CollectPolicy.from_spec((obj or {}).get("spec"))
        for e in errors:
            self._bad(f"nodemetric {e}", "NodeMetric %s: %s", self.config.node_name, e)
        return policy

    def node_slo(self) -> NodeSLOSpec:
        """The effective NodeSLO spec: the cluster's NodeSLO, the standalone file, or the defaults."""
        return self._slo_state()[1]

    def host_apps(self) -> list[HostApp]:
        """The NodeSLO's host applications with their cgroup dirs (refused ones logged once)."""
        return self._slo_state()[2]

    def _slo_state(self) -> tuple[Any, NodeSLOSpec, list[HostApp]]:
        """Parsed once per NodeSLO version (the collection asks every second)."""
        if self.cluster is not None:
            obj = self.cluster.node_slo.object
            key: Any = ("object", (obj or {}).get("metadata", {}).get("resourceVersion"))
        elif self.slo_file is not None:
            obj, key = None, ("file", id(self.slo_file.spec))
        else:
            obj, key = None, ("defaults",)
        if self._slo is not None and self._slo[0] == key:
            return self._slo
        errors: list[str] = []
        if self.slo_file is not None and self.cluster is None:
            spec = self.slo_file.spec         # the file source logs its own errors
        else:
            spec, errors = node_slo_from_object(obj) if obj else merge_node_slo_spec(None, self.config.node_name)
        apps, app_errors = resolve_host_apps(spec.host_applications, self.cgroups.layout)
        for e in errors + app_errors:
            self._bad(f"nodeslo {e}", "NodeSLO %s: %s", self.config.node_name, e)
        self._slo = (key, spec, apps)
        return self._slo

    def kubelet_config(self) -> nrt.KubeletCPUConfig | None:
        """The kubelet's CPU/topology manager settings, re-read every minute; None when not queried.

        A failed read keeps the last good answer; before the first good one it raises (the NRT report waits,
        as upstream's does: reporting "no kubelet policy" would be wrong).
        """
        if self.config.disable_query_kubelet_config or self.kubelet is None:
            return None
        read_at, value = self._kubelet_config
        if time.monotonic() - read_at < KUBELET_CONFIG_REFRESH:
            return value
        try:
            value = nrt.KubeletCPUConfig.from_configz(self.kubelet.get_configz())
        except Exception as e:    # unreachable kubelet or bad document: the same consequence
            self._bad("configz", "kubelet /configz unusable error=%s", e)
            if value is None:
                raise
            return value
        if self._bad.forget("configz"):
            log.info("kubelet /configz readable again")
        self._kubelet_config = (time.monotonic(), value)
        return value

    def allocatable(self) -> Resources | None:
        """What the Prod reclaimable prediction caps against: the Node's raw/allocatable in a cluster, the host's
        online CPUs and memory without one (there is no kubelet reserve to subtract)."""
        if self.cluster is not None:
            obj = self.cluster.node.object
            return node_allocatable(obj) if obj else None
        memory = sum(n.mem_total_bytes for n in self.topology.nodes if not n.gpu_memory)
        return Resources(1000 * len(self.topology.online), memory)

    def nri_view(self) -> "NodeView | None":
        """What the NRI hooks decide from: the reconciler's latest view (no extra work on the container path);
        with enforcement off, a view built at most once per second."""
        if self.reconciler is not None:
            return self.reconciler.last_view
        now = time.monotonic()
        if now - self._nri_view[0] >= 1.0:
            self._nri_view = (now, self.qos_view())
        return self._nri_view[1]

    def qos_view(self) -> "NodeView | None":
        """The snapshot the QoS strategies decide from; None until the pods have been synced once (deciding on an
        empty pod list would reset every pod's settings)."""
        from koordlet.qos import NodeView
        if not self.informer.synced.is_set():
            return None
        pods, node = self.informer.pods, self.node_info()
        kubelet: nrt.KubeletCPUConfig | None = None
        try:
            kubelet = self.kubelet_config()
        except Exception:     # logged by kubelet_config(); decide as with policy none until it answers
            kubelet = None
        key = (id(pods), id(self.topology), node, kubelet)
        if self._pools is None or self._pools[0] != key:
            from koordlet.qos.reconciler import pools_from_annotations
            status = nrt.build_status(self.topology, pods, node, kubelet, bad=self._bad)
            self._pools = (key, pools_from_annotations(status.annotations))
        return NodeView(pods=pods, slo=self.node_slo(), host_apps=tuple(self.host_apps()), topology=self.topology,
                        node=node, cpu_manager_policy=kubelet.policy if kubelet else "none", now=time.time(),
                        **self._pools[1])

    # --- reports ---------------------------------------------------------------------------------------------

    def node_metric(self, now: float | None = None) -> dict[str, Any]:
        """The NodeMetric object this agent would report now (status built from the metric cache)."""
        obj = self.cluster.node_metric.object if self.cluster else None
        now = time.time() if now is None else now
        gpus = [g for g in self.gpus.gpus if not g.lost] if self.gpus else []
        builder = NodeMetricBuilder(self.cache, self.collect_policy(),
                                    kidled_running=self.cold_pages is not None and self.cold_pages.running)
        if builder.memory_policy_fallback:
            self._bad("memory policy", "NodeMetric %s: %s", self.config.node_name, builder.memory_policy_fallback)
        else:
            self._bad.forget("memory policy")
        status = builder.status(self.informer.pods, now,
                                lambda pods: self.prediction.reclaimable(now, self.allocatable(), pods),
                                self.host_apps(), gpus)
        return node_metric_object(self.config.node_name, (obj or {}).get("spec") or {}, status)

    def nrt_status(self) -> nrt.NRTStatus:
        return nrt.build_status(self.topology, self.informer.pods, self.node_info(), self.kubelet_config(),
                                hugepage_report=self.config.gate("HugePageReport"), bad=self._bad)

    def nrt_object(self) -> dict[str, Any]:
        """The NodeResourceTopology object this agent would report now (as created for this node)."""
        return nrt.apply(nrt.new_object(self.node_info()), self.nrt_status())

    def device_object(self, now: float | None = None) -> dict[str, Any]:
        """The Device object this agent wants (GPUs with the Accelerators gate, RDMA NICs with both gates)."""
        from koordlet.reporters import device
        rdma = self.rdma if self.config.gate("Accelerators") else None   # upstream: RDMA rides the GPU reporter
        return device.desired(self.node_info(), self.gpus.inventory if self.gpus else None,
                              self.gpus.health.get if self.gpus else (lambda bus_id: None), rdma or [],
                              self.config.gpu_partition_policy, time.time() if now is None else now)

    def read_rdma(self) -> "list[RdmaDevice]":
        """RDMA NICs from sysfs; a malformed device is skipped and logged once."""
        from koordlet.host.rdma import discover_rdma
        nics, problems = discover_rdma(self.paths)
        for problem in problems:
            self._bad(f"rdma {problem}", "rdma discovery: %s", problem)
        return nics

    def report_objects(self) -> dict[str, dict[str, Any]]:
        """File name -> object, for the standalone sink and ``koordlet report``."""
        objects = {"nodemetric.yaml": self.node_metric()}
        if self.config.node_topology_sync_interval > 0:
            objects["noderesourcetopology.yaml"] = self.nrt_object()
        if self.config.gate("Accelerators"):
            objects["device.yaml"] = self.device_object()
        return objects

    def write_reports(self) -> None:
        """Standalone sink: what would be sent to the API server, as files under report-dir."""
        for name, obj in self.report_objects().items():
            write_yaml_atomic(self.config.report_dir, name, obj)

    @classmethod
    def build(cls, config: Config, *, persist: bool = True, connect: bool = True) -> "Agent":
        """Everything wired, nothing started. ``connect=False`` skips the API server (``koordlet report``)."""
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
        cluster = Cluster.connect(config) if connect and not config.standalone else None
        kubelet = kubelet_client(config) if config.pod_source == "kubelet" else None
        informer = PodsInformer(pod_source(config, cgroups, kubelet, cluster.api if cluster else None),
                                config.kubelet_sync_interval, config.pod_source)
        informer.on_error.append(metrics.pod_sync_errors.labels(config.node_name, config.pod_source).inc)
        slo_file = NodeSLOFile(config.nodeslo_file, config.node_name) if config.nodeslo_file else None
        # a one-shot run must not touch the daemon's checkpoints (restore deletes those of unknown pods)
        checkpoints = config.prediction_checkpoint_filepath if persist else ""
        prediction = Prediction(cache, PredictionConfig(checkpoint_dir=checkpoints or None))
        topology = read_topology(paths)
        collection = UsageCollection(paths, cgroups, metrics, interval=config.collect_res_used_interval,
                                     outdated=config.collect_sys_metric_outdated_interval, topology=topology)
        gpus = None
        if config.gate("Accelerators"):
            from koordlet.collectors.gpu import GpuDevices
            gpus = GpuDevices.open(paths, metrics)
        agent = cls(config, paths, cgroups, metrics, cache, informer, collection, topology, prediction, cluster,
                    kubelet, slo_file, gpus=gpus)
        if config.gate("RDMADevices"):
            agent.rdma = agent.read_rdma()
        if config.reconcile_interval_seconds > 0 and os.geteuid() == 0:
            agent.executor, agent.reconciler = build_enforcement(config, paths, cgroups, metrics, cache, topology,
                                                                 cluster)
        if config.enable_nri_runtime_hook and os.geteuid() == 0:
            agent.nri = build_nri(config, paths, cgroups, metrics, agent)
        if config.gate("CPICollector") and config.cpi_collector_interval > 0:
            from koordlet.collectors.cpi import CPICollector
            agent.cpi = CPICollector(cgroups, metrics, topology.online, window=config.collect_cpi_timewindow)
        if config.gate("ColdPageCollector") and config.coldpage_collector_interval > 0:
            from koordlet.collectors.memory import ColdPageCollector
            cold = ColdPageCollector(paths, cgroups, metrics, agent.executor)
            supported, why = cold.supported()
            if supported:
                agent.cold_pages = cold
            else:
                log.warning("cold page collector off: %s", why)
        if config.gate("PSICollector") and config.psi_collector_interval > 0:
            from koordlet.collectors.psi import PSICollector
            psi = PSICollector(paths, cgroups, metrics)
            supported, why = psi.supported()
            if supported:
                agent.psi = psi
            else:
                log.warning("psi collector off: %s", why)
        if config.enable_pagecache_collector:
            from koordlet.collectors.memory import PageCacheCollector
            agent.page_cache = PageCacheCollector(paths, cgroups, metrics)
        if config.gate("PodResourcesProxy"):
            agent.pod_resources = build_pod_resources_proxy(config, metrics, informer)
        return agent

    # --- one cycle (also used by `run --once`) -----------------------------------------------------------

    def collect_once(self) -> CycleResult:
        pods = self.informer.pods
        result = self.collection.run(pods, self.host_apps())
        if self.gpus is not None:
            try:
                result.samples.extend(self.gpus.collect(time.time(), pods))
            except Exception as e:    # the driver must not take CPU/memory collection down with it
                self._bad("gpu collect", "gpu collection failed error=%s", e)
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
        server = HttpServer(cfg.addr, self.metrics.registry, self.ready,
                            self.executor.events if self.executor is not None else None)
        pleg = self._start_pleg()
        threads = [threading.Thread(target=self.informer.run, args=(stop,), name="pods", daemon=True),
                   threading.Thread(target=self._report_loop, args=(stop,), name="report", daemon=True)]
        for watcher in self.cluster.watchers if self.cluster else ():
            threads.append(threading.Thread(target=watcher.run, args=(stop,), name=f"watch-{watcher.what}",
                                            daemon=True))
        if cfg.collect_res_used_interval > 0:
            threads.append(threading.Thread(target=self._collect_loop, args=(stop,), name="collect",
                                            daemon=True))
        else:
            log.warning("collect-res-used-interval=0: usage collection is disabled")
        if self.reconciler is not None:
            threads.append(threading.Thread(target=self.reconciler.run, args=(stop, self.qos_view), name="qos",
                                            daemon=True))
        if self.cpi is not None:
            cpi = self.cpi
            threads.append(threading.Thread(target=self._periodic, name="cpi", daemon=True, args=(
                stop, "cpi", cfg.cpi_collector_interval,
                lambda: self.cache.append(cpi.collect(time.time(), self.informer.pods, stop)))))
        if self.cold_pages is not None:
            cold = self.cold_pages
            threads.append(threading.Thread(target=self._periodic, name="coldpage", daemon=True, args=(
                stop, "coldpage", cfg.coldpage_collector_interval,
                lambda: self.cache.append(cold.collect(time.time(), self.informer.pods, self.host_apps())
                                          if cold.running or cold.start() else []))))
        if self.psi is not None:
            psi = self.psi
            threads.append(threading.Thread(target=self._periodic, name="psi", daemon=True, args=(
                stop, "psi", cfg.psi_collector_interval,
                lambda: self.cache.append(psi.collect(time.time(), self.informer.pods)))))
        if self.page_cache is not None:
            page_cache = self.page_cache
            threads.append(threading.Thread(target=self._periodic, name="pagecache", daemon=True, args=(
                stop, "pagecache", max(cfg.collect_res_used_interval, 1.0),
                lambda: self.cache.append(page_cache.collect(time.time(), self.informer.pods)))))
        if self.gpus is not None and self.gpus.session is not None:
            threads.append(threading.Thread(target=self.gpus.watch_health, args=(stop,), name="gpu-health",
                                            daemon=True))
        self.informer.sync()
        for t in threads:
            t.start()
        if self.nri is not None:
            self.nri.start()
        if self.pod_resources is not None:
            try:
                self.pod_resources.start()
            except OSError as e:     # the agent's other work goes on; Multus keeps the kubelet's socket
                log.error("PodResources proxy not started dir=%s error=%s", self.pod_resources.directory, e)
                self.pod_resources = None
        server.start()
        if on_ready:
            on_ready()
        last_flush = last_trim = time.monotonic()
        try:
            while not stop.wait(min(cfg.metric_cache_flush_interval, 1.0)):
                now = time.monotonic()
                if now - last_flush >= cfg.metric_cache_flush_interval:
                    self._housekeep(self.cache.flush, "flush")
                    last_flush = now
                if now - last_trim >= TRIM_INTERVAL:
                    self._housekeep(self.cache.trim, "trim")
                    last_trim = now
        finally:
            server.stop()
            if self.nri is not None:
                self.nri.stop()
            if self.pod_resources is not None:
                self.pod_resources.stop()
            if self.reconciler is not None:
                self.reconciler.nudge()          # ends its wait; it sees stop and returns
            if pleg:
                pleg.stop()
            for watcher in self.cluster.watchers if self.cluster else ():
                watcher.stop()
            for t in threads:
                t.join(timeout=1.5)
            if self.gpus is not None:
                self._housekeep(self.gpus.close, "nvml shutdown")
            self._housekeep(self.cache.close, "close")
            log.info("agent stopped node=%s", cfg.node_name)

    def _report_loop(self, stop: threading.Event) -> None:
        """NodeMetric status every report interval, the NRT and the Device every node-topology-sync-interval,
        the standalone files every report interval; plus the slow refreshes (host topology, RDMA, NodeSLO file).

        A failed report is retried sooner than its period (5 s doubling up to the period) and logged once; the
        recovery is logged too. Reports are rebuilt from the metric cache each time, so nothing collected
        during an API server outage is lost: the first report after it covers the whole window.
        """
        from koordlet.reporters.cluster import write_device, write_nrt
        cfg = self.config
        start = time.monotonic()
        node_metric = _Schedule(start + self.collect_policy().report_interval)   # upstream waits one period too
        topology = _Schedule(start)
        devices = _Schedule(start)
        files = _Schedule(start + self.collect_policy().report_interval)
        topology_read = start
        while not stop.wait(REPORT_TICK):
            now = time.monotonic()
            if now - topology_read >= TOPOLOGY_REFRESH:
                topology_read = now
                try:
                    self.topology = read_topology(self.paths)
                    if self.rdma is not None:
                        self.rdma = self.read_rdma()
                except Exception as e:      # keep the last topology; a sysfs hiccup must not stop reports
                    self._bad("topology", "host topology re-read failed error=%s", e)
            if self.slo_file is not None:
                self.slo_file.refresh()
            try:
                self.prediction.step(time.time(), self.informer.pods)
            except Exception as e:    # a full disk for checkpoints must not stop reports
                self._bad("prediction", "prediction step failed error=%s", e)
            interval = self.collect_policy().report_interval
            cluster = self.cluster
            if cluster is not None and cfg.enable_node_metric_report and node_metric.due(now) \
                    and cluster.node_metric.synced.is_set():
                self._report(node_metric, interval, "nodemetric",
                             lambda: cluster.node_metric_writer.write(self.node_metric()["status"], stop))
            if cluster is not None and cfg.node_topology_sync_interval > 0 and cfg.gate("NodeTopologyReport") \
                    and topology.due(now) and cluster.nrt.synced.is_set() and self._node_known(cluster):
                self._report(topology, cfg.node_topology_sync_interval, "noderesourcetopology",
                             lambda: write_nrt(cluster.nrt_writer, self.node_info(), self.nrt_status()))
            if cluster is not None and cluster.device is not None and cluster.device_writer is not None \
                    and cfg.node_topology_sync_interval > 0 and devices.due(now) and cluster.device.synced.is_set() \
                    and self._node_known(cluster):
                writer = cluster.device_writer
                self._report(devices, cfg.node_topology_sync_interval, "device",
                             lambda: write_device(writer, self.device_object()))
            if cfg.report_dir and files.due(now):
                self._report(files, interval, "files", lambda: self.write_reports() or "written")

    def _node_known(self, cluster: Cluster) -> bool:
        if not cluster.node.synced.is_set():
            return False
        if cluster.node.object is None:
            self._bad("node", "Node %s not found in the API server; NodeResourceTopology waits for it",
                      self.config.node_name)
            return False
        return True

    def _report(self, schedule: "_Schedule", interval: float, kind: str, send: Callable[[], str]) -> None:
        from koordlet.kubeapi import ApiError
        now = time.monotonic()
        try:
            result = send()
        except Exception as e:
            schedule.failed(now, interval)
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

    def _periodic(self, stop: threading.Event, what: str, interval: float, step: Callable[[], None]) -> None:
        """A slow collector's loop: ``step`` every ``interval`` (its own duration included), errors logged once."""
        while True:
            started = time.monotonic()
            try:
                step()
                self._bad.forget(what)
            except Exception as e:      # a collector bug must not end the agent (nor the loop)
                self._bad(what, "%s collection failed error=%s", what, e)
            if stop.wait(max(0.0, interval - (time.monotonic() - started))):
                return

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
