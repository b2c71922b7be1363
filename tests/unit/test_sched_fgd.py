"""Fragmentation (scheduler/fgd.py): the paper's definition on hand-worked nodes, the online mix, and FGD's choice
through the extender where it differs from packing."""

from __future__ import annotations

import pytest

from doubles import schedcluster as sc
from scheduler.cache import ClusterCache
from scheduler.config import ExtenderConfig
from scheduler.extender import Extender
from scheduler.fgd import (
    SCARCITY,
    WHOLE,
    NodeFree,
    Shape,
    WorkloadMix,
    fragmentation,
    fragmentation_for,
    normalize,
    pinned_models,
    placements,
    pressure,
    shape_of,
    typical,
)
from scheduler.requests import pod_device_request

BIG = 1 << 40
SHARE_600 = Shape(1000, 1 << 30, 600, 1)
WHOLE_2 = Shape(1000, 1 << 30, 1000, 2)
CPU_ONLY = Shape(4000, 1 << 30)


def node(*cards: int, cpu: int = BIG, memory: int = BIG) -> NodeFree:
    return NodeFree(cpu, memory, cards)


@pytest.mark.parametrize(("n", "m", "want"), [
    (node(1000, 300, 0), SHARE_600, 300),          # the 300 left on card 1 is too small for a 600 share
    (node(500, 300), SHARE_600, 800),              # no card can take 600: every free milli-GPU is a fragment
    (node(1000, 1000, 400), WHOLE_2, 400),         # two whole cards fit; the partly used card is a fragment
    (node(1000, 400, 400), WHOLE_2, 1800),         # only one whole card: nothing usable, all 1800 fragmented
    (node(1000, 1000, cpu=500), SHARE_600, 2000),  # cpu short: the GPUs cannot be used by this task at all
    (node(1000, 500), CPU_ONLY, 1500),             # a task without GPUs can use none of them: all are fragment
    (node(0, 0), SHARE_600, 0),                    # nothing free, nothing fragmented
])
def test_fragmentation_for_one_task_shape(n: NodeFree, m: Shape, want: int) -> None:
    assert fragmentation_for(n, m) == want


def test_a_shape_pinned_to_other_models_counts_the_whole_node_as_fragment() -> None:
    t4 = NodeFree(BIG, BIG, (1000, 300), "T4")
    pinned = Shape(1000, 1 << 30, 600, 1, frozenset({"G2", "V100M16"}))
    assert fragmentation_for(t4, pinned) == 1300
    assert fragmentation_for(t4, Shape(1000, 1 << 30, 600, 1, frozenset({"T4"}))) == 300
    assert fragmentation(t4, ((pinned, 0.5), (SHARE_600, 0.5))) == pytest.approx(0.5 * 1300 + 0.5 * 300)
    # a placement keeps the node's model
    assert {n.model for n in placements(t4, SHARE_600)} == {"T4"}


def test_stranding_counts_its_share_of_the_gpus_the_cpu_left_cannot_feed() -> None:
    """An 8-GPU node with 24 cores free and 12-core whole-GPU tasks: the paper's measure sees no fragment (a task
    fits); six GPUs cannot be fed (two tasks can), and ``stranding`` counts that share of them. A 10-core CPU-only
    pod grows it there (one task left: one more GPU) and not on a cpu-rich 2-GPU node."""
    task = Shape(12_000, 0, 1000, 1)
    eight = NodeFree(24_000, BIG, (1000,) * 8)
    assert fragmentation_for(eight, task) == 0
    assert fragmentation_for(eight, task, stranding=1.0) == 6000
    assert fragmentation_for(eight, task, stranding=0.1) == pytest.approx(600)
    assert fragmentation(eight, ((task, 1.0),), stranding=0.1) == pytest.approx(600)
    # a fragment the paper's measure already counts is not counted twice: 3 partly used cards, 2 tasks fed
    partly = NodeFree(24_000, BIG, (500, 500, 500, 1000, 1000, 1000, 1000, 1000))
    assert fragmentation_for(partly, task) == 1500
    assert fragmentation_for(partly, task, stranding=0.5) == pytest.approx(1500 + 0.5 * (6500 - 2000 - 1500))
    assert fragmentation(partly, ((task, 1.0),), stranding=0.5) == pytest.approx(1500 + 0.5 * (6500 - 2000 - 1500))
    mix = WorkloadMix(prior=(), stranding=1.0)
    mix.set({task: 1.0})
    cpu_pod = Shape(10_000, 0)
    assert mix.best_growth(eight, cpu_pod) == 1000
    assert mix.best_growth(NodeFree(104_000, BIG, (1000, 1000)), cpu_pod) == 0
    assert WorkloadMix(prior=()).stranding == 0.0          # the extender measures as the paper does
    mix = WorkloadMix(prior=())
    mix.set({task: 1.0})
    assert mix.best_growth(eight, cpu_pod) == 0


def test_the_mix_is_the_most_frequent_shapes_covering_95_percent() -> None:
    counts = {Shape(1000, 0, 500, 1): 60.0, Shape(2000, 0): 30.0, Shape(8000, 0, 1000, 8): 6.0,
              Shape(4000, 0, 1000, 2): 4.0}
    # 60 + 30 = 90 % < 95 %: the third (6 %) is needed, the fourth is not; popularities renormalized over 96
    assert typical(counts) == {Shape(1000, 0, 500, 1): 60 / 96, Shape(2000, 0): 30 / 96,
                               Shape(8000, 0, 1000, 8): 6 / 96}
    target = WorkloadMix(prior=(), cpu_step=1, memory_step=1, coverage=0.95)
    target.set(counts)
    assert [s for s, _ in target.snapshot] == list(typical(counts))
    # the learned mix keeps every shape: the rare large ones are the ones whose nodes FGD must keep free
    learned = WorkloadMix(prior=(), cpu_step=1, memory_step=1)
    learned.set(counts)
    assert dict(learned.snapshot) == pytest.approx({s: w / 100 for s, w in counts.items()})


@pytest.mark.parametrize(("spec", "hint", "want"), [
    ({}, None, None),
    ({"nodeSelector": {"node.koordinator.sh/gpu-model": "T4"}}, None, {"T4"}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.koordinator.sh/gpu-model", "operator": "In", "values": ["T4", "G2"]}]},
        {"matchExpressions": [{"key": "node.koordinator.sh/gpu-model", "operator": "In", "values": ["P100"]}]},
    ]}}}}, None, {"T4", "G2", "P100"}),
    # a term that does not name the model allows any
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node.koordinator.sh/gpu-model", "operator": "In", "values": ["T4"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
    ]}}}}, None, None),
    ({}, {"gpu": {"selector": {"matchLabels": {"node.koordinator.sh/gpu-model": "A100"}}}}, {"A100"}),
    ({"nodeSelector": {"node.koordinator.sh/gpu-model": "T4"}},
     {"gpu": {"selector": {"matchExpressions": [{"key": "node.koordinator.sh/gpu-model", "operator": "In",
                                                 "values": ["T4", "A10"]}]}}}, {"T4"}),
])
def test_a_pod_is_pinned_to_models_by_affinity_node_selector_or_gpu_hint(spec: dict, hint: dict | None,
                                                                          want: set[str] | None) -> None:
    import json
    annotations = {"scheduling.koordinator.sh/device-allocate-hint": json.dumps(hint)} if hint else {}
    pod = sc.pod("p", {"koordinator.sh/gpu": "50", "cpu": "1"}, annotations=annotations)
    pod["spec"].update(spec)
    request = pod_device_request(pod)
    assert pinned_models(pod, request) == (frozenset(want) if want is not None else None)
    assert shape_of(pod, request).models == frozenset(want or ())


def test_fragmentation_of_a_mix_is_the_popularity_weighted_sum() -> None:
    n = node(1000, 300)
    mix = ((SHARE_600, 0.75), (WHOLE_2, 0.25))     # 300 for the share task, 1300 for the 2-card task
    assert fragmentation(n, mix) == pytest.approx(0.75 * 300 + 0.25 * 1300)


def test_placements_are_the_distinct_states_one_pod_can_leave() -> None:
    share = Shape(0, 0, 400, 1)
    assert placements(node(1000, 1000, 500), share) == [node(600, 1000, 500), node(1000, 1000, 100)]
    assert placements(node(1000, 1000, 500), WHOLE_2) == [node(0, 0, 500, cpu=BIG - 1000, memory=BIG - (1 << 30))]
    assert placements(node(1000, 300), WHOLE_2) == []
    assert placements(node(1000, cpu=10), Shape(20, 0)) == []


def test_the_mix_decays_and_is_bounded() -> None:
    mix = WorkloadMix(half_life=10, max_shapes=2, refresh_every=1, prior=())
    a, b, c = Shape(1000, 1 << 30, 500, 1), Shape(2000, 1 << 30, 1000, 1), Shape(3000, 1 << 30, 200, 1)
    for _ in range(10):
        mix.observe(a)
    for _ in range(10):
        mix.observe(b)
    weights = dict(mix.snapshot)
    # ten observations later a counts half as much as a fresh shape: b's 10 recent ones outweigh a's 10 older ones
    assert weights[b.coarse()] > weights[a.coarse()] and sum(weights.values()) == pytest.approx(1.0)
    mix.observe(c)
    assert dict(mix.snapshot).keys() == {b.coarse(), c.coarse()}          # room made by dropping the lightest


def test_normalize_tops_the_smallest_growth_breaks_ties_by_packing_and_counts_milli_gpus() -> None:
    # b grows least: the top band (90..100, by how full it would be); a 8 milli-GPUs more: 82; c far off: 0
    assert normalize({"a": -92.0, "b": -100.0, "c": 200.0}, {"b": 0.5}) == {"a": 82.0, "b": 95.0, "c": 0.0}
    # equal growth: the fuller node wins the tie, as best-fit would pick it
    assert normalize({"a": 3.0, "b": 3.4}, {"a": 0.2, "b": 0.9}) == {"a": 92.0, "b": 99.0}


def _one_card_nodes(extender_strategy: str) -> Extender:
    cache = ClusterCache(ExtenderConfig(strategy=extender_strategy, max_score=100))
    for name in ("a", "b"):
        cache.on_node("ADDED", sc.node(name))
        cache.on_device("ADDED", sc.gpu_board(name, 1))
    # node a's card is 40 % used, b's is free
    cache.on_pod("ADDED", sc.pod("held", {"koordinator.sh/gpu": "40"}, node_name="a", annotations={
        "scheduling.koordinator.sh/device-allocated":
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"40","koordinator.sh/gpu-memory-ratio":"40"}}]}'
    }))
    return Extender(cache)


def test_fgd_keeps_room_for_the_common_shape_where_packing_fills_the_tight_node() -> None:
    """Hand-worked: cards free 600 (node a) and 1000 (node b), the workload mostly 60 % shares, a 40 % pod arrives.
    MostAllocated (packing) puts it on a, leaving 200 no 60 % task can use (ΔF = +200 for that task); FGD puts it on
    b, leaving 600 + 600, each able to take one (ΔF = 0). The next two 60 % pods then both fit under FGD, one under
    packing."""
    placed = {}
    for strategy in ("MostAllocated", "FragmentationAware"):
        ext = _one_card_nodes(strategy)
        if ext.allocator.mix is not None:
            ext.allocator.mix.set({Shape(1000, 1 << 30, 600, 1): 1000.0})
        got = []
        for name, percent in (("small", "40"), ("big-1", "60"), ("big-2", "60")):
            pod = sc.pod(name, {"koordinator.sh/gpu": percent, "cpu": "1"})
            ext.cache.on_pod("ADDED", pod)
            args = {"Pod": pod, "Nodes": None, "NodeNames": ["a", "b"]}
            fits = ext.filter(args)["NodeNames"]
            if not fits:
                got.append(None)
                continue
            scores = {e["Host"]: e["Score"] for e in ext.prioritize({**args, "NodeNames": fits})}
            node_name = max(fits, key=lambda n: (scores[n], n == fits[0]))
            assert ext.bind({"PodName": name, "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                             "Node": node_name}) == {"Error": ""}
            got.append(node_name)
        placed[strategy] = got
    assert placed["MostAllocated"] == ["a", "b", None]
    assert placed["FragmentationAware"][0] == "b" and None not in placed["FragmentationAware"]


def test_a_models_pressure_is_its_pinned_demand_share_over_its_capacity_share() -> None:
    t4_only, either = Shape(4000, 0, WHOLE, 1, frozenset({"T4"})), Shape(4000, 0, 500, 1, frozenset({"T4", "V100"}))
    mix = ((t4_only, 0.4), (either, 0.2), (Shape(4000, 0, WHOLE, 1), 0.4))
    # GPU demand 400 + 100 + 400; T4 holds 2 of 10 cards, V100 2, G2 6
    got = pressure(mix, {"T4": 2, "V100": 2, "G2": 6, "none": 0})
    assert got == pytest.approx({"T4": (400 / 900) / 0.2 + (100 / 900) / 0.4, "V100": (100 / 900) / 0.4, "G2": 0.0})
    assert pressure(((Shape(4000, 0, WHOLE, 1), 1.0),), {"T4": 2, "G2": 6}) == {"T4": 0.0, "G2": 0.0}


def test_a_pod_pays_for_taking_a_more_crowded_model_than_it_had_to() -> None:
    """Half the demand is pinned to T4, which holds a fifth of the cards: an unpinned pod's growth on a T4 node
    gains its GPUs × T4's pressure; a T4-only pod pays nothing there; a pod that may use T4 or G2 pays as the
    unpinned one; a node of a model the cluster does not count, and a pod without GPUs, pay nothing."""
    t4_only, unpinned = Shape(4000, 0, WHOLE, 1, frozenset({"T4"})), Shape(4000, 0, WHOLE, 1)
    mixes = []
    for scarcity in (SCARCITY, 0.0):
        mix = WorkloadMix(prior=(), scarcity=scarcity)
        mix.capacity = lambda: {"T4": 2, "G2": 8}
        mix.set({t4_only: 1.0, unpinned: 1.0})
        mixes.append(mix)
    mix, plain = mixes
    crowded = (500 / 1000) / 0.2
    t4, other = (NodeFree(64_000, BIG, (WHOLE, WHOLE), model) for model in ("T4", "A10"))
    assert mix.best_growth(t4, unpinned) == pytest.approx(plain.best_growth(t4, unpinned) + SCARCITY * crowded * WHOLE)
    assert mix.best_growth(t4, t4_only) == plain.best_growth(t4, t4_only)
    assert mix.best_growth(t4, Shape(4000, 0, WHOLE, 1, frozenset({"T4", "G2"}))) == mix.best_growth(t4, unpinned)
    assert mix.best_growth(other, unpinned) == plain.best_growth(other, unpinned)
    assert mix.best_growth(t4, Shape(4000, 0)) == plain.best_growth(t4, Shape(4000, 0))


def test_the_extender_keeps_a_crowded_models_cards_for_the_pods_pinned_to_it() -> None:
    """Through the verbs, hand-worked: a T4 node with one card half used, two 8-card G2 nodes; a quarter of the
    workload whole T4 cards (T4 holds a ninth of the cards: pressure 2.25), the rest whole cards anywhere. A half-card
    pod fits the T4's half card exactly (ΔF −500 against +250 on a G2), so the paper's measure puts it on the T4;
    the model pressure (+2.25 × 500) puts it on a G2 and keeps the T4 card for the pods that can run nowhere
    else. The capacity per model comes from the cache."""
    cache = ClusterCache(ExtenderConfig(strategy="FragmentationAware", max_score=100))
    for name, model, cards in (("t4", "T4", 2), ("g2-a", "G2", 8), ("g2-b", "G2", 8)):
        cache.on_node("ADDED", sc.node(name, labels={"node.koordinator.sh/gpu-model": model}))
        cache.on_device("ADDED", sc.gpu_board(name, cards))
    cache.on_pod("ADDED", sc.pod("held", {"koordinator.sh/gpu": "50"}, node_name="t4", annotations={
        "scheduling.koordinator.sh/device-allocated":
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50","koordinator.sh/gpu-memory-ratio":"50"}}]}'
    }))
    assert cache.gpus_by_model() == {"T4": 2, "G2": 16}
    ext = Extender(cache)
    mix = ext.allocator.mix
    assert mix is not None
    pod = sc.pod("half", {"koordinator.sh/gpu": "50", "cpu": "1"})
    args = {"Pod": pod, "Nodes": None, "NodeNames": ["t4", "g2-a"]}
    best = {}
    for scarcity in (SCARCITY, 0.0):
        mix.scarcity = scarcity
        mix.set({Shape(1000, 1 << 30, WHOLE, 1, frozenset({"T4"})): 1.0, Shape(1000, 1 << 30, WHOLE, 1): 3.0})
        scores = {e["Host"]: e["Score"] for e in ext.prioritize(args)}
        best[scarcity] = max(scores, key=scores.__getitem__)
    assert best == {SCARCITY: "g2-a", 0.0: "t4"}


def test_fragmentation_aware_is_selected_in_the_extenders_config() -> None:
    from scheduler.config import ConfigError, parse
    config = parse({"deviceShare": {"scoringStrategy": {"type": "FragmentationAware"}}, "prioritizeMaxScore": 100})
    ext = Extender(ClusterCache(config))
    assert ext.allocator.mix is not None and config.max_score == 100
    with pytest.raises(ConfigError, match="FragmentAware"):
        parse({"deviceShare": {"scoringStrategy": {"type": "FragmentAware"}}})
    with pytest.raises(ConfigError, match="prioritizeMaxScore"):
        parse({"prioritizeMaxScore": 1000})
