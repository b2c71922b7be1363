"""The test suite's one pod builder and one HostPaths factory.

``pod_object`` builds a Pod in Kubernetes JSON (what the kubelet, the API server and a pods file give the agent);
tests that need the agent's ``Pod`` pass it to ``koordlet.states.pod.pod_from_k8s``. ``host_paths`` gives this
host's real roots, with any of them replaced (a test cgroup tree, a missing directory).
"""

from __future__ import annotations

from typing import Any

from koordlet.host.cgroup import SCOPE_PREFIX
from koordlet.host.paths import HostPaths

_OMIT: Any = object()


def host_paths(cgroup_root: str = "/sys/fs/cgroup", *, sys_root: str = "/sys", sys_fs_root: str = "/sys/fs",
               proc_root: str = "/proc", var_run_root: str = "/var/run", run_root: str = "/run",
               var_lib_kubelet: str = "/var/lib/kubelet") -> HostPaths:
    """This host's roots as the agent sees them in host mode; ``cgroup_root`` is the one tests usually move."""
    return HostPaths(cgroup_root, sys_root, sys_fs_root, proc_root, var_run_root, run_root, var_lib_kubelet)


def pod_object(uid: str | None, name: str, *, namespace: str = "default", qos: str | None = "Burstable",
               containers: dict[str, str] | None = None, labels: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, runtime: str = "containerd",
               priority: int | None = None, phase: str | None = "Running",
               resources: dict[str, dict] | None = None, spec_containers: list[dict] | None = None,
               init_containers: list[dict] | None = None, node: str | None = None, pod_ip: str | None = None,
               host_network: bool | None = None, deleting: str | None = None,
               statuses: bool = True, api_version: bool = True, labels_key: bool = True) -> dict:
    """A Pod in Kubernetes JSON.

    ``containers`` maps container name to runtime id (``<runtime>://<id>`` in ``containerStatuses``; an id that
    already has a scheme is kept as it is); ``resources`` maps a container name to its ``resources``;
    ``spec_containers`` replaces ``spec.containers`` wholesale (extra fields, containers without a status).
    ``None`` leaves a field out (``uid``, ``qos`` → ``status.qosClass``, ``phase``, ``annotations``, ...), as
    a sparse object from a peer would.
    """
    assert runtime in SCOPE_PREFIX, runtime
    containers = containers or {}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        metadata["uid"] = uid
    if labels_key or labels:
        metadata["labels"] = dict(labels or {})
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if deleting is not None:
        metadata["deletionTimestamp"] = deleting
    spec: dict[str, Any] = {}
    if node is not None:
        spec["nodeName"] = node
    if spec_containers is not None:
        spec["containers"] = spec_containers
    else:
        spec["containers"] = [{"name": n, **({"resources": resources[n]} if resources and n in resources else {})}
                              for n in containers]
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if host_network is not None:
        spec["hostNetwork"] = host_network
    if priority is not None:
        spec["priority"] = priority
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if qos is not None:
        status["qosClass"] = qos
    if pod_ip is not None:
        status["podIP"] = pod_ip
    if statuses and containers:
        status["containerStatuses"] = [{"name": n, "containerID": cid if "://" in cid else f"{runtime}://{cid}"}
                                       for n, cid in containers.items()]
    elif statuses and spec_containers is None:
        status["containerStatuses"] = []
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"} if api_version else {}
    obj.update({"metadata": metadata, "spec": spec, "status": status})
    return obj
