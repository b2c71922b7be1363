"""What the NRI bench sends and the view its plugin answers from: PodSandbox/Container messages as containerd
sends them and a NodeSLO with the QoS defaults. The bench's own copy (bench imports nothing from tests/); the
same shapes as the NRI hook tests use, so the bench times the paths the tests check."""

from __future__ import annotations

import json

from koordlet._proto.nri import api_pb2 as api
from koordlet.states.nodeslo.merge import merge_node_slo_spec

POOLS = {0: (0, 1, 2, 3), 1: (6, 7)}      # cpu-shared-pools: NUMA node -> CPUs
SPEC = "node.koordinator.sh/extended-resource-spec"
STATUS = "scheduling.koordinator.sh/resource-status"
BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
         "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "2Gi"}}


def sandbox(uid: str, qos: str | None = None, kube: str = "burstable", annotations=None) -> api.PodSandbox:
    """A PodSandbox as containerd sends it (the cgroupfs parent encodes the Kubernetes QoS class)."""
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    parent = f"/kubepods/{kube}/pod{uid}" if kube != "guaranteed" else f"/kubepods/pod{uid}"
    pod = api.PodSandbox(id="sb-" + uid, name=uid, uid=uid, namespace="ns", labels=labels,
                         annotations=dict(annotations or {}))
    pod.linux.cgroup_parent = parent
    return pod


def container(pod: api.PodSandbox, name: str = "c0", shares: int = 2, cpus: str = "",
              state: int = api.CONTAINER_CREATED) -> api.Container:
    ctr = api.Container(id=f"{pod.uid}-{name}".replace("-", "")[:60].ljust(64, "0"), pod_sandbox_id=pod.id,
                        name=name, state=state)
    ctr.linux.resources.cpu.shares.value = shares
    ctr.linux.resources.cpu.cpus = cpus
    return ctr


def be_spec(*names: str) -> dict[str, str]:
    return {SPEC: json.dumps({"containers": dict.fromkeys(names, BATCH)})}


def slo():
    merged, errors = merge_node_slo_spec({"resourceQOSStrategy": {}})
    assert errors == []
    return merged
