"""Families the collectors set (``koordlet/collectors/``): node and host-application usage, CPI, PSI, resctrl
monitoring, GPUs and HAMi-core vGPUs, and what each collection cycle costs and skips."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from koordlet.ops.metrics.exposition import TableGauge
from koordlet.ops.metrics.families import Families
from koordlet.ops.metrics.upstream import PSI_LABELS


class CollectionMetrics(Families):
    def _declare_collection(self) -> None:
        # usage (collectors/usage.py): the node, the BE tier, the NodeSLO host applications, the YARN containers
        self.node_used_cpu_cores = self._upstream("koordlet_node_used_cpu_cores", Gauge)
        self.node_used_memory_bytes = self._upstream("koordlet_node_used_memory_bytes", Gauge)
        self.be_suppress_be_used_cpu_cores = self._upstream("koordlet_be_suppress_be_used_cpu_cores", Gauge)
        self.host_application_resource_usage = self._upstream("koordlet_host_application_resource_usage", TableGauge)
        self.yarn_container_resource_usage = self._own(
            TableGauge, "koordlet_yarn_container_resource_usage", "(koordlet-py) usage of a YARN container of a "
            "NodeManager pod, as the YARN Copilot agent names it (cpu in cores, memory in bytes)",
            ["node", "namespace", "name", "resource"])
        self.collect_skipped = self._own(
            Counter, "koordlet_collect_skipped", "(koordlet-py) cgroup readings skipped: vanished = the pod or "
            "container went away mid-read (normal), error = unreadable or malformed file",
            ["node", "collector", "reason"])
        self.collect_cycle_seconds = self._own(
            Histogram, "koordlet_collect_cycle_duration_seconds", "(koordlet-py) duration of one collection cycle",
            ["node"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))
        # CPI (collectors/cpi.py) and its fd budget
        self.container_cpi = self._upstream("koordlet_container_cpi", Gauge)
        self.cpi_containers = self._own(
            Gauge, "koordlet_cpi_containers", "(koordlet-py) containers counted in the last CPI window (counted) and "
            "those left for a later window because the fd budget was short (deferred)", ["node", "state"])
        # PSI (collectors/psi.py); the node's label values as upstream's pod/container PSI
        self.container_psi = self._upstream("koordlet_container_psi", Gauge)
        self.pod_psi = self._upstream("koordlet_pod_psi", Gauge)
        self.node_psi = self._own(
            Gauge, "koordlet_node_psi", "(koordlet-py) node pressure stall information from /proc/pressure: percent "
            "of wall time stalled (full only where the kernel has it)", ["node", *PSI_LABELS[:3]])
        # resctrl monitoring (collectors/resctrl.py)
        self.resctrl_llc_occupancy = self._upstream("koordlet_resctrl_llc_occupancy", Gauge)
        self.resctrl_memory_bandwidth = self._upstream("koordlet_resctrl_memory_bandwidth", Gauge)
        # GPUs (collectors/gpu.py; upstream sends GPU usage only to its metric cache and NodeMetric)
        gpu = ["node", "minor", "uuid"]
        self.gpu_core_usage = self._own(
            Gauge, "koordlet_gpu_core_usage", "(koordlet-py) Σ SM utilization of the GPU's processes, percent of one "
            "card", gpu)
        self.gpu_utilization = self._own(
            Gauge, "koordlet_gpu_utilization", "(koordlet-py) percent of time a kernel ran on the GPU (NVML "
            "utilization.gpu; absent in MIG mode)", gpu)
        self.gpu_memory_used_bytes = self._own(
            Gauge, "koordlet_gpu_memory_used_bytes", "(koordlet-py) GPU memory in use (device-wide)", gpu)
        self.gpu_memory_total_bytes = self._own(
            Gauge, "koordlet_gpu_memory_total_bytes", "(koordlet-py) GPU memory size", gpu)
        self.gpu_healthy = self._own(
            Gauge, "koordlet_gpu_healthy", "(koordlet-py) 1 while the GPU is healthy, 0 after an XID or when it fell "
            "off the bus", gpu)
        pod_gpu = ["node", "pod_uid", "pod_name", "pod_namespace", "minor", "uuid"]
        self.pod_gpu_core_usage = self._own(
            Gauge, "koordlet_pod_gpu_core_usage", "(koordlet-py) SM utilization of the pod's processes on one GPU, "
            "percent of the card", pod_gpu)
        self.pod_gpu_memory_used_bytes = self._own(
            Gauge, "koordlet_pod_gpu_memory_used_bytes", "(koordlet-py) GPU memory held by the pod's processes on one "
            "GPU", pod_gpu)
        # HAMi-core vGPUs (collectors/hami_vgpu.py, gate HamiCoreVGPUMonitor): libvgpu's shared region per container
        vgpu = ["node", "pod_uid", "pod_name", "pod_namespace", "container_name", "vdevice_index", "device_uuid"]
        self.container_vgpu_memory_used_bytes = self._own(
            Gauge, "koordlet_container_vgpu_memory_used_bytes", "(koordlet-py) device memory the container's "
            "processes hold on one vGPU, as HAMi-core's libvgpu accounts it", vgpu)
        self.container_vgpu_memory_limit_bytes = self._own(
            Gauge, "koordlet_container_vgpu_memory_limit_bytes", "(koordlet-py) libvgpu's device memory limit of the "
            "container on one vGPU", vgpu)
        self.container_vgpu_core_utilization = self._own(
            Gauge, "koordlet_container_vgpu_core_utilization", "(koordlet-py) SM utilization of the container's "
            "processes on one vGPU, percent of the card, as libvgpu samples it", vgpu)

    def skipped(self, collector: str, reason: str, n: int = 1) -> None:
        """``n`` cgroup readings the collector had to skip (``vanished`` or ``error``)."""
        if n:
            self.collect_skipped.labels(self.node, collector, reason).inc(n)
