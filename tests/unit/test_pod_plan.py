"""One pod-settings decision (koordlet.rules.pod_plan): the periodic reconcile and the NRI hooks, fed the same pod,
give its cgroups the same values, field by field.

The reconciler path is the pod-resources strategy writing through an executor into one cgroup tree; the NRI path is
the hooks' RunPodSandbox (the pod dir, through an executor into a second tree) and CreateContainer (each container's
adjustment, against a runtime that has set nothing yet). The pods cover what the decision reads: the class pools,
a scheduler's pin (resource-status), batch resources from the spec and from the annotation only, a refused
annotation, and a pod with an unstarted container.
"""

from __future__ import annotations

import json

import pytest

from koordlet._proto.nri import api_pb2 as api
from koordlet.host.cgroup import KubeQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.states.informer import meta_for
from koordlet.states.pod import pod_from_k8s
from koordlet.writer.executor import Executor
from nri_plugin.hooks import Hooks
from tests.builders import node_view, pod_object
from tests.hookfeatures import hook_features
from tests.unit.test_nri_hooks import resources
from tests.unit.test_qos_rules import BATCH
from tests.unit.test_qos_strategies import fake_host, mkcg, value

POOLS = {0: (0, 1, 2, 3), 1: (6, 7)}
STATUS = "scheduling.koordinator.sh/resource-status"
SPEC = "node.koordinator.sh/extended-resource-spec"
QOS_LABEL = "koordinator.sh/qosClass"
LIMITED = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
BATCH_2 = {"requests": {"kubernetes.io/batch-cpu": "250", "kubernetes.io/batch-memory": "512Mi"},
           "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}
#: (kernel file, its subsystem, the adjustment field that carries it)
FIELDS = (("cpuset.cpus", "cpuset", "cpus"), ("cpu.shares", "cpu", "shares"), ("cpu.cfs_quota_us", "cpu", "quota"),
          ("memory.limit_in_bytes", "memory", "memory"))
UNTOUCHED = {"cpuset.cpus": "0-7", "cpu.shares": "1024", "cpu.cfs_quota_us": "-1",
             "memory.limit_in_bytes": "9223372036854771712"}         # what mkcg puts there: nobody wrote


def k8s(uid: str, label: str | None, kube: str, resources: dict[str, dict], annotations: dict[str, str] | None = None,
        started: tuple[str, ...] | None = None) -> dict:
    names = list(resources)
    started = tuple(names) if started is None else started
    obj = pod_object(uid, uid, namespace="ns", qos=kube, labels={QOS_LABEL: label} if label else {},
                     annotations=annotations or {}, resources=resources,
                     containers={n: f"{uid}-{n}".replace("-", "").ljust(64, "0") for n in started})
    if len(started) < len(names):         # a container of the spec that has no status yet
        obj["spec"]["containers"] = [{"name": n, "resources": resources[n]} for n in names]
    return obj


PODS = [
    pytest.param(k8s("u-ls", "LS", "Burstable", {"app": LIMITED}), id="LS: the shared pools"),
    pytest.param(k8s("u-lsr", "LSR", "Guaranteed", {"app": LIMITED}, {STATUS: '{"cpuset": "4-5"}'}),
                 id="LSR pinned: its cpuset, quota unlimited"),
    pytest.param(k8s("u-be", "BE", "BestEffort", {"a": BATCH, "b": BATCH_2}), id="BE: batch from the spec"),
    pytest.param(k8s("u-be-ann", "BE", "BestEffort", {"a": {}, "b": {}},
                     {SPEC: json.dumps({"containers": {"a": BATCH, "b": BATCH_2}})}),
                 id="BE: batch from the annotation only"),
    pytest.param(k8s("u-be-late", "BE", "BestEffort", {"a": BATCH, "b": BATCH_2}, started=("a",)),
                 id="BE: one container not started yet"),
    pytest.param(k8s("u-bad", "LSR", "Guaranteed", {"app": LIMITED}, {STATUS: '{"cpuset": 7}'}),
                 id="refused resource-status: not pinned"),
    pytest.param(k8s("u-none", None, "BestEffort", {"app": {}}), id="no class label, BestEffort"),
]


def tree(tmp_path, name: str, meta) -> tuple[Executor, object]:
    _paths, cg, files = fake_host(tmp_path / name, files=())
    for q in KubeQOS:
        mkcg(cg, cg.layout.qos_dir(q), files)
    mkcg(cg, meta.cgroup_dir, files)
    for _, rel in meta.containers:
        mkcg(cg, rel, files)
    return Executor(cg), cg


def sandbox(meta) -> api.PodSandbox:
    pod = meta.pod
    sb = api.PodSandbox(id="sb-" + pod.uid, name=pod.name, uid=pod.uid, namespace=pod.namespace,
                        labels=dict(pod.labels), annotations=dict(pod.annotations))
    sb.linux.cgroup_parent = "/" + meta.cgroup_dir
    return sb


def written(cg, sub: str, rel: str, f: str) -> str | None:
    """The file's value when someone wrote it, else None (mkcg's default left in place)."""
    v = value(cg, sub, rel, f)
    return None if v == UNTOUCHED[f] else v


@pytest.mark.parametrize("obj", PODS)
def test_the_reconciler_and_the_nri_hooks_give_a_pod_the_same_cgroup_values(tmp_path, obj):
    meta = meta_for(pod_from_k8s(obj), fake_host(tmp_path / "layout", files=())[1].layout)
    view = node_view(pods=(meta,), ls_pools=POOLS)

    rec_ex, rec_cg = tree(tmp_path, "reconciler", meta)
    PodResources().reconcile(view, rec_ex)

    nri_ex, nri_cg = tree(tmp_path, "nri", meta)
    hooks = Hooks(hook_features(), nri_cg.layout, lambda: view, executor=nri_ex)
    sb = sandbox(meta)
    hooks.run_pod_sandbox(sb)
    checked = 0
    for f, sub, _ in FIELDS:
        assert written(nri_cg, sub, meta.cgroup_dir, f) == written(rec_cg, sub, meta.cgroup_dir, f), f
    for container, rel in meta.containers:
        ctr = api.Container(id=container.id, pod_sandbox_id=sb.id, name=container.name,
                            state=api.CONTAINER_CREATED)
        answer = {k: str(v) for k, v in resources(hooks.create_container(sb, ctr)).items()}
        for f, sub, field in FIELDS:
            assert answer.get(field) == written(rec_cg, sub, rel, f), (container.name, f)
            checked += 1
    assert checked or not meta.containers
