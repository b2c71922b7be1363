"""The simulator (scheduler/simulate.py): it places pods only through the extender's verbs, a hand-worked cluster
where fragmentation-aware placement beats best-fit by a pod, invariants after every pod, and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler import allocator, cli, simulate
from scheduler.extender import Extender
from scheduler.requests import pod_device_request
from scheduler.trace import cluster, generator, records

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"


def pod(name: str, gpu_milli: int = 0, num_gpu: int = 1, *, created: int = 0, spec: tuple[str, ...] = (),
        cpu: int = 1000) -> records.TracePod:
    return records.TracePod(name, cpu, 1024, num_gpu if gpu_milli else 0, gpu_milli, spec, "LS", "Running", created,
                            None, None)


def one_gpu_nodes(*names: str, model: str = "T4") -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    return [cluster.node_objects(records.TraceNode(n, 32000, 131072, 1, model)) for n in names]


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
    result = simulate.run([cluster.node_objects(n) for n in nodes], pods, simulate.POLICIES["fgd"], seed=1)
    # a pod no node passes kube's own filters for never reaches the extender, as in kube
    assert 0 < result.placed <= calls["filter"] <= result.submitted
    assert calls["bind"] == result.placed and calls["prioritize"] <= calls["filter"]


def test_fragmentation_aware_beats_best_fit_on_a_hand_worked_cluster() -> None:
    """Two one-GPU nodes; pods ask 40 %, 40 %, 60 %, 60 % of a card, the workload half 40 % and half 60 %.
    The first 40 % pod lands on either node. Best-fit puts the second one beside it (the tightest fit: 20 % left,
    which no pod of the mix can use), so the last 60 % pod finds no room. FGD puts it on the empty node (growth of
    fragmentation 0 there, +20 % beside the first), leaving 60 % on each: both 60 % pods fit."""
    pods = [pod("p1", 400, created=1), pod("p2", 400, created=2), pod("p3", 600, created=3),
            pod("p4", 600, created=4)]
    outcome = {}
    for name in ("best-fit", "fgd"):
        result = simulate.run(one_gpu_nodes("a", "b"), pods, simulate.POLICIES[name], seed=7, known_mix=True)
        outcome[name] = (result.placed, result.points[-1].failed)
    assert outcome == {"best-fit": (3, 1), "fgd": (4, 0)}


@pytest.mark.parametrize("policy", list(simulate.POLICIES))
def test_invariants_hold_after_every_pod(policy: str) -> None:
    """No card over 100 % of compute or memory, and no pod on a model its gpu_spec excludes, at every step."""
    nodes, pods = generator.generate(5, 16, 160, generator.Marginals(gpu_spec_share=0.5))
    sim = simulate.Simulator([cluster.node_objects(n) for n in nodes], simulate.POLICIES[policy], seed=2)
    model_of = {n.name: n.model for n in nodes}
    placed = 0
    for tp in pods:
        chosen = sim.place(cluster.pod_object(tp, whole_gpus=simulate.POLICIES[policy].whole_gpus),
                           cluster.gpu_request_milli(tp))
        if chosen is None:
            continue
        placed += 1
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
    assert loads == list(range(1, len(loads) + 1)) and loads[-1] == 100
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
    (run,) = curve["runs"]
    last = run["points"][-1]
    assert (run["placed"], last["load"], last["unallocated"]) == (2, 100, 0.0)
    assert (last["multi_gpu"], last["in_partition"]) == (2, 2)
    assert "deviceshare-most" in capsys.readouterr().out
