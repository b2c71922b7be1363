"""HAMi-core vGPU monitoring (gate ``HamiCoreVGPUMonitor``): each container's use of its shared GPUs, read from the
shared region libvgpu keeps in the per-container cache directory.

What upstream's gate does (runtimehooks/hooks/gpu/gpu.go): for a container that gets HAMi-core (GPUEnvInject, a
``HAMi-core`` isolation label, a GPU share below 100 %), ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` points at
``/usr/local/vgpu/<pod uid>_<container>.cache`` and the host directory ``<libvgpu dir>/containers/<pod
uid>_<container>`` (emptied, 0777) is bind-mounted over ``/usr/local/vgpu``, so the region lands on the host where
HAMi's vGPUmonitor reads it (``HOOK_PATH/containers``, pkg/monitor/nvidia/cudevshr.go); upstream koordlet reads
nothing itself. The NRI hook here always gives HAMi-core containers that per-container file (libvgpu fixes limits
when the file is created: a shared default file would keep stale limits, HAMi-core #7), so the gate's part in the
hook is always done; the gate's own effect here is this collector, which reads the regions the way HAMi's monitor
does and exports them:

- every collection interval, for each directory ``<pod uid>_<container>`` under the cache root whose pod the agent
  knows, the one ``*.cache`` file in it (``koordlet.host.hamicore``: magic, version 1.x, the live process slots);
- per device the container sees: ``koordlet_container_vgpu_memory_used_bytes`` (Σ ``used.total`` of its live
  processes), ``..._memory_limit_bytes`` (libvgpu's limit) and ``koordlet_container_vgpu_core_utilization``
  (Σ ``sm_util``), labelled with the pod, the container, the CUDA index and the device uuid; series of a container
  whose region is gone are removed.

A region that is not there yet (the container has not run CUDA) is silent; one that cannot be read is logged once.
"""

from __future__ import annotations

import logging

from hami_bridge.inject import HostLayout
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, collecting, host_probe
from koordlet.host import probes
from koordlet.host.hamicore import list_regions, read_shared_region
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)


class HamiVGPUCollector:
    name = "hami-vgpu"

    def __init__(self, cache_root: str, metrics: AgentMetrics) -> None:
        self._root = cache_root
        self._metrics = metrics
        self._bad = LogOnce(log, logging.WARNING)
        self._series: set[tuple[str, ...]] = set()

    def collect(self, tick: Tick) -> list[Sample]:
        pods = {m.pod.uid: m.pod for m in tick.pods}
        m = self._metrics
        seen: set[tuple[str, ...]] = set()
        problems: list[str] = []
        for uid, container, path in list_regions(self._root):
            pod = pods.get(uid)
            if pod is None:
                continue                         # HAMi's monitor also reports only the pods it knows
            try:
                region = read_shared_region(path)
            except (OSError, ValueError) as e:
                problems.append(path)
                self._bad(path, "vGPU region of pod %s container %s not read: %s", pod.key, container, e)
                continue
            for d in region.devices:
                labels: tuple[str, ...] = (m.node, uid, pod.name, pod.namespace, container, str(d.index), d.uuid)
                m.container_vgpu_memory_used_bytes.labels(*labels).set(d.used_bytes)
                m.container_vgpu_memory_limit_bytes.labels(*labels).set(d.limit_bytes)
                m.container_vgpu_core_utilization.labels(*labels).set(d.sm_util)
                seen.add(labels)
        self._bad.keep_only(problems)
        for labels in self._series - seen:
            for gauge in (m.container_vgpu_memory_used_bytes, m.container_vgpu_memory_limit_bytes,
                          m.container_vgpu_core_utilization):
                try:
                    gauge.remove(*labels)
                except KeyError:
                    pass                         # already dropped with its pod (AgentMetrics.pods_synced)
        self._series = seen
        return []


def _build(ctx: Context) -> HamiVGPUCollector:
    # the same directory the NRI hook gives each HAMi-core container (nri_plugin builds the same HostLayout)
    root = HostLayout(libvgpu=ctx.config.hami_core_library_directory_path).cache_root
    return HamiVGPUCollector(root, ctx.metrics)


PLUGIN = Plugin("hami-vgpu", _build, gates=("HamiCoreVGPUMonitor",), when=collecting,
                period=lambda c: c.collect_res_used_interval, probe=host_probe(probes.nvidia_gpus))
