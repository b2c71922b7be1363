"""The extender keeps each node's answers until the node changes (``scheduler.cache.Answers``): every kind of change
the watches, binds and the clock bring must be seen by the very next filter or prioritize of the same pod shape, and
pods that differ in anything the plugins read must not share answers."""

from __future__ import annotations

import json
import math
from typing import Any

from doubles import schedcluster as sc
from scheduler.cache import ClusterCache
from scheduler.config import ExtenderConfig
from scheduler.extender import UNKNOWN_NODE, Extender
from tests.unit.test_sched_extender import GPU_ALLOC, Binds, _args, _cluster
from tests.unit.test_sched_loadaware import NOW, metric
from tests.unit.test_sched_numa import detail, nrt

WHOLE_CARD = ('{"gpu":[{"minor":%d,"resources":{"koordinator.sh/gpu-core":"100",'
              '"koordinator.sh/gpu-memory-ratio":"100"}}]}')


def _gpu_node(gpus: int = 1) -> ClusterCache:
    cache = ClusterCache()
    cache.on_node("ADDED", sc.node("n0"))
    cache.on_device("ADDED", sc.gpu_board("n0", gpus))
    return cache


def _replica(i: int, requests: dict[str, str], **kw: Any) -> dict[str, Any]:
    """One replica of a workload: a new name and uid each time, the same shape."""
    return sc.pod(f"replica-{i}", requests, **kw)


def _fits(ext: Extender, pod: dict[str, Any], node: str = "n0") -> bool:
    return ext.filter(_args(pod, [node]))["NodeNames"] == [node]


class Decisions:
    """Counts the nodes an extender decides afresh (answers it could not reuse)."""

    def __init__(self, ext: Extender) -> None:
        self.count = 0
        check = ext._check_node

        def counted(*args: Any) -> Any:
            self.count += 1
            return check(*args)
        ext._check_node = counted        # type: ignore[method-assign]


def test_replicas_share_a_nodes_answer_and_a_pod_landing_there_changes_it() -> None:
    cache = _gpu_node(1)
    ext = Extender(cache)
    decided = Decisions(ext)
    asks = {"nvidia.com/gpu": "1"}
    assert _fits(ext, _replica(0, asks)) and decided.count == 1
    assert _fits(ext, _replica(1, asks)) and decided.count == 1            # the second replica read the first's
    holder = sc.pod("holder", asks, node_name="n0", annotations={GPU_ALLOC: WHOLE_CARD % 0})
    cache.on_pod("ADDED", holder)
    assert not _fits(ext, _replica(2, asks))
    cache.on_pod("DELETED", holder)
    assert _fits(ext, _replica(3, asks))
    cache.on_node("DELETED", sc.node("n0"))
    assert ext.filter(_args(_replica(4, asks), ["n0"]))["FailedNodes"] == {"n0": UNKNOWN_NODE}


def test_a_pod_moved_between_nodes_frees_the_first_and_fills_the_second() -> None:
    cache = _gpu_node(1)
    cache.on_node("ADDED", sc.node("n1"))
    cache.on_device("ADDED", sc.gpu_board("n1", 1))
    ext = Extender(cache)
    asks = {"nvidia.com/gpu": "1"}
    holder = sc.pod("holder", asks, node_name="n0", annotations={GPU_ALLOC: WHOLE_CARD % 0})
    cache.on_pod("ADDED", holder)
    assert ext.filter(_args(_replica(0, asks), ["n0", "n1"]))["NodeNames"] == ["n1"]
    moved = json.loads(json.dumps(holder))
    moved["spec"]["nodeName"] = "n1"
    cache.on_pod("MODIFIED", moved)
    assert ext.filter(_args(_replica(1, asks), ["n0", "n1"]))["NodeNames"] == ["n0"]


def test_bind_assumes_at_once_and_a_failed_or_expired_binding_gives_the_card_back() -> None:
    now = [0.0]
    cache = _cluster(1, gpus=1, clock=lambda: now[0])
    binds = Binds()
    ext = Extender(cache, binder=binds)
    asks = {"nvidia.com/gpu": "1"}

    def bind(i: int) -> dict[str, str]:
        pod = _replica(i, asks)
        cache.on_pod("ADDED", pod)
        assert _fits(ext, _replica(100 + i, asks))
        return ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                         "PodUID": pod["metadata"]["uid"], "Node": "n0"})

    assert bind(0) == {"Error": ""}
    assert not _fits(ext, _replica(1, asks))                 # assumed: counted before any watch event
    now[0] = 31.0
    assert cache.expire() == 1
    assert _fits(ext, _replica(2, asks))
    binds.fail = RuntimeError("apiserver down")
    assert bind(3)["Error"]
    assert _fits(ext, _replica(4, asks))                     # forgotten: the card is free again


def test_the_watch_confirming_a_bound_pod_keeps_the_nodes_answers_and_a_different_copy_drops_them() -> None:
    cache = _gpu_node(2)
    binds = Binds()
    ext = Extender(cache, binder=binds)
    decided = Decisions(ext)
    asks = {"nvidia.com/gpu": "1"}
    pod = _replica(0, asks)
    cache.on_pod("ADDED", pod)
    assert ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                     "PodUID": pod["metadata"]["uid"], "Node": "n0"}) == {"Error": ""}
    assert _fits(ext, _replica(1, asks)) and decided.count == 1
    stored = json.loads(json.dumps(pod))          # what the API server stores after the Binding
    stored["spec"]["nodeName"] = "n0"
    stored["metadata"]["annotations"] = binds.calls[0][4]
    cache.on_pod("MODIFIED", stored)
    assert _fits(ext, _replica(2, asks)) and decided.count == 1    # nothing the node holds changed
    moved = json.loads(json.dumps(stored))
    moved["metadata"]["annotations"] = {GPU_ALLOC: WHOLE_CARD % 1}    # another card than the one assumed
    cache.on_pod("MODIFIED", moved)
    assert _fits(ext, _replica(3, asks)) and decided.count == 2
    other = sc.pod("other", asks, node_name="n0", annotations={GPU_ALLOC: WHOLE_CARD % 0})
    cache.on_pod("ADDED", other)
    assert not _fits(ext, _replica(4, asks)) and decided.count == 3


def test_a_bind_answers_its_node_again_for_the_next_replica_and_those_answers_are_the_nodes_new_ones() -> None:
    """kube-scheduler runs one scheduling cycle at a time and binds beside them: the node a pod was bound to is
    decided again for the pod's workload in bind, so the next replica's filter and prioritize only read, and what
    they read is the node with the pod on it. A failed bind gives the card back and answers nothing."""
    cache = _gpu_node(2)
    binds = Binds()
    ext = Extender(cache, binder=binds)
    decided = Decisions(ext)
    scored = [0]
    score_node = ext._score_node

    def counted(*args: Any) -> Any:
        scored[0] += 1
        return score_node(*args)
    ext._score_node = counted        # type: ignore[method-assign]
    asks = {"nvidia.com/gpu": "1"}

    def cycle(i: int) -> bool:
        """One replica's filter and prioritize on n0: whether it fits."""
        pod = _replica(100 + i, asks)
        fits = _fits(ext, pod)
        if fits:
            ext.prioritize(_args(pod, ["n0"]))
        return fits

    def bind(i: int) -> tuple[dict[str, Any], str]:
        pod = _replica(i, asks)
        cache.on_pod("ADDED", pod)
        return pod, ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                              "PodUID": pod["metadata"]["uid"], "Node": "n0"})["Error"]

    assert cycle(0) and (decided.count, scored[0]) == (1, 1)
    first, error = bind(0)
    assert not error and (decided.count, scored[0]) == (2, 2)     # answered again in bind: one GPU left
    assert cycle(1) and (decided.count, scored[0]) == (2, 2)      # read, not decided
    assert not bind(1)[1] and (decided.count, scored[0]) == (3, 2)   # the node is full: nothing to score
    assert not cycle(2) and decided.count == 3                    # the next replica reads that it is full
    cache.on_pod("DELETED", first)
    binds.fail = RuntimeError("apiserver down")
    assert bind(3)[1] and decided.count == 3                      # no answer after a failed bind
    assert cycle(3) and decided.count == 4                        # the card it was given back is seen


def test_bind_observes_no_pod_in_the_learned_mix() -> None:
    """FragmentationAware learns the mix from filter's pods, one observation per scheduling cycle; answering the
    bound node again in bind must not count the pod a second time."""
    cache = ClusterCache(ExtenderConfig(strategy="FragmentationAware"))
    cache.on_node("ADDED", sc.node("n0"))
    cache.on_device("ADDED", sc.gpu_board("n0", 2))
    ext = Extender(cache, binder=Binds())
    mix = ext.allocator.mix
    assert mix is not None
    pod = _replica(0, {"nvidia.com/gpu": "1"})
    cache.on_pod("ADDED", pod)
    assert _fits(ext, pod)
    version = mix.version                  # the mix is refreshed at its 1st, 2nd, 4th ... observation
    assert ext.bind({"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                     "PodUID": pod["metadata"]["uid"], "Node": "n0"}) == {"Error": ""}
    assert mix.version == version
    assert _fits(ext, _replica(1, {"nvidia.com/gpu": "1"})) and mix.version != version


def test_device_cr_node_and_nrt_changes_are_seen_by_the_next_filter() -> None:
    cache = _gpu_node(2)
    ext = Extender(cache)
    two = {"nvidia.com/gpu": "2"}
    assert _fits(ext, _replica(0, two))
    cache.on_device("MODIFIED", sc.gpu_board("n0", 1))
    assert not _fits(ext, _replica(1, two))
    cache.on_device("DELETED", sc.gpu_board("n0", 1))
    assert ext.filter(_args(_replica(2, two), ["n0"]))["FailedAndUnresolvableNodes"] == {
        "n0": "Insufficient gpu devices"}
    cache.on_device("ADDED", sc.gpu_board("n0", 2))
    assert _fits(ext, _replica(3, two))

    # the Node: LoadAware divides the reported usage by its allocatable cpu (30 of 100 fits 65 %, of 40 not)
    cache.on_node("ADDED", sc.node("busy", cpu="100"))
    cache.on_node_metric("ADDED", metric(name="busy", usage={"cpu": "30", "memory": "1Gi"}))
    ext = Extender(cache, clock=lambda: NOW)
    web = {"cpu": "1", "memory": "1Gi"}
    assert _fits(ext, _replica(4, web), "busy")
    cache.on_node("MODIFIED", sc.node("busy", cpu="40"))
    assert not _fits(ext, _replica(5, web), "busy")

    # the NRT: a pod pinned to CPUs needs the node's CPU topology
    cache.on_node("ADDED", sc.node("n1"))
    pinned = {"cpu": "4", "memory": "1Gi"}
    lsr = {"labels": {"koordinator.sh/qosClass": "LSR"}, "priority": 9500}
    assert ext.filter(_args(_replica(6, pinned, **lsr), ["n1"]))["FailedAndUnresolvableNodes"]
    cache.on_nrt("ADDED", nrt(detail(1, 2, 4, 2), memory="64Gi"))
    assert _fits(ext, _replica(7, pinned, **lsr), "n1")
    cache.on_nrt("DELETED", nrt(detail(1, 2, 4, 2), memory="64Gi"))
    assert not _fits(ext, _replica(8, pinned, **lsr), "n1")


def test_node_metric_changes_and_its_expiry_are_seen_without_any_other_change() -> None:
    now = [NOW]
    cache = ClusterCache()
    cache.on_node("ADDED", sc.node("n0", cpu="100", memory="400Gi"))
    cache.on_node_metric("ADDED", metric(name="n0", usage={"cpu": "5", "memory": "10Gi"}))
    ext = Extender(cache, clock=lambda: now[0])
    web = {"cpu": "2", "memory": "4Gi"}
    assert _fits(ext, _replica(0, web))
    fresh = ext.prioritize(_args(_replica(1, web), ["n0"]))
    cache.on_node_metric("MODIFIED", metric(name="n0", usage={"cpu": "70", "memory": "10Gi"}))
    assert ext.filter(_args(_replica(2, web), ["n0"]))["FailedNodes"] == {"n0": "node(s) cpu usage exceed threshold"}
    cache.on_node_metric("MODIFIED", metric(name="n0", usage={"cpu": "5", "memory": "10Gi"}))
    assert _fits(ext, _replica(3, web)) and ext.prioritize(_args(_replica(4, web), ["n0"])) == fresh
    now[0] = NOW + 180                                        # the report is now too old: nothing else changed
    assert ext.filter(_args(_replica(5, web), ["n0"]))["FailedNodes"] == {"n0": "node(s) nodeMetric expired"}
    assert ext.prioritize(_args(_replica(6, web), ["n0"])) != fresh          # LoadAware scores it 0
    cache.on_node_metric("DELETED", metric(name="n0"))
    assert _fits(ext, _replica(7, web))                       # no agent: LoadAware lets it pass


def test_prioritize_sees_a_pod_that_landed_since_the_last_call() -> None:
    cache = ClusterCache(ExtenderConfig(strategy="MostAllocated"))
    for name in ("n0", "n1"):
        cache.on_node("ADDED", sc.node(name))
        cache.on_device("ADDED", sc.gpu_board(name, 2))
    ext = Extender(cache)
    half = {"koordinator.sh/gpu": "50"}
    before = {e["Host"]: e["Score"] for e in ext.prioritize(_args(_replica(0, half), ["n0", "n1"]))}
    assert before["n0"] == before["n1"]
    cache.on_pod("ADDED", sc.pod("held", half, node_name="n1", annotations={GPU_ALLOC: (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory":"40Gi",'
        '"koordinator.sh/gpu-memory-ratio":"50"}}]}')}))
    after = {e["Host"]: e["Score"] for e in ext.prioritize(_args(_replica(1, half), ["n0", "n1"]))}
    assert after["n1"] > after["n0"]                          # packing prefers the card already in use


def _hot_node() -> tuple[Extender, Decisions]:
    """An extender over one node whose NodeMetric puts it above LoadAware's threshold, counting its decisions."""
    cache = ClusterCache()
    cache.on_node("ADDED", sc.node("hot", cpu="100", memory="400Gi"))
    cache.on_node_metric("ADDED", metric(name="hot", usage={"cpu": "70", "memory": "10Gi"}))
    ext = Extender(cache, clock=lambda: NOW)
    return ext, Decisions(ext)


WEB = {"cpu": "1", "memory": "1Gi"}


def test_pods_that_differ_in_what_the_plugins_read_do_not_share_answers() -> None:
    ext, decided = _hot_node()
    assert not _fits(ext, _replica(0, WEB), "hot")
    daemon = _replica(1, WEB)
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "uid": "d"}]
    assert _fits(ext, daemon, "hot")                          # LoadAware lets DaemonSet pods pass
    batch = _replica(2, WEB, labels={"koordinator.sh/priority-class": "koord-batch"})
    _fits(ext, batch, "hot")                                  # a Koordinator label: decided afresh
    pending = _replica(3, WEB)
    pending["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert not _fits(ext, pending, "hot")
    assert decided.count == 3                                 # the pending replica shared the first's answer


def test_the_pods_of_alike_workloads_share_answers() -> None:
    """A Job's or ReplicaSet's own labels and annotations, and its owner's name and uid, are read by no decision:
    the first pod of a second Job of the same template finds the first Job's answers."""
    ext, decided = _hot_node()

    def job_pod(i: int, job: str) -> dict[str, Any]:
        pod = _replica(i, WEB, labels={"job-name": job, "controller-uid": f"uid-{job}",
                                        "koordinator.sh/qosClass": "LS"},
                       annotations={"batch.kubernetes.io/job-completion-index": str(i)})
        pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": job, "uid": f"uid-{job}", "controller": True}]
        return pod

    assert not _fits(ext, job_pod(0, "train-a"), "hot")
    assert not _fits(ext, job_pod(1, "train-b"), "hot")
    assert decided.count == 1
    other_class = job_pod(2, "train-c")
    other_class["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    _fits(ext, other_class, "hot")
    assert decided.count == 2                                 # a Koordinator label is read: decided afresh


def test_the_least_recently_asked_question_is_the_one_dropped() -> None:
    from scheduler.cache import Answers
    answers = Answers(keys=2)
    answers.table("a").put("n0", "A", math.inf, NOW)
    answers.table("b").put("n0", "B", math.inf, NOW)
    assert answers.table("a").read(["n0"], NOW) == ["A"]      # asked again: now the most recent
    answers.table("c")
    assert answers.table("a") and not answers.table("b")


def test_an_answer_given_on_a_fresh_metric_lapses_when_it_expires_and_one_given_on_an_expired_one_stays() -> None:
    from scheduler.cache import Table
    table = Table()
    table.put("fresh", "F", NOW + 10, NOW)
    table.put("late", "L", NOW + 20, NOW)
    table.put("expired", "E", NOW - 1, NOW)
    table.put("no-metric", "N", math.inf, NOW)
    names = ["fresh", "late", "expired", "no-metric", "unknown"]
    assert table.read(names, NOW + 9.9) == ["F", "L", "E", "N", None]
    assert table.read(names, NOW + 10) == [None, "L", "E", "N", None]
    table.put("fresh", "F2", NOW + 70, NOW + 10)                  # a renewed metric, answered again
    table.drop("late")                                          # the node changed before its metric expired
    assert table.read(names, NOW + 30) == ["F2", None, "E", "N", None]
    assert table.read(names, NOW + 70) == [None, None, "E", "N", None]


def test_the_watchs_copy_of_an_assumed_pod_is_read_again_only_where_it_differs() -> None:
    cache = _gpu_node(2)
    state = cache.get("n0")
    assert state is not None
    pod = sc.pod("p", {"nvidia.com/gpu": "1"}, node_name="n0", annotations={GPU_ALLOC: WHOLE_CARD % 0})
    with state.lock:
        cache.assume(state, pod)
    generation = state.devices.generation
    cache.on_pod("MODIFIED", json.loads(json.dumps(pod)))          # the same holdings: nothing read again
    assert state.devices.generation == generation and set(state.devices.used["gpu"]) == {0}
    moved = json.loads(json.dumps(pod))
    moved["metadata"]["annotations"][GPU_ALLOC] = WHOLE_CARD % 1
    cache.on_pod("MODIFIED", moved)
    assert set(state.devices.used["gpu"]) == {1}


def test_every_label_and_annotation_the_scheduler_reads_is_in_koordinators_domain() -> None:
    """pod_key keeps only Koordinator's labels and annotations: a decision reading any other key would be handed
    answers given to pods that differ in it. So every ANNOTATION_*/LABEL_* constant the scheduler's code names
    must be one of Koordinator's."""
    import importlib
    import re
    from pathlib import Path

    from koordlet.base import wire
    from scheduler.requests import is_koordinator_key

    root = Path(__file__).resolve().parents[2]
    keys: dict[str, str] = {}
    for path in sorted((root / "scheduler").rglob("*.py")):
        if path.name == "__main__.py":
            continue
        source = path.read_text()
        module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts).removesuffix(
            ".__init__"))
        for name in set(re.findall(r"\b(?:wire\.)?((?:ANNOTATION|LABEL)_[A-Z0-9_]+)\b", source)):
            value = getattr(module, name, None) or getattr(wire, name, None)
            assert isinstance(value, str), f"{path.name}: {name} does not resolve to a key"
            keys[name] = value
    assert len(keys) > 20
    assert {n: k for n, k in keys.items() if not is_koordinator_key(k)} == {}
