"""The simulator (scheduler/simulate/): it places pods only through the extender's verbs, a hand-worked cluster
where fragmentation-aware placement beats best-fit by a pod, invariants after every pod, the protocols (arrival,
the paper's shuffle and inflation, seeds in processes, departures), the measures per load level and over time,
the paper's policies' scores, and the command line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler import allocator, cli
from scheduler.extender import Extender
from scheduler.fgd import Shape, WorkloadMix
from scheduler.requests import pod_device_request
from scheduler.simulate import churn, policies, protocol, report
from scheduler.simulate.policies import POLICIES
from scheduler.simulate.simulator import Simulator
from scheduler.trace import cluster, generator, records

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"


def pod(name: str, gpu_milli: int = 0, num_gpu: int = 1, *, created: int = 0, spec: tuple[str, ...] = (),
        cpu: int = 1000) -> records.TracePod:
    return records.TracePod(name, cpu, 1024, num_gpu if gpu_milli else 0, gpu_milli, spec, "LS", "Running", created,
                            None, None)


def one_gpu_nodes(*names: str, model: str = "T4") -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    return [cluster.node_objects(records.TraceNode(n, 32000, 131072, 1, model)) for n in names]


def run(nodes: protocol.Nodes, pods: list[records.TracePod], policy: str, *, seed: int = 0,
        known_mix: bool = False) -> protocol.Run:
    """One run in arrival order up to 100 % of the GPU capacity."""
    plan = protocol.Protocol(seed=seed, known_mix=known_mix)
    capacity = 1000 * sum(int(n["status"]["allocatable"].get(cluster.WHOLE_GPU, 0)) for n, _ in nodes)
    submitted = protocol.workload(pods, capacity, plan, seed).pods
    return protocol.run(nodes, submitted, POLICIES[policy], plan, seed, protocol.target_mix(pods))


def test_the_simulator_places_only_through_the_extenders_verbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every allocation happens inside filter or bind, and every placement is a bind the verb accepted; the
    simulator holds no placement logic of its own."""
    calls: dict[str, int] = {"filter": 0, "prioritize": 0, "bind": 0}
    inside: list[str] = []
    for verb in calls:
        real = getattr(Extender, verb)

        def spy(self: Extender, args: dict, verb: str = verb, real: Any = real) -> Any:
            calls[verb] += 1
            inside.append(verb)
            try:
                return real(self, args)
            finally:
                inside.pop()
        monkeypatch.setattr(Extender, verb, spy)
    real_allocate = allocator.Allocator.allocate

    def allocate(self: allocator.Allocator, *args: Any, **kwargs: Any) -> Any:
        assert inside and inside[-1] in ("filter", "bind"), "an allocation outside the extender's verbs"
        return real_allocate(self, *args, **kwargs)
    monkeypatch.setattr(allocator.Allocator, "allocate", allocate)
    nodes, pods = generator.generate(3, 12, 120)
    result = run([cluster.node_objects(n) for n in nodes], pods, "fgd", seed=1)
    # a pod no node passes kube's own filters for never reaches the extender, as in kube
    assert 0 < result.placed <= calls["filter"] <= result.submitted
    assert calls["bind"] == result.placed and calls["prioritize"] <= calls["filter"]


def test_a_class_of_alike_nodes_is_asked_about_through_the_node_that_joined_it_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The verbs see one node per class of alike nodes; which one must not depend on string hashing (a set of names
    did, so a seed's result changed with PYTHONHASHSEED): it is the one that joined the class first."""
    asked: list[list[str]] = []
    real = Extender.filter

    def spy(self: Extender, args: dict) -> Any:
        asked.append(list(args["NodeNames"]))
        return real(self, args)
    monkeypatch.setattr(Extender, "filter", spy)
    names = [f"node-{i}" for i in range(8)]
    sim = Simulator(one_gpu_nodes(*names), POLICIES["fgd"], seed=3)
    assert sim.place(pod("p1", 500)) is not None
    assert asked == [["node-0"]]


def test_fragmentation_aware_beats_best_fit_on_a_hand_worked_cluster() -> None:
    """Two one-GPU nodes; pods ask 40 %, 40 %, 60 %, 60 % of a card, the workload half 40 % and half 60 %.
    The first 40 % pod lands on either node. Best-fit puts the second one beside it (the tightest fit: 20 % left,
    which no pod of the mix can use), so the last 60 % pod finds no room. FGD puts it on the empty node (growth of
    fragmentation 0 there, +20 % beside the first), leaving 60 % on each: both 60 % pods fit."""
    pods = [pod("p1", 400, created=1), pod("p2", 400, created=2), pod("p3", 600, created=3),
            pod("p4", 600, created=4)]
    outcome = {}
    for name in ("best-fit", "fgd"):
        result = run(one_gpu_nodes("a", "b"), pods, name, seed=7, known_mix=True)
        outcome[name] = (result.placed, result.points[-1].failed)
    assert outcome == {"best-fit": (3, 1), "fgd": (4, 0)}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_invariants_hold_after_every_pod(policy: str) -> None:
    """No card over 100 % of compute or memory, no pod on a model its gpu_spec excludes, and no node over its pod
    limit, at every step."""
    nodes, pods = generator.generate(5, 16, 160, generator.Marginals(gpu_spec_share=0.5))
    sim = Simulator([cluster.node_objects(n) for n in nodes], POLICIES[policy], seed=2,
                    target=protocol.target_mix(pods), max_pods=6)
    model_of = {n.name: n.model for n in nodes}
    placed = 0
    on_node: dict[str, int] = {}
    for tp in pods:
        chosen = sim.place(tp)
        if chosen is None:
            continue
        placed += 1
        on_node[chosen] = on_node.get(chosen, 0) + 1
        assert on_node[chosen] <= 6
        if tp.gpu_spec:
            assert model_of[chosen] in tp.gpu_spec, (tp, chosen)
        state = sim.cache.get(chosen)
        assert state is not None
        totals = state.devices.inventory.total("gpu")
        for minor, used in state.devices.used.get("gpu", {}).items():
            for resource in ("koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio",
                             "koordinator.sh/gpu-memory"):
                assert used.get(resource, 0) <= totals[minor][resource], (policy, chosen, minor, used)
    assert placed > 0


def test_whole_gpus_policy_gives_every_gpu_request_whole_cards() -> None:
    shared = cluster.pod_object(pod("s", 300), whole_gpus=True)
    request = pod_device_request(shared)
    assert request.gpu is not None and not request.gpu.shared and request.gpu.count == 1


def test_simulate_command_prints_the_table_and_writes_curve_and_plot(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["generate", "--nodes", "20", "--pods", "150", "--seed", "4", "--out", str(tmp_path)]) == 0
    out = tmp_path / "out"
    code = cli.main(["simulate", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                     "--policies", "best-fit,fgd", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "unalloc@100%" in printed and "best-fit" in printed and "fgd" in printed
    curve = json.loads((out / "curve.json").read_text())
    assert [r["policy"] for r in curve["runs"]] == ["best-fit", "fgd"]
    loads = [p["load"] for p in curve["runs"][0]["points"]]
    assert loads == list(range(1, len(loads) + 1)) and 90 <= loads[-1] <= 100
    assert (out / "curve.csv").read_text().splitlines()[0].startswith("policy,load,unallocated,fragmented,failed")
    assert (out / "unallocated.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_command_refuses_unknown_policies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["simulate", "--nodes", "n.csv", "--pods", "p.csv", "--policies", "fastest",
                     "--out", str(tmp_path)]) == 2
    assert "unknown fastest" in capsys.readouterr().err


def test_simulate_on_nodes_from_the_agents_own_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`--report-dir`: the cluster is what `koordlet report --once` printed for an 8×H100 host; 4-GPU pods land on
    one NVLink half each (the agent's partition table), counted as inside a partition."""
    from tests.unit.test_sched_trace import agent_report
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "h100.yaml").write_text(agent_report(tmp_path, monkeypatch, "h100", "yaml", gpus=True))
    pods = [pod(f"train-{i}", 1000, 4, created=i, cpu=100) for i in range(2)]
    records.write_pods(str(tmp_path / "pods.csv"), pods)
    assert cli.main(["simulate", "--report-dir", str(reports), "--pods", str(tmp_path / "pods.csv"),
                     "--policies", "deviceshare-most", "--out", str(tmp_path / "out")]) == 0
    curve = json.loads((tmp_path / "out" / "curve.json").read_text())
    (only,) = curve["runs"]
    last = only["points"][-1]
    assert (only["placed"], last["load"], last["unallocated"]) == (2, 100, 0.0)
    assert (last["multi_gpu"], last["in_partition"]) == (2, 2)
    assert "deviceshare-most" in capsys.readouterr().out


def test_simulate_says_so_when_the_reported_nodes_have_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_sched_trace import agent_report
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "cpu.yaml").write_text(agent_report(tmp_path, monkeypatch, "cpu-only", "yaml", gpus=False))
    records.write_pods(str(tmp_path / "pods.csv"), [pod("p", 500)])
    assert cli.main(["simulate", "--report-dir", str(reports), "--pods", str(tmp_path / "pods.csv"),
                     "--out", str(tmp_path / "out")]) == 2
    assert "no GPU in the 1 node(s) of --report-dir" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- protocols ----------------------------------------------------------------------------------------------------

TEN_GPUS = 10_000


def trace(n: int = 40) -> list[records.TracePod]:
    """n pods of 500 milli-GPUs (a tenth of them CPU-only), arriving in reverse name order."""
    return [pod(f"p{i:03d}", 0 if i % 10 == 0 else 500, created=n - i) for i in range(n)]


def test_arrival_order_is_creation_order_and_stops_before_passing_the_load() -> None:
    plan = protocol.Protocol(max_load=50)
    load = protocol.workload(trace(), TEN_GPUS, plan, 0)
    assert [p.creation_time for p in load.pods] == sorted(p.creation_time for p in load.pods)
    assert sum(cluster.gpu_request_milli(p) for p in load.pods) == 5000
    assert load.notes == [("29 of 40 pods not submitted: the next would have passed --max-load 50 % (the trace asks "
                           "180.0 % of GPU capacity)")]
    again = protocol.workload(trace(), TEN_GPUS, protocol.Protocol(max_load=300), 0)
    assert len(again.pods) == 66 and again.pods[40].name.endswith("-r1")
    assert again.notes[0].startswith("26 pods submitted again (renamed) in 1 more pass(es)")


def test_the_papers_shuffle_is_seeded_and_inflates_by_sampling_up_to_the_load() -> None:
    plan = protocol.Protocol(order="shuffle", max_load=300)
    pods = trace()
    first, same, other = (protocol.workload(pods, TEN_GPUS, plan, s) for s in (42, 42, 43))
    assert first.pods == same.pods and first.pods != other.pods
    head = first.pods[:40]
    assert sorted(p.name for p in head) == sorted(p.name for p in pods) and head != sorted(head, key=lambda p: p.name)
    asked = sum(cluster.gpu_request_milli(p) for p in first.pods)
    assert 30_000 - 500 < asked <= 30_000                       # the next draw would have passed 300 %
    added = first.pods[40:]
    assert added and all(p.name.split("-s")[0] in {q.name for q in pods} for p in added)
    assert len({p.name for p in first.pods}) == len(first.pods)
    assert first.notes == [(f"{len(added)} pods added, drawn from the trace with replacement: the trace asks 180.0 % "
                            "of GPU capacity, less than --max-load 300 %")]


def test_the_papers_shuffle_thins_a_trace_that_asks_more_than_the_load() -> None:
    load = protocol.workload(trace(), TEN_GPUS, protocol.Protocol(order="shuffle", max_load=100), 7)
    assert sum(cluster.gpu_request_milli(p) for p in load.pods) <= 10_000
    assert load.notes[0].endswith("removed at random: the trace asks 180.0 % of GPU capacity, more than --max-load "
                                  "100 %")


def test_a_trace_without_gpu_requests_has_no_load_to_reach() -> None:
    with pytest.raises(ValueError, match="ask no GPU"):
        protocol.workload([pod("cpu-only", 0)], TEN_GPUS, protocol.Protocol(order="shuffle"), 0)


def test_each_load_level_is_the_mean_after_its_pods_as_the_papers_analysis_computes_it() -> None:
    """Two one-GPU nodes (2,000 milli-GPUs): pods of 300, 300 and 900 land at 15 %, 30 % and 75 %; 30 % is the
    mean of the one pod there, 16..29 % have no pod and take the neighbours' or the level before's, 76 % on have no
    pod and stop the curve."""
    pods = [pod("a", 300, created=1), pod("b", 300, created=2), pod("c", 900, created=3)]
    result = protocol.run(one_gpu_nodes("n1", "n2"), pods, POLICIES["best-fit"], protocol.Protocol(), 0,
                          protocol.target_mix(pods))
    by_load = {p.load: p for p in result.points}
    assert max(by_load) == 75 and sorted(by_load) == list(range(1, 76))
    assert by_load[15].unallocated == pytest.approx(1 - 300 / 2000)
    assert by_load[30].unallocated == pytest.approx(1 - 600 / 2000)
    assert by_load[14].unallocated == pytest.approx(1 - 300 / 2000)          # its neighbour 15
    assert by_load[20].unallocated == pytest.approx(1 - 300 / 2000)          # the level before's
    assert by_load[75].unallocated == pytest.approx(1 - 1500 / 2000) and by_load[75].failed == 0


def test_seeds_run_in_processes_and_each_level_reports_the_median_and_spread() -> None:
    nodes, pods = generator.generate(2, 10, 80, generator.Marginals(cpu_node_share=0.0))
    objects = [cluster.node_objects(n) for n in nodes]
    capacity = 1000 * sum(n.gpus for n in nodes)
    plan = protocol.Protocol(order="shuffle", seed=42, seeds=3, max_load=120)
    wanted = [POLICIES["paper-best-fit"], POLICIES["fgd"]]
    parallel = protocol.simulate(objects, pods, wanted, plan, capacity=capacity, jobs=2)
    serial = protocol.simulate(objects, pods, wanted, plan, capacity=capacity, jobs=1)
    assert [(r.policy, r.seed, r.points) for r in parallel.runs] == [(r.policy, r.seed, r.points)
                                                                     for r in serial.runs]
    runs = parallel.by_policy()["fgd"]
    assert [r.seed for r in runs] == [42, 43, 44]
    at100 = sorted(p.unallocated for r in runs if (p := protocol.at(r, 100)) is not None and p.load == 100)
    assert protocol.spread(runs, 100, "unallocated") == protocol.Spread(at100[1], at100[0], at100[-1])
    printed = report.table(parallel)
    assert printed.startswith("protocol: shuffle: shuffled by seed") and "3 seeds (42..44)" in printed
    assert "unalloc@120%" in printed and "failed@120%" in printed and "lower is better" in printed


# --- the paper's scores, worked by hand -----------------------------------------------------------------------------

def view(*cards: int, cpu: int = 64_000, kinds: dict[str, int] | None = None) -> policies.NodeView:
    return policies.NodeView(cpu, 1 << 40, (96_000, 1 << 40), tuple(cards), "G2", kinds or {})


def ask(gpu_milli: int, gpus: int = 1, cpu: int = 8000) -> policies.Ask:
    return policies.Ask(cpu, 0, gpu_milli, gpus, Shape(cpu, 0, gpu_milli, gpus))


MIX = WorkloadMix(prior=())


def test_paper_best_fit_scores_absolute_leftovers_and_normalizes_in_integers() -> None:
    # left after the pod: 56 of 128 cores and 1.5 of 8 GPUs: 100 × (1 − ½·56/128 − ½·1.5/8) = 68.75, truncated
    assert policies.paper_best_fit(view(1000, 1000), ask(500), MIX) == 68.0
    assert policies.normalized({"a": 68.0, "b": 60.0, "c": 61.0}) == {"a": 100.0, "b": 0.0, "c": 12.0}
    assert policies.normalized({"a": 5.0, "b": 5.0}) == {"a": 0.0, "b": 0.0}


def test_paper_dot_product_prefers_the_node_whose_free_resources_point_least_along_the_request() -> None:
    # (64/128 · 8/128 + 2/8 · 0.5/8) / 2 = 0.0234…: int(97.65…)
    assert policies.paper_dot_product(view(1000, 1000), ask(500), MIX) == 97.0
    assert policies.paper_dot_product(view(1000, 1000, cpu=4000), ask(500), MIX) == 0.0


@pytest.mark.parametrize(("cards", "wanted", "want"), [
    ((1000,) * 8, (500, 1), 25.0),             # an empty 8-card node: 33 − 8
    ((1000, 1000), (500, 1), 31.0),            # an empty 2-card node: 33 − 2
    ((300, 1000), (500, 1), 49.0),             # a used node, one free card taken: 50 − 1
    ((700, 600, 1000), (500, 1), 94.0),        # the fullest card that fits, 60 % free: 100 − 60 // 10
    ((1000, 1000, 0), (1000, 2), 48.0),        # two free cards of a used node: 50 − 2
    ((1000, 1000), (0, 0), 0.0),               # no GPU asked: 0 everywhere
])
def test_paper_gpu_packing_prefers_partly_used_cards_then_used_nodes(cards: tuple[int, ...], wanted: tuple[int, int],
                                                                      want: float) -> None:
    assert policies.paper_gpu_packing(view(*cards), ask(*wanted), MIX) == want


def test_paper_gpu_clustering_groups_pods_of_one_gpu_kind() -> None:
    share = ask(500)
    assert share.kind == "share" and ask(1000, 2).kind == "2-gpu" and ask(0, 0).kind == ""
    # 4,000 of 8,000 milli-GPUs free: the band is 12 of 25
    assert policies.paper_gpu_clustering(view(*(500,) * 8, kinds={"share": 3}), share, MIX) == 87.0
    assert policies.paper_gpu_clustering(view(*(500,) * 8, kinds={"share": 3, "1-gpu": 1}), share, MIX) == 62.0
    assert policies.paper_gpu_clustering(view(*(1000,) * 8), share, MIX) == 25.0       # empty: 25 + 0
    assert policies.paper_gpu_clustering(view(*(500,) * 8, kinds={"1-gpu": 4}), share, MIX) == 12.0
    assert policies.paper_gpu_clustering(view(*(500,) * 8), ask(0, 0), MIX) == 0.0


def test_paper_fgd_is_the_sigmoid_of_the_saved_fragmentation() -> None:
    mix = WorkloadMix(prior=(), cpu_step=1, memory_step=1)
    mix.set({Shape(1000, 0, 600, 1): 1.0})
    # a 400 share on the 600-free card leaves 200 no 600 share can use: ΔF = +200, 100 × sigmoid(−0.2) = 45.0…
    assert policies.paper_fgd(view(600, 0), ask(400, cpu=1000), mix) == 45.0
    # on an empty card: 600 left, still usable: ΔF = 0, 50
    assert policies.paper_fgd(view(1000), ask(400, cpu=1000), mix) == 50.0


# --- departures (churn) -------------------------------------------------------------------------------------------

def lives(tp: records.TracePod, created: int, deleted: int | None) -> records.TracePod:
    return replace(tp, creation_time=created, deletion_time=deleted)


def gpu_capacity(nodes: protocol.Nodes) -> int:
    return 1000 * sum(int(n["status"]["allocatable"].get(cluster.WHOLE_GPU, 0)) for n, _ in nodes)


def test_a_departure_frees_the_node_for_a_pod_that_fails_without_departures() -> None:
    """One one-GPU node; two whole-GPU pods, the first leaving at the second the second arrives. Without
    departures (arrival order) the second finds no room; with churn the departure goes first and it is placed.
    Each lives 20 s over an arrival span of 20 s: an offered load of 200 % needs no compression."""
    nodes = one_gpu_nodes("only")
    pods = [lives(pod("first", 1000), 0, 20), lives(pod("second", 1000), 20, 40)]
    outcome = {}
    for order in ("arrival", "churn"):
        plan = protocol.Protocol(order=order, max_load=200)
        load = protocol.workload(pods, gpu_capacity(nodes), plan, 0)
        result = protocol.run(nodes, load.pods, POLICIES["best-fit"], plan, 0, protocol.target_mix(pods),
                              load.compression)
        outcome[order] = (result.submitted, result.placed, result.points[-1].failed)
    assert outcome == {"arrival": (2, 1, 1), "churn": (2, 2, 0)}
    assert load.notes[0].startswith("arrivals compressed ×1 so the offered load is 200 % of GPU capacity")


def test_a_departure_is_the_pods_deleted_watch_event_and_gives_the_node_back() -> None:
    """The extender's cache no longer holds the departed pod, and the node's cpu, memory and cards are free again;
    the simulator's own measures go back to the empty cluster's."""
    nodes = one_gpu_nodes("a", "b")
    sim = Simulator(nodes, POLICIES["fgd"], seed=1, target=protocol.target_mix([pod("x", 300)]))

    def free() -> dict[str, Any]:
        return {n: (s.free(), s.devices.free("gpu")) for n in ("a", "b") if (s := sim.cache.get(n)) is not None}

    empty = free()
    fragmented = sim.fragmented
    tp = pod("share", 300)
    uid = cluster.pod_object(tp)["metadata"]["uid"]
    node = sim.place(tp)
    assert node is not None and sim.placed("share") == node and sim.cache.pod(uid) is not None
    assert sim.allocated == 300
    assert sim.remove(tp) == node
    state = sim.cache.get(node)
    assert state is not None and uid not in state.pods and sim.cache.pod(uid) is None
    assert free() == empty
    assert (sim.allocated, sim.placed("share")) == (0, None) and sim.fragmented == pytest.approx(fragmented)
    with pytest.raises(KeyError):
        sim.remove(tp)


def test_compression_makes_the_offered_load_the_load_asked_for() -> None:
    """Σ GPU asked × lifetime / (arrival span × capacity), computed from the compressed times, is --max-load; a
    pod without deletion_time lives to the last arrival; lifetimes are kept."""
    nodes, pods = generator.generate(3, 10, 200, generator.Marginals(cpu_node_share=0.0))
    pods[5] = lives(pods[5], pods[5].creation_time, None)
    capacity = 1000 * sum(n.gpus for n in nodes)
    for load in (50, 100, 150):
        factor = churn.compression(pods, capacity, load)
        assert factor > 1 and churn.offered_load(pods, capacity, factor) == pytest.approx(load, rel=1e-9)
    t = churn.timeline(pods, factor)
    assert t.departures[5] is None and t.span == pytest.approx((pods[-1].creation_time - pods[0].creation_time) /
                                                               factor)
    assert all(d - a == pytest.approx(p.deletion_time - p.creation_time)
               for p, a, d in zip(pods, t.arrivals, t.departures, strict=True)
               if d is not None and p.deletion_time is not None)


def test_churn_refuses_a_trace_where_no_pod_leaves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = [pod(f"p{i}", 500, created=i) for i in range(3)]
    with pytest.raises(ValueError, match="no pod has a deletion_time"):
        protocol.workload(pods, 1000, protocol.Protocol(order="churn"), 0)
    records.write_nodes(str(tmp_path / "nodes.csv"), [records.TraceNode("n", 32000, 131072, 1, "T4")])
    records.write_pods(str(tmp_path / "pods.csv"), pods)
    assert cli.main(["simulate", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                     "--order", "churn", "--out", str(tmp_path / "out")]) == 2
    assert "deletion_time column is empty or missing" in capsys.readouterr().err


def test_invariants_hold_after_every_arrival_and_departure() -> None:
    """Allocated never passes capacity and is the sum over the placed pods, all of them live; the demand is the sum
    over the live pods, placed or not; departures happen and some pods fail (the offered load passes capacity)."""
    nodes, pods = generator.generate(6, 12, 400, generator.Marginals(cpu_node_share=0.0))
    objects = [cluster.node_objects(n) for n in nodes]
    capacity = 1000 * sum(n.gpus for n in nodes)
    sim = Simulator(objects, POLICIES["fgd"], seed=3, target=protocol.target_mix(pods), max_pods=20)
    replay = churn.Replay(sim, pods, churn.compression(pods, capacity, 300))
    live: set[int] = set()
    for e in replay.events():
        replay.play(e)
        (live.add if e.arrives else live.discard)(e.index)
        assert 0 <= sim.allocated <= capacity
        assert sim.allocated == sum(cluster.gpu_request_milli(p) for p in pods if sim.placed(p.name) is not None)
        assert all(i in live for i, p in enumerate(pods) if sim.placed(p.name) is not None)   # none left placed
        assert replay.demand == sum(cluster.gpu_request_milli(pods[i]) for i in live)
    assert replay.departed > 0 and sim.failed > 0 and replay.placed + sim.failed == len(pods)


def test_churn_events_put_departures_first_within_an_instant() -> None:
    t = churn.Timeline([0.0, 5.0, 5.0], [5.0, 5.0, None], 5.0)
    assert [(e.time, e.index, e.arrives) for e in churn.events(t)] == [
        (0.0, 0, True), (5.0, 0, False), (5.0, 1, True), (5.0, 2, True), (5.0, 1, False)]


def test_simulate_churn_prints_the_steady_state_and_writes_curves_over_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["generate", "--gpu-nodes-only", "--nodes", "10", "--pods", "200", "--seed", "4",
                     "--out", str(tmp_path)]) == 0
    out = tmp_path / "out"
    assert cli.main(["simulate", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv"),
                     "--order", "churn", "--max-load", "150", "--seeds", "2", "--jobs", "1",
                     "--policies", "best-fit,fgd", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\nprotocol: churn:" in printed and "seeds change only the draws" in printed
    assert "arrivals compressed ×" in printed and "so the offered load is 150 %" in printed
    assert "demand@peak" in printed and "unalloc 2nd half" in printed and "not retried" in printed
    curve = json.loads((out / "curve.json").read_text())
    points = curve["runs"][0]["points"]
    assert [p["time"] for p in points] == list(range(1, 101)) and all(p["demand"] >= 0 for p in points)
    assert (out / "curve.csv").read_text().splitlines()[0].endswith(",seed,time,demand")
    assert (out / "unallocated.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
