"""The kube-scheduler double against stand-in extenders over real HTTP.

It must reproduce upstream's extender integration case (TestSchedulerExtender: the pod lands on machine2) and the
extender rules kube-scheduler enforces, before it is trusted to drive the companion extender.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from doubles.apiserver_double import ApiServerDouble
from doubles.kube_scheduler import (
    ExtenderConfig,
    ExtenderError,
    KubeSchedulerDouble,
    ManagedResource,
    Victims,
    load_config,
    num_feasible_nodes_to_find,
    parse_go_duration,
)
from doubles.stand_in_extenders import (
    ExtenderServer,
    UpstreamExtender,
    machine2_prioritizer,
    machine_1_2_3_predicate,
    upstream_case,
    upstream_nodes,
    upstream_pod,
)
from tests.builders import pod_object

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def api() -> Iterator[ApiServerDouble]:
    with ApiServerDouble() as double:
        yield double


def node(name: str, **allocatable: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"pods": "110", **allocatable}}}


def nodes(*names: str) -> list[dict[str, Any]]:
    return [node(n) for n in names]


# a pod as the scheduler is handed it: metadata and a spec (one container, c, asking for what a test gives), no status
pod = partial(pod_object, uid="uid-p", name="p", resources={"c": {}}, qos=None, phase=None, status_key=False,
              statuses=False, api_version=False, labels_key=False)


def filter_reply(**fields: Any) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": None, "FailedAndUnresolvableNodes": None, "Error": "",
            **fields}


def scripted(**replies: Any) -> ExtenderServer:
    """An extender whose verbs answer what the test says: a handler, a reply (200) or (status, reply)."""
    def handler(reply: Any) -> Any:
        if callable(reply):
            return reply
        return lambda args: reply if isinstance(reply, tuple) else (200, reply)

    return ExtenderServer({verb: handler(reply) for verb, reply in replies.items()})


def passes_all(args: dict[str, Any]) -> tuple[int, Any]:
    return 200, filter_reply(NodeNames=args["NodeNames"])


# --- upstream's golden case --------------------------------------------------------------------------------------


def test_upstream_extender_case_lands_on_machine2_and_extender2_binds(api: ApiServerDouble) -> None:
    stored = api.add_pod(upstream_pod())
    with upstream_case(api.url) as (servers, configs), KubeSchedulerDouble(configs, api=api.url) as scheduler:
        result = scheduler.schedule_one(stored, upstream_nodes())
    assert (result.node, result.reason, result.bound_by) == ("machine2", "", servers[1].url)
    assert result.feasible == ("machine2", "machine3")
    assert result.filtered == {"machine1": "extender failed: extender2", "machine4": "extender failed: extender1",
                               "machine5": "extender failed: extender1"}
    # 10·3·10 + 1·4·10 + 50·10·10 against 1·3·10 + 10·4·10 + 5·10·10: extender3's 50 is not clamped to 10.
    assert result.scores == {"machine2": 5340, "machine3": 930}
    assert [s.verbs() for s in servers] == [["filter", "prioritize"], ["filter", "prioritize", "bind"],
                                            ["filter", "prioritize"]]
    # Sequential filters: each extender saw only what the one before it left; extender3 got names, not Nodes.
    filter_args = [s.requests[0].body for s in servers]
    assert [n["metadata"]["name"] for n in filter_args[0]["Nodes"]["items"]] == [f"machine{i}" for i in range(1, 6)]
    assert [n["metadata"]["name"] for n in filter_args[1]["Nodes"]["items"]] == ["machine1", "machine2", "machine3"]
    assert filter_args[2]["NodeNames"] == ["machine2", "machine3"] and filter_args[2]["Nodes"] is None
    assert filter_args[0]["NodeNames"] is None
    assert servers[1].requests[2].body == {"PodName": "extender-test-pod", "PodNamespace": "default",
                                           "PodUID": stored["metadata"]["uid"], "Node": "machine2"}
    bound = api.objects[(PODS, "extender-test-pod")]
    assert bound["spec"]["nodeName"] == "machine2"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"


def test_a_pod_without_the_managed_resource_skips_the_binder_and_the_default_binder_binds(
    api: ApiServerDouble,
) -> None:
    plain = upstream_pod()
    plain["spec"]["containers"][0]["resources"] = {}
    stored = api.add_pod(plain)
    with upstream_case(api.url) as (servers, configs), KubeSchedulerDouble(configs, api=api.url) as scheduler:
        result = scheduler.schedule_one(stored, upstream_nodes())
    # Without extender2 (not interested), extender1 and 3 leave machine1-3; machine2 still scores highest.
    assert (result.node, result.bound_by) == ("machine2", "default")
    assert servers[1].requests == []
    assert api.objects[(PODS, "extender-test-pod")]["spec"]["nodeName"] == "machine2"


# --- which pods an extender sees ---------------------------------------------------------------------------------


def test_is_interested_in_requests_or_limits_of_containers_and_init_containers() -> None:
    gpu = ExtenderConfig("http://x", managed_resources=(ManagedResource("nvidia.com/gpu"),))
    assert gpu.is_interested(pod(resources={"c": {"requests": {"nvidia.com/gpu": "1"}}}))
    assert gpu.is_interested(pod(resources={"c": {"limits": {"nvidia.com/gpu": "1"}}}))
    assert gpu.is_interested(pod(resources={"c": {"requests": {"cpu": "1"}}},
                                 init_containers=[{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]))
    assert not gpu.is_interested(pod(resources={"c": {"requests": {"cpu": "1"},
                                                      "limits": {"koordinator.sh/gpu": "1"}}}))
    assert ExtenderConfig("http://x").is_interested(pod())  # nothing managed: every pod


def test_an_uninterested_extender_is_never_called() -> None:
    with scripted(filter=filter_reply(NodeNames=[]), prioritize=[], bind={"Error": "no"}) as gpu:
        config = ExtenderConfig(gpu.url, filter_verb="filter", prioritize_verb="prioritize", bind_verb="bind",
                                weight=1, node_cache_capable=True,
                                managed_resources=(ManagedResource("nvidia.com/gpu"),))
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(resources={"c": {"requests": {"cpu": "1"}}}),
                                            [node("a", cpu="4"), node("b", cpu="4")])
    assert result.node in ("a", "b") and result.bound_by == ""
    assert gpu.requests == []


# --- filter replies ------------------------------------------------------------------------------------------


def test_node_cache_capable_gets_names_and_a_name_it_was_not_sent_is_an_error() -> None:
    with scripted(filter=filter_reply(NodeNames=["a", "ghost"])) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert ext.requests[0].body == {"Pod": pod(), "Nodes": None, "NodeNames": ["a", "b"]}
    assert result.node is None
    assert result.reason == (f'extender "{ext.url}" claims a filtered node "ghost" which is not found in the input '
                             "node list")


def test_without_node_cache_whole_nodes_are_sent_and_node_names_in_the_reply_are_not_read() -> None:
    with scripted(filter=filter_reply(NodeNames=["a"])) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter")
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert ext.requests[0].body["NodeNames"] is None
    assert ext.requests[0].body["Nodes"] == {"metadata": {}, "items": nodes("a", "b")}
    assert result.node is None and result.feasible == ()   # only Nodes counts here, and it was null


def test_both_lists_null_means_no_node_is_feasible_and_later_extenders_are_not_asked() -> None:
    with scripted(filter=filter_reply(FailedNodes={"b": "busy"})) as first, \
            ExtenderServer({"filter": passes_all}) as second:
        configs = [ExtenderConfig(first.url, filter_verb="filter", node_cache_capable=True),
                   ExtenderConfig(second.url, filter_verb="filter", node_cache_capable=True)]
        with KubeSchedulerDouble(configs, api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b", "c"))
    assert result.node is None and result.feasible == ()
    assert result.reason == "0/3 nodes are available: 1 busy."
    assert second.requests == []


def test_an_ignorable_extender_that_fails_is_skipped_a_required_one_fails_the_cycle() -> None:
    with scripted(filter=(500, {})) as broken, scripted(filter=filter_reply(Error="cache not synced")) as erring:
        for url in (broken.url, erring.url):
            ignorable = ExtenderConfig(url, filter_verb="filter", node_cache_capable=True, ignorable=True)
            with KubeSchedulerDouble([ignorable], api=None) as scheduler:
                assert scheduler.schedule_one(pod(), nodes("a")).node == "a"
        for url, reason in ((broken.url, f"failed filter with extender at URL {broken.url}/filter, code 500"),
                            (erring.url, "cache not synced")):
            required = ExtenderConfig(url, filter_verb="filter", node_cache_capable=True)
            with KubeSchedulerDouble([required], api=None) as scheduler:
                result = scheduler.schedule_one(pod(), nodes("a"))
            assert (result.node, result.reason) == (None, reason)


def test_an_extender_that_is_down_is_an_error_unless_ignorable() -> None:
    with ExtenderServer({}) as gone:
        url = gone.url  # stopped: the port refuses connections
    with KubeSchedulerDouble([ExtenderConfig(url, filter_verb="filter")], api=None) as scheduler:
        result = scheduler.schedule_one(pod(), nodes("a"))
    assert result.node is None and result.reason.startswith(f'Post "{url}/filter": ')
    with KubeSchedulerDouble([ExtenderConfig(url, filter_verb="filter", ignorable=True)], api=None) as scheduler:
        assert scheduler.schedule_one(pod(), nodes("a")).node == "a"


def test_failed_and_unresolvable_takes_precedence_over_failed() -> None:
    reply = filter_reply(NodeNames=["c"], FailedNodes={"a": "no free GPU", "b": "no free GPU"},
                         FailedAndUnresolvableNodes={"a": "no GPU of that model"})
    with scripted(filter=reply) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b", "c"))
    assert result.node == "c"
    assert result.filtered == {"a": "no GPU of that model", "b": "no free GPU"}
    assert result.unresolvable == {"a"}


def test_replies_are_decoded_as_go_decodes_them() -> None:
    lower_case = {"nodenames": ["b"], "failednodes": {"a": "full"}}   # Go matches keys ignoring case
    with scripted(filter=lower_case) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert (result.node, result.filtered) == ("b", {"a": "full"})
    with scripted(filter=passes_all, prioritize=[{"Host": "a", "Score": 7.5}]) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", prioritize_verb="prioritize", weight=1,
                                node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert result.scores == {"a": 0, "b": 0}   # a float Score fails the decode: the extender gives no score


# --- the in-tree filter and sampling -------------------------------------------------------------------------


def test_node_resources_fit_counts_assigned_pods_and_skips_ignored_resources() -> None:
    fits = [node("small", cpu="2"), node("big", cpu="8")]
    assigned = [pod(uid="uid-old", name="old", resources={"c": {"requests": {"cpu": "7"}}}, node="big")]
    wants = {"c": {"requests": {"cpu": "2", "foo.com/bar": "1"}}}
    with KubeSchedulerDouble([], api=None) as scheduler:
        result = scheduler.schedule_one(pod(resources=wants), fits, assigned=assigned)
    assert result.node is None
    assert result.reason == "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient foo.com/bar."
    ignoring = ExtenderConfig("http://127.0.0.1:9", managed_resources=(ManagedResource("foo.com/bar", True),))
    with KubeSchedulerDouble([ignoring], api=None) as scheduler:
        result = scheduler.schedule_one(pod(resources=wants), fits, assigned=assigned)
    assert result.node == "small" and result.filtered == {"big": "Insufficient cpu"}


def test_node_resources_fit_reads_each_node_and_pod_as_it_is_now() -> None:
    """NodeInfo's integers are kept per object: a Node or a Pod updated (a new object under the same name or uid)
    is read afresh, and the amounts are rounded up as NodeInfo holds them (cpu in millicores)."""
    wants = {"c": {"requests": {"cpu": "1500m"}}}
    with KubeSchedulerDouble([], api=None) as scheduler:
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="1")]).node is None
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="2")]).node == "n"
        holder = pod(uid="uid-h", name="h", resources={"c": {"requests": {"cpu": "1"}}}, node="n")
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="2")], assigned=[holder]).node is None
        holder = pod(uid="uid-h", name="h", resources={"c": {"requests": {"cpu": "0.4"}}}, node="n")
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="2")], assigned=[holder]).node == "n"
        tiny = [pod(uid=f"uid-t{i}", name=f"t{i}", resources={"c": {"requests": {"cpu": "0.0001"}}}, node="n")
                for i in range(2)]                                    # 0.1m each, held as 1m each
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="1502m")], assigned=tiny).node == "n"
        assert scheduler.schedule_one(pod(resources=wants), [node("n", cpu="1501m")], assigned=tiny).node is None


def test_num_feasible_nodes_to_find_follows_upstream() -> None:
    assert num_feasible_nodes_to_find(0, 99) == 99
    assert num_feasible_nodes_to_find(0, 1000) == 420      # 50 - 1000/125 = 42 %
    assert num_feasible_nodes_to_find(0, 5000) == 500      # 10 %
    assert num_feasible_nodes_to_find(0, 20000) == 1000    # floor of 5 %
    assert num_feasible_nodes_to_find(10, 300) == 100      # never fewer than 100
    assert num_feasible_nodes_to_find(100, 300) == 300


def test_extenders_see_the_sample_and_the_next_cycle_starts_where_the_last_stopped() -> None:
    names = [f"n{i:03}" for i in range(150)]
    with ExtenderServer({"filter": passes_all}) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None, percentage_of_nodes_to_score=10) as scheduler:
            scheduler.schedule_one(pod(), nodes(*names))
            scheduler.schedule_one(pod(), nodes(*names))
    first, second = (r.body["NodeNames"] for r in ext.requests)
    assert first == names[:100]
    assert second == names[100:] + names[:50]


def test_the_next_scheduling_cycle_runs_while_the_last_pod_binds() -> None:
    release = threading.Event()

    def bind(args: dict[str, Any]) -> tuple[int, Any]:
        release.wait(10)
        return 200, {"Error": ""}

    with scripted(filter=passes_all, bind=bind) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", bind_verb="bind", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            first = scheduler.schedule(pod(uid="uid-a", name="a"), nodes("n1"))
            second = scheduler.schedule(pod(uid="uid-b", name="b"), nodes("n1"))
            # the second pod's scheduling cycle (its filter call) ran while the first pod's bind still waited
            filtered = [r.body["Pod"]["metadata"]["name"] for r in ext.requests if r.verb == "filter"]
            assert filtered == ["a", "b"] and not first.done()
            release.set()
            assert (first.result(10).node, second.result(10).node) == ("n1", "n1")
    assert sorted(r.body["PodName"] for r in ext.requests if r.verb == "bind") == ["a", "b"]


# --- prioritize and selectHost ---------------------------------------------------------------------------------


def test_prioritize_errors_give_no_score_and_scores_are_weighted_by_ten() -> None:
    with scripted(filter=passes_all, prioritize=[{"Host": "b", "Score": 3}, {"Host": "elsewhere", "Score": 9}]) \
            as good, scripted(prioritize=(500, {})) as bad:
        configs = [ExtenderConfig(good.url, filter_verb="filter", prioritize_verb="prioritize", weight=2,
                                  node_cache_capable=True),
                   ExtenderConfig(bad.url, prioritize_verb="prioritize", weight=5)]
        with KubeSchedulerDouble(configs, api=None, in_tree_score=lambda p, n, on: 7) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert result.scores == {"a": 7, "b": 7 + 3 * 2 * 10}
    assert result.node == "b" and bad.verbs() == ["prioritize"]


def test_one_feasible_node_is_taken_without_prioritizing() -> None:
    with scripted(filter=filter_reply(NodeNames=["b"]), prioritize=[]) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", prioritize_verb="prioritize", weight=1,
                                node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            result = scheduler.schedule_one(pod(), nodes("a", "b"))
    assert (result.node, result.scores) == ("b", {})
    assert ext.verbs() == ["filter"]


def test_ties_are_broken_by_the_seeded_reservoir_sample() -> None:
    def choice(seed: int) -> str | None:
        with KubeSchedulerDouble([], api=None, seed=seed) as scheduler:
            return scheduler.schedule_one(pod(), nodes("a", "b", "c")).node

    picks = [choice(seed) for seed in range(30)]
    assert picks == [choice(seed) for seed in range(30)]   # reproducible per seed
    assert set(picks) == {"a", "b", "c"}                    # and every tied node can win


# --- bind -------------------------------------------------------------------------------------------------------


def test_an_ignorable_binder_that_fails_falls_back_to_the_default_binder(api: ApiServerDouble) -> None:
    stored = api.add_pod(pod(uid="uid-gpu-0", name="gpu-0", resources={"c": {"requests": {"nvidia.com/gpu": "1"}}}))
    with scripted(bind={"Error": "allocation changed"}) as ext:
        base = ExtenderConfig(ext.url, bind_verb="bind", managed_resources=(ManagedResource("nvidia.com/gpu", True),))
        with KubeSchedulerDouble([base], api=api.url) as scheduler:
            required = scheduler.schedule_one(stored, nodes("a"))
        with KubeSchedulerDouble([dataclasses.replace(base, ignorable=True)], api=api.url) as scheduler:
            fallback = scheduler.schedule_one(stored, nodes("a"))
    assert (required.node, required.selected, required.reason) == (None, "a", "allocation changed")
    assert (fallback.node, fallback.bound_by) == ("a", "default")
    assert api.objects[(PODS, "gpu-0")]["spec"]["nodeName"] == "a"


def test_the_default_binder_reports_the_api_servers_refusal(api: ApiServerDouble) -> None:
    stored = api.add_pod(pod(uid="uid-web-0", name="web-0"))
    with KubeSchedulerDouble([], api=api.url) as scheduler:
        assert scheduler.schedule_one(stored, nodes("a")).bound_by == "default"
        again = scheduler.schedule_one(stored, nodes("b"))
    assert again.node is None
    assert again.reason == 'Operation cannot be fulfilled on pods/binding "web-0": pod web-0 is already assigned ' \
                           'to node "a"'


# --- preempt ---------------------------------------------------------------------------------------------------


def test_preempt_sends_uids_to_a_node_cache_capable_extender_and_maps_them_back() -> None:
    on_a = [pod(uid="uid-v1", name="v1", node="a"), pod(uid="uid-v2", name="v2", node="a")]
    answer = {"NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 1}}}
    with scripted(preempt=answer) as ext:
        config = ExtenderConfig(ext.url, preempt_verb="preempt", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            chosen = scheduler.preempt(pod(), {"a": Victims(tuple(on_a)),
                                               "b": Victims((pod(uid="uid-v3", name="v3"),))},
                                       {"a": on_a, "b": [pod(uid="uid-v3", name="v3")]})
            ext.handlers["preempt"] = lambda args: (200, {"NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "x"}]}}})
            with pytest.raises(ExtenderError, match=r"claims to preempt pod \(UID: x\) on node: a"):
                scheduler.preempt(pod(), {"a": Victims(tuple(on_a))}, {"a": on_a})
    assert chosen == {"a": Victims((on_a[1],), 1)}
    sent = ext.requests[0].body
    assert sent["NodeNameToVictims"] is None
    assert sent["NodeNameToMetaVictims"] == {"a": {"Pods": [{"UID": "uid-v1"}, {"UID": "uid-v2"}],
                                                   "NumPDBViolations": 0},
                                             "b": {"Pods": [{"UID": "uid-v3"}], "NumPDBViolations": 0}}


# --- concurrency and connections ------------------------------------------------------------------------------


def test_one_keep_alive_connection_per_thread_and_concurrent_cycles() -> None:
    logic = UpstreamExtender("e", [machine_1_2_3_predicate], [(machine2_prioritizer, 1)], node_cache_capable=True)
    with ExtenderServer({"filter": logic.filter}) as ext:
        config = ExtenderConfig(ext.url, filter_verb="filter", node_cache_capable=True)
        with KubeSchedulerDouble([config], api=None) as scheduler:
            for _ in range(5):
                assert scheduler.schedule_one(pod(), upstream_nodes()).node in ("machine1", "machine2", "machine3")
            assert ext.connections == 1
            results: list[str | None] = []
            threads = [threading.Thread(target=lambda: results.append(
                scheduler.schedule_one(pod(), upstream_nodes()).node)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    assert len(results) == 8 and set(results) <= {"machine1", "machine2", "machine3"}
    assert ext.connections == 1 + 8


# --- configuration ---------------------------------------------------------------------------------------------


REFERENCE_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "koord-companion", "percentageOfNodesToScore": 100}],
    "extenders": [{
        "urlPrefix": "http://127.0.0.1:8888/scheduler", "filterVerb": "filter", "prioritizeVerb": "prioritize",
        "bindVerb": "bind", "weight": 5, "nodeCacheCapable": True, "httpTimeout": "5s", "ignorable": False,
        "managedResources": [{"name": "nvidia.com/gpu"},
                             {"name": "koordinator.sh/gpu-core", "ignoredByScheduler": True}],
    }],
}


def test_load_config_reads_the_extender_entries_and_the_profiles_sampling() -> None:
    config = load_config(REFERENCE_CONFIG, "koord-companion")
    assert config.percentage_of_nodes_to_score == 100
    assert config.extenders == (ExtenderConfig(
        "http://127.0.0.1:8888/scheduler", filter_verb="filter", prioritize_verb="prioritize", bind_verb="bind",
        weight=5, node_cache_capable=True, http_timeout=5.0,
        managed_resources=(ManagedResource("nvidia.com/gpu"), ManagedResource("koordinator.sh/gpu-core", True))),)
    with pytest.raises(ValueError, match='no profile has schedulerName "default-scheduler"'):
        load_config(REFERENCE_CONFIG)


def test_load_config_validates_as_kube_scheduler_does() -> None:
    def errors_of(*extenders: dict[str, Any]) -> str:
        with pytest.raises(ValueError) as info:
            load_config({**REFERENCE_CONFIG, "extenders": list(extenders)}, "koord-companion")
        return str(info.value)

    url = {"urlPrefix": "http://127.0.0.1:1"}
    assert errors_of({**url, "prioritizeVerb": "p"}) == \
        "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it"
    assert errors_of({**url, "bindVerb": "b"}, {**url, "bindVerb": "b"}) == \
        'extenders: Invalid value: "found 2 extenders implementing bind": only one extender can implement bind'
    assert errors_of({**url, "managedResources": [{"name": "kubernetes.io/batch-cpu"}, {"name": "cpu"}]}) == (
        '[extenders[0].managedResources[0].name: Invalid value: "kubernetes.io/batch-cpu": is an invalid extended '
        'resource name, extenders[0].managedResources[1].name: Invalid value: "cpu": is an invalid extended '
        "resource name]")
    assert errors_of({**url, "managedResources": [{"name": "foo.com/bar"}]},
                     {**url, "managedResources": [{"name": "foo.com/bar"}]}) == \
        'extenders[1].managedResources[0].name: Invalid value: "foo.com/bar": duplicate extender managed resource name'
    assert errors_of({**url, "urlprefix": "x"}) == 'strict decoding error: unknown field "extenders[0].urlprefix"'
    assert errors_of({**url, "weight": "5"}) == "extenders[0].weight: expected int, got str"
    with pytest.raises(ValueError, match="only one extender can implement bind"):
        KubeSchedulerDouble([ExtenderConfig("http://x", bind_verb="b")] * 2, api=None)


def test_http_timeout_is_a_go_duration() -> None:
    assert parse_go_duration("1m30s") == 90.0
    assert parse_go_duration("500ms") == 0.5
    assert parse_go_duration("0") == 0.0 and ExtenderConfig("http://x").timeout == 5.0
    for bad in ("5", "5 s", "", "1d"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_go_duration(bad)
