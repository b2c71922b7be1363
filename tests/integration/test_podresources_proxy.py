"""PodResources proxy end to end: a fake kubelet upstream and a Multus-like client downstream, real gRPC over unix
sockets, the proxy's own server and cache in between."""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from functools import partial

import grpc
import pytest

from doubles import multus
from doubles.kubelet_podresources import FakeKubelet
from koordlet._proto.podresources import api_pb2 as pb
from koordlet._proto.podresources import api_pb2_grpc as pb_grpc
from koordlet.base import wire
from koordlet.ops.metrics import AgentMetrics
from koordlet.podresources.proxy import PodResourcesProxy, ProxyServer
from koordlet.podresources.upstream import KubeletPodResources
from koordlet.states.informer import PodMeta, PodsInformer
from koordlet.states.pod import pod_from_k8s
from tests.builders import pod_object

GPU0 = "GPU-5b1f0000-0000-0000-0000-000000000000"
PF, VF_A, VF_B, VF_C = "0000:09:00.0", "0000:09:00.4", "0000:09:00.5", "0000:09:00.6"


def vf_alloc(*vfs):
    return {"rdma": [{"minor": 0, "id": PF, "resources": {wire.RESOURCE_RDMA: "1"},
                      "extension": {"vfs": [{"minor": -1, "busID": v} for v in vfs]}}]}


# pods as the API server lists them in namespace ml: containers asking through their limits, no status yet
pod = partial(pod_object, namespace="ml", qos=None, statuses=False, api_version=False, labels_key=False)
TRAIN = pod("11111111-2222-3333-4444-555555555555", "train",
            spec_containers=[{"name": "app", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                             {"name": "nic", "resources": {"limits": {wire.RESOURCE_RDMA: "1"}}}],
            init_containers=[{"name": "mesh", "resources": {"limits": {}}, "restartPolicy": "Always"}],
            annotations={wire.ANNOTATION_DEVICE_ALLOCATED: json.dumps(
                {"gpu": [{"minor": 0, "id": GPU0, "resources": {}}], **vf_alloc(VF_A)})})
SERVE = pod("22222222-2222-3333-4444-555555555555", "serve",
            spec_containers=[{"name": "app", "resources": {"limits": {wire.RESOURCE_RDMA: "1"}}}],
            annotations={wire.ANNOTATION_DEVICE_ALLOCATED: json.dumps(vf_alloc(VF_B))})
PLAIN = pod("33333333-2222-3333-4444-555555555555", "plain",
            spec_containers=[{"name": "app", "resources": {"limits": {}}}], annotations={})


class Harness:
    def __init__(self, view_objects, kubelet_objects=None, max_age=1.0, min_interval=1.0):
        self.dir = tempfile.mkdtemp(prefix="podres-")
        self.kubelet = FakeKubelet(os.path.join(self.dir, "kubelet.sock"),
                                   list(view_objects if kubelet_objects is None else kubelet_objects),
                                   devices={("ml", "train", "app"): {"openshift.io/sriov": ["0000:af:00.2"]}})
        self.view_objects = list(view_objects)
        self.informer = PodsInformer(lambda: [PodMeta(pod_from_k8s(o), "", ()) for o in self.view_objects], 60, "test")
        self.informer.sync()
        self.stop_event = threading.Event()
        self.metrics = AgentMetrics("node-a")
        self.upstream = KubeletPodResources(self.kubelet.socket_path)
        self.proxy = PodResourcesProxy(self.upstream, lambda: self.informer.pods, self.metrics,
                                       sync_pods=self.informer.sync_now, max_age=max_age, min_interval=min_interval)
        self.proxy_dir = os.path.join(self.dir, "proxy")
        self.server = ProxyServer(self.proxy, self.proxy_dir, self.metrics)

    def start(self, kubelet=True):
        if kubelet:
            self.kubelet.start()
        threading.Thread(target=self.informer.run, args=(self.stop_event,), daemon=True).start()
        self.server.start()
        return self

    @property
    def socket(self):
        return self.server.socket_path

    def metric(self, name, **labels):
        return self.metrics.registry.get_sample_value(name, {"node": "node-a", **labels})

    def close(self):
        self.stop_event.set()
        self.server.stop()
        self.kubelet.stop()
        self.upstream.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def harness():
    made = []

    def make(*args, **kwargs):
        made.append(Harness(*args, **kwargs))
        return made[-1]
    yield make
    for h in made:
        h.close()


def test_multus_sees_each_containers_devices_through_our_socket(harness):
    h = harness([TRAIN, SERVE, PLAIN]).start()
    mode = stat.S_IMODE(os.stat(h.socket).st_mode)
    assert mode == 0o660 and stat.S_ISSOCK(os.stat(h.socket).st_mode)
    response = multus.list_pods(h.socket)       # :authority is the socket path, as grpc-go sends it
    pods = {p.name: p for p in response.pod_resources}
    train = {c.name: {d.resource_name: list(d.device_ids) for d in c.devices} for c in pods["train"].containers}
    assert train == {"mesh": {}, "app": {"nvidia.com/gpu": [GPU0], "openshift.io/sriov": ["0000:af:00.2"]},
                     "nic": {wire.RESOURCE_RDMA: [VF_A]}}
    assert multus.device_ids_for(h.socket, "ml", "serve", wire.RESOURCE_RDMA) == [VF_B]
    assert multus.resource_map(response, "ml", "plain") == {}
    assert h.metric("koordlet_pod_resources_proxy_requests_total", method="List", code="OK") == 2


def test_kubelet_away_serves_the_last_answer_plus_new_pods_from_annotations(harness, caplog):
    h = harness([TRAIN], min_interval=0.2, max_age=0.2).start()
    assert multus.device_ids_for(h.socket, "ml", "train", "openshift.io/sriov") == ["0000:af:00.2"]
    h.kubelet.stop()
    late = pod("44444444-2222-3333-4444-555555555555", "late",
               spec_containers=[{"name": "app", "resources": {"limits": {wire.RESOURCE_RDMA: "1"}}}],
               annotations={wire.ANNOTATION_DEVICE_ALLOCATED: json.dumps(vf_alloc(VF_C))})
    h.view_objects.append(late)
    h.informer.sync()
    time.sleep(0.3)
    with caplog.at_level(logging.WARNING, logger="koordlet.podresources"):
        for _ in range(3):
            response = multus.list_pods(h.socket)
            time.sleep(0.25)
    # the kubelet's devices for the pod it listed are still there, and the new pod's VF is listed
    assert multus.resource_map(response, "ml", "train")["openshift.io/sriov"] == ["0000:af:00.2"]
    assert multus.resource_map(response, "ml", "late") == {wire.RESOURCE_RDMA: [VF_C]}
    failures = [r for r in caplog.records if "kubelet PodResources List failed" in r.getMessage()]
    assert len(failures) == 1                     # logged once, not per call
    assert h.metric("koordlet_pod_resources_proxy_staleness_seconds") > 0.5
    assert h.metric("koordlet_pod_resources_proxy_upstream_calls_total", method="List", result="error") >= 2
    h.kubelet.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and h.metric("koordlet_pod_resources_proxy_staleness_seconds") > 0.3:
        multus.list_pods(h.socket)
        time.sleep(0.2)
    assert h.metric("koordlet_pod_resources_proxy_staleness_seconds") <= 0.3


def test_no_kubelet_ever_still_answers_from_the_pod_view(harness):
    h = harness([SERVE]).start(kubelet=False)
    assert multus.device_ids_for(h.socket, "ml", "serve", wire.RESOURCE_RDMA) == [VF_B]
    assert h.metric("koordlet_pod_resources_proxy_staleness_seconds") == -1
    with grpc.insecure_channel(f"unix://{h.socket}") as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.PodResourcesListerStub(channel).GetAllocatableResources(pb.AllocatableResourcesRequest(),
                                                                        timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_thousand_concurrent_lists_cost_at_most_one_kubelet_call_per_second(harness):
    h = harness([TRAIN, SERVE, PLAIN], max_age=0.0, min_interval=1.0).start()
    options = [("grpc.max_receive_message_length", multus.MAX_RECV)]
    with grpc.insecure_channel(f"unix://{h.socket}", options=options) as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        started = time.monotonic()
        pending = [stub.List.future(pb.ListPodResourcesRequest(), timeout=30) for _ in range(1000)]
        answers = [f.result() for f in pending]
        elapsed = time.monotonic() - started
    assert all(len(a.pod_resources) == 3 for a in answers)
    calls = [t for m, t in h.kubelet.calls if m == "List"]
    # at most one call a second, on the kubelet's own clock: spaced ≥ 0.99 s apart, so however long a loaded host
    # makes the thousand lists take, the calls inside that window number at most elapsed/0.99 + 1 (a call made
    # while the harness started, before the window, is not counted against it)
    during = [t for t in calls if t >= started]
    assert len(calls) >= 1 and len(during) <= int(elapsed / 0.99) + 1
    assert all(b - a >= 0.99 for a, b in itertools.pairwise(calls))


def test_a_pod_only_the_kubelet_knows_gets_the_pod_view_synced_first(harness):
    h = harness([PLAIN], kubelet_objects=[PLAIN, SERVE]).start()
    h.view_objects.append(SERVE)     # the source has it; the informer has not synced since
    assert "serve" not in {m.pod.name for m in h.informer.pods}
    assert multus.device_ids_for(h.socket, "ml", "serve", wire.RESOURCE_RDMA) == [VF_B]


def test_get_answers_merged_and_unknown_pods_as_the_kubelet_does(harness):
    h = harness([TRAIN]).start()
    with grpc.insecure_channel(f"unix://{h.socket}") as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        got = stub.Get(pb.GetPodResourcesRequest(pod_name="train", pod_namespace="ml"), timeout=10).pod_resources
        nic = next(c for c in got.containers if c.name == "nic")
        assert [(d.resource_name, list(d.device_ids)) for d in nic.devices] == [(wire.RESOURCE_RDMA, [VF_A])]
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(pb.GetPodResourcesRequest(pod_name="nope", pod_namespace="ml"), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == "pod nope in namespace ml not found"
        allocatable = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=10)
        assert list(allocatable.cpu_ids) == [0, 1]
    assert h.metric("koordlet_pod_resources_proxy_requests_total", method="Get", code="UNKNOWN") == 1


def test_answers_larger_than_grpc_pythons_default_4mib_pass(harness):
    h = harness([TRAIN])
    h.kubelet.devices[("ml", "train", "app")] = {"example.com/big": [f"dev-{i:060d}" for i in range(90_000)]}
    h.start()
    response = multus.list_pods(h.socket)
    assert response.ByteSize() > 5 * 2**20
    assert len(multus.resource_map(response, "ml", "train")["example.com/big"]) == 90_000


def test_socket_dir_writable_by_others_is_refused_and_a_stale_socket_replaced(harness):
    h = harness([PLAIN])
    os.makedirs(h.proxy_dir, mode=0o777)
    os.chmod(h.proxy_dir, 0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        h.server.start()
    os.chmod(h.proxy_dir, 0o750)
    with open(h.socket, "w") as stale:
        stale.write("left over")
    h.start()
    assert stat.S_ISSOCK(os.stat(h.socket).st_mode)
    assert multus.list_pods(h.socket).pod_resources[0].name == "plain"
    h.server.stop()
    assert not os.path.exists(h.socket)
