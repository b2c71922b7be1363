"""Pod churn: BestEffort pods whose cgroup dirs are made and removed as the kubelet would, on a fake tree
(doubles/fakehost.py). Shared by bench/churn_state.py and tests/unit/test_executor_cache_bounds.py."""

from __future__ import annotations

import os
import shutil

from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.states.informer import PodMeta, meta_for
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import pod_from_k8s

BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
         "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "2Gi"}}
# the files PodResources writes for a BE pod, with the kernel's defaults
FILES = {CgroupVersion.V1: {"cpu": {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1"},
                            "memory": {"memory.limit_in_bytes": "9223372036854771712"}},
         CgroupVersion.V2: {"cpu": {"cpu.weight": "100", "cpu.max": "max 100000"}, "memory": {"memory.max": "max"}}}


class Clock:
    """Frozen at 1000 s unless a caller moves ``t``."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def add_be_pod(host, cg: Cgroups, n: int) -> PodMeta:
    """A BestEffort batch pod with one container, its cgroup dirs made as the kubelet would (``host``: the
    FakeHost, for its cgroup version)."""
    cid = f"{n:064x}"
    pod = pod_from_k8s({
        "metadata": {"name": f"job-{n}", "namespace": "default", "uid": f"00000000-0000-0000-0000-{n:012d}",
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "job", "resources": BATCH}]},
        "status": {"phase": "Running", "qosClass": "BestEffort",
                   "containerStatuses": [{"name": "job", "containerID": f"containerd://{cid}"}]}})
    meta = meta_for(pod, cg.layout)
    for rel in (meta.cgroup_dir, *(r for _, r in meta.containers)):
        for sub, files in FILES[host.version].items():
            os.makedirs(cg.path(sub, rel), exist_ok=True)
            for f, v in files.items():
                with open(cg.path(sub, rel, f), "w") as fh:
                    fh.write(v + "\n")
    return meta


def remove_pod(cg: Cgroups, meta: PodMeta) -> None:
    """The kubelet removing the pod's cgroups (every hierarchy)."""
    for sub in ("cpu", "memory"):
        shutil.rmtree(cg.path(sub, meta.cgroup_dir), ignore_errors=True)


def view(metas) -> NodeView:
    slo, _ = merge_node_slo_spec({})
    return NodeView(tuple(metas), slo, (), None, NodeInfo("n"))  # type: ignore[arg-type]
