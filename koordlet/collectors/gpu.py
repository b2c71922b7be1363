"""GPU devices of the node: the NVML session, the inventory, XID health, and per-cycle usage samples.

Usage follows upstream's metric kinds (``pkg/koordlet/metricsadvisor/devices/gpu/collector_gpu_linux.go``:
``gpuDeviceManager.getNodeGPUUsage``, ``getPodOrContainerTotalGPUUsageOfPIDs``): per GPU
``node_gpu_core_usage`` (Σ SM % of its processes), ``node_gpu_memory_usage`` (Σ process memory) and
``node_gpu_memory_total``; per pod and container ``pod_gpu_*`` / ``container_gpu_*`` from the processes that
belong to them. Upstream reads every container's ``cgroup.procs`` each second to find them; we read
``/proc/<pid>/cgroup`` of the few GPU processes instead (same answer, cost proportional to GPU processes, not
containers) and match its last path components to the pods' container dirs, which also works when the agent's
cgroup namespace prefixes the path with ``/..``.

Where NVML cannot list a GPU's processes (MIG mode, no permission), the GPU's device-wide use is attributed
through the ``device-allocated`` annotation instead: to the pods the scheduler gave that GPU, split by their
``gpu-memory-ratio``. Upstream reports nothing for those pods.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, host_probe
from koordlet.host import probes
from koordlet.host.nvml import GPU_LOST, Gpu, GpuHealth, GpuInventory, GpuUsage, Nvml, NvmlUnavailable
from koordlet.host.paths import HostPaths
from koordlet.host.procfs import read_process_cgroup
from koordlet.metriccache import Sample, labels
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.deviceallocation import parse_device_allocated
from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

INVENTORY_REFRESH = 60.0


@dataclass(frozen=True)
class _Owner:
    meta: PodMeta
    container_id: str


class GpuDevices:
    """The GPU collector, and the one owner of the NVML session; it publishes itself as the node state's ``gpus``
    (the Device and NodeMetric reports read the inventory and health from there). ``inventory`` is replaced whole
    (readers take it without locks)."""

    name = "gpu"

    def __init__(self, paths: HostPaths, metrics: AgentMetrics, session: Nvml | None, error: str = "") -> None:
        self.paths = paths
        self.metrics = metrics
        self.session = session
        self.error = error                   # why there is no session ("" when there is)
        self.health = GpuHealth()
        self.inventory = GpuInventory(error=error)
        self._read_at = float("-inf")
        self._bad = LogOnce(log, logging.WARNING)
        self._gauges: set[tuple[str, ...]] = set()
        self._rewatch = threading.Event()          # set when the GPUs to watch for XIDs change
        if session is not None:
            self.refresh(force=True)

    @classmethod
    def open(cls, paths: HostPaths, metrics: AgentMetrics) -> GpuDevices:
        """Never raises: a host without NVIDIA GPUs gets an empty inventory and the reason in ``error``."""
        try:
            session = Nvml.open(paths)
        except NvmlUnavailable as e:
            log.info("gpu collection off: %s", e)
            return cls(paths, metrics, None, str(e))
        return cls(paths, metrics, session)

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self.inventory.gpus

    def refresh(self, force: bool = False) -> GpuInventory:
        """Re-read the inventory once a minute (hot-plug, a GPU that came back); keeps the last on failure."""
        if self.session is None or (not force and time.monotonic() - self._read_at < INVENTORY_REFRESH):
            return self.inventory
        self._read_at = time.monotonic()
        try:
            inventory = self.session.inventory()
        except Exception as e:     # a driver hiccup must not take the collection down
            self._bad("inventory", "gpu inventory failed error=%s", e)
            return self.inventory
        for problem in inventory.problems:
            self._bad(problem, "gpu inventory: %s", problem)
        for gpu in inventory.gpus:
            if gpu.lost:
                self.health.mark(gpu.bus_id, GPU_LOST, "NVML cannot open the GPU (fallen off the bus?)")
            else:
                self.health.clear(gpu.bus_id, GPU_LOST)
        if [g.bus_id for g in inventory.gpus if not g.lost] != [g.bus_id for g in self.inventory.gpus if not g.lost]:
            self._rewatch.set()
        if [g.bus_id for g in inventory.gpus] != [g.bus_id for g in self.inventory.gpus]:
            log.info("gpu inventory count=%d driver=%s cuda=%s model=%s", len(inventory.gpus),
                     inventory.driver_version, inventory.cuda_version, inventory.model or "mixed")
        self.inventory = inventory
        return inventory

    def run(self, stop: threading.Event) -> None:
        """The XID health loop (blocks until ``stop``). Registers again whenever the set of GPUs NVML can open changes
        (one came back, one was added), so no GPU goes unwatched until a restart."""
        while self.session is not None and not stop.is_set():
            self._rewatch.clear()
            gpus = [g.bus_id for g in self.gpus if not g.lost]
            if gpus:
                self.session.watch_xid(gpus, self.health, stop, self._rewatch)
            else:
                while not stop.wait(1.0) and not self._rewatch.is_set():
                    pass

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    # --- one cycle ---------------------------------------------------------------------------------------------

    def collect(self, tick: Tick) -> list[Sample]:
        now, pods = tick.now, tick.pods
        if self.session is None or not self.gpus:
            return []
        self.refresh()
        usages, failed = self.session.usage(self.gpus)
        for bus_id, (lost, error) in failed.items():
            if lost:
                self.health.mark(bus_id, GPU_LOST, f"NVML error: {error}")
            else:              # a passing error: this cycle has no sample for the GPU, its health is unchanged
                self._bad(f"usage {bus_id}", "gpu usage unreadable bus_id=%s error=%s", bus_id, error)
        by_minor = {g.minor: g for g in self.gpus}
        owners = self._owners([p.pid for u in usages for p in u.processes], pods)
        samples: list[Sample] = []
        gauges: set[tuple[str, ...]] = set()
        for usage in usages:
            gpu_labels = {"gpu_minor": str(usage.minor), "gpu_device_uuid": usage.uuid}
            # Without a per-process split (MIG) the device-wide values stand in, so that the pods' shares
            # attributed below never add up to more than the node's.
            node_sm = usage.sm_util if usage.processes_known else (usage.utilization or 0)
            node_mem = usage.process_memory if usage.processes_known else usage.memory_used
            samples += [Sample("node_gpu_core_usage", labels(**gpu_labels), now, node_sm),
                        Sample("node_gpu_memory_usage", labels(**gpu_labels), now, node_mem),
                        Sample("node_gpu_memory_total", labels(**gpu_labels), now, usage.memory_total)]
            per_pod, per_container = self._attribute(usage, owners, pods)
            for cid, (sm, mem) in per_container.items():
                samples += [Sample("container_gpu_core_usage", labels(container_id=cid, **gpu_labels), now, sm),
                            Sample("container_gpu_memory_usage", labels(container_id=cid, **gpu_labels), now, mem)]
            for meta, sm, mem in per_pod.values():
                samples += [Sample("pod_gpu_core_usage", labels(pod_uid=meta.pod.uid, **gpu_labels), now, sm),
                            Sample("pod_gpu_memory_usage", labels(pod_uid=meta.pod.uid, **gpu_labels), now, mem)]
                key = (meta.pod.uid, meta.pod.name, meta.pod.namespace, str(usage.minor), usage.uuid)
                self.metrics.pod_gpu_core_usage.labels(self.metrics.node, *key).set(sm)
                self.metrics.pod_gpu_memory_used_bytes.labels(self.metrics.node, *key).set(mem)
                gauges.add(key)
        self._export(usages, by_minor)
        for gone in self._gauges - gauges:      # pods that left a GPU: drop their series
            for gauge in (self.metrics.pod_gpu_core_usage, self.metrics.pod_gpu_memory_used_bytes):
                gauge.remove(self.metrics.node, *gone)
        self._gauges = gauges
        return samples

    def _export(self, usages: Iterable[GpuUsage], by_minor: dict[int, Gpu]) -> None:
        m, node = self.metrics, self.metrics.node
        for usage in usages:
            key = (node, str(usage.minor), usage.uuid)
            m.gpu_core_usage.labels(*key).set(usage.sm_util)
            if usage.utilization is not None:
                m.gpu_utilization.labels(*key).set(usage.utilization)
            m.gpu_memory_used_bytes.labels(*key).set(usage.memory_used)
            m.gpu_memory_total_bytes.labels(*key).set(usage.memory_total)
        for gpu in by_minor.values():
            m.gpu_healthy.labels(node, str(gpu.minor), gpu.uuid).set(0 if self.health.get(gpu.bus_id) else 1)

    def _owners(self, pids: Iterable[int], pods: Sequence[PodMeta]) -> dict[int, _Owner]:
        """GPU process pid -> the pod container it runs in (pids outside pods are left out)."""
        pids = set(pids)
        if not pids:
            return {}
        index: dict[tuple[str, str], _Owner] = {}
        for meta in pods:
            for container, rel in meta.containers:
                parts = rel.rstrip("/").split("/")
                if len(parts) >= 2:
                    index[(parts[-2], parts[-1])] = _Owner(meta, container.id)
        out = {}
        for pid in pids:
            owner = self._owner_of(pid, index)
            if owner is not None:
                out[pid] = owner
        return out

    def _owner_of(self, pid: int, index: dict[tuple[str, str], _Owner]) -> _Owner | None:
        try:
            lines = read_process_cgroup(self.paths, pid)
        except OSError:
            return None          # the process ended between NVML's answer and now
        for controllers, path in lines:
            if controllers and "cpu" not in controllers.split(","):
                continue         # v1: the cpu hierarchy is the one kubelet's layout describes; v2 has ""
            parts = [p for p in path.split("/") if p]
            for i in range(len(parts) - 1, 0, -1):
                owner = index.get((parts[i - 1], parts[i]))
                if owner is not None:
                    return owner
        return None

    def _attribute(self, usage: GpuUsage, owners: dict[int, _Owner], pods: Sequence[PodMeta]
                   ) -> tuple[dict[str, tuple[PodMeta, float, float]], dict[str, tuple[float, float]]]:
        """(pod uid -> (pod, SM %, bytes), container id -> (SM %, bytes)) of one GPU."""
        per_pod: dict[str, tuple[PodMeta, float, float]] = {}
        per_container: dict[str, tuple[float, float]] = {}
        if usage.processes_known:
            for proc in usage.processes:
                owner = owners.get(proc.pid)
                if owner is None:
                    continue
                sm, mem = per_container.get(owner.container_id, (0.0, 0.0))
                per_container[owner.container_id] = (sm + proc.sm_util, mem + proc.memory_used)
                _, sm, mem = per_pod.get(owner.meta.pod.uid, (owner.meta, 0.0, 0.0))
                per_pod[owner.meta.pod.uid] = (owner.meta, sm + proc.sm_util, mem + proc.memory_used)
            return per_pod, per_container
        shares = self._allocated_shares(usage.minor, pods)
        total = sum(share for _, share in shares.values())
        for uid, (meta, share) in shares.items():
            part = share / total
            per_pod[uid] = (meta, (usage.utilization or 0) * part, usage.memory_used * part)
        return per_pod, per_container

    def _allocated_shares(self, minor: int, pods: Sequence[PodMeta]) -> dict[str, tuple[PodMeta, float]]:
        """Pods holding GPU ``minor`` per their device-allocated annotation, weighted by gpu-memory-ratio."""
        shares: dict[str, tuple[PodMeta, float]] = {}
        for meta in pods:
            raw = meta.pod.annotations.get(wire.ANNOTATION_DEVICE_ALLOCATED)
            if not raw or meta.pod.terminating:
                continue
            try:
                allocations = parse_device_allocated(raw).get(wire.DEVICE_GPU, [])
            except ValueError as e:
                self._bad(f"alloc {meta.pod.uid}", "pod %s: %s", meta.pod.key, e)
                continue
            for a in allocations:
                if a.minor == minor:
                    shares[meta.pod.uid] = (meta, float(a.resources.get(wire.RESOURCE_GPU_MEMORY_RATIO, 100)) or 100.0)
        return shares


def _build(ctx: Context) -> GpuDevices:
    devices = GpuDevices.open(ctx.paths, ctx.metrics)
    ctx.node.gpus = devices
    return devices


PLUGIN = Plugin("gpu", _build, gates=("Accelerators",), period=lambda c: c.collect_res_used_interval, primary=True,
                probe=host_probe(probes.nvidia_gpus))
