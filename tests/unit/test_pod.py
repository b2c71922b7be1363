import pytest

from koordlet.host.cgroup import KubeQOS
from koordlet.states.pod import kube_qos_of, pod_from_k8s
from tests.builders import pod_object


def res(req=None, lim=None):
    return {"resources": {"requests": req or {}, "limits": lim or {}}}


def test_kube_qos_rules():
    assert kube_qos_of({"containers": [res()]}) is KubeQOS.BESTEFFORT
    assert kube_qos_of({"containers": [res(lim={"cpu": "1", "memory": "1Gi"})]}) is KubeQOS.GUARANTEED
    assert kube_qos_of({"containers": [res({"cpu": "1000m", "memory": "1024Mi"},
                                           {"cpu": "1", "memory": "1Gi"})]}) is KubeQOS.GUARANTEED
    assert kube_qos_of({"containers": [res({"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"})]}) is KubeQOS.BURSTABLE
    assert kube_qos_of({"containers": [res(lim={"cpu": "1", "memory": "1Gi"}), res()]}) is KubeQOS.BURSTABLE
    # batch resources alone leave a pod BestEffort (that is how koordinator BE pods are shaped)
    assert kube_qos_of({"containers": [res({"kubernetes.io/batch-cpu": "1000"})]}) is KubeQOS.BESTEFFORT


def test_classes_and_containers():
    obj = pod_object("u-1", "web", containers={"app": "a" * 64, "side": "b" * 64}, qos="Guaranteed")
    pod = pod_from_k8s(obj)
    assert pod.kube_qos is KubeQOS.GUARANTEED
    assert pod.qos_class == "LSR" and pod.priority_class == "koord-prod"
    assert [(c.name, c.runtime, c.id) for c in pod.containers] == [("app", "containerd", "a" * 64),
                                                                  ("side", "containerd", "b" * 64)]
    be = pod_from_k8s(pod_object("u-2", "batch", qos="BestEffort", labels={"koordinator.sh/qosClass": "BE"}))
    assert be.raw_qos_class == "BE" and be.priority_class == "koord-batch"
    mid = pod_from_k8s(pod_object("u-3", "mid", priority=7100))
    assert mid.priority_class == "koord-mid" and mid.qos_class == "LS"
    bogus = pod_from_k8s(pod_object("u-4", "x", labels={"koordinator.sh/qosClass": "ls"}, qos="BestEffort"))
    assert bogus.raw_qos_class == "" and bogus.qos_class == "BE"      # case-sensitive, falls back


def test_batch_cpu_request():
    obj = pod_object("u-5", "b", qos="BestEffort")
    obj["spec"]["containers"] = [res({"kubernetes.io/batch-cpu": "1500"}),
                                 res({"koordinator.sh/batch-cpu": "500"})]
    assert pod_from_k8s(obj).batch_cpu_request_milli == 2000


@pytest.mark.parametrize("mutate,needle", [
    (lambda o: o["metadata"].pop("uid"), "pod uid"),
    (lambda o: o["metadata"].update(uid="../../etc"), "pod uid"),
    (lambda o: o["status"]["containerStatuses"][0].update(containerID="containerd://../x"), "container id"),
    (lambda o: o["status"].update(qosClass="Gold"), "Gold"),
    (lambda o: o["metadata"].update(labels={"a": 1}), "metadata.labels"),
    (lambda o: o["spec"].update(priority="high"), "spec.priority"),
])
def test_malformed_pods_name_the_pod_and_field(mutate, needle):
    obj = pod_object("u-6", "broken", namespace="ns1", containers={"app": "c" * 64})
    mutate(obj)
    with pytest.raises(ValueError) as e:
        pod_from_k8s(obj)
    assert "pod ns1/broken" in str(e.value) and needle in str(e.value)


def test_pod_requests_created_and_terminating():
    obj = pod_object("11111111-2222-3333-4444-555555555555", "web")
    obj["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
    obj["spec"] = {
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                       {"name": "b", "resources": {"requests": {"cpu": "0.5"}}}],
        # an init container needing more than the sum raises the pod's request; overhead comes on top
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}],
        "overhead": {"cpu": "100m", "memory": "64Mi"}}
    pod = pod_from_k8s(obj)
    assert (pod.cpu_request_milli, pod.memory_request_bytes) == (1100, (1024 + 64) * 2**20)
    assert pod.created == 1767323045.0          # 2026-01-02T03:04:05Z
    assert not pod.terminating
    obj["metadata"]["deletionTimestamp"] = "2026-01-02T04:00:00Z"
    assert pod_from_k8s(obj).terminating
    del obj["metadata"]["deletionTimestamp"]
    obj["status"]["phase"] = "Succeeded"
    assert pod_from_k8s(obj).terminating
    obj["metadata"]["creationTimestamp"] = "yesterday"
    with pytest.raises(ValueError, match="creationTimestamp"):
        pod_from_k8s(obj)
