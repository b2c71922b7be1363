"""Annotation -> per-container GPU injection, as koordlet's ``gpu env inject`` hook (koordinator
``pkg/koordlet/runtimehooks/hooks/gpu/gpu.go: gpuPlugin.InjectContainerGPUEnv``).

- Every container of a pod with GPU allocations gets ``NVIDIA_VISIBLE_DEVICES``: the allocated minors, in
  annotation order, comma-joined (upstream's choice; the NVIDIA toolkit accepts minors and UUIDs alike).
- Pods labelled ``koordinator.sh/gpu-isolation-provider: HAMi-core`` (case-sensitive) that share a card
  (``gpu-memory-ratio`` below 100) also get HAMi-core: ``CUDA_DEVICE_MEMORY_LIMIT`` (plain bytes, which libvgpu
  applies to every visible device), ``CUDA_DEVICE_SM_LIMIT`` (percent), ``LD_PRELOAD`` of libvgpu, bind mounts of
  ``libvgpu.so`` and ``/tmp/vgpulock``, and a per-container shared-region file
  (``CUDA_DEVICE_MEMORY_SHARED_CACHE``): libvgpu fixes the limits when that file is first created, so each
  container gets its own directory, emptied before every create (a restart with new limits starts fresh;
  HAMi-core #7). Upstream does the last part only behind the HamiCoreVGPUMonitor gate.

The decision is pure (:func:`plan`); :func:`prepare` does the host side (checks, the cache directory) and is the
only function that touches files (through ``koordlet.host.fs``). Problems never fail the container: the injection
is dropped and the caller logs the reason against the pod.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from koordlet.base import wire
from koordlet.host.cgroup import check_pod_uid
from koordlet.host.fs import reset_dir
from koordlet.states.deviceallocation import parse_device_allocated

LIBVGPU = "/usr/local/vgpu/libvgpu.so"      # libvgpu dlopens itself from exactly this path in the container
VGPU_DIR = "/usr/local/vgpu"
LOCK_DIR = "/tmp/vgpulock"
_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Mount:
    source: str
    destination: str
    options: tuple[str, ...] = ("rbind",)
    type: str = "bind"


@dataclass(frozen=True)
class HostLayout:
    """Where the node keeps HAMi-core (the hami-core distribute DaemonSet puts libvgpu.so there)."""
    libvgpu: str = LIBVGPU                                # host path of libvgpu.so
    lock_dir: str = LOCK_DIR
    cache_root: str = os.path.join(VGPU_DIR, "containers")  # per-container shared-region dirs


@dataclass(frozen=True)
class Injection:
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    cache_dir: str = ""        # host dir to empty before the container starts ("" when none)

    @property
    def empty(self) -> bool:
        return not self.env and not self.mounts

    def visible_only(self) -> Injection:
        """The fallback when HAMi-core cannot be set up: the GPUs, without isolation."""
        visible = self.env.get("NVIDIA_VISIBLE_DEVICES")
        return Injection({"NVIDIA_VISIBLE_DEVICES": visible}) if visible else NONE


NONE = Injection()


def plan(annotations: Mapping[str, str], labels: Mapping[str, str], pod_uid: str, container: str,
         host: HostLayout = HostLayout()) -> Injection:
    """What the container gets; ValueError names the annotation field or the label that is wrong."""
    raw = annotations.get(wire.ANNOTATION_DEVICE_ALLOCATED)
    if not raw:
        return NONE
    gpus = parse_device_allocated(raw).get("gpu") or []
    if not gpus:
        return NONE
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(str(g.minor) for g in gpus)}
    if labels.get(wire.LABEL_GPU_ISOLATION_PROVIDER) != wire.GPU_ISOLATION_HAMI_CORE:
        return Injection(env)
    first = gpus[0].resources
    ratio = first.get(wire.RESOURCE_GPU_MEMORY_RATIO)
    if ratio is not None and ratio >= 100:
        return Injection(env)                    # whole cards: nothing to share, no limits
    memory = first.get(wire.RESOURCE_GPU_MEMORY)
    if memory is None or memory <= 0:
        raise ValueError(f"{wire.ANNOTATION_DEVICE_ALLOCATED}[gpu][0]: a shared GPU without "
                         f"{wire.RESOURCE_GPU_MEMORY}; HAMi-core limits not injected")
    env["CUDA_DEVICE_MEMORY_LIMIT"] = str(int(memory))
    core = first.get(wire.RESOURCE_GPU_CORE)
    if core is not None and core > 0:
        env["CUDA_DEVICE_SM_LIMIT"] = str(int(core))
    if not _CONTAINER_NAME.fullmatch(container):
        raise ValueError(f"container name {container!r} is not a DNS label; no per-container cache path")
    key = f"{check_pod_uid(pod_uid)}_{container}"
    env["LD_PRELOAD"] = LIBVGPU
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{VGPU_DIR}/{key}.cache"
    cache_dir = os.path.join(host.cache_root, key)
    # the runtime mounts by depth: the cache dir onto /usr/local/vgpu first, then libvgpu.so inside it
    mounts = (Mount(cache_dir, VGPU_DIR), Mount(host.libvgpu, LIBVGPU), Mount(host.lock_dir, LOCK_DIR))
    return Injection(env, mounts, cache_dir)


def host_ready(host: HostLayout) -> str | None:
    """None when the node can take HAMi-core containers, else why not (a bind mount of a missing source fails
    the container, so the injection is dropped instead)."""
    if not os.path.isfile(host.libvgpu):
        return f"{host.libvgpu} missing (deploy the hami-core distribute DaemonSet)"
    if not os.path.isdir(host.lock_dir):
        return f"{host.lock_dir} missing (deploy the hami-core distribute DaemonSet)"
    return None


def prepare(injection: Injection, host: HostLayout) -> Injection:
    """Make the host side real: check libvgpu and the lock dir, give the container an empty cache dir (0777:
    the container's user is unknown). OSError (FileNotFoundError naming the missing piece) when the host is not
    ready; the caller then injects :meth:`Injection.visible_only` and logs why."""
    if not injection.cache_dir:
        return injection
    problem = host_ready(host)
    if problem is not None:
        raise FileNotFoundError(problem)
    reset_dir(injection.cache_dir, 0o777)
    return injection
