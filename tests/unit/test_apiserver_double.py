"""The kube-apiserver double, driven by the official ``kubernetes`` client.

These pin the API conventions the double enforces, so tests of the agent's reporters and
informers that pass against it would pass against a real API server too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from doubles.apiserver_double import ApiServerDouble, Resource
from tests.builders import pod_object

SLO = ("slo.koordinator.sh", "v1alpha1")
NRT = ("topology.node.k8s.io", "v1alpha1", "noderesourcetopologies")


class Clients:
    """The typed APIs a node agent uses, all on one connection pool to the double."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)


def node_metric(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "spec": spec,
    }


# a bare create: no uid and no status yet (the API server sets them), one container, on node-a unless a test says
pod = partial(pod_object, None, node="node-a", qos=None, phase=None, status_key=False, statuses=False,
              api_version=False, spec_containers=[{"name": "c", "image": "busybox"}])


def status_of(exc: ApiException) -> dict[str, Any]:
    """The Kubernetes Status body of a failed call."""
    return json.loads(exc.body)


def consume_in_thread(stream: Iterator[dict[str, Any]]) -> tuple[threading.Thread, list[Any]]:
    """Drain a watch stream on a thread; the list gets each event, then the exception if any."""
    received: list[Any] = []

    def run() -> None:
        try:
            for event in stream:
                received.append(event)
        except Exception as exc:  # the outcome under test
            received.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, received


@pytest.fixture
def make_double() -> Iterator[Callable[..., ApiServerDouble]]:
    """Start doubles serving NodeMetric (status subresource) and NRT (none); stop them after."""
    doubles: list[ApiServerDouble] = []

    def make(**kwargs: Any) -> ApiServerDouble:
        double = ApiServerDouble(**kwargs).start()
        doubles.append(double)
        double.resource(*SLO, "nodemetrics", "NodeMetric", namespaced=False, status_subresource=True)
        double.resource(*NRT, "NodeResourceTopology", namespaced=False)
        return double

    yield make
    for double in doubles:
        double.stop()


@pytest.fixture
def double(make_double: Callable[..., ApiServerDouble]) -> ApiServerDouble:
    return make_double()


@pytest.fixture
def connect(tmp_path: Path) -> Iterator[Callable[[ApiServerDouble], Clients]]:
    """Clients configured the way the agent is: from a kubeconfig file."""
    api_clients: list[client.ApiClient] = []

    def make(double: ApiServerDouble) -> Clients:
        kubeconfig = double.write_kubeconfig(tmp_path / f"kubeconfig-{len(api_clients)}")
        api_clients.append(config.new_client_from_config(config_file=kubeconfig))
        return Clients(api_clients[-1])

    yield make
    for api_client in api_clients:
        api_client.close()


@pytest.fixture
def k8s(double: ApiServerDouble, connect: Callable[[ApiServerDouble], Clients]) -> Clients:
    return connect(double)


# --- create / get / list ------------------------------------------------------------------------


def test_create_sets_server_fields_and_drops_status_behind_a_subresource(k8s: Clients) -> None:
    sent = node_metric("node-a", metricCollectPolicy={"aggregateDurationSeconds": 60})
    sent["status"] = {"updateTime": "2024-01-01T00:00:00Z"}
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", sent)
    metadata = created["metadata"]
    assert metadata["uid"] and metadata["creationTimestamp"].endswith("Z")
    assert metadata["generation"] == 1 and int(metadata["resourceVersion"]) > 0
    assert "status" not in created  # only /status writes status
    assert k8s.custom.get_cluster_custom_object(*SLO, "nodemetrics", "node-a") == created
    listed = k8s.custom.list_cluster_custom_object(*SLO, "nodemetrics")
    assert listed["kind"] == "NodeMetricList" and listed["items"] == [created]
    assert listed["metadata"]["resourceVersion"] == metadata["resourceVersion"]


def test_create_of_an_existing_name_is_already_exists(k8s: Clients) -> None:
    k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    assert info.value.status == 409
    assert status_of(info.value)["reason"] == "AlreadyExists"
    assert status_of(info.value)["message"] == 'nodemetrics.slo.koordinator.sh "node-a" already exists'


def test_create_rejects_what_the_real_server_rejects(k8s: Clients) -> None:
    with_rv = node_metric("node-a")
    with_rv["metadata"]["resourceVersion"] = "7"
    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", with_rv)
    assert info.value.status == 500
    assert status_of(info.value)["message"] == "resourceVersion should not be set on objects to be created"

    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("Node_A"))
    assert info.value.status == 422
    assert status_of(info.value)["details"]["causes"][0]["field"] == "metadata.name"

    with pytest.raises(ApiException) as info:
        k8s.core.create_namespaced_pod("default", pod("web-0", namespace="prod"))
    assert info.value.status == 400

    wrong_kind = node_metric("node-a") | {"kind": "NodeSLO"}
    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", wrong_kind)
    assert info.value.status == 400

    generated = k8s.core.create_namespaced_event(
        "default", {"metadata": {"generateName": "web-0."}, "involvedObject": {"name": "web-0"}}
    )
    assert generated.metadata.name.startswith("web-0.") and len(generated.metadata.name) == 11


def test_list_selectors_and_scopes(k8s: Clients) -> None:
    k8s.core.create_namespaced_pod("default", pod("web-0", labels={"app": "web", "tier": "fe"}))
    k8s.core.create_namespaced_pod("default", pod("web-1", node="node-b", labels={"app": "web"}))
    k8s.core.create_namespaced_pod("prod", pod("db-0", namespace="prod", labels={"app": "db"}))

    def names(pods: client.V1PodList) -> list[str]:
        return [p.metadata.name for p in pods.items]

    assert names(k8s.core.list_pod_for_all_namespaces()) == ["web-0", "web-1", "db-0"]  # etcd key order
    assert names(k8s.core.list_namespaced_pod("prod")) == ["db-0"]
    assert names(k8s.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")) == ["web-0", "db-0"]
    assert names(k8s.core.list_pod_for_all_namespaces(field_selector="metadata.name=web-1")) == ["web-1"]
    assert names(k8s.core.list_namespaced_pod("default", label_selector="app=web,tier!=fe")) == ["web-1"]
    assert names(k8s.core.list_pod_for_all_namespaces(label_selector="app in (db, x)")) == ["db-0"]
    assert names(k8s.core.list_pod_for_all_namespaces(label_selector="!tier,app")) == ["web-1", "db-0"]
    with pytest.raises(ApiException) as info:
        k8s.core.list_pod_for_all_namespaces(field_selector="spec.hostname=x")
    assert info.value.status == 400
    assert status_of(info.value)["message"] == "field label not supported: spec.hostname"
    # Typed lists carry kind/apiVersion only on the list, not on each item.
    raw = k8s.core.list_namespaced_pod("prod", _preload_content=False)
    listed = json.loads(raw.data)
    assert listed["kind"] == "PodList" and "kind" not in listed["items"][0]


def test_list_pages_with_limit_and_continue(double: ApiServerDouble, k8s: Clients) -> None:
    for name in ("a", "b", "c"):
        k8s.core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    first = k8s.core.list_namespaced_config_map("default", limit=2)
    assert [c.metadata.name for c in first.items] == ["a", "b"]
    assert first.metadata.remaining_item_count == 1
    rest = k8s.core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
    assert [c.metadata.name for c in rest.items] == ["c"] and rest.metadata._continue is None
    k8s.core.create_namespaced_config_map("default", {"metadata": {"name": "d"}})
    double.compact()  # the first page's revision is gone now
    with pytest.raises(ApiException) as info:
        k8s.core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
    assert info.value.status == 410 and status_of(info.value)["reason"] == "Expired"


# --- update conventions --------------------------------------------------------------------------


def test_replace_with_a_stale_resource_version_is_a_conflict(k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    fresh = k8s.custom.replace_cluster_custom_object(
        *SLO, "nodemetrics", "node-a", created | {"spec": {"reportIntervalSeconds": 60}}
    )
    assert int(fresh["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert fresh["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object(*SLO, "nodemetrics", "node-a", created)
    assert info.value.status == 409
    status = status_of(info.value)
    assert status["reason"] == "Conflict"
    assert status["details"] == {"name": "node-a", "group": "slo.koordinator.sh", "kind": "nodemetrics"}
    assert "the object has been modified" in status["message"]


def test_custom_resources_need_a_resource_version_to_update_built_ins_do_not(k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    del created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object(*SLO, "nodemetrics", "node-a", created)
    assert info.value.status == 422
    assert status_of(info.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"

    k8s.core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    replaced = k8s.core.replace_namespaced_config_map(
        "cfg", "default", {"metadata": {"name": "cfg"}, "data": {"a": "2"}}
    )
    assert replaced.data == {"a": "2"}


def test_replace_of_a_missing_object_is_not_found(k8s: Clients) -> None:
    with pytest.raises(ApiException) as info:
        k8s.core.replace_node("node-x", {"metadata": {"name": "node-x"}})
    assert info.value.status == 404
    assert status_of(info.value)["message"] == 'nodes "node-x" not found'


def test_an_update_that_changes_nothing_is_not_a_write(double: ApiServerDouble, k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a", a=1))
    again = k8s.custom.replace_cluster_custom_object(*SLO, "nodemetrics", "node-a", created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    patched = k8s.custom.patch_cluster_custom_object(*SLO, "nodemetrics", "node-a", {"spec": {"a": 1}})
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_status_subresource_separates_status_from_the_rest(k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a", a=1))
    # A status write changes only status: the spec change is dropped, generation stays.
    with_status = k8s.custom.replace_cluster_custom_object_status(
        *SLO, "nodemetrics", "node-a", created | {"spec": {"a": 2}, "status": {"nodeMetric": {"cpu": "1"}}}
    )
    assert with_status["spec"] == {"a": 1} and with_status["status"] == {"nodeMetric": {"cpu": "1"}}
    assert with_status["metadata"]["generation"] == 1
    # A main write changes all but status.
    main = k8s.custom.replace_cluster_custom_object(
        *SLO, "nodemetrics", "node-a", with_status | {"spec": {"a": 3}, "status": {"nodeMetric": {}}}
    )
    assert main["spec"] == {"a": 3} and main["status"] == {"nodeMetric": {"cpu": "1"}}
    assert main["metadata"]["generation"] == 2
    # The resourceVersion precondition applies to status writes too.
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object_status(*SLO, "nodemetrics", "node-a", with_status)
    assert info.value.status == 409
    patched = k8s.custom.patch_cluster_custom_object_status(
        *SLO, "nodemetrics", "node-a", {"status": {"updateTime": "2024-01-01T00:00:00Z"}, "spec": {"a": 9}}
    )
    assert patched["status"] == {"nodeMetric": {"cpu": "1"}, "updateTime": "2024-01-01T00:00:00Z"}
    assert patched["spec"] == {"a": 3}
    assert k8s.custom.get_cluster_custom_object_status(*SLO, "nodemetrics", "node-a") == patched


def test_without_a_status_subresource_status_is_ordinary_content(k8s: Clients) -> None:
    nrt = {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
           "metadata": {"name": "node-a"}, "zones": [], "status": {"x": 1}}
    created = k8s.custom.create_cluster_custom_object(*NRT, nrt)
    assert created["status"] == {"x": 1}
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object_status(*NRT, "node-a", created)
    assert info.value.status == 404
    replaced = k8s.custom.replace_cluster_custom_object(*NRT, "node-a", created | {"status": {"x": 2}})
    assert replaced["status"] == {"x": 2}


def test_built_in_status_subresource(k8s: Clients) -> None:
    # Nodes keep the status they are created with (the kubelet registers them that way).
    created = k8s.core.create_node({"metadata": {"name": "node-a"}, "status": {"capacity": {"cpu": "4"}}})
    assert created.status.capacity == {"cpu": "4"}
    k8s.core.patch_node("node-a", {"metadata": {"labels": {"a": "b"}}, "status": {"capacity": {"cpu": "8"}}})
    node = k8s.core.read_node("node-a")
    assert node.metadata.labels == {"a": "b"} and node.status.capacity == {"cpu": "4"}
    k8s.core.patch_node_status("node-a", {"status": {"capacity": {"cpu": "8"}}})
    assert k8s.core.read_node_status("node-a").status.capacity == {"cpu": "8"}


# --- patches -------------------------------------------------------------------------------------


def test_merge_patch_on_custom_resources(k8s: Clients) -> None:
    k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a", a=1, b={"c": 2}))
    patched = k8s.custom.patch_cluster_custom_object(
        *SLO, "nodemetrics", "node-a", {"metadata": {"labels": {"x": "y"}}, "spec": {"a": None, "b": {"d": 3}}}
    )
    assert patched["spec"] == {"b": {"c": 2, "d": 3}}
    assert patched["metadata"]["labels"] == {"x": "y"}
    # Strategic merge does not exist for custom resources: 415, as from the real server.
    with pytest.raises(ApiException) as info:
        k8s.custom.patch_cluster_custom_object(
            *SLO, "nodemetrics", "node-a", {"spec": {"a": 1}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert info.value.status == 415
    # A resourceVersion in a patch is a precondition.
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"a": 5}}
    with pytest.raises(ApiException) as info:
        k8s.custom.patch_cluster_custom_object(*SLO, "nodemetrics", "node-a", stale)
    assert info.value.status == 409


def test_strategic_merge_patch_merges_conditions_by_type(k8s: Clients) -> None:
    k8s.core.create_node({"metadata": {"name": "node-a"}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"},
    ]}})
    patched = k8s.core.patch_node_status("node-a", {"status": {"conditions": [
        {"type": "MemoryPressure", "status": "True"},
        {"type": "Ready", "$patch": "delete"},
        {"type": "DiskPressure", "status": "False"},
    ]}})
    assert [(c.type, c.status) for c in patched.status.conditions] == [
        ("MemoryPressure", "True"), ("DiskPressure", "False"),
    ]


def test_json_patch(k8s: Clients) -> None:
    k8s.core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    patched = k8s.core.patch_namespaced_config_map("cfg", "default", [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "remove", "path": "/data/a"},
    ])
    assert patched.data == {"b": "2"}
    with pytest.raises(ApiException) as info:
        k8s.core.patch_namespaced_config_map("cfg", "default", [{"op": "test", "path": "/data/b", "value": "9"}])
    assert info.value.status == 422


# --- delete ----------------------------------------------------------------------------------------


def test_delete_answers_like_the_real_server(k8s: Clients) -> None:
    k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    status = k8s.custom.delete_cluster_custom_object(*SLO, "nodemetrics", "node-a")
    assert status["status"] == "Success" and status["details"]["name"] == "node-a"
    with pytest.raises(ApiException) as info:
        k8s.custom.delete_cluster_custom_object(*SLO, "nodemetrics", "node-a")
    assert info.value.status == 404

    created = k8s.core.create_namespaced_pod("default", pod("web-0"))
    with pytest.raises(ApiException) as info:
        k8s.core.delete_namespaced_pod("web-0", "default", body={"preconditions": {"uid": "other"}})
    assert info.value.status == 409
    deleted = k8s.core.delete_namespaced_pod("web-0", "default")
    assert deleted.metadata.uid == created.metadata.uid  # pods answer with the deleted pod


def test_eviction_deletes_the_pod(k8s: Clients) -> None:
    k8s.core.create_namespaced_pod("default", pod("web-0"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "default"}}
    k8s.core.create_namespaced_pod_eviction("web-0", "default", eviction)
    assert k8s.core.list_namespaced_pod("default").items == []
    with pytest.raises(ApiException) as info:
        k8s.core.create_namespaced_pod_eviction("web-0", "default", eviction)
    assert info.value.status == 404


# --- watch -----------------------------------------------------------------------------------------


def test_watch_replays_added_modified_deleted_in_order(double: ApiServerDouble, k8s: Clients) -> None:
    double.put("/api/v1/nodes", {"metadata": {"name": "node-a"}})  # another resource's write
    start = k8s.custom.list_cluster_custom_object(*SLO, "nodemetrics")["metadata"]["resourceVersion"]
    assert start == "1"
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    k8s.custom.patch_cluster_custom_object(*SLO, "nodemetrics", "node-a", {"spec": {"a": 1}})
    k8s.custom.delete_cluster_custom_object(*SLO, "nodemetrics", "node-a")
    w = watch.Watch()
    events = []
    for event in w.stream(k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics",
                          resource_version=start, timeout_seconds=5):
        events.append((event["type"], int(event["object"]["metadata"]["resourceVersion"])))
        if len(events) == 3:
            w.stop()
    first = int(created["metadata"]["resourceVersion"])
    assert events == [("ADDED", first), ("MODIFIED", first + 1), ("DELETED", first + 2)]


def test_watch_sees_live_changes_behind_the_api(double: ApiServerDouble, k8s: Clients) -> None:
    double.add_pod(pod("web-0"))
    w = watch.Watch()
    seen = []
    for event in w.stream(k8s.core.list_namespaced_pod, "default", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:  # the initial state, then changes made while watching
            double.add_pod(pod("web-1"))
            double.add_pod(pod("db-0", namespace="prod"))  # another namespace: not seen
            double.remove("/api/v1/namespaces/default/pods", "web-0")
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "web-0"), ("ADDED", "web-1"), ("DELETED", "web-0")]


def test_watch_with_a_selector_sees_objects_enter_and_leave_it(double: ApiServerDouble, k8s: Clients) -> None:
    double.add_pod(pod("web-0", labels={"app": "web"}))
    w = watch.Watch()
    seen = []
    for event in w.stream(k8s.core.list_pod_for_all_namespaces, label_selector="app=web", timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.labels))
        if len(seen) == 1:
            k8s.core.patch_namespaced_pod("web-0", "default", {"metadata": {"labels": {"app": "db"}}})
            k8s.core.patch_namespaced_pod("web-0", "default", {"metadata": {"labels": {"app": "web", "v": "2"}}})
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", {"app": "web"}), ("DELETED", {"app": "db"}), ("ADDED", {"app": "web", "v": "2"})]


def test_bookmark_on_demand_carries_only_the_current_resource_version(
    double: ApiServerDouble, k8s: Clients
) -> None:
    double.add_pod(pod("web-0"))
    w = watch.Watch()
    seen = []
    for event in w.stream(k8s.core.list_namespaced_pod, "default", allow_watch_bookmarks=True, timeout_seconds=5):
        seen.append(event)
        if len(seen) == 1:
            other = double.put("/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": "other"}})
            double.bookmark()
        else:
            w.stop()
    current = other["metadata"]["resourceVersion"]  # a write to another resource moved it
    assert seen[1]["type"] == "BOOKMARK"
    assert seen[1]["raw_object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": current}}
    assert w.resource_version == current  # the client resumes from it


def test_periodic_bookmarks_only_when_allowed_and_watches_end_at_timeout_seconds(
    make_double: Callable[..., ApiServerDouble], connect: Callable[[ApiServerDouble], Clients]
) -> None:
    double = make_double(bookmark_interval=0.2)
    k8s = connect(double)
    began = time.monotonic()
    thread, without = consume_in_thread(
        watch.Watch().stream(k8s.core.list_namespaced_pod, "default", timeout_seconds=1)
    )
    events = list(watch.Watch().stream(
        k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics", allow_watch_bookmarks=True, timeout_seconds=1
    ))
    thread.join(timeout=5)
    assert 0.9 <= time.monotonic() - began < 3
    assert {e["type"] for e in events} == {"BOOKMARK"} and 2 <= len(events) <= 5
    assert without == []


def test_watch_from_a_compacted_resource_version_is_410_expired(double: ApiServerDouble, k8s: Clients) -> None:
    old = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    k8s.custom.patch_cluster_custom_object(*SLO, "nodemetrics", "node-a", {"spec": {"a": 1}})
    double.compact()
    old_rv = old["metadata"]["resourceVersion"]
    # With timeoutSeconds the client does not retry: the ERROR event becomes an ApiException.
    with pytest.raises(ApiException) as info:
        list(watch.Watch().stream(k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics",
                                  resource_version=old_rv, timeout_seconds=2))
    assert info.value.status == 410
    assert info.value.reason == f"Expired: too old resource version: {old_rv} ({int(old_rv) + 1})"
    assert info.value.body is None
    # Without it the client retries once from the same resourceVersion, then raises the same.
    watches_before = sum(1 for r in double.requests if r.query.get("watch"))
    with pytest.raises(ApiException) as info:
        list(watch.Watch().stream(k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics",
                                  resource_version=old_rv))
    assert info.value.status == 410
    assert sum(1 for r in double.requests if r.query.get("watch")) - watches_before == 2
    # Watching from the resourceVersion of a relist works.
    fresh = k8s.custom.list_cluster_custom_object(*SLO, "nodemetrics")["metadata"]["resourceVersion"]
    k8s.custom.delete_cluster_custom_object(*SLO, "nodemetrics", "node-a")
    w = watch.Watch()
    for event in w.stream(k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics",
                          resource_version=fresh, timeout_seconds=2):
        assert event["type"] == "DELETED"
        w.stop()


def test_bounded_history_expires_old_resource_versions(
    make_double: Callable[..., ApiServerDouble], connect: Callable[[ApiServerDouble], Clients]
) -> None:
    double = make_double(history=2)
    k8s = connect(double)
    for name in ("a", "b", "c", "d"):  # resourceVersions 1-4; the history keeps 3 and 4
        k8s.core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    with pytest.raises(ApiException) as info:
        list(watch.Watch().stream(k8s.core.list_namespaced_config_map, "default",
                                  resource_version="1", timeout_seconds=1))
    assert info.value.status == 410
    events = []
    w = watch.Watch()
    for event in w.stream(k8s.core.list_namespaced_config_map, "default", resource_version="2", timeout_seconds=2):
        events.append(event["object"].metadata.name)
        if len(events) == 2:
            w.stop()
    assert events == ["c", "d"]


# --- failures ----------------------------------------------------------------------------------------


def test_outage_answers_503_and_ends_open_watches(double: ApiServerDouble, k8s: Clients) -> None:
    double.add_pod(pod("web-0"))
    thread, received = consume_in_thread(watch.Watch().stream(k8s.core.list_namespaced_pod, "default"))
    deadline = time.monotonic() + 5
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    double.outage(True)
    thread.join(timeout=5)
    assert not thread.is_alive()
    # The stream ended; the client's automatic re-watch got the 503.
    assert received[0]["type"] == "ADDED"
    assert isinstance(received[-1], ApiException) and received[-1].status == 503
    with pytest.raises(ApiException) as info:
        k8s.core.read_namespaced_pod("web-0", "default")
    assert info.value.status == 503 and status_of(info.value)["reason"] == "ServiceUnavailable"
    double.outage(False)
    assert k8s.core.read_namespaced_pod("web-0", "default").metadata.name == "web-0"


def test_stop_refuses_connections_and_start_serves_the_same_store(double: ApiServerDouble, k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    thread, received = consume_in_thread(
        watch.Watch().stream(k8s.custom.list_cluster_custom_object, *SLO, "nodemetrics")
    )
    deadline = time.monotonic() + 5
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    url = double.url
    double.stop()
    thread.join(timeout=5)
    assert not thread.is_alive()
    # The stream broke off without its final chunk, as when a real server dies.
    assert isinstance(received[-1], urllib3.exceptions.ProtocolError)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as info:
        k8s.custom.get_cluster_custom_object(*SLO, "nodemetrics", "node-a")
    assert isinstance(info.value.reason, urllib3.exceptions.NewConnectionError)
    assert "Connection refused" in str(info.value.reason)

    double.start()
    assert double.url == url
    assert k8s.custom.get_cluster_custom_object(*SLO, "nodemetrics", "node-a") == created
    # The resourceVersion sequence carries on: no reuse after a restart.
    again = k8s.custom.patch_cluster_custom_object(*SLO, "nodemetrics", "node-a", {"spec": {"a": 1}})
    assert int(again["metadata"]["resourceVersion"]) == int(created["metadata"]["resourceVersion"]) + 1


def test_fail_next_injects_failures_once(double: ApiServerDouble, k8s: Clients) -> None:
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a"))
    double.fail_next("PUT", r".*/nodemetrics/node-a/status", 500)
    double.fail_next("POST", r"/apis/slo\.koordinator\.sh/.*", 429)
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object_status(*SLO, "nodemetrics", "node-a", created | {"status": {}})
    assert info.value.status == 500 and status_of(info.value)["reason"] == "InternalError"
    k8s.custom.replace_cluster_custom_object_status(*SLO, "nodemetrics", "node-a", created | {"status": {}})
    # (A GET or PUT answered 429 is retried inside urllib3, which honours Retry-After; a POST is not.)
    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-b"))
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    assert status_of(info.value)["details"] == {"retryAfterSeconds": 1}
    k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-b"))
    put = [r for r in double.requests if r.method == "PUT"]
    assert len(put) == 2 and put[0].path == "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/node-a/status"
    assert json.loads(put[0].body)["status"] == {}


def test_validation_hook_makes_custom_resource_writes_422(
    make_double: Callable[..., ApiServerDouble], connect: Callable[[ApiServerDouble], Clients]
) -> None:
    validated: list[str] = []

    def validate(obj: dict[str, Any]) -> list[str]:
        validated.append(obj["kind"])
        errors = []
        if obj.get("spec", {}).get("a", 0) < 0:
            errors.append("spec.a: Invalid value: must be >= 0")
        if "bad" in obj.get("status", {}):
            errors.append("status.bad: Forbidden")
        return errors

    double = make_double(validate=validate)
    k8s = connect(double)
    with pytest.raises(ApiException) as info:
        k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a", a=-1))
    assert info.value.status == 422
    status = status_of(info.value)
    assert status["reason"] == "Invalid"
    assert status["message"] == 'NodeMetric.slo.koordinator.sh "node-a" is invalid: spec.a: Invalid value: must be >= 0'
    assert [c["message"] for c in status["details"]["causes"]] == ["spec.a: Invalid value: must be >= 0"]
    created = k8s.custom.create_cluster_custom_object(*SLO, "nodemetrics", node_metric("node-a", a=1))
    with pytest.raises(ApiException) as info:
        k8s.custom.replace_cluster_custom_object_status(*SLO, "nodemetrics", "node-a", created | {"status": {"bad": 1}})
    assert info.value.status == 422
    assert double.objects[("/apis/slo.koordinator.sh/v1alpha1/nodemetrics", "node-a")] == created
    # Built-ins are not custom resources: the hook never sees them.
    k8s.core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}})
    assert validated == ["NodeMetric"] * 3


def test_registered_resource_describes_its_paths(double: ApiServerDouble) -> None:
    quota = double.resource("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota")
    assert isinstance(quota, Resource)
    assert quota.collection("team-a") == "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team-a/elasticquotas"
    assert quota.collection() == "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas"


# --- pods/binding ----------------------------------------------------------------------------------


def binding(name: str, node: str, **metadata: Any) -> client.V1Binding:
    return client.V1Binding(metadata=client.V1ObjectMeta(name=name, **metadata),
                            target=client.V1ObjectReference(kind="Node", name=node))


def bind(k8s: Clients, name: str, body: client.V1Binding) -> dict[str, Any]:
    """POST pods/{name}/binding; the reply is read raw (the client cannot parse the Status the server answers
    with: kubernetes-client/python #547)."""
    response = k8s.core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)
    assert response.status == 201
    return json.loads(response.data)


def test_binding_sets_node_annotations_and_condition_in_one_update(double: ApiServerDouble, k8s: Clients) -> None:
    created = k8s.core.create_namespaced_pod("default", pod("gpu-0", node=None))
    k8s.core.patch_namespaced_pod_status("gpu-0", "default", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}]}})
    w = watch.Watch()
    seen = []
    for event in w.stream(k8s.core.list_namespaced_pod, "default", timeout_seconds=5):
        seen.append(event)
        if len(seen) == 1:  # the initial ADDED; then bind while watching
            reply = bind(k8s, "gpu-0", binding("gpu-0", "node-b", uid=created.metadata.uid,
                                               annotations={"scheduling.koordinator.sh/device-allocated": "{}"}))
            double.add_pod(pod("marker", node="node-b"))  # a later write, so one event more shows nothing else came
        if event["object"].metadata.name == "marker":
            w.stop()
    assert reply == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    assert [(e["type"], e["object"].metadata.name) for e in seen] == [
        ("ADDED", "gpu-0"), ("MODIFIED", "gpu-0"), ("ADDED", "marker")]
    bound = seen[1]["raw_object"]
    assert bound["spec"]["nodeName"] == "node-b"
    assert bound["metadata"]["annotations"] == {"scheduling.koordinator.sh/device-allocated": "{}"}
    [condition] = bound["status"]["conditions"]  # replaced, reason and message gone
    assert condition["type"] == "PodScheduled" and condition["status"] == "True"
    assert set(condition) == {"type", "status", "lastProbeTime", "lastTransitionTime"}
    assert int(bound["metadata"]["resourceVersion"]) == int(seen[0]["raw_object"]["metadata"]["resourceVersion"]) + 1


def test_binding_merges_annotations_over_the_pods_own(double: ApiServerDouble, k8s: Clients) -> None:
    k8s.core.create_namespaced_pod("default", pod("gpu-0", node=None) | {
        "metadata": {"name": "gpu-0", "annotations": {"keep": "1", "replace": "old"}}})
    bind(k8s, "gpu-0", binding("gpu-0", "node-a", annotations={"replace": "new", "add": "2"}))
    stored = double.objects[("/api/v1/namespaces/default/pods", "gpu-0")]
    assert stored["metadata"]["annotations"] == {"keep": "1", "replace": "new", "add": "2"}


def test_binding_conflicts_like_the_real_server(double: ApiServerDouble, k8s: Clients) -> None:
    k8s.core.create_namespaced_pod("default", pod("assigned", node="node-a"))
    double.add_pod(pod("leaving", node=None) | {
        "metadata": {"name": "leaving", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    created = k8s.core.create_namespaced_pod("default", pod("other-uid", node=None))
    cases = [
        ("assigned", binding("assigned", "node-b"), "pods/binding",
         'pod assigned is already assigned to node "node-a"'),
        ("leaving", binding("leaving", "node-b"), "pods/binding",
         "pod leaving is being deleted, cannot be assigned to a host"),
        ("other-uid", binding("other-uid", "node-b", uid="not-the-pods"), "pods",
         f"Precondition failed: UID in precondition: not-the-pods, UID in object meta: {created.metadata.uid}"),
    ]
    for name, body, kind, why in cases:
        with pytest.raises(ApiException) as info:
            k8s.core.create_namespaced_pod_binding(name, "default", body)
        status = status_of(info.value)
        assert (info.value.status, status["reason"]) == (409, "Conflict"), name
        assert status["message"] == f'Operation cannot be fulfilled on {kind} "{name}": {why}'
        assert status["details"]["kind"] == kind
    with pytest.raises(ApiException) as info:
        k8s.core.create_namespaced_pod_binding("missing", "default", binding("missing", "node-b"))
    assert info.value.status == 404 and status_of(info.value)["message"] == 'pods "missing" not found'
    with pytest.raises(ApiException) as info:
        k8s.core.create_namespaced_pod_binding("other-uid", "default", binding("assigned", "node-b"))
    assert info.value.status == 400
    # Nothing was written by the refused bindings.
    assert "nodeName" not in double.objects[("/api/v1/namespaces/default/pods", "other-uid")]["spec"]
    assert double.objects[("/api/v1/namespaces/default/pods", "assigned")]["spec"]["nodeName"] == "node-a"


def test_koordinator_crds_are_served_cluster_scoped() -> None:
    with ApiServerDouble() as double:
        devices, node_metrics, nrts = double.serve_koordinator_crds()
        assert devices.collection("ignored") == "/apis/scheduling.koordinator.sh/v1alpha1/devices"
        assert node_metrics.collection() == "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
        assert node_metrics.status_subresource and not devices.status_subresource
        assert nrts.collection() == "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"
        double.put(devices.collection(), {"metadata": {"name": "node-a"}, "spec": {"devices": []}})
        assert double.objects[(devices.collection(), "node-a")]["kind"] == "Device"
