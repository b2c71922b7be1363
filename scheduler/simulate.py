"""``koord-scheduler-extender simulate``: a whole cluster placed pod by pod through the extender's own verbs, to measure
scheduling quality (the measure of Weng et al., ATC '23, as their artifact hkust-adsl/kubernetes-scheduler-simulator
computes it).

Nodes come from the trace's nodes CSV (each built as the agent would report it:
:func:`scheduler.trace.cluster.node_objects`) or from the agent's report files; pods from the trace's pods CSV, in
arrival order, deletions ignored (the paper's setting: the cluster only fills). When the trace ends before the
cluster's GPU capacity is reached it is submitted again (new names), as the paper inflates its workload, up to
:data:`MAX_PASSES` times.

**The same code path as the extender.** The simulator plays kube-scheduler and the API server around one
:class:`~scheduler.extender.Extender`: for each pod it runs an in-tree filter (cpu and memory fit, the pod's required
node affinity on the GPU model), then the extender's ``filter`` and ``prioritize`` verbs (JSON dicts, the handlers
the HTTP server calls), picks the highest total (ties broken by a seeded draw, as kube's selectHost) and calls the
``bind`` verb, which allocates and assumes; the pod's bound copy is then fed back as its watch event. Nothing here
decides where a device goes.

**Equivalent nodes are asked once.** kube's own filters (cpu, memory, the required GPU model) run per node, as
kube runs them; the verbs are then called with one node name per class of nodes that get the same answers from
every verb: same model, size and per-card free resources (a trace has no NodeMetric or NRT; for FragmentationAware
also the free cpu and memory in whole cores and GiB, which its growth reads). The pick among equal-best nodes is
uniform over all members of the best classes. This is what makes 8,000 pods on 1,500 nodes take a minute, not
hours.

**Policies**, all through that path (:data:`POLICIES`):

* ``kube-default``: what a cluster without GPU sharing gets: every GPU request is whole cards (``nvidia.com/gpu``,
  the device plugin), scored by kube's NodeResourcesFit LeastAllocated and BalancedAllocation on cpu and memory;
* ``random-fit`` (a uniform draw over the feasible nodes) and ``best-fit`` (the node left with the least free
  resources, GPU and cpu shares summed), both scored in-tree;
* ``deviceshare-least`` / ``deviceshare-most``: koord-scheduler's DeviceShare with LeastAllocated / MostAllocated;
* ``fgd``: DeviceShare with FragmentationAware (:mod:`scheduler.fgd`), the mix learned online from the pods seen.

**Measures**, at every 1 % of arrived load (Σ GPU requests of the pods submitted ÷ GPU capacity): the share of
GPU capacity unallocated; the fragmented share (Σ over nodes of ``F_n(M)`` for the trace's own workload mix ``M``,
:mod:`scheduler.fgd`); the pods that failed so far; and of the multi-GPU pods placed, how many got cards inside one
partition of their node's table (NVLink) and how many inside one PCIe switch.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from koordlet.base import wire
from scheduler.allocator import FRAGMENTATION_AWARE, LEAST_ALLOCATED, MOST_ALLOCATED
from scheduler.cache import ClusterCache, NodeState
from scheduler.config import ExtenderConfig, PluginWeights
from scheduler.extender import Extender
from scheduler.fgd import CPU_STEP, MEMORY_STEP, WHOLE, NodeFree, Shape, WorkloadMix, card_milli, mix_of
from scheduler.requests import GPU, pod_requests, value
from scheduler.trace import cluster, records

log = logging.getLogger(__name__)

MAX_PASSES = 5
LABEL_MODEL = wire.LABEL_GPU_MODEL


@dataclass(frozen=True)
class Policy:
    name: str
    strategy: str = LEAST_ALLOCATED        # DeviceShare's scoring strategy in the extender
    whole_gpus: bool = False               # every GPU request as whole cards (kube's default with the device plugin)
    extender_scores: bool = True           # the extender's prioritize counts
    in_tree: str = ""                      # "", "kube-default", "random", "best-fit"


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("kube-default", whole_gpus=True, extender_scores=False, in_tree="kube-default"),
    Policy("random-fit", extender_scores=False, in_tree="random"),
    Policy("best-fit", extender_scores=False, in_tree="best-fit"),
    Policy("deviceshare-least", strategy=LEAST_ALLOCATED),
    Policy("deviceshare-most", strategy=MOST_ALLOCATED),
    Policy("fgd", strategy=FRAGMENTATION_AWARE),
)}


@dataclass
class Point:
    """The measures at one load level (percent of GPU capacity requested by the pods submitted so far)."""

    policy: str
    load: int
    unallocated: float           # share of GPU capacity no placed pod asked for
    fragmented: float            # share of GPU capacity fragmented for the trace's workload mix
    failed: int                  # pods that found no node so far
    multi_gpu: int = 0           # multi-GPU pods placed so far
    in_partition: int = 0        # ... with their cards inside one partition of the node's table
    in_pcie: int = 0             # ... with their cards behind one PCIe switch


@dataclass
class Run:
    policy: str
    points: list[Point] = field(default_factory=list)
    submitted: int = 0
    placed: int = 0


def _requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    summed = pod_requests(pod.get("spec") or {})
    return value(summed.get("cpu", Fraction(0)) * 1000), value(summed.get("memory", Fraction(0)))


def _affinity(pod: Mapping[str, Any]) -> frozenset[str] | None:
    """The GPU models a pod's required node affinity allows (None: any)."""
    terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    allowed: set[str] = set()
    for term in terms:
        for e in term.get("matchExpressions") or []:
            if e.get("key") == LABEL_MODEL and e.get("operator") == "In":
                allowed.update(e.get("values") or [])
    return frozenset(allowed) if terms else None


class Simulator:
    """One policy's run over one cluster (see the module docstring)."""

    def __init__(self, nodes: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], policy: Policy, *,
                 seed: int = 0, target: Mapping[Shape, float] | None = None, known_mix: bool = False) -> None:
        self.policy = policy
        # DeviceShare's scores alone (a trace has no NodeMetric or NRT: LoadAware would score every node 0 and
        # NodeNUMAResource would add a cpu/memory spread score that is not the policy under test); 0..100 so that
        # close scores stay apart
        self.cache = ClusterCache(ExtenderConfig(strategy=policy.strategy, max_score=100,
                                                 weights=PluginWeights(1, 0, 0)))
        self.extender = Extender(self.cache)
        if known_mix and self.extender.allocator.mix is not None:
            # FGD as the paper runs it, with the trace's workload known in advance (default: learned online)
            self.extender.allocator.mix.set(target or {})
        self._rng = random.Random(seed)
        self.capacity = 0
        for node, device in nodes:
            self.cache.on_node("ADDED", node)
            if device is not None:
                self.cache.on_device("ADDED", device)
        self._members: dict[tuple[Any, ...], set[str]] = {}
        self._class: dict[str, tuple[Any, ...]] = {}
        self._model: dict[str, str] = {}
        self._allocatable: dict[str, tuple[int, int]] = {}
        self._free: dict[str, tuple[int, int, int]] = {}      # cpu, memory, GPU milli free
        self._allocated: dict[str, int] = {}
        self._frag: dict[str, float] = {}
        self._target = WorkloadMix()
        self._target.set(target or {})
        for name in self.cache.node_names():
            state = self.cache.get(name)
            assert state is not None and state.node is not None
            self._model[name] = ((state.node.get("metadata") or {}).get("labels") or {}).get(LABEL_MODEL, "")
            self._allocatable[name] = state.allocatable
            self.capacity += WHOLE * len(state.devices.inventory.total(GPU))
            self._refresh(name, state)
        self.allocated = 0           # milli-GPUs the placed pods asked for
        self.fragmented = sum(self._frag.values())
        self.failed = 0
        self.multi_gpu = self.in_partition = self.in_pcie = 0

    # --- node classes and measures ---------------------------------------------------------------------------------

    def _refresh(self, name: str, state: NodeState) -> None:
        """Recompute a node's class, its free resources, allocated GPU and fragmentation after it changed."""
        cpu, memory = state.free()
        totals = state.devices.inventory.total(GPU)
        free = state.devices.free(GPU)
        cards = tuple(card_milli(free[m], totals[m]) for m in sorted(totals))
        key: tuple[Any, ...] = (self._model[name], self._allocatable[name],
                                tuple(tuple(sorted(free[m].items())) for m in sorted(totals)))
        if self.policy.strategy == FRAGMENTATION_AWARE:       # FGD's growth also reads cpu and memory, by step
            key += (cpu // CPU_STEP, memory // MEMORY_STEP)
        old = self._class.get(name)
        if old is not None and old != key:
            members = self._members[old]
            members.discard(name)
            if not members:
                del self._members[old]
        self._class[name] = key
        self._members.setdefault(key, set()).add(name)
        self._free[name] = (cpu, memory, sum(cards))
        self._allocated[name] = sum(WHOLE - c for c in cards)
        self._frag[name] = self._target.fragmentation(NodeFree(cpu, memory, cards))

    def _in_tree_filter(self, pod: Mapping[str, Any]) -> dict[str, list[str]]:
        """kube's own filters (cpu and memory fit, the required GPU model), by class: a representative of each class
        with members that pass, and those members. GPUs are the extender's (ignoredByScheduler), so a pod that fits
        no node's GPUs still reaches it, as in a cluster: that is also how the extender's workload mix sees the
        large pods that no longer fit."""
        cpu, memory = _requests(pod)
        allowed = _affinity(pod)
        free = self._free
        out: dict[str, list[str]] = {}
        for key, members in self._members.items():
            if allowed is not None and key[0] not in allowed:
                continue
            passing = [n for n in members if free[n][0] >= cpu and free[n][1] >= memory]
            if passing:
                out[passing[0]] = passing
        return out

    def _in_tree_score(self, name: str, cpu: int, memory: int, gpu_request: int) -> float:
        cpu_free, memory_free, gpu_free = self._free[name]
        state = self.cache.get(name)
        assert state is not None
        allocatable = state.allocatable
        if self.policy.in_tree == "kube-default":
            # NodeResourcesFit LeastAllocated + NodeResourcesBalancedAllocation on cpu and memory (weights 1)
            fractions = [(a - (f - r)) / a if a else 1.0
                         for a, f, r in ((allocatable[0], cpu_free, cpu), (allocatable[1], memory_free, memory))]
            least = sum((1 - fr) * 100 for fr in fractions) / 2
            mean = sum(fractions) / 2
            std = math.sqrt(sum((fr - mean) ** 2 for fr in fractions) / 2)
            return least + (1 - std) * 100
        if self.policy.in_tree == "best-fit":
            # the tightest fit: the smallest share of GPU and cpu left free after the pod
            gpu_total = WHOLE * len(state.devices.inventory.total(GPU))
            gpu_left = (gpu_free - gpu_request) / gpu_total if gpu_total else 0.0
            cpu_left = (cpu_free - cpu) / allocatable[0] if allocatable[0] else 0.0
            return -(gpu_left + cpu_left)
        return 0.0

    @staticmethod
    def _gpu_request(pod: Mapping[str, Any]) -> int:
        """milli-GPUs a pod's request takes when placed (whole cards count 1000 each)."""
        summed = pod_requests(pod.get("spec") or {})
        whole = sum(value(summed.get(n, Fraction(0))) for n in wire.WHOLE_GPU_RESOURCES)
        if whole:
            return whole * WHOLE
        return value(summed.get(wire.RESOURCE_GPU_MEMORY_RATIO, Fraction(0)) * 10)

    # --- one pod ---------------------------------------------------------------------------------------------------

    def place(self, pod: dict[str, Any], request_milli: int = 0) -> str | None:
        """Schedule one pod as kube-scheduler would with this extender; the node, or None when none fits.
        ``request_milli``: what the pod asked of GPUs in the trace, counted as allocated when it is placed (a share
        rounded up to whole cards counts only its share: the rest of the card is allocated to nobody's use)."""
        meta = pod["metadata"]
        self.cache.on_pod("ADDED", pod)
        # one node per class asks the verbs for the whole class (the members that passed kube's filters)
        reps = self._in_tree_filter(pod)
        fits = self.extender.filter({"Pod": pod, "Nodes": None, "NodeNames": list(reps)})["NodeNames"] \
            if reps else []
        if not fits:
            self.cache.on_pod("DELETED", pod)
            self.failed += 1
            return None
        if self.policy.in_tree == "random":
            pool = [n for rep in fits for n in reps[rep]]
        elif self.policy.in_tree:
            cpu, memory = _requests(pod)
            gpu_request = self._gpu_request(pod)
            scored = {n: self._in_tree_score(n, cpu, memory, gpu_request) for rep in fits for n in reps[rep]}
            best = max(scored.values())
            pool = [n for n, v in scored.items() if v == best]
        else:
            scores = {e["Host"]: e["Score"]
                      for e in self.extender.prioritize({"Pod": pod, "Nodes": None, "NodeNames": fits})}
            best_score = max(scores.values())
            pool = [n for rep in fits if scores[rep] == best_score for n in reps[rep]]
        chosen = self._rng.choice(sorted(pool))
        error = self.extender.bind({"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                    "PodUID": meta["uid"], "Node": chosen})["Error"]
        state = self.cache.get(chosen)
        assert state is not None
        if error:          # one pod at a time: bind re-runs what filter ran, on the same state
            log.warning("simulated bind failed pod=%s node=%s error=%s", meta["name"], chosen, error)
            self.cache.on_pod("DELETED", pod)
            self.failed += 1
            return None
        with state.lock:
            bound = state.pods[meta["uid"]]
        self.cache.on_pod("MODIFIED", bound)        # the watch event the API server would send
        old_frag = self._frag[chosen]
        self._refresh(chosen, state)
        self.allocated += request_milli
        self.fragmented += self._frag[chosen] - old_frag
        self._locality(bound, state)
        return chosen

    def _locality(self, bound: Mapping[str, Any], state: NodeState) -> None:
        raw = ((bound.get("metadata") or {}).get("annotations") or {}).get(wire.ANNOTATION_DEVICE_ALLOCATED)
        if not raw:
            return
        minors = sorted(a["minor"] for a in json.loads(raw).get(GPU, []))
        if len(minors) < 2:
            return
        self.multi_gpu += 1
        index = state.devices.inventory.partitions or {}
        if any(sorted(p.minors) == minors for group in index.get(len(minors), ()) for p in group):
            self.in_partition += 1
        pcies = {d.pcie for m in minors if (d := state.devices.device(GPU, m)) is not None}
        if len(pcies) == 1:
            self.in_pcie += 1

    def point(self, load: int) -> Point:
        cap = self.capacity or 1
        return Point(self.policy.name, load, 1 - self.allocated / cap, self.fragmented / cap, self.failed,
                     self.multi_gpu, self.in_partition, self.in_pcie)


def run(nodes: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], pods: Sequence[records.TracePod],
        policy: Policy, *, seed: int = 0, max_load: int = 100, known_mix: bool = False) -> Run:
    """Submit pods in arrival order until the arrived GPU load reaches ``max_load`` percent of capacity;
    ``known_mix``: FragmentationAware scores with the trace's own mix instead of learning it."""
    target = mix_of([_shape(p) for p in pods])
    sim = Simulator(nodes, policy, seed=seed, target=target, known_mix=known_mix)
    out = Run(policy.name)
    if sim.capacity == 0 or not pods:
        return out
    ordered = sorted(pods, key=lambda p: p.creation_time)
    arrived = 0
    step = 0
    for n in range(MAX_PASSES * len(ordered)):
        tp = ordered[n % len(ordered)]
        if n >= len(ordered):
            tp = records.TracePod(f"{tp.name}-r{n // len(ordered)}", tp.cpu_milli, tp.memory_mib, tp.num_gpu,
                                  tp.gpu_milli, tp.gpu_spec, tp.qos, tp.phase, tp.creation_time, tp.deletion_time,
                                  tp.scheduled_time)
        out.submitted += 1
        if sim.place(cluster.pod_object(tp, whole_gpus=policy.whole_gpus), cluster.gpu_request_milli(tp)) is not None:
            out.placed += 1
        arrived += cluster.gpu_request_milli(tp)
        load = arrived * 100 // sim.capacity
        while step < min(load, max_load) + 1:
            if step:
                out.points.append(sim.point(step))
            step += 1
        if load >= max_load:
            break
    return out


def _shape(p: records.TracePod) -> Shape:
    gpus = p.num_gpu if p.num_gpu > 0 else (1 if p.gpu_milli > 0 else 0)
    share = min(p.gpu_milli, WHOLE) if gpus == 1 else WHOLE
    return Shape(p.cpu_milli, p.memory_mib << 20, share if gpus else 0, gpus)


def at(run_: Run, load: int) -> Point | None:
    """The measures at a load level (the last point at or below it)."""
    best = None
    for p in run_.points:
        if p.load <= load:
            best = p
    return best


def write_outputs(runs: Sequence[Run], out_dir: str) -> list[str]:
    """curve.csv, curve.json and unallocated.png (when matplotlib is installed) in ``out_dir``; their paths."""
    import os
    os.makedirs(out_dir, exist_ok=True)
    rows = [asdict(p) for r in runs for p in r.points]
    paths = [os.path.join(out_dir, "curve.csv"), os.path.join(out_dir, "curve.json")]
    with open(paths[0], "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(Point("", 0, 0.0, 0.0, 0))))
        writer.writeheader()
        writer.writerows(rows)
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump({"runs": [{"policy": r.policy, "submitted": r.submitted, "placed": r.placed,
                             "points": [asdict(p) for p in r.points]} for r in runs]}, f, indent=1)
    try:
        import matplotlib
    except ImportError:
        log.warning("plot skipped: matplotlib is not installed (pip install 'koordlet-py[sim]')")
        return paths
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, low in zip(axes, (0, 80), strict=True):      # the whole run, and the last fifth where policies part
        for r in runs:
            points = [p for p in r.points if p.load >= low]
            ax.plot([p.load for p in points], [100 * p.unallocated for p in points], label=r.policy)
        ax.set_xlabel("arrived workload (% of GPU capacity requested)")
        ax.set_ylabel("GPU capacity unallocated (%)")
        ax.grid(True, alpha=0.3)
    axes[0].set_title("Unallocated GPUs vs arrived load")
    axes[1].set_title("80-100 % of capacity arrived")
    axes[1].legend()
    png = os.path.join(out_dir, "unallocated.png")
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [*paths, png]


def table(runs: Sequence[Run], loads: Sequence[int] = (90, 95, 100)) -> str:
    """The summary the command prints: unallocated and fragmented GPU share, failed pods, at each load."""
    head = ["policy", *(f"unalloc@{x}%" for x in loads), *(f"frag@{x}%" for x in loads), "failed@100%",
            "multi-GPU in partition / PCIe"]
    lines = [head]
    for r in runs:
        points = [at(r, x) for x in loads]
        last = points[-1]
        lines.append([r.policy, *(f"{100 * p.unallocated:.1f}%" if p else "-" for p in points),
                      *(f"{100 * p.fragmented:.1f}%" if p else "-" for p in points),
                      str(last.failed) if last else "-",
                      f"{last.in_partition}/{last.multi_gpu} / {last.in_pcie}/{last.multi_gpu}" if last else "-"])
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines)
