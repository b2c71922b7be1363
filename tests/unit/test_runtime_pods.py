"""What the runtime tells the NRI plugin feeds the standalone pod view.

A standalone agent without a pods file knows its pods only from the cgroup tree. Without the runtime's facts (1) the
NRI hooks would use that label-less record instead of the sandbox's labels and annotations (a BE container would get
no batch adjustment, a pinned LSR container the shared pool), and (2) the reconciler would count the sandbox (pause)
container's cgroup dir as an application container with no limits, loosening the pod's batch quota and memory limit
to unlimited right after the hook had set them. The real-runtime scenarios are in tests/realruntime.
"""

from __future__ import annotations

import json

from koordlet._proto.nri import api_pb2 as api
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.rules.resources import Settings
from koordlet.states.runtimepods import MAX_SANDBOXES, RuntimePod, RuntimePods
from koordlet.states.standalone import StandalonePodSource
from nri_plugin.hooks import Hooks
from tests.builders import node_view, pod_object
from tests.fakehost import CgroupValues, FakeHost
from tests.hookfeatures import hook_features
from tests.unit.test_nri_hooks import POOLS, be_spec, container, resources, sandbox
from tests.unit.test_qos_rules import BATCH

APP, PAUSE, LATE = "a" * 64, "f" * 64, "c" * 64
UID = "0123abcd-0000-4000-8000-000000000001"
POD_QUOTA = 2000 * 100_000 // 1000                 # BATCH: batch-cpu limit 2000 milli, one container
POD_MEMORY = 2 * 1024**3                           # BATCH: batch-memory limit 2Gi


def be_host(tmp_path) -> tuple[FakeHost, Cgroups]:
    """A BE pod as the kubelet and runc leave it on a cgroupfs v1 host: the sandbox's dir and one app's."""
    host = FakeHost(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
    host.add_pod(KubeQOS.BESTEFFORT, UID, containers={PAUSE: CgroupValues(), APP: CgroupValues()})
    return host, Cgroups.detect(host.paths)


def told(sb: api.PodSandbox, **containers: str) -> RuntimePod:
    return RuntimePod(UID, sb.id, sb.name, sb.namespace, dict(sb.labels), dict(sb.annotations),
                      {cid: name for name, cid in containers.items()})


def be_sandbox() -> api.PodSandbox:
    sb = sandbox(UID, "BE", "besteffort", be_spec("app"), name="batch-job")
    sb.id = PAUSE
    return sb


def test_runtime_names_the_pod_its_containers_and_its_sandbox(tmp_path):
    _host, cgroups = be_host(tmp_path)
    runtime = RuntimePods()
    runtime.sandbox(told(be_sandbox()))
    assert runtime.container(UID, APP, "app")
    (meta,) = StandalonePodSource(cgroups, runtime=runtime)()
    assert meta.described and meta.pod.key == "ns/batch-job" and meta.pod.qos_class == "BE"
    ((app, _rel),) = meta.containers                      # the pause container's dir is not a container
    assert (app.name, app.id, app.known) == ("app", APP, True)
    assert app.resources.batch_cpu_limit == 2000 and app.resources.batch_memory_limit == POD_MEMORY
    plan = PodResources().plan(meta, node_view(ls_pools=POOLS))
    pod_s, per_container = plan.pod, list(zip((rel for _, rel in meta.containers), plan.containers, strict=True))
    assert (pod_s.cpu_shares, pod_s.cfs_quota, pod_s.memory_limit) == (512, POD_QUOTA, POD_MEMORY)
    assert [(s.cfs_quota, s.memory_limit) for _, s in per_container] == [(POD_QUOTA, POD_MEMORY)]


def test_unnamed_child_dirs_never_loosen_the_pod_batch_limits(tmp_path):
    """(2) above: without the runtime's word, the sandbox's dir is one more child with no resources. The pod sums
    are then unknown: the reconciler leaves the pod cgroup alone rather than set quota and memory to -1."""
    _host, cgroups = be_host(tmp_path)
    runtime = RuntimePods()
    runtime.sandbox(told(be_sandbox()))                   # the pod is named, its containers are not (yet)
    (meta,) = StandalonePodSource(cgroups, runtime=runtime)()
    assert [c.known for c, _ in meta.containers] == [False]
    plan = PodResources().plan(meta, node_view(ls_pools=POOLS))
    pod_s, per_container = plan.pod, list(zip((rel for _, rel in meta.containers), plan.containers, strict=True))
    assert pod_s == Settings()
    assert [s for _, s in per_container] == [Settings()]

    (bare,) = StandalonePodSource(cgroups)()              # nothing but the cgroup tree
    assert not bare.described and {c.known for c, _ in bare.containers} == {False}
    assert PodResources().plan(bare, node_view(ls_pools=POOLS)).pod == Settings()


def test_a_pods_file_spec_tells_the_sandbox_dir_from_app_containers(tmp_path):
    """With the pod's spec known and every regular container found by id, the unnamed child is not an app."""
    _host, cgroups = be_host(tmp_path)
    f = tmp_path / "pods.json"
    f.write_text(json.dumps([pod_object(UID, "batch-job", qos="BestEffort", containers={"app": APP},
                                        labels={"koordinator.sh/qosClass": "BE"}, resources={"app": BATCH})]))
    (meta,) = StandalonePodSource(cgroups, str(f))()
    assert sorted((c.name, c.known) for c, _ in meta.containers) == [("app", True), (PAUSE[:12], False)]
    pod_s = PodResources().plan(meta, node_view(ls_pools=POOLS)).pod
    assert (pod_s.cfs_quota, pod_s.memory_limit) == (POD_QUOTA, POD_MEMORY)


def test_a_malformed_spec_annotation_costs_only_that_pods_batch_settings(tmp_path, caplog):
    _host, cgroups = be_host(tmp_path)
    runtime = RuntimePods()
    sb = be_sandbox()
    sb.annotations["node.koordinator.sh/extended-resource-spec"] = "[" * 5000
    runtime.sandbox(told(sb, app=APP))
    source = StandalonePodSource(cgroups, runtime=runtime)
    (meta,) = source()
    source()
    assert meta.pod.qos_class == "BE" and [c.known for c, _ in meta.containers] == [False]
    assert PodResources().plan(meta, node_view(ls_pools=POOLS)).pod == Settings()
    assert sum("extended-resource-spec" in r.getMessage() for r in caplog.records) == 1     # once per pod


def test_hooks_use_the_sandbox_over_a_cgroup_only_record(tmp_path):
    """(1) above: the pod view has the pod from the cgroup tree only (no labels yet); CreateContainer must still
    decide from the sandbox's labels and annotations, as RunPodSandbox did."""
    _host, cgroups = be_host(tmp_path)
    (bare,) = StandalonePodSource(cgroups)()
    v = node_view(pods=[bare], ls_pools=POOLS)
    runtime = RuntimePods()
    woken = []
    h = Hooks(hook_features(), cgroups.layout, lambda: v, runtime=runtime, on_runtime_news=lambda: woken.append(1))
    sb = be_sandbox()
    adjust = h.create_container(sb, container(sb, "app", APP))
    assert resources(adjust) == {"shares": 512, "quota": POD_QUOTA, "memory": POD_MEMORY}
    assert woken and runtime.get(UID) is not None and runtime.get(UID).containers == {APP: "app"}   # type: ignore[union-attr]
    h.remove_pod_sandbox(sb)
    assert runtime.get(UID) is None


def test_synchronize_replaces_what_the_runtime_said_before(tmp_path):
    _host, cgroups = be_host(tmp_path)
    runtime = RuntimePods()
    runtime.sandbox(RuntimePod("gone-uid", "x" * 64, "old", "ns"))
    h = Hooks(hook_features(), cgroups.layout, lambda: node_view(ls_pools=POOLS), runtime=runtime)
    sb = be_sandbox()
    h.synchronize([sb], [container(sb, "app", APP, state=api.CONTAINER_RUNNING)])
    assert runtime.get("gone-uid") is None
    assert runtime.get(UID).containers == {APP: "app"}                                      # type: ignore[union-attr]


def test_the_store_is_bounded():
    runtime = RuntimePods()
    for i in range(MAX_SANDBOXES + 10):
        runtime.sandbox(RuntimePod(f"uid-{i}", f"sb-{i}", "p", "ns"))
    assert len(runtime) == MAX_SANDBOXES and runtime.get("uid-0") is None and runtime.get(f"uid-{MAX_SANDBOXES}")
