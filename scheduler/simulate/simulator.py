"""One policy's run over one cluster: pods placed one by one through the extender's own verbs, and the measures
after each.

**The same code path as the extender.** The simulator plays kube-scheduler and the API server around one
:class:`~scheduler.extender.Extender`: for each pod it runs kube's own filters (cpu, memory and pod count fit, the
pod's required node affinity on the GPU model), then the extender's ``filter`` verb and either its ``prioritize``
verb or the policy's in-tree score (:mod:`scheduler.simulate.policies`), picks the highest (ties broken by a seeded
draw, as kube's selectHost, or by the seed's ranking of the nodes for the paper's policies) and calls the ``bind``
verb, which allocates and assumes; the pod's bound copy is then fed back as its watch event. Nothing here decides
where a device goes.

**Equivalent nodes are asked once.** The verbs are called with one node name per class of nodes that get the same
answers from every verb and score: same model, size and per-card free resources, plus what the policy's score
reads (free cpu and memory; for FragmentationAware, in whole cores and GiB). The pick among equal-best nodes is
uniform over all members of the best classes. This is what makes 10,000 pods on 1,200 nodes take a minute, not
hours.

**Departures** (:meth:`Simulator.remove`) go the way a real cluster's do: the extender's cache gets the pod's DELETED
watch event, and the simulator's own view of the node (free resources, class, pod count, kinds) is recomputed.

**Measures** after each pod (:class:`Curve` turns them into one point per 1 % of arrived load, as the paper's
artifact does; :mod:`scheduler.simulate.churn` one per 1 % of time): the share of GPU capacity unallocated (no
placed pod asked for it); the fragmented share (Σ over nodes of ``F_n(M)`` for the target mix ``M``,
:mod:`scheduler.fgd`); the pods that failed so far; and of the multi-GPU pods placed, how many got cards inside one
partition of their node's table (NVLink) and how many inside one PCIe switch.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koordlet.base import wire
from scheduler.allocator import FRAGMENTATION_AWARE
from scheduler.cache import ClusterCache, NodeState
from scheduler.config import ExtenderConfig, PluginWeights
from scheduler.extender import Extender
from scheduler.fgd import CPU_STEP, MEMORY_STEP, WHOLE, NodeFree, Shape, WorkloadMix, card_milli
from scheduler.requests import GPU
from scheduler.simulate.policies import Ask, NodeView, Policy, normalized
from scheduler.trace import cluster, records

log = logging.getLogger(__name__)


@dataclass
class Point:
    """The measures at one load level (percent of GPU capacity requested by the pods submitted so far) or, with
    departures, at one time level (``time``: percent of the arrivals' time span, and ``demand``: the share of GPU
    capacity the live pods ask, placed or not); both None without departures."""

    policy: str
    load: int
    unallocated: float           # share of GPU capacity no placed pod asked for
    fragmented: float            # share of GPU capacity fragmented for the target mix
    failed: int                  # pods that found no node so far
    multi_gpu: int = 0           # multi-GPU pods placed so far
    in_partition: int = 0        # ... with their cards inside one partition of the node's table
    in_pcie: int = 0             # ... with their cards behind one PCIe switch
    seed: int = 0
    time: int | None = None
    demand: float | None = None


@dataclass
class Run:
    """One policy's run with one seed: its points, and the pods submitted and placed."""

    policy: str
    seed: int = 0
    points: list[Point] = field(default_factory=list)
    submitted: int = 0
    placed: int = 0


def task_shape(pod: records.TracePod) -> Shape:
    """A trace pod's shape as the paper's artifact counts its typical pods: cpu, GPU share per card, GPU count and
    GPU models; memory is not part of it."""
    milli = min(pod.gpu_milli, WHOLE) if pod.num_gpu else 0
    return Shape(pod.cpu_milli, 0, milli, pod.num_gpu, frozenset(pod.gpu_spec))


def ask_of(pod: records.TracePod, whole_gpus: bool) -> Ask:
    """What the pod asks of a node as placed: a share in koordinator's 1 % steps, or whole cards."""
    if not pod.num_gpu:
        milli, gpus = 0, 0
    elif whole_gpus or pod.gpu_milli >= WHOLE or pod.num_gpu > 1:
        milli, gpus = WHOLE, pod.num_gpu
    else:
        milli, gpus = min(cluster.share_percent(pod.gpu_milli) * 10, WHOLE), 1
    return Ask(pod.cpu_milli, pod.memory_mib * cluster.MIB, milli, gpus, task_shape(pod))


class Simulator:
    """One policy's run over one cluster (see the module docstring). ``target``: the mix fragmentation is measured
    against (and paper-fgd scores with; the extender's FragmentationAware too with ``known_mix``); ``max_pods``:
    pods a node takes at most (None: no limit)."""

    def __init__(self, nodes: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], policy: Policy, *,
                 seed: int = 0, target: Mapping[Shape, float] | None = None, known_mix: bool = False,
                 max_pods: int | None = None) -> None:
        self.policy = policy
        # DeviceShare's scores alone (a trace has no NodeMetric or NRT: LoadAware would score every node 0 and
        # NodeNUMAResource would add a cpu/memory spread score that is not the policy under test); 0..100 so that
        # close scores stay apart
        self.cache = ClusterCache(ExtenderConfig(strategy=policy.strategy, max_score=100,
                                                 weights=PluginWeights(1, 0, 0)))
        self.extender = Extender(self.cache)
        # the target mix's shapes are the trace's own, cpu exact; fragmentation as the paper measures it
        # the target arrives cut to the paper's 95 % (protocol.target_mix): this mix keeps it whole, not cut twice
        self._target = WorkloadMix(prior=(), cpu_step=1, memory_step=1)
        self._target.set(target or {})
        mix = self.extender.allocator.mix
        if mix is not None:
            mix.stranding, mix.scarcity = policy.stranding, policy.scarcity
            if known_mix or policy.known_mix:
                # FGD with the trace's workload known in advance, as the paper runs it (default: learned online)
                mix.set(target or {})
        self._rng = random.Random(f"ties-{seed}")
        self._max_pods = max_pods
        self.capacity = 0
        for node, device in nodes:
            self.cache.on_node("ADDED", node)
            if device is not None:
                self.cache.on_device("ADDED", device)
        # class -> its nodes in the order they joined it (a dict, not a set: the representative kube's filters
        # send the verbs must not depend on string hashing, or a run would differ with PYTHONHASHSEED)
        self._members: dict[tuple[Any, ...], dict[str, None]] = {}
        self._class: dict[str, tuple[Any, ...]] = {}
        self._model: dict[str, str] = {}
        self._allocatable: dict[str, tuple[int, int]] = {}
        self._free: dict[str, tuple[int, int]] = {}           # cpu (milli), memory (bytes)
        self._cards: dict[str, tuple[int, ...]] = {}          # free milli-GPUs per card
        self._kinds: dict[str, Counter[str]] = {}             # GPU kinds of the pods on the node
        self._pods: Counter[str] = Counter()
        self._frag: dict[str, float] = {}
        self._bound: dict[str, tuple[str, dict[str, Any]]] = {}   # placed pod's name -> its node, its bound copy
        names = sorted(self.cache.node_names())
        # the seed's ranking of the nodes, for policies whose ties go to the first (the paper's artifact)
        self._rank = dict(zip(random.Random(f"ranks-{seed}").sample(names, len(names)), range(len(names)),
                              strict=True))
        for name in names:
            state = self.cache.get(name)
            assert state is not None and state.node is not None
            self._model[name] = state.gpu_model
            self._allocatable[name] = state.allocatable
            self._kinds[name] = Counter()
            self.capacity += WHOLE * len(state.devices.inventory.total(GPU))
            self._refresh(name, state)
        self.allocated = 0           # milli-GPUs the placed pods asked for
        self.fragmented = sum(self._frag.values())
        self.failed = 0
        self.multi_gpu = self.in_partition = self.in_pcie = 0

    # --- node classes and measures ---------------------------------------------------------------------------------

    def _refresh(self, name: str, state: NodeState) -> None:
        """Recompute a node's class, its free resources and fragmentation after it changed."""
        cpu, memory = state.free()
        totals = state.devices.inventory.total(GPU)
        free = state.devices.free(GPU)
        cards = tuple(card_milli(free[m], totals[m]) for m in sorted(totals))
        key: tuple[Any, ...] = (self._model[name], self._allocatable[name],
                                tuple(tuple(sorted(free[m].items())) for m in sorted(totals)))
        if self.policy.score is not None:           # an in-tree score may read all of these
            key += (cpu, memory, tuple(sorted(self._kinds[name].items())))
        elif self.policy.strategy == FRAGMENTATION_AWARE:     # FGD's growth also reads cpu and memory, by step
            key += (cpu // CPU_STEP, memory // MEMORY_STEP)
        old = self._class.get(name)
        if old is not None and old != key:
            members = self._members[old]
            members.pop(name, None)
            if not members:
                del self._members[old]
        self._class[name] = key
        self._members.setdefault(key, {})[name] = None
        self._free[name] = (cpu, memory)
        self._cards[name] = cards
        self._frag[name] = self._target.fragmentation(NodeFree(cpu, memory, cards, self._model[name]))

    def _in_tree_filter(self, ask: Ask, models: frozenset[str]) -> dict[str, list[str]]:
        """kube's own filters (cpu, memory and pod count fit, the required GPU model), by class: a representative of
        each class with members that pass, and those members. GPUs are the extender's (ignoredByScheduler), so a
        pod that fits no node's GPUs still reaches it, as in a cluster: that is also how the extender's workload
        mix sees the large pods that no longer fit."""
        free, pods, limit = self._free, self._pods, self._max_pods
        out: dict[str, list[str]] = {}
        for key, members in self._members.items():
            if models and key[0] not in models:
                continue
            passing = [n for n in members if free[n][0] >= ask.cpu and free[n][1] >= ask.memory
                       and (limit is None or pods[n] < limit)]
            if passing:
                out[passing[0]] = passing
        return out

    def _view(self, name: str) -> NodeView:
        cpu, memory = self._free[name]
        return NodeView(cpu, memory, self._allocatable[name], self._cards[name], self._model[name], self._kinds[name])

    # --- one pod ---------------------------------------------------------------------------------------------------

    def place(self, tp: records.TracePod) -> str | None:
        """Schedule one trace pod as kube-scheduler would with this extender and policy; the node, or None when none
        fits. What the pod asked of GPUs in the trace counts as allocated once it is placed (a share rounded up to
        whole cards counts only its share: the rest of the card is allocated to nobody's use)."""
        pod = cluster.pod_object(tp, whole_gpus=self.policy.whole_gpus)
        ask = ask_of(tp, self.policy.whole_gpus)
        meta = pod["metadata"]
        self.cache.on_pod("ADDED", pod)
        # one node per class asks the verbs for the whole class (the members that passed kube's filters)
        reps = self._in_tree_filter(ask, frozenset(tp.gpu_spec))
        fits = self.extender.filter({"Pod": pod, "Nodes": None, "NodeNames": list(reps)})["NodeNames"] \
            if reps else []
        if not fits:
            self.cache.on_pod("DELETED", pod)
            self.failed += 1
            return None
        score = self.policy.score
        if score is not None:
            scores = {rep: score(self._view(rep), ask, self._target) for rep in fits}
            if self.policy.normalize:
                scores = normalized(scores)
        else:
            scores = {e["Host"]: e["Score"]
                      for e in self.extender.prioritize({"Pod": pod, "Nodes": None, "NodeNames": fits})}
        best = max(scores.values())
        pool = [n for rep in fits if scores[rep] == best for n in reps[rep]]
        chosen = min(pool, key=self._rank.__getitem__) if self.policy.ranked_ties else self._rng.choice(sorted(pool))
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
        self._bound[tp.name] = (chosen, bound)
        self._pods[chosen] += 1
        if ask.kind:
            self._kinds[chosen][ask.kind] += 1
        self._account(chosen, state, cluster.gpu_request_milli(tp))
        self._locality(bound, state)
        return chosen

    def remove(self, tp: records.TracePod) -> str:
        """A placed pod leaves, as in a cluster: the extender's cache gets its DELETED watch event and frees what it
        held; this simulator's view of the node follows. The node it left; KeyError when it is not placed."""
        node, bound = self._bound.pop(tp.name)
        self.cache.on_pod("DELETED", bound)
        self._pods[node] -= 1
        kind = ask_of(tp, self.policy.whole_gpus).kind
        if kind:
            kinds = self._kinds[node]
            kinds[kind] -= 1
            if not kinds[kind]:         # a node's class must read the same as when the kind never came
                del kinds[kind]
        state = self.cache.get(node)
        assert state is not None
        self._account(node, state, -cluster.gpu_request_milli(tp))
        return node

    def placed(self, name: str) -> str | None:
        """The node a pod is placed on, None when it is not (never was, failed, or left)."""
        entry = self._bound.get(name)
        return entry[0] if entry else None

    def _account(self, name: str, state: NodeState, gpu_milli: int) -> None:
        """A node after a pod came (``gpu_milli`` it asked) or left (minus that): its class, and the measures."""
        old_frag = self._frag[name]
        self._refresh(name, state)
        self.allocated += gpu_milli
        self.fragmented += self._frag[name] - old_frag

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


def load_level(arrived: int, capacity: int) -> int:
    """The load level of ``arrived`` milli-GPUs asked so far: percent of ``capacity``, rounded to an integer."""
    return int(arrived * 100 / capacity + 0.5)


class Curve:
    """The measures at each 1 % of arrived load, as the paper's artifact computes them: after each pod, its load
    is the GPU requests of the pods submitted so far (it included, placed or not) in percent of capacity, rounded
    to an integer; a load level's point is the mean of the measures after the pods at that level (the failed and
    locality counts: after its last pod). A level no pod landed on (a large pod jumped it) gets the mean over its
    neighbours' pods, one level either side, or else the level before's."""

    def __init__(self, sim: Simulator, seed: int) -> None:
        self.policy, self.seed, self.capacity = sim.policy.name, seed, sim.capacity
        self._initial = (1.0, sim.fragmented / sim.capacity)
        self._sums: dict[int, list[float]] = {}     # level -> [pods, Σ unallocated, Σ fragmented]
        self._last: dict[int, tuple[int, int, int, int]] = {}

    def add(self, arrived: int, sim: Simulator) -> None:
        """The measures of ``sim`` after a pod, ``arrived`` milli-GPUs having been asked so far."""
        level = load_level(arrived, self.capacity)
        sums = self._sums.setdefault(level, [0, 0.0, 0.0])
        sums[0] += 1
        sums[1] += 1 - sim.allocated / self.capacity
        sums[2] += sim.fragmented / self.capacity
        self._last[level] = (sim.failed, sim.multi_gpu, sim.in_partition, sim.in_pcie)

    def points(self, top: int) -> list[Point]:
        """A point for each level 1..``top`` up to the last pod's."""
        out: list[Point] = []
        measures, last = self._initial, (0, 0, 0, 0)
        for level in range(1, min(top, max(self._sums, default=0)) + 1):
            near = [self._sums[x] for x in ((level,) if level in self._sums else (level - 1, level + 1))
                    if x in self._sums]
            if near:
                pods = sum(s[0] for s in near)
                measures = (sum(s[1] for s in near) / pods, sum(s[2] for s in near) / pods)
            last = self._last.get(level, last)
            out.append(Point(self.policy, level, *measures, *last, seed=self.seed))
        return out
