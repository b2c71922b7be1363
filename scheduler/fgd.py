"""Fragmentation-aware GPU placement (FGD: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC '23), as a DeviceShare scoring strategy (``FragmentationAware``).

**Definitions** (the paper's, in milli-GPUs; its artifact is hkust-adsl/kubernetes-scheduler-simulator):

* A *task shape* ``m`` is what one pod asks: cpu, memory, either a share ``d`` < 1000 of one GPU, or ``k``
  whole GPUs, or no GPU, and the GPU models it may run on (none named: any).
* A node's *fragmentation for m*, ``F_n(m)``, is the free GPU capacity on ``n`` that a task of shape ``m`` can no
  longer use:
  - if ``m`` cannot use the node's GPUs at all (it asks none, its models exclude the node's, not enough free cpu
    or memory, no GPU with ``d`` free, or fewer than ``k`` wholly free GPUs), every free milli-GPU of the node is a
    fragment: ``F = Σ_g free_g``;
  - otherwise, a GPU's free capacity is a fragment when it is too small for ``m``'s per-GPU demand: for a share
    ``d``, the GPUs with ``0 < free_g < d``; for whole GPUs, the partly used ones (``0 < free_g < 1000``).
* For a workload *mix* ``M`` (shapes with popularities ``p_m`` summing to 1), ``F_n(M) = Σ_m p_m · F_n(m)``: the
  capacity expected to go unused if tasks keep arriving as the mix says. As in the paper's artifact, the mix holds
  the most frequent shapes that together cover :data:`COVERAGE` of the pods (:func:`typical`): the rare rest would
  cost a pass each for a share of a percent.
* Because a GPU-model pin is part of the shape, a node of a model few shapes may use counts most of its free GPUs
  as fragment already, and placing an unpinned pod there grows fragmentation less than on a node that the pinned
  shapes need: FGD keeps the pinned models' nodes for the pods that can run nowhere else.
* **FGD** places each pod where the *growth* of fragmentation, ``ΔF = F_n'(M) − F_n(M)`` (``n'``: the node after
  the placement), is smallest: across nodes (prioritize) and across the cards of a node for a GPU share (bind).

**Beyond the paper: the cpu and memory beside the GPUs** (``stranding``, a weight, 0 by default: the paper's
measure). The paper's ``F_n(m)`` sees a node's cpu only once not even one more task of ``m`` fits. With room for
``c`` tasks of ``m`` (free cpu and memory over ``m``'s), at most ``c × m's GPU request`` is usable: an 8-GPU node
with 24 cores left can feed two more 12-core GPU tasks, not eight. ``stranding`` adds that share of the GPUs no
copy can be fed to ``F_n(m)``. On the paper's protocol it cuts the GPUs left unallocated on the default workload
(4.37 % against 4.65 % at a weight of 0.1) but raises them where a third of the pods pin a GPU model (12.5 %
against 11.9 %) and, at full weight, on the multi-GPU workload too (bench/NOTES.md): the simulator's ``fgd-cpu``
policy runs it; the extender measures as the paper does.

**Beyond the paper: models the pinned pods crowd** (``scarcity``). FGD measures waste on one node; it does not
see that a GPU model is oversubscribed by the pods that may run only on it. Where a third of the pods pin a model,
the T4-only pods ask more than all the T4 cards (16.4 % of the cluster's GPU capacity against 13.6 %), and every T4
card an unpinned pod takes is one a pinned pod then lacks. A model's *pressure* (:func:`pressure`) is, summed over
the mix's pinned shapes that may use it, the shape's share of the mix's GPU demand over its models' share of the
GPU capacity (1: as crowded as the cluster on average). A placement's growth gains ``scarcity × (the node model's
pressure − the lowest pressure among the models the shape may use) × the GPUs it takes``: a pod pays only for
taking a more crowded model than it had to, so a pod pinned to one model pays nothing, and a workload without pins
is scored as before. On the paper's protocol, with a third of the pods pinned, this more than halved the GPUs left
unallocated at 100 % load (12.7 % to 5.5 %, median of 10 seeds) and nearly halved the failed pods (829 to 434);
overloaded, at 130 %, it leaves more (5.3 % against 4.8 %): the small P100 nodes, left to pinned shares that
ask more cpu per GPU, run out of cpu with GPU capacity left (bench/NOTES.md). The capacity per model comes from
the extender's cache (:attr:`WorkloadMix.capacity`), read at each refresh of the snapshot.

**The mix is learned online** from the pods the extender sees (each filter call observes its pod), so no trace is
needed at run time: a histogram of shapes (cpu rounded up to whole cores and memory to whole GiB, so that similar
pods share an entry; the models a pod's required node affinity, node selector or GPU hint pins) with exponential
decay (half-life :data:`HALF_LIFE` observations), at most :data:`MAX_SHAPES` shapes (the lightest is dropped).
Unlike the paper's target, the learned mix keeps every shape (up to :data:`MAX_SHAPES`): with memory in the
shape, the rare large tasks (8 GPUs, 88 to 120 cores) split into several entries that each fall below a 95 % cut,
and FGD then broke up the empty 8-GPU nodes they need (bench/NOTES.md). Scoring reads a snapshot refreshed at the
1st, 2nd, 4th, ... observation and then every :data:`REFRESH_EVERY`, so fragmentation values can be remembered per
(node state, snapshot) instead of recomputed for every node of every call. Before any pod has been seen the
snapshot holds only :data:`PRIOR`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from koordlet.base.wire import LABEL_GPU_MODEL
from scheduler.requests import CORE, GPU, MEMORY, RATIO, PodDeviceRequest, pod_requests, value

WHOLE = 1000                 # milli-GPUs in one card
HALF_LIFE = 2000.0           # observations after which a shape's weight has halved
MAX_SHAPES = 256
REFRESH_EVERY = 1024
_MEMO = 200_000              # remembered fragmentation values (per snapshot)
SCARCITY = 1.0               # milli-GPUs of growth per milli-GPU taken from a model one pressure unit more crowded


CPU_STEP = 1000             # the learned mix keeps shapes with cpu rounded up to whole cores ...
MEMORY_STEP = 1 << 30       # ... and memory to whole GiB
COVERAGE = 0.95             # the paper's target mix: the most frequent shapes covering this share of the pods
LEARNED_COVERAGE = 1.0      # the learned mix: every shape (module docstring)


def _up(v: int, step: int) -> int:
    return -(-v // step) * step


@dataclass(frozen=True)
class Shape:
    """What one task asks: ``gpu_milli`` per card (< 1000: a share of one card) on ``gpus`` cards (0: none), on a
    node of one of ``models`` (empty: any model)."""

    cpu: int                 # milli-cores
    memory: int              # bytes
    gpu_milli: int = 0
    gpus: int = 0
    models: frozenset[str] = frozenset()

    def coarse(self, cpu_step: int = CPU_STEP, memory_step: int = MEMORY_STEP) -> Shape:
        """The shape with cpu and memory rounded up to the steps (a step of 1 keeps them exact)."""
        return Shape(_up(self.cpu, cpu_step), _up(self.memory, memory_step), self.gpu_milli, self.gpus, self.models)

    def order(self) -> tuple[int, int, int, int, tuple[str, ...]]:
        """A total order over shapes, for ties in popularity (the paper's: cpu, GPU share, GPU count, model)."""
        return self.cpu, self.gpu_milli, self.gpus, self.memory, tuple(sorted(self.models))


@dataclass(frozen=True)
class NodeFree:
    """A node as fragmentation sees it: free cpu, memory, the free milli-GPUs of each card (any order) and its GPU
    model."""

    cpu: int
    memory: int
    gpus: tuple[int, ...]
    model: str = ""


Mix = tuple[tuple[Shape, float], ...]          # shapes with popularities summing to 1

# What the mix holds before any pod is seen, one observation's weight each: whole-card tasks of 1, 2, 4 and 8 GPUs
# (no cpu or memory). Without it the first pods are placed as if no multi-GPU task will ever come, and break up
# the empty 8-GPU nodes that such tasks need; the prior decays like any observation, so the real mix takes over.
PRIOR = tuple(Shape(0, 0, WHOLE, k) for k in (1, 2, 4, 8))


def _copies(node: NodeFree, m: Shape) -> int:
    """How many tasks of shape ``m`` the node's free cpu and memory leave room for."""
    return min(node.cpu // m.cpu if m.cpu > 0 else _UNBOUNDED, node.memory // m.memory if m.memory > 0 else _UNBOUNDED)


_UNBOUNDED = 1 << 40


def fragmentation_for(node: NodeFree, m: Shape, *, stranding: float = 0.0) -> float:
    """``F_n(m)`` in milli-GPUs (see the module docstring; ``stranding``: the weight of the GPUs no copy of ``m``
    can be fed)."""
    total = sum(node.gpus)
    if total == 0:
        return 0
    if m.gpus == 0 or (m.models and node.model not in m.models) or node.cpu < m.cpu or node.memory < m.memory:
        return total
    if m.gpu_milli < WHOLE:
        frag = sum(f for f in node.gpus if f < m.gpu_milli) if max(node.gpus) >= m.gpu_milli else total
    else:
        whole = sum(1 for f in node.gpus if f >= WHOLE)
        frag = total - whole * WHOLE if whole >= m.gpus else total
    if stranding:
        rest = total - _copies(node, m) * m.gpu_milli * m.gpus
        if rest > frag:
            return frag + stranding * (rest - frag)
    return frag


def fragmentation(node: NodeFree, mix: Mix, *, stranding: float = 0.0) -> float:
    """``F_n(M)``: the mix-weighted fragmentation of one node, in milli-GPUs (:func:`fragmentation_for` per shape,
    with the node's totals and the fragment for each share size computed once: this runs for every node state the
    extender scores)."""
    cards = node.gpus
    total = sum(cards)
    if total == 0:
        return 0.0
    top = max(cards)
    whole = sum(1 for f in cards if f >= WHOLE)
    partial = total - whole * WHOLE
    by_share: dict[int, int] = {}
    out = 0.0
    model, cpu, memory = node.model, node.cpu, node.memory
    for m, p in mix:
        if m.gpus == 0 or (m.models and model not in m.models) or cpu < m.cpu or memory < m.memory:
            out += p * total
            continue
        if m.gpu_milli < WHOLE:
            d = m.gpu_milli
            frag = by_share.get(d)
            if frag is None:
                frag = by_share[d] = sum(f for f in cards if f < d) if top >= d else total
        else:
            frag = partial if whole >= m.gpus else total
        if stranding:       # _copies, inline: this loop is the extender's hottest
            copies = min(cpu // m.cpu if m.cpu > 0 else _UNBOUNDED, memory // m.memory if m.memory > 0 else _UNBOUNDED)
            rest = total - copies * m.gpu_milli * m.gpus
            if rest > frag:
                out += p * stranding * (rest - frag)
        out += p * frag
    return out


def placements(node: NodeFree, shape: Shape) -> list[NodeFree]:
    """The distinct states the node can be left in by one placement of ``shape`` (one per distinct free value of a
    card that can take a share; whole cards are interchangeable). Empty: it does not fit."""
    if node.cpu < shape.cpu or node.memory < shape.memory:
        return []
    cpu, memory = node.cpu - shape.cpu, node.memory - shape.memory
    if shape.gpus == 0:
        return [NodeFree(cpu, memory, node.gpus, node.model)]
    if shape.gpu_milli < WHOLE:
        out, seen = [], set()
        for i, f in enumerate(node.gpus):
            if f >= shape.gpu_milli and f not in seen:
                seen.add(f)
                out.append(NodeFree(cpu, memory, node.gpus[:i] + (f - shape.gpu_milli,) + node.gpus[i + 1:],
                                    node.model))
        return out
    left, taken = [], 0
    for f in node.gpus:
        if f >= WHOLE and taken < shape.gpus:
            taken += 1
            left.append(0)
        else:
            left.append(f)
    return [NodeFree(cpu, memory, tuple(left), node.model)] if taken == shape.gpus else []


class WorkloadMix:
    """The online, decaying histogram of task shapes (thread-safe) and the snapshot scoring reads.

    ``cpu_step`` and ``memory_step``: the steps shapes are rounded up to (1: exact, as for a known mix whose
    shapes are the trace's own); ``coverage``: the share of the weight the snapshot's shapes cover;
    ``stranding``: the weight of the GPUs the node's cpu and memory cannot feed (the module docstring; 0: the
    paper's measure); ``scarcity``: the weight of the model pressure (0: none)."""

    def __init__(self, half_life: float = HALF_LIFE, max_shapes: int = MAX_SHAPES,
                 refresh_every: int = REFRESH_EVERY, prior: Sequence[Shape] = PRIOR, *,
                 cpu_step: int = CPU_STEP, memory_step: int = MEMORY_STEP, coverage: float = LEARNED_COVERAGE,
                 stranding: float = 0.0, scarcity: float = SCARCITY) -> None:
        self.stranding, self.scarcity = stranding, scarcity
        # GPU cards per model (the gpu-model label) in the cluster, read at each refresh for the model pressure;
        # called under this mix's lock, so it must not call back into the mix (the cache's gpus_by_model does not)
        self.capacity: Callable[[], Mapping[str, int]] | None = None
        self._pressure: dict[str, float] = {}
        self._floors: dict[frozenset[str], float] = {}
        self._coverage = coverage
        self._decay = math.pow(0.5, 1.0 / half_life)
        self._max_shapes, self._refresh_every = max_shapes, refresh_every
        self._steps = (cpu_step, memory_step)
        self._weights: dict[Shape, float] = {}
        self._scale = 1.0              # weights are stored divided by the decay so far (no per-shape update)
        self._seen = 0
        self._lock = threading.Lock()
        self.snapshot: Mix = ()
        self.version = 0
        self._memo: dict[NodeFree, float] = {}
        self._frozen = False
        for shape in prior:
            self._weights[shape.coarse(*self._steps)] = 1.0
        self._refresh()

    def observe(self, shape: Shape) -> None:
        if self._frozen:
            return
        with self._lock:
            self._scale /= self._decay
            key = shape.coarse(*self._steps)
            if key not in self._weights and len(self._weights) >= self._max_shapes:
                # make room by dropping the lightest shape seen so far (a new shape always gets in)
                del self._weights[min(self._weights, key=self._weights.__getitem__)]
            self._weights[key] = self._weights.get(key, 0.0) + self._scale
            if self._scale > 1e100:            # renormalize long before floats overflow
                self._weights = {k: v / self._scale for k, v in self._weights.items()}
                self._scale = 1.0
            self._seen += 1
            seen = self._seen
            # refreshed at the 1st, 2nd, 4th, 8th ... observation, then every refresh_every: early on each pod
            # changes the mix a lot, later one pod changes it little (and each refresh empties the memo)
            if seen % self._refresh_every == 0 or (seen < self._refresh_every and seen & (seen - 1) == 0):
                self._refresh()

    def set(self, mix: Mapping[Shape, float], *, frozen: bool = True) -> None:
        """Use a known mix (a trace's workload, as the FGD paper does, and the simulator's fragmentation measure);
        ``frozen``: observations no longer change it."""
        self._frozen = frozen
        with self._lock:
            weights: dict[Shape, float] = {}
            for k, v in mix.items():
                if v > 0:
                    key = k.coarse(*self._steps)
                    weights[key] = weights.get(key, 0.0) + v
            self._weights = weights
            self._scale = 1.0
            self._refresh()

    def _refresh(self) -> None:
        self.snapshot = tuple(typical(self._weights, self._coverage).items())
        crowded = pressure(self.snapshot, self.capacity()) if self.capacity is not None else {}
        self._pressure = crowded if any(crowded.values()) else {}      # no pins: nothing to charge
        self._floors = {}
        self.version += 1
        self._memo = {}

    def fragmentation(self, node: NodeFree) -> float:
        """``F_n(M)`` under the current snapshot, remembered per node state. The mix's shapes are in whole steps
        of cpu and memory, so the node's are floored to those steps first: every comparison comes out the same,
        and nodes that differ by less share one entry."""
        cpu_step, memory_step = self._steps
        node = NodeFree(node.cpu - node.cpu % cpu_step, node.memory - node.memory % memory_step, node.gpus,
                        node.model)
        memo = self._memo
        known = memo.get(node)
        if known is None:
            known = fragmentation(node, self.snapshot, stranding=self.stranding)
            if len(memo) < _MEMO:
                memo[node] = known
        return known

    def best_growth(self, node: NodeFree, shape: Shape) -> float | None:
        """The smallest ``ΔF`` over the placements of ``shape`` on ``node``, plus the cost of the model pressure
        (the module docstring); None when it does not fit."""
        after = placements(node, shape)
        if not after:
            return None
        before = self.fragmentation(node)
        growth = min(self.fragmentation(n) for n in after) - before
        crowded = self._pressure
        if crowded and shape.gpus:
            excess = crowded.get(node.model, 0.0) - self._floor(shape.models)
            if excess > 0:
                growth += self.scarcity * excess * shape.gpu_milli * shape.gpus
        return growth

    def _floor(self, models: frozenset[str]) -> float:
        """The lowest pressure among ``models`` (empty: any model), remembered until the next refresh."""
        floors = self._floors
        low = floors.get(models)
        if low is None:
            crowded = self._pressure
            low = floors[models] = min((crowded[m] for m in models or crowded if m in crowded), default=0.0)
        return low


def pressure(mix: Mix, capacity: Mapping[str, int]) -> dict[str, float]:
    """Each model's pressure (the module docstring), for every model with capacity: Σ over the pinned shapes whose
    models include it of (the shape's share of the mix's GPU demand) / (the capacity share of its models)."""
    total = sum(capacity.values())
    demand = sum(p * m.gpu_milli * m.gpus for m, p in mix)
    out = dict.fromkeys((model for model, cards in capacity.items() if cards > 0), 0.0)
    if total <= 0 or demand <= 0:
        return out
    for m, p in mix:
        if not m.models or not m.gpus:
            continue
        share = sum(capacity.get(model, 0) for model in m.models) / total
        if share > 0:
            crowding = p * m.gpu_milli * m.gpus / demand / share
            for model in m.models:
                if model in out:
                    out[model] += crowding
    return out


def typical(counts: Mapping[Shape, float], coverage: float = COVERAGE) -> dict[Shape, float]:
    """The most frequent shapes that together cover ``coverage`` of the weight (ties: the larger shape first, as
    the paper's artifact sorts them), their popularities renormalized to sum to 1, most frequent first."""
    total = sum(counts.values())
    if total <= 0:
        return {}
    kept: dict[Shape, float] = {}
    covered = 0.0
    for shape, weight in sorted(counts.items(), key=lambda kv: (kv[1], kv[0].order()), reverse=True):
        if covered >= coverage * total:
            break
        kept[shape] = weight
        covered += weight
    return {s: w / covered for s, w in kept.items()}


def card_growth(mix: WorkloadMix, cards: Mapping[int, int], minor: int, share: int,
                cpu: int = 1 << 62, memory: int = 1 << 62) -> float:
    """``ΔF`` of putting a share of ``share`` milli-GPUs on card ``minor`` of a node whose cards have ``cards``
    free (minor -> milli-GPUs): the bind-time choice of a card. cpu, memory and the node's model weigh the same
    whichever card is chosen, so they may be left out."""
    before = NodeFree(cpu, memory, tuple(cards[m] for m in sorted(cards)))
    after = NodeFree(cpu, memory, tuple(cards[m] - (share if m == minor else 0) for m in sorted(cards)))
    return mix.fragmentation(after) - mix.fragmentation(before)


TIE = 5.0              # milli-GPUs of growth within which placements count as equally good
TIE_BAND = 10.0        # score points the tie-break (packing) spans at the top


def normalize(growth: Mapping[str, float], packed: Mapping[str, float] | None = None) -> dict[str, float]:
    """Node scores 0..100 from ``ΔF`` per node, with packing as the tie-break.

    Nodes within :data:`TIE` of the smallest growth share the top band, 90..100, ordered by ``packed`` (the
    node's used share of its resources once the pod is placed: the fuller the higher, as best-fit would pick); the
    others score 90 less one point per milli-GPU more (at least 0). Not min-max scaling: with hundreds of nodes the
    spread between the best and the worst is hundreds of milli-GPUs, and scaled into 100 integer steps the few
    milli-GPUs that separate the best nodes (a rare 8-GPU shape's share of a node's growth) would round away. The
    tie-break matters as much: many placements leave fragmentation alike (a CPU-only pod on any node with cpu to
    spare), and spreading those at random uses up the cpu that GPU tasks later need beside free GPUs; in the
    simulation the packing tie-break cut the GPUs left unallocated at 100 % load by a fifth (bench/NOTES.md)."""
    if not growth:
        return {}
    lo = min(growth.values())
    top = 100.0 - TIE_BAND
    out = {}
    for n, g in growth.items():
        excess = g - lo
        if excess < TIE:
            out[n] = top + TIE_BAND * min(1.0, max(0.0, (packed or {}).get(n, 0.0)))
        else:
            out[n] = max(0.0, top - excess)
    return out


def card_milli(free: Mapping[str, int], total: Mapping[str, int]) -> int:
    """A card's free milli-GPUs as fragmentation counts them: the smaller of its free compute and memory shares."""
    shares = [free.get(name, 0) * 10 for name in (CORE, RATIO) if name in total]
    if not shares and total.get(MEMORY):
        shares = [free.get(MEMORY, 0) * WHOLE // total[MEMORY]]
    return min(shares) if shares else 0


def shape_of(pod: Mapping[str, Any], request: PodDeviceRequest) -> Shape:
    """The pod's task shape: its cpu and memory requests, its GPU request per card (a share of a card in
    milli-GPUs from its compute or memory-ratio percent; a memory-only share counts as half a card, since its
    fraction depends on the card it lands on) and the GPU models it is pinned to (:func:`pinned_models`)."""
    summed = pod_requests(pod.get("spec") or {})
    cpu, memory = value(summed.get("cpu", Fraction(0)) * 1000), value(summed.get("memory", Fraction(0)))
    gpu = request.gpu
    if gpu is None:
        return Shape(cpu, memory)
    return Shape(cpu, memory, shape_milli(gpu.per_gpu), gpu.count, pinned_models(pod, request) or frozenset())


def pinned_models(pod: Mapping[str, Any], request: PodDeviceRequest | None = None) -> frozenset[str] | None:
    """The GPU models (values of the ``gpu-model`` node label) a pod may run on, None when any: its node
    selector, the ``In`` expressions of its required node affinity (terms are alternatives: a term that does not
    name the model allows any), and its GPU hint's device selector."""
    spec = pod.get("spec") or {}
    allowed: set[str] | None = None
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        in_term: set[str] | None = None
        for e in term.get("matchExpressions") or []:
            if e.get("key") == LABEL_GPU_MODEL and e.get("operator") == "In":
                values = {str(v) for v in e.get("values") or []}
                in_term = values if in_term is None else in_term & values
        if in_term is None:
            allowed = None
            break
        allowed = in_term if allowed is None else allowed | in_term
    selected = (spec.get("nodeSelector") or {}).get(LABEL_GPU_MODEL)
    if selected is not None:
        allowed = {str(selected)} if allowed is None else allowed & {str(selected)}
    hint = request.hints.get(GPU) if request is not None else None
    if hint is not None and hint.selector is not None:
        selector = hint.selector
        pins = [values for key, op, values in selector.expressions if key == LABEL_GPU_MODEL and op == "In"]
        if LABEL_GPU_MODEL in selector.match_labels:
            pins.append(frozenset({selector.match_labels[LABEL_GPU_MODEL]}))
        for pin in pins:
            allowed = set(pin) if allowed is None else allowed & pin
    return frozenset(allowed) if allowed is not None else None


def shape_milli(per_gpu: Mapping[str, int]) -> int:
    """milli-GPUs a per-card request takes (its memory-ratio or compute percent × 10; memory only: half a card)."""
    share = per_gpu[RATIO] * 10 if RATIO in per_gpu else per_gpu[CORE] * 10 if CORE in per_gpu else WHOLE // 2
    return min(share, WHOLE)
