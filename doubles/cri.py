"""A kubelet stand-in on the CRI (proto/cri, k8s.io/cri-api runtime/v1): pods and containers created in a real
container runtime the way the kubelet creates them.

- the pod cgroup is made first, named as the kubelet's cgroupfs driver names it (``/kubepods/pod<uid>``,
  ``/kubepods/burstable/pod<uid>``, ``/kubepods/besteffort/pod<uid>``), with the kubelet's pod-level values, then
  ``RunPodSandbox`` with that ``cgroup_parent``, host network (no CNI needed) and no hostname (runc refuses one
  without a UTS namespace of its own), the pod's labels and annotations on the sandbox;
- containers get the kubelet's ``LinuxContainerResources`` for their requests and limits (cpu shares from the
  request, cfs quota from the limit, the memory limit, the kubelet's oom_score_adj for the QoS class) and the
  sandbox config along with ``CreateContainer``, as the kubelet sends it;
- a pod with ``host_pid`` / ``privileged`` (a node agent's DaemonSet pod) gets the host's PID namespace and the
  privileged flag on its sandbox and containers, and containers get the pod spec's ``args`` and ``mounts``
  (hostPath volumes); ``ExecSync`` runs a command in a running container (``kubectl exec``).

Used by tests/realruntime and bench/cri_create.py (doubles/containerd.py starts the runtime). gRPC over the
runtime's unix socket; every call has a deadline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from koordlet._proto.cri import api_pb2 as cri
from koordlet._proto.cri import api_pb2_grpc as cri_grpc

MILLI_CPU_TO_CPU = 1000
MIN_SHARES, SHARES_PER_CPU = 2, 1024
QUOTA_PERIOD = 100000            # the kubelet's cfs period, us
CAPACITY = 64 << 30              # node memory assumed for the Burstable oom_score_adj


@dataclass(frozen=True)
class Resources:
    """A container's cpu (millicores) and memory (bytes) requests and limits; 0 = not set."""
    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0


@dataclass(frozen=True)
class Pod:
    name: str
    uid: str
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: Mapping[str, Resources] = field(default_factory=dict)    # name -> resources (spec order)
    host_pid: bool = False                  # spec.hostPID (the network is always the host's here)
    privileged: bool = False                # securityContext.privileged of every container (and so the sandbox)

    @property
    def kube_qos(self) -> str:
        """The Kubernetes QoS class as the kubelet decides it: guaranteed, burstable or besteffort."""
        res = list(self.containers.values())
        if all(r == Resources() for r in res):
            return "besteffort"
        if all(r.cpu_limit and r.memory_limit and r.cpu_request in (0, r.cpu_limit)
               and r.memory_request in (0, r.memory_limit) for r in res):
            return "guaranteed"
        return "burstable"

    def cgroup_parent(self, root: str = "/") -> str:
        """The pod's cgroup as the kubelet's cgroupfs driver names it (``--cgroup-root`` = ``root``)."""
        qos = self.kube_qos
        tier = "kubepods" if qos == "guaranteed" else f"kubepods/{qos}"
        return os.path.join(root, tier, f"pod{self.uid}")


def shares(milli: int) -> int:
    return max(milli * SHARES_PER_CPU // MILLI_CPU_TO_CPU, MIN_SHARES) if milli else MIN_SHARES


def kubelet_resources(pod: Pod, name: str) -> cri.LinuxContainerResources:
    """What the kubelet puts in ContainerConfig.linux.resources for this container (cgroup v1)."""
    r = pod.containers[name]
    request = r.cpu_request or r.cpu_limit        # the API server defaults a missing request to the limit
    out = cri.LinuxContainerResources(cpu_period=QUOTA_PERIOD, cpu_shares=shares(request),
                                      memory_limit_in_bytes=r.memory_limit,
                                      oom_score_adj=oom_score_adj(pod, r))
    if r.cpu_limit:
        out.cpu_quota = r.cpu_limit * QUOTA_PERIOD // MILLI_CPU_TO_CPU
    return out


def oom_score_adj(pod: Pod, r: Resources) -> int:
    """The kubelet's policy: -997 Guaranteed, 1000 BestEffort, Burstable by memory request within 2..999."""
    qos = pod.kube_qos
    if qos == "guaranteed":
        return -997
    if qos == "besteffort":
        return 1000
    value = 1000 - (1000 * (r.memory_request or r.memory_limit)) // CAPACITY
    return min(max(value, 2), 999)


def pod_cgroup_values(pod: Pod) -> dict[str, dict[str, str]]:
    """The pod-level values the kubelet writes when it makes the pod cgroup: {subsystem: {file: value}}."""
    res = list(pod.containers.values())
    cpu_request = sum(r.cpu_request or r.cpu_limit for r in res)
    out: dict[str, dict[str, str]] = {"cpu": {"cpu.shares": str(shares(cpu_request))}}
    if pod.kube_qos == "guaranteed":
        out["cpu"]["cpu.cfs_quota_us"] = str(sum(r.cpu_limit for r in res) * QUOTA_PERIOD // MILLI_CPU_TO_CPU)
        out["memory"] = {"memory.limit_in_bytes": str(sum(r.memory_limit for r in res))}
    return out


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


class CRIError(RuntimeError):
    def __init__(self, method: str, error: grpc.RpcError) -> None:
        code: grpc.StatusCode | None = getattr(error, "code", lambda: None)()     # a grpc.Call, in practice
        details = getattr(error, "details", lambda: str(error))()
        super().__init__(f"CRI {method}: {code.name if code else '?'}: {details}")
        self.code = code


class CRIClient:
    """The kubelet's calls, one method each; ``timeout`` per call (the kubelet's is 2 min; ours is shorter)."""

    def __init__(self, socket_path: str, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.runtime = cri_grpc.RuntimeServiceStub(self._channel)
        self.images = cri_grpc.ImageServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CRIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., Any], request: Any, timeout: float | None = None) -> Any:
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as e:
            raise CRIError(type(request).__name__.removesuffix("Request"), e) from None

    # --- runtime ----------------------------------------------------------------------------------------------

    def version(self, timeout: float | None = None) -> cri.VersionResponse:
        resp: cri.VersionResponse = self._call(self.runtime.Version, cri.VersionRequest(version="v1"), timeout)
        return resp

    def status(self) -> cri.StatusResponse:
        resp: cri.StatusResponse = self._call(self.runtime.Status, cri.StatusRequest(verbose=False))
        return resp

    # --- pods -------------------------------------------------------------------------------------------------

    def sandbox_config(self, pod: Pod, cgroup_root: str = "/", attempt: int = 0,
                       log_directory: str = "") -> cri.PodSandboxConfig:
        config = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=attempt),
            labels={**pod.labels, "io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.namespace": pod.namespace,
                    "io.kubernetes.pod.uid": pod.uid},
            annotations=dict(pod.annotations))
        config.linux.cgroup_parent = pod.cgroup_parent(cgroup_root)
        config.linux.security_context.namespace_options.network = cri.NODE
        if pod.host_pid:
            config.linux.security_context.namespace_options.pid = cri.NODE
        config.linux.security_context.privileged = pod.privileged
        config.log_directory = log_directory          # where the runtime writes the containers' logs
        return config

    def run_pod_sandbox(self, config: cri.PodSandboxConfig) -> str:
        return str(self._call(self.runtime.RunPodSandbox, cri.RunPodSandboxRequest(config=config)).pod_sandbox_id)

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self._call(self.runtime.StopPodSandbox, cri.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self._call(self.runtime.RemovePodSandbox, cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    def pod_sandbox_status(self, sandbox_id: str) -> tuple[cri.PodSandboxStatus, dict[str, Any]]:
        resp = self._call(self.runtime.PodSandboxStatus,
                          cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True))
        return resp.status, _info(resp.info)

    def list_pod_sandbox(self) -> list[cri.PodSandbox]:
        return list(self._call(self.runtime.ListPodSandbox, cri.ListPodSandboxRequest()).items)

    # --- containers -------------------------------------------------------------------------------------------

    def container_config(self, pod: Pod, name: str, image: str, command: Sequence[str] = (),
                         env: Mapping[str, str] | None = None, attempt: int = 0, args: Sequence[str] = (),
                         mounts: Sequence[cri.Mount] = (), log_path: str = "") -> cri.ContainerConfig:
        """``log_path``: relative to the sandbox's log directory."""
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=attempt), image=cri.ImageSpec(image=image),
            command=list(command), args=list(args), mounts=list(mounts), log_path=log_path,
            envs=[cri.KeyValue(key=k, value=v) for k, v in (env or {}).items()],
            labels={"io.kubernetes.container.name": name, "io.kubernetes.pod.name": pod.name,
                    "io.kubernetes.pod.namespace": pod.namespace, "io.kubernetes.pod.uid": pod.uid})
        config.linux.resources.CopyFrom(kubelet_resources(pod, name))
        security = config.linux.security_context
        security.privileged = pod.privileged
        if pod.host_pid:
            security.namespace_options.network = cri.NODE
            security.namespace_options.pid = cri.NODE
        return config

    def create_container(self, sandbox_id: str, config: cri.ContainerConfig,
                         sandbox_config: cri.PodSandboxConfig) -> str:
        req = cri.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config)
        return str(self._call(self.runtime.CreateContainer, req).container_id)

    def start_container(self, container_id: str) -> None:
        self._call(self.runtime.StartContainer, cri.StartContainerRequest(container_id=container_id))

    def stop_container(self, container_id: str, timeout: int = 0) -> None:
        """timeout 0: SIGKILL at once (the kubelet's grace period is the pod's; these workloads have none)."""
        self._call(self.runtime.StopContainer, cri.StopContainerRequest(container_id=container_id, timeout=timeout))

    def remove_container(self, container_id: str) -> None:
        self._call(self.runtime.RemoveContainer, cri.RemoveContainerRequest(container_id=container_id))

    def update_container_resources(self, container_id: str, resources: cri.LinuxContainerResources) -> None:
        self._call(self.runtime.UpdateContainerResources,
                   cri.UpdateContainerResourcesRequest(container_id=container_id, linux=resources))

    def container_status(self, container_id: str) -> tuple[cri.ContainerStatus, dict[str, Any]]:
        """The status and, decoded, the verbose ``info`` document (``pid``, ``runtimeSpec``: the OCI spec)."""
        resp = self._call(self.runtime.ContainerStatus,
                          cri.ContainerStatusRequest(container_id=container_id, verbose=True))
        return resp.status, _info(resp.info)

    def exec_sync(self, container_id: str, cmd: Sequence[str], timeout: int = 60) -> ExecResult:
        """``cmd`` in the running container, to its end (the runtime kills it after ``timeout`` seconds)."""
        resp = self._call(self.runtime.ExecSync,
                          cri.ExecSyncRequest(container_id=container_id, cmd=list(cmd), timeout=timeout),
                          timeout + 30)
        return ExecResult(int(resp.exit_code), resp.stdout.decode(errors="replace"),
                          resp.stderr.decode(errors="replace"))

    def list_containers(self, sandbox_id: str = "") -> list[cri.Container]:
        req = cri.ListContainersRequest(filter=cri.ContainerFilter(pod_sandbox_id=sandbox_id))
        return list(self._call(self.runtime.ListContainers, req).containers)

    # --- images -----------------------------------------------------------------------------------------------

    def image_present(self, ref: str) -> bool:
        resp = self._call(self.images.ImageStatus, cri.ImageStatusRequest(image=cri.ImageSpec(image=ref)))
        return bool(resp.image.id)

    # --- the kubelet's sequences ------------------------------------------------------------------------------

    def remove_pod(self, sandbox_id: str) -> None:
        """Stop and remove every container of the sandbox, then the sandbox (the kubelet's pod deletion)."""
        for c in self.list_containers(sandbox_id):
            self.stop_container(c.id)
            self.remove_container(c.id)
        self.stop_pod_sandbox(sandbox_id)
        self.remove_pod_sandbox(sandbox_id)


def _info(info: Mapping[str, str]) -> dict[str, Any]:
    """The verbose map: containerd puts one JSON document under "info"."""
    out: dict[str, Any] = {}
    for key, raw in info.items():
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    doc = out.get("info")
    return doc if isinstance(doc, dict) else out


# ---- the kubelet's part ------------------------------------------------------------------------------------------

class PodCgroups(Protocol):
    """Where the kubelet makes pod cgroups (doubles/containerd.py ``CgroupRoots``): paths relative to the root."""

    def mkdir(self, rel: str) -> None: ...

    def write(self, subsystem: str, rel: str, name: str, value: str) -> None: ...

    def rmdir(self, rel: str) -> None: ...


@dataclass
class RunningPod:
    pod: Pod
    sandbox_id: str
    config: cri.PodSandboxConfig
    cgroup_dir: str                                         # relative to the cgroup root, e.g. kubepods/pod<uid>
    containers: dict[str, str] = field(default_factory=dict)   # name -> container id


class Kubelet:
    """The kubelet's sequences against a runtime: pod cgroup first, then the sandbox, then containers."""

    def __init__(self, client: CRIClient, cgroups: PodCgroups, cgroup_root: str = "/") -> None:
        self.client = client
        self.cgroups = cgroups
        self.cgroup_root = cgroup_root

    def setup(self) -> None:
        """The QoS tiers the kubelet makes at start (cgroupfs driver)."""
        for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
            self.cgroups.mkdir(tier)
        self.cgroups.write("cpu", "kubepods/besteffort", "cpu.shares", str(MIN_SHARES))

    def run_pod(self, pod: Pod, log_directory: str = "") -> RunningPod:
        """``log_directory``: the runtime writes each container's output to ``<log_directory>/<name>.log``."""
        rel = pod.cgroup_parent("/").strip("/")
        self.cgroups.mkdir(rel)
        for subsystem, files in pod_cgroup_values(pod).items():
            for name, value in files.items():
                self.cgroups.write(subsystem, rel, name, value)
        config = self.client.sandbox_config(pod, self.cgroup_root, log_directory=log_directory)
        return RunningPod(pod, self.client.run_pod_sandbox(config), config, rel)

    def create_container(self, rp: RunningPod, name: str, image: str, command: Sequence[str] = (),
                         env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                         mounts: Sequence[cri.Mount] = ()) -> str:
        config = self.client.container_config(rp.pod, name, image, command, env, args=args, mounts=mounts,
                                              log_path=f"{name}.log" if rp.config.log_directory else "")
        cid = self.client.create_container(rp.sandbox_id, config, rp.config)
        rp.containers[name] = cid
        return cid

    def start_container(self, rp: RunningPod, name: str, image: str, command: Sequence[str] = (),
                        env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                        mounts: Sequence[cri.Mount] = ()) -> str:
        cid = self.create_container(rp, name, image, command, env, args, mounts)
        self.client.start_container(cid)
        return cid

    def delete_pod(self, rp: RunningPod) -> None:
        """Containers, sandbox, then the pod cgroup (the kubelet removes it once the sandbox is gone)."""
        self.client.remove_pod(rp.sandbox_id)
        self.cgroups.rmdir(rp.cgroup_dir)
