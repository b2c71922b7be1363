"""The test suite's one pod builder, one NodeView builder and one HostPaths factory.

``pod_object`` builds a Pod in Kubernetes JSON (what the kubelet, the API server and a pods file give the agent);
``agent_pod`` is the same pod as the agent parses it (``pod_from_k8s``) and ``pod_meta`` that pod with its cgroup
dirs, so a test that works on the agent's side still starts from the object a peer would send. ``node_view`` is what
a strategy or an NRI hook decides from, with only what the test varies given. ``host_paths`` gives this host's real
roots, with any of them replaced (a test cgroup tree, a missing directory).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from koordlet.base import wire
from koordlet.host.cgroup import SCOPE_PREFIX, Layout
from koordlet.host.paths import HostPaths
from koordlet.host.topology import Topology
from koordlet.states.hostapps import HostApp
from koordlet.states.informer import PodMeta, meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import Pod, pod_from_k8s


def host_paths(cgroup_root: str = "/sys/fs/cgroup", *, sys_root: str = "/sys", sys_fs_root: str = "/sys/fs",
               proc_root: str = "/proc", var_run_root: str = "/var/run", run_root: str = "/run",
               var_lib_kubelet: str = "/var/lib/kubelet") -> HostPaths:
    """This host's roots as the agent sees them in host mode; ``cgroup_root`` is the one tests usually move."""
    return HostPaths(cgroup_root, sys_root, sys_fs_root, proc_root, var_run_root, run_root, var_lib_kubelet)


def pod_object(uid: str | None, name: str, *, namespace: str = "default", qos: str | None = "Burstable",
               qos_class: str | None = None, containers: dict[str, str] | None = None,
               labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
               runtime: str = "containerd", priority: int | None = None, phase: str | None = "Running",
               created: str | None = None, resources: dict[str, dict] | None = None,
               spec_containers: list[dict] | None = None, init_containers: list[dict] | None = None,
               node: str | None = None, pod_ip: str | None = None, host_network: bool | None = None,
               deleting: str | None = None, owners: list[dict] | None = None, conditions: list[dict] | None = None,
               statuses: bool = True, container_status: dict | None = None, api_version: bool = True,
               labels_key: bool = True, status_key: bool = True) -> dict:
    """A Pod in Kubernetes JSON.

    ``qos`` is the Kubernetes QoS class (``status.qosClass``), ``qos_class`` Koordinator's (the
    ``koordinator.sh/qosClass`` label, after ``labels``). ``containers`` maps container name to runtime id
    (``<runtime>://<id>`` in ``containerStatuses``; an id that already has a scheme is kept as it is);
    ``resources`` maps a container name to its ``resources`` (a name not in ``containers``: a container in the spec
    only, not started); ``spec_containers`` replaces ``spec.containers`` wholesale (extra fields, containers without
    a status); ``container_status`` adds its fields (``ready``, ``restartCount``, ...) to every container's status.
    ``created`` is ``metadata.creationTimestamp``, ``owners`` ``metadata.ownerReferences``, ``conditions``
    ``status.conditions``. ``None`` leaves a field out (``uid``, ``qos``, ``phase``, ``annotations``, ...), as a
    sparse object from a peer would; ``status_key=False`` leaves out ``status`` itself (a pod as created, before any
    status). The object shares no dict or list with the arguments: a test or a double may change it without changing
    the next one.
    """
    assert runtime in SCOPE_PREFIX, runtime
    containers = containers or {}
    if qos_class is not None:
        labels = {**(labels or {}), wire.LABEL_QOS_CLASS: qos_class}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        metadata["uid"] = uid
    if labels_key or labels:
        metadata["labels"] = dict(labels or {})
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if created is not None:
        metadata["creationTimestamp"] = created
    if deleting is not None:
        metadata["deletionTimestamp"] = deleting
    if owners is not None:
        metadata["ownerReferences"] = copy.deepcopy(owners)
    spec: dict[str, Any] = {}
    if node is not None:
        spec["nodeName"] = node
    if spec_containers is not None:
        spec["containers"] = copy.deepcopy(spec_containers)
    else:
        names = [*containers, *(n for n in resources or {} if n not in containers)]
        spec["containers"] = [{"name": n, **({"resources": copy.deepcopy(resources[n])}
                                             if resources and n in resources else {})}
                              for n in names]
    if init_containers is not None:
        spec["initContainers"] = copy.deepcopy(init_containers)
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
    if conditions is not None:
        status["conditions"] = copy.deepcopy(conditions)
    if statuses and containers:
        status["containerStatuses"] = [{"name": n, "containerID": cid if "://" in cid else f"{runtime}://{cid}",
                                        **copy.deepcopy(container_status or {})}
                                       for n, cid in containers.items()]
    elif statuses and spec_containers is None:
        status["containerStatuses"] = []
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"} if api_version else {}
    obj.update({"metadata": metadata, "spec": spec})
    if status_key:
        obj["status"] = status
    else:
        assert not status, f"status_key=False with status fields {status}"
    return obj


def agent_pod(uid: str, name: str, **fields: Any) -> Pod:
    """The pod ``pod_object(uid, name, **fields)`` describes, as the agent parses it."""
    return pod_from_k8s(pod_object(uid, name, **fields))


def pod_meta(uid: str, name: str, *, layout: Layout | None = None, cgroup_dir: str = "", **fields: Any) -> PodMeta:
    """The pod ``pod_object(uid, name, **fields)`` describes with its cgroup dirs: computed by ``layout`` as the
    informer does, or, without one, ``cgroup_dir`` and no container dirs (a test that never touches a cgroup)."""
    pod = agent_pod(uid, name, **fields)
    if layout is not None:
        assert not cgroup_dir, "layout computes the cgroup dir"
        return meta_for(pod, layout)
    return PodMeta(pod, cgroup_dir, ())


def node_view(*, pods: Iterable[PodMeta] = (), slo: NodeSLOSpec | None = None, host_apps: Iterable[HostApp] = (),
              topology: Topology | None = None, node: NodeInfo | None = None, **fields: Any) -> NodeView:
    """A NodeView with what the test varies; the rest as on a node where nothing is set: the NodeSLO defaults, no
    host applications, a Node named ``n`` with no labels, annotations or resources, and no topology (a strategy
    that reads none is given none, so one that starts reading it fails loudly). ``fields`` are NodeView's others
    (``ls_pools``, ``now``, ...)."""
    return NodeView(pods=tuple(pods), slo=slo if slo is not None else merge_node_slo_spec(None)[0],
                    host_apps=tuple(host_apps), topology=topology,  # type: ignore[arg-type]
                    node=node if node is not None else NodeInfo("n"), **fields)
