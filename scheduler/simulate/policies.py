"""The placement policies the simulator compares, and the node scores of those whose scoring kube-scheduler plays.

Every policy runs through the same path (:mod:`scheduler.simulate.simulator`): kube's filters, the extender's
filter and bind. What differs is who scores the nodes (the extender's prioritize, or a score here in kube's place)
and how the extender picks a GPU share's card at bind (DeviceShare's scoring strategy).

**Ours.**

* ``kube-default``: a cluster without GPU sharing: every GPU request is whole cards (``nvidia.com/gpu``, the device
  plugin), scored by kube's NodeResourcesFit LeastAllocated and BalancedAllocation on cpu and memory;
* ``random-fit``: a uniform draw over the feasible nodes;
* ``best-fit``: the node left with the least free, GPU and cpu shares of the node summed; a share's card the
  tightest that fits;
* ``deviceshare-least`` / ``deviceshare-most``: koord-scheduler's DeviceShare with LeastAllocated / MostAllocated;
* ``fgd``: DeviceShare with FragmentationAware (:mod:`scheduler.fgd`), the workload mix learned online, the
  model pressure counted (``scarcity``);
* ``fgd-plain``: ``fgd`` without the model pressure: fragmentation alone, as the paper measures it;
* ``fgd-cpu``: ``fgd`` that also counts a tenth of the GPUs the node's free cpu and memory can no longer feed
  (:mod:`scheduler.fgd`'s ``stranding``): better on the default workload, worse where pods pin GPU models.

**The paper's** (Weng et al., ATC '23: the score plugins of its artifact, hkust-adsl/kubernetes-scheduler-simulator,
as its experiments configure them: one plugin, integer scores 0..100, the highest wins; a share's card the tightest
that fits, its "best" GPU selection, which is DeviceShare's MostAllocated at bind). Ties do not go to a random node,
as kube's selectHost draws: the artifact's vendored selectHost takes the smallest node name, and the names carry a
prefix from a seeded permutation of the nodes, so each seed ranks the nodes once and every tie goes to the first of
them in that ranking (its placements pile up on the same nodes, as packing would). Resources are absolute: cpu in
units of 128 cores and GPUs of 8 cards (its largest node), not shares of each node.

* ``paper-best-fit`` (BestFitScore): ``100 × (1 − ½ cpu left / 128 cores − ½ GPUs left / 8)`` after the pod,
  truncated, then min–max normalized over the feasible nodes in integers (its NormalizeScore);
* ``paper-dot-product`` (DotProductScore, ``merge``, ``max``): ``100 × (1 − ½ (cpu free × cpu asked / 128² +
  GPUs free × GPUs asked / 8²))`` before the pod, truncated (0 where the cpu does not fit): the node whose free
  resources point least along the request;
* ``paper-gpu-packing`` (GpuPackingScore): a partly used card that fits first (100 less a tenth of the free
  percent on the cards used, at least 50), then free cards of a used node (50 less the free cards taken, at
  least 33), then an empty node (33 less its cards, at least its cards); a pod without GPUs scores 0 everywhere;
* ``paper-gpu-clustering`` (GpuClusteringScore): nodes holding only pods of the pod's own GPU kind (a share, or
  ``n`` whole cards) 75..100, mixed nodes holding that kind 50..75, empty nodes 25..50, others 0..25, within a band
  by how little GPU is free; a pod without GPUs scores 0 everywhere;
* ``paper-fgd`` (FGDScore): ``100 × sigmoid(−ΔF / 1000)``, truncated, ``ΔF`` the growth of the node's
  fragmentation under the trace's typical shapes (the simulator's target mix), the extender's card choice under
  the same mix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from scheduler.allocator import FRAGMENTATION_AWARE, LEAST_ALLOCATED, MOST_ALLOCATED
from scheduler.fgd import SCARCITY, WHOLE, NodeFree, Shape, WorkloadMix

MAX_SPEC_CPU = 128_000       # the paper's normalization: its largest node's cpu (milli) ...
MAX_SPEC_GPU = 8 * WHOLE     # ... and GPUs (milli)


@dataclass(frozen=True)
class NodeView:
    """One node as the in-tree scores read it."""

    cpu_free: int                          # milli-cores
    memory_free: int                       # bytes
    allocatable: tuple[int, int]           # cpu (milli), memory (bytes)
    cards: tuple[int, ...]                 # free milli-GPUs per card, by minor
    model: str = ""
    kinds: Mapping[str, int] = field(default_factory=dict)   # GPU kind (:attr:`Ask.kind`) -> pods of it here


@dataclass(frozen=True)
class Ask:
    """What one pod asks, as the in-tree scores read it: ``gpu_milli`` per card on ``gpus`` cards."""

    cpu: int
    memory: int
    gpu_milli: int
    gpus: int
    shape: Shape                           # its task shape (paper-fgd's growth)

    @property
    def gpu_total(self) -> int:
        return self.gpu_milli * self.gpus

    @property
    def kind(self) -> str:
        """The pod's GPU kind, as GPU clustering groups pods: "" without GPUs, a share, or ``n`` whole cards."""
        if not self.gpus:
            return ""
        return "share" if self.gpu_milli < WHOLE else f"{self.gpus}-gpu"


Score = Callable[[NodeView, Ask, WorkloadMix], float]


@dataclass(frozen=True)
class Policy:
    """One policy: the extender's DeviceShare strategy (its card choice at bind, and its node scores when
    ``score`` is None) and the in-tree ``score`` that replaces them (higher is better; the best score wins, ties
    drawn at random, or with ``ranked_ties`` to the first node in the seed's ranking, as the paper's artifact).
    ``normalize``: scores min–max scaled to 0..100 in integers over the feasible nodes first; ``known_mix``: the
    extender's FragmentationAware uses the target mix instead of learning one; ``stranding`` and ``scarcity``: its
    weights of the GPUs the cpu and memory left cannot feed and of the model pressure (:mod:`scheduler.fgd`)."""

    name: str
    strategy: str = LEAST_ALLOCATED
    whole_gpus: bool = False               # every GPU request as whole cards (kube's default with the device plugin)
    score: Score | None = None
    normalize: bool = False
    known_mix: bool = False
    ranked_ties: bool = False
    stranding: float = 0.0
    scarcity: float = SCARCITY


def kube_default(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """NodeResourcesFit LeastAllocated + NodeResourcesBalancedAllocation on cpu and memory (weights 1)."""
    fractions = [(a - (f - r)) / a if a else 1.0
                 for a, f, r in ((node.allocatable[0], node.cpu_free, ask.cpu),
                                 (node.allocatable[1], node.memory_free, ask.memory))]
    least = sum((1 - fr) * 100 for fr in fractions) / 2
    mean = sum(fractions) / 2
    std = math.sqrt(sum((fr - mean) ** 2 for fr in fractions) / 2)
    return least + (1 - std) * 100


def random_fit(_node: NodeView, _ask: Ask, _mix: WorkloadMix) -> float:
    """Every feasible node alike: the draw among ties is the policy."""
    return 0.0


def best_fit(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """The tightest fit: minus the shares of the node's GPU and cpu left free after the pod."""
    gpu_total = WHOLE * len(node.cards)
    gpu_left = (sum(node.cards) - ask.gpu_total) / gpu_total if gpu_total else 0.0
    cpu_left = (node.cpu_free - ask.cpu) / node.allocatable[0] if node.allocatable[0] else 0.0
    return -(gpu_left + cpu_left)


def paper_best_fit(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """BestFitScore before normalization (the module docstring)."""
    left = 0.5 * (node.cpu_free - ask.cpu) / MAX_SPEC_CPU + 0.5 * (sum(node.cards) - ask.gpu_total) / MAX_SPEC_GPU
    return float(int((1.0 - left) * 100))


def paper_dot_product(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """DotProductScore with ``merge`` and ``max`` (the module docstring)."""
    if node.cpu_free < ask.cpu:
        return 0.0
    dot = (node.cpu_free / MAX_SPEC_CPU) * (ask.cpu / MAX_SPEC_CPU) + \
        (sum(node.cards) / MAX_SPEC_GPU) * (ask.gpu_total / MAX_SPEC_GPU)
    return float(int(100 * (1 - dot / 2)))


def paper_gpu_packing(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """GpuPackingScore (the module docstring): the cards a pod would take are the fullest that fit."""
    if ask.gpu_milli <= 0:
        return 0.0
    free_cards = sum(1 for c in node.cards if c >= WHOLE)
    if free_cards == len(node.cards):
        return float(max(100 // 3 - free_cards, free_cards))
    need, taken = ask.gpus, []
    for c in sorted(node.cards):
        if need == 0:
            break
        if ask.gpu_milli <= c:
            need -= 1
            taken.append(c)
    if need:
        return 0.0
    whole_taken = sum(1 for c in taken if c >= WHOLE)
    if whole_taken:
        return float(max(100 // 2 - whole_taken, 100 // 3))
    return float(max(100 - sum(c * 100 // WHOLE for c in taken) // 10, 100 // 2))


def paper_gpu_clustering(node: NodeView, ask: Ask, _mix: WorkloadMix) -> float:
    """GpuClusteringScore (the module docstring), in the integer arithmetic of its Go code."""
    kind = ask.kind
    if not kind:
        return 0.0
    band = int(25 * (MAX_SPEC_GPU - sum(node.cards)) / MAX_SPEC_GPU)      # Go's division truncates toward 0
    if node.kinds.get(kind):
        return float(band + (75 if len(node.kinds) == 1 else 50))
    return float(band + (25 if not node.kinds else 0))


def paper_fgd(node: NodeView, ask: Ask, mix: WorkloadMix) -> float:
    """FGDScore: the sigmoid of the fragmentation the placement saves, in GPUs, as an integer percent."""
    growth = mix.best_growth(NodeFree(node.cpu_free, node.memory_free, node.cards, node.model), ask.shape)
    if growth is None:
        return 0.0
    return float(int(100 / (1 + math.exp(min(growth / WHOLE, 700.0)))))


def normalized(scores: Mapping[str, float]) -> dict[str, float]:
    """The paper's NormalizeScore: min–max scaled to 0..100 in integers (all 0 when every score is the same)."""
    hi, lo = max(scores.values()), min(scores.values())
    if hi == lo:
        return dict.fromkeys(scores, 0.0)
    return {n: float(int((s - lo) * 100 // (hi - lo))) for n, s in scores.items()}


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("kube-default", whole_gpus=True, score=kube_default),
    Policy("random-fit", score=random_fit),
    Policy("best-fit", MOST_ALLOCATED, score=best_fit),
    Policy("deviceshare-least", LEAST_ALLOCATED),
    Policy("deviceshare-most", MOST_ALLOCATED),
    Policy("fgd", FRAGMENTATION_AWARE),
    Policy("fgd-plain", FRAGMENTATION_AWARE, scarcity=0.0),
    Policy("fgd-cpu", FRAGMENTATION_AWARE, stranding=0.1),
    Policy("paper-best-fit", MOST_ALLOCATED, score=paper_best_fit, normalize=True, ranked_ties=True),
    Policy("paper-dot-product", MOST_ALLOCATED, score=paper_dot_product, ranked_ties=True),
    Policy("paper-gpu-packing", MOST_ALLOCATED, score=paper_gpu_packing, ranked_ties=True),
    Policy("paper-gpu-clustering", MOST_ALLOCATED, score=paper_gpu_clustering, ranked_ties=True),
    Policy("paper-fgd", FRAGMENTATION_AWARE, score=paper_fgd, known_mix=True, ranked_ties=True),
)}
