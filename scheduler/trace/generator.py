"""A seeded workload generator with the production trace's marginals: nodes apportioned by the trace's node shapes,
pods drawn by kind, shape, GPU share and model constraint, their arrival gaps and lifetimes drawn with the trace's
statistics.

:class:`Marginals` holds its knobs; their defaults and where each number comes from are on the class.

Separate because it only makes trace records (the same ones the CSV files hold), and its tables of counts are data
the rest of the package does not need.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.trace.records import TraceNode, TracePod


@dataclass(frozen=True)
class NodeShape:
    model: str                 # "" for a CPU-only node
    gpus: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class PodShape:
    cpu_milli: int
    memory_mib: int


Weighted = tuple[tuple[Any, float], ...]

# Counts in openb_node_list_all_node.csv (1,523 nodes: 1,213 with 6,212 GPUs, 310 CPU-only).
TRACE_GPU_NODES: tuple[tuple[NodeShape, float], ...] = (
    (NodeShape("G2", 8, 96000, 393216), 549), (NodeShape("T4", 2, 104000, 524288), 387),
    (NodeShape("P100", 2, 16000, 122880), 107), (NodeShape("G3", 8, 128000, 786432), 39),
    (NodeShape("V100M16", 4, 32000, 131072), 28), (NodeShape("P100", 2, 64000, 262144), 22),
    (NodeShape("V100M32", 8, 96000, 786432), 21), (NodeShape("V100M16", 1, 8000, 32768), 19),
    (NodeShape("T4", 4, 96000, 393216), 17), (NodeShape("V100M32", 4, 48000, 376832), 9),
    (NodeShape("V100M16", 8, 64000, 262144), 7), (NodeShape("P100", 1, 8000, 61440), 3),
    (NodeShape("P100", 2, 8000, 61440), 2), (NodeShape("A10", 1, 128000, 1048576), 2),
    (NodeShape("V100M16", 8, 82000, 344064), 1))
TRACE_CPU_NODES: tuple[tuple[NodeShape, float], ...] = (
    (NodeShape("", 0, 32000, 262144), 129), (NodeShape("", 0, 96000, 524288), 59),
    (NodeShape("", 0, 96000, 393216), 30), (NodeShape("", 0, 32000, 131072), 23),
    (NodeShape("", 0, 64000, 524288), 22), (NodeShape("", 0, 104000, 524288), 20),
    (NodeShape("", 0, 32000, 65536), 10), (NodeShape("", 0, 64000, 262144), 8),
    (NodeShape("", 0, 64000, 131072), 4), (NodeShape("", 0, 104000, 786432), 3),
    (NodeShape("", 0, 104000, 196608), 1), (NodeShape("", 0, 96000, 786432), 1))
# openb_pod_list_default.csv (8,152 pods): every gpu_milli below 1000 with its count (3,078 shared-GPU pods)
TRACE_SHARE_MILLI: tuple[tuple[int, float], ...] = (
    (810, 1078), (470, 750), (320, 328), (650, 253), (230, 140), (460, 128), (590, 75), (160, 74), (550, 72),
    (220, 62), (370, 47), (110, 24), (480, 19), (50, 7), (330, 7), (350, 6), (270, 4), (440, 2), (140, 1), (290, 1))
# (cpu_milli, memory_mib) pairs of the same file with their counts, the rarest left out (coverage in brackets)
TRACE_CPU_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (       # CPU-only pods (96 % of 1,088)
    (PodShape(12500, 57344), 364), (PodShape(32000, 49152), 284), (PodShape(8000, 30517), 163),
    (PodShape(15400, 51200), 120), (PodShape(16500, 51200), 95), (PodShape(11400, 57344), 11),
    (PodShape(8000, 15625), 11))
TRACE_SHARE_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # shared-GPU pods (98 % of 3,078)
    (PodShape(3152, 5600), 1122), (PodShape(11908, 47104), 625), (PodShape(8000, 30517), 486),
    (PodShape(4000, 22888), 189), (PodShape(4000, 15258), 182), (PodShape(4152, 10600), 152),
    (PodShape(4000, 30517), 136), (PodShape(6000, 6144), 51), (PodShape(6000, 12288), 29),
    (PodShape(6000, 22888), 28), (PodShape(1000, 2048), 26))
TRACE_WHOLE_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # one whole GPU (94 % of 3,911)
    (PodShape(11300, 49152), 857), (PodShape(11400, 48128), 534), (PodShape(3152, 5600), 470),
    (PodShape(18708, 64512), 255), (PodShape(9810, 41560), 195), (PodShape(12000, 24576), 158),
    (PodShape(15700, 58368), 158), (PodShape(11908, 47104), 153), (PodShape(16000, 32768), 108),
    (PodShape(8000, 16384), 104), (PodShape(4000, 24576), 104), (PodShape(12000, 16384), 99),
    (PodShape(14200, 58368), 93), (PodShape(24200, 93184), 84), (PodShape(11400, 77824), 65),
    (PodShape(8000, 32768), 55), (PodShape(11900, 77824), 51), (PodShape(12000, 15360), 44),
    (PodShape(8200, 33792), 41), (PodShape(4000, 31250), 40))
TRACE_MULTI_POD_SHAPES: tuple[tuple[PodShape, float], ...] = (     # several GPUs, per GPU (all 75 pods)
    (PodShape(11000, 40960), 18), (PodShape(8025, 32896), 18), (PodShape(8050, 33024), 9), (PodShape(8100, 33280), 7),
    (PodShape(8000, 32768), 6), (PodShape(15000, 92160), 3), (PodShape(3000, 32768), 3), (PodShape(15100, 80384), 3),
    (PodShape(15050, 80128), 3), (PodShape(8700, 21504), 2), (PodShape(15025, 80000), 2), (PodShape(7000, 30000), 1))
# openb_pod_list_gpuspec33.csv is openb_pod_list_default.csv with a gpu_spec on 2,388 of its 7,064 GPU pods, and which
# models a pod pins depends on its kind: per kind (a share of one GPU, one whole GPU, several GPUs), its GPU pods in
# the list and the gpu_spec sets of the pinned ones with their counts (a repeated model merged). Within a kind the
# pinned pods ask what the others do (mean cpu and gpu_milli within 1 %).
SpecTable = tuple[tuple[tuple[str, ...], float], ...]
TRACE_GPU_SPECS: tuple[tuple[str, float, SpecTable], ...] = (
    ("share", 3078, ((("T4",), 593), (("P100",), 278), (("G2", "P100", "T4", "V100M16", "V100M32"), 13))),
    ("whole", 3911, (
        (("T4",), 698), (("G2",), 321), (("V100M16", "V100M32"), 156), (("P100", "V100M16", "V100M32"), 102),
        (("G3",), 80), (("P100", "T4", "V100M16", "V100M32"), 33), (("G2", "P100", "T4", "V100M16", "V100M32"), 26),
        (("A10", "G2", "T4", "V100M16", "V100M32"), 24), (("V100M32",), 18), (("A10", "T4"), 6),
        (("P100", "V100M16"), 4), (("A10", "G2", "P100", "T4", "V100M16", "V100M32"), 3), (("V100M16",), 3),
        (("P100",), 1), (("T4", "V100M16", "V100M32"), 1))),
    ("multi", 75, ((("G2",), 10), (("V100M16", "V100M32"), 7), (("G3",), 6), (("T4", "V100M16", "V100M32"), 2),
                   (("V100M32",), 2), (("P100", "V100M16", "V100M32"), 1))))
TRACE_QOS: tuple[tuple[str, float], ...] = (("LS", 4647), ("BE", 3398), ("Burstable", 100), ("Guaranteed", 7))


@dataclass(frozen=True)
class Marginals:
    """The generator's knobs. Defaults are the production trace's (openb_*_default / all_node, counted):

    * nodes: ``cpu_node_share`` 310 / 1,523 CPU-only; the GPU nodes' shapes (model, GPUs, cpu, memory) weighted by
      their counts (G2 8-GPU boards hold 4,392 of the 6,212 GPUs). Nodes are apportioned, not drawn: 1,523 nodes
      give exactly the trace's population, in a seeded order.
    * pod kinds, drawn per pod (shares are normalized by their sum): CPU-only 13.35 % (1,088 of 8,152), a share of
      one GPU 37.76 % (3,078), one whole GPU 47.98 % (3,911), 2 / 4 / 8 GPUs 0.20 / 0.18 / 0.54 % (16 / 15 / 44).
    * ``share_milli``: the trace's 20 gpu_milli values below 1000 with their counts (810 milli is 35 % of them,
      470 milli 24 %); drawn independently of the pod's cpu and memory.
    * cpu and memory: the trace's most common (cpu_milli, memory_mib) pairs per kind with their counts, the rare
      tail left out (the tables above say how much they cover); for multi-GPU pods the pair is per GPU.
    * ``gpu_spec_share`` 0: the default trace has no model constraints, and it is the workload on which the paper
      reports its headline result. Production has about a third (the trace's gpuspec33 variant: 2,388 of 7,064 GPU
      pods, 0.338); ``gpu_specs`` are that variant's sets with their counts, per pod kind, as the variant pins
      them: a GPU share pins T4 or P100 (never G2 alone), a whole GPU mostly T4, G2 or V100s. A kind's pods pin a
      model with probability ``1 - (1 - gpu_spec_share) ** k``, ``k`` such that at the variant's overall share
      (0.338) each kind pins its own share in the variant (shares 28.7 %, one GPU 37.7 %, several 37.3 %): 0 and 1
      stay none and all.
    * ``qos``: LS / BE / Burstable / Guaranteed as counted (the simulator does not read it).
    * arrivals: exponential gaps with the trace's mean (1,583 s over 8,152 pods; its median is 161 s, bursty, which
      an arrival-order simulation does not see); lifetimes lognormal with the trace's median 540 s and log-sd 1.88.

    Every generated pod fits some generated node while the cluster is empty: table entries (a kind, a pod shape, a
    gpu_spec set) that fit no node are left out of that draw, so on a tiny cluster the shares shift accordingly.
    """

    cpu_node_share: float = 310 / 1523
    gpu_nodes: tuple[tuple[NodeShape, float], ...] = TRACE_GPU_NODES
    cpu_nodes: tuple[tuple[NodeShape, float], ...] = TRACE_CPU_NODES
    cpu_pod_share: float = 0.1335
    share_pod_share: float = 0.3776
    whole_pod_share: float = 0.4798
    multi_gpu_pod_shares: tuple[tuple[int, float], ...] = ((2, 0.0020), (4, 0.0018), (8, 0.0054))
    share_milli: tuple[tuple[int, float], ...] = TRACE_SHARE_MILLI
    cpu_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_CPU_POD_SHAPES
    share_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_SHARE_POD_SHAPES
    whole_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_WHOLE_POD_SHAPES
    multi_gpu_pod_shapes: tuple[tuple[PodShape, float], ...] = TRACE_MULTI_POD_SHAPES
    gpu_spec_share: float = 0.0
    gpu_specs: tuple[tuple[str, float, SpecTable], ...] = TRACE_GPU_SPECS
    qos: tuple[tuple[str, float], ...] = TRACE_QOS
    mean_interarrival_s: float = 1583.0
    lifetime_median_s: float = 540.0
    lifetime_log_sd: float = 1.88

    def __post_init__(self) -> None:
        for name in ("cpu_node_share", "gpu_spec_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"marginals: {name} {getattr(self, name)} is not a share in 0..1")
        if min(self.cpu_pod_share, self.share_pod_share, self.whole_pod_share) < 0 or sum(self.pod_kinds()[1]) <= 0:
            raise ValueError("marginals: the pod kind shares must be non-negative, and not all 0")
        for name in ("gpu_nodes", "cpu_nodes", "share_milli", "cpu_pod_shapes", "share_pod_shapes",
                     "whole_pod_shapes", "multi_gpu_pod_shapes", "qos", "multi_gpu_pod_shares"):
            table: Weighted = getattr(self, name)
            if any(w < 0 for _, w in table) or (name != "multi_gpu_pod_shares" and sum(w for _, w in table) <= 0):
                raise ValueError(f"marginals: {name} needs non-negative weights, not all 0")
        if any(not 1 <= m <= 999 for m, _ in self.share_milli):
            raise ValueError("marginals: share_milli values are shares of one GPU, 1..999")
        if any(n < 2 for n, _ in self.multi_gpu_pod_shares):
            raise ValueError("marginals: multi_gpu_pod_shares are for 2 GPUs or more")
        if sorted(g for g, _, _ in self.gpu_specs) != sorted(SPEC_KINDS) or any(
                n <= 0 or any(w < 0 for _, w in table) or not 0 < sum(w for _, w in table) <= n
                for _, n, table in self.gpu_specs):
            raise ValueError(f"marginals: gpu_specs needs one table per kind {SPEC_KINDS}, its pinned pods (weights "
                             "non-negative, not all 0) no more than the kind's pods")
        if any(s.gpus < 1 or not s.model for s, _ in self.gpu_nodes) or any(s.gpus for s, _ in self.cpu_nodes):
            raise ValueError("marginals: gpu_nodes have a model and GPUs, cpu_nodes have neither")
        for name in ("mean_interarrival_s", "lifetime_median_s", "lifetime_log_sd"):
            if not getattr(self, name) > 0:
                raise ValueError(f"marginals: {name} must be positive")

    def emphasize(self, *, share_gpu: float | None = None, multi_gpu: float | None = None,
                  gpu_spec: float | None = None) -> Marginals:
        """The marginals of the published workload variants (``openb_pod_list_gpushareN``, ``multigpuN``,
        ``gpuspecN``, sampled from the default list by the paper's authors): GPU-sharing pods (``share_gpu``) or
        multi-GPU pods (``multi_gpu``) ask that share of all GPU requests (0..1), the other GPU kinds keeping
        their proportions among themselves and CPU-only pods their share of pods; ``gpu_spec``: about that share of GPU
        pods pins a GPU model, each kind its own share and sets (the class docstring)."""
        kinds, shares = self.pod_kinds()
        mean_share = sum(m * w for m, w in self.share_milli) / sum(w for _, w in self.share_milli) / 1000

        def group(kind: int) -> str:
            return "share" if kind == -1 else "multi" if kind > 1 else "whole"

        def gpus(kind: int) -> float:
            return mean_share if kind == -1 else kind

        mass = {k: w * gpus(k) for k, w in zip(kinds, shares, strict=True) if k}     # GPUs asked, by kind
        by_group = {g: sum(m for k, m in mass.items() if group(k) == g) for g in ("share", "multi", "whole")}
        fixed = {g: p for g, p in (("share", share_gpu), ("multi", multi_gpu)) if p is not None}
        if any(not 0 <= p <= 1 for p in fixed.values()) or sum(fixed.values()) > 1:
            raise ValueError("marginals: share_gpu and multi_gpu are shares of GPU requests, together at most 1")
        others = [g for g in by_group if g not in fixed]
        other_mass = sum(by_group[g] for g in others)
        goal = {**fixed, **{g: (1 - sum(fixed.values())) * by_group[g] / other_mass if other_mass else 0.0
                            for g in others}}
        if any(goal[g] > 0 and not by_group[g] for g in goal) or abs(sum(goal.values()) - 1) > 1e-9:
            raise ValueError(f"marginals: no pods of a kind to scale to {fixed}")
        weights = {k: (m / by_group[group(k)] * goal[group(k)] / gpus(k) if by_group[group(k)] else 0.0)
                   for k, m in mass.items()}
        norm = sum(w for k, w in zip(kinds, shares, strict=True) if k) / sum(weights.values())
        return replace(self, share_pod_share=weights[-1] * norm, whole_pod_share=weights[1] * norm,
                       multi_gpu_pod_shares=tuple((n, weights[n] * norm) for n, _ in self.multi_gpu_pod_shares),
                       gpu_spec_share=self.gpu_spec_share if gpu_spec is None else gpu_spec)

    def spec_chance(self, kind: int) -> float:
        """The probability that a GPU pod of ``kind`` (:meth:`pod_kinds`) pins a model (the class docstring)."""
        share = self.gpu_spec_share
        if share in (0.0, 1.0):
            return share
        pinned = {g: sum(w for _, w in table) for g, _, table in self.gpu_specs}
        pods = {g: n for g, n, _ in self.gpu_specs}
        overall = sum(pinned.values()) / sum(pods.values())
        own = pinned[_spec_kind(kind)] / pods[_spec_kind(kind)]
        if own >= 1.0:
            return 1.0
        return 1.0 - math.pow(1.0 - share, math.log1p(-own) / math.log1p(-overall))

    def pod_kinds(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(GPUs per kind, share per kind): 0 CPU-only, -1 a share of one GPU, 1 one whole GPU, n > 1 several."""
        kinds = (0, -1, 1, *(n for n, _ in self.multi_gpu_pod_shares))
        shares = (self.cpu_pod_share, self.share_pod_share, self.whole_pod_share,
                  *(s for _, s in self.multi_gpu_pod_shares))
        return kinds, shares


SPEC_KINDS = ("share", "whole", "multi")


def _spec_kind(kind: int) -> str:
    """The kind of a GPU pod (:meth:`Marginals.pod_kinds`) as :data:`TRACE_GPU_SPECS` groups them."""
    return "share" if kind == -1 else "whole" if kind == 1 else "multi"


def _apportion(total: int, table: Sequence[tuple[NodeShape, float]]) -> list[NodeShape]:
    """``total`` shapes in proportion to the weights (largest remainder; ties to the earlier entry)."""
    weight = sum(w for _, w in table)
    exact = [total * w / weight for _, w in table]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(table)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[:total - sum(counts)]:
        counts[i] += 1
    return [shape for (shape, _), n in zip(table, counts, strict=True) for _ in range(n)]


def _gpus_of(kind: int) -> tuple[int, int]:
    """(GPUs, the factor on the pod shape) of a pod kind: multi-GPU pods' cpu and memory are per GPU."""
    gpus = max(kind, 1) if kind else 0
    return gpus, gpus if kind > 1 else 1


def _fits(node: NodeShape, gpus: int, cpu_milli: int, memory_mib: int) -> bool:
    return node.gpus >= gpus and node.cpu_milli >= cpu_milli and node.memory_mib >= memory_mib


class _Draw:
    """Weighted choices over a fixed table (cumulative weights computed once)."""

    def __init__(self, table: Sequence[tuple[Any, float]]) -> None:
        kept = [(item, w) for item, w in table if w > 0]
        self.items = [item for item, _ in kept]
        self._cum: list[float] = []
        total = 0.0
        for _, w in kept:
            total += w
            self._cum.append(total)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __call__(self, rng: random.Random) -> Any:
        return rng.choices(self.items, cum_weights=self._cum)[0]


def generate(seed: int, nodes: int, pods: int, marginals: Marginals = Marginals()
             ) -> tuple[list[TraceNode], list[TracePod]]:
    """A cluster of ``nodes`` nodes and ``pods`` pods in arrival order (creation_time strictly increasing from 0),
    the same for the same arguments. Names as the trace's (``openb-node-0000``, ``openb-pod-0000``). Pods are
    what has not happened yet: phase Pending, no scheduled_time; deletion_time is creation + a drawn lifetime."""
    if nodes < 1 or pods < 0:
        raise ValueError(f"generate: {nodes} nodes and {pods} pods (at least one node, no negative count)")
    m = marginals
    rng = random.Random(seed)
    cpu_count = round(nodes * m.cpu_node_share)
    shapes = _apportion(cpu_count, m.cpu_nodes) + _apportion(nodes - cpu_count, m.gpu_nodes)
    rng.shuffle(shapes)
    width = max(4, len(str(max(nodes, pods) - 1)))
    node_list = [TraceNode(f"openb-node-{i:0{width}d}", s.cpu_milli, s.memory_mib, s.gpus, s.model)
                 for i, s in enumerate(shapes)]

    tables = {0: m.cpu_pod_shapes, -1: m.share_pod_shapes, 1: m.whole_pod_shapes}
    distinct = set(shapes)
    shape_draws: dict[int, _Draw] = {}
    spec_draws: dict[tuple[int, PodShape], _Draw] = {}
    kinds, shares = m.pod_kinds()
    kind_table = []
    for kind, share in zip(kinds, shares, strict=True):
        gpus, per = _gpus_of(kind)
        fitting = [(s, w) for s, w in tables.get(kind, m.multi_gpu_pod_shapes)
                   if any(_fits(n, gpus, s.cpu_milli * per, s.memory_mib * per) for n in distinct)]
        shape_draws[kind] = _Draw(fitting)
        kind_table.append((kind, share if shape_draws[kind] else 0.0))
        for s, _ in fitting if gpus else ():
            models = {n.model for n in distinct if _fits(n, gpus, s.cpu_milli * per, s.memory_mib * per)}
            specs = next(table for g, _, table in m.gpu_specs if g == _spec_kind(kind))
            spec_draws[(kind, s)] = _Draw([(spec, w) for spec, w in specs if models & set(spec)])
    kind_draw = _Draw(kind_table)
    if pods and not kind_draw:
        raise ValueError("generate: no pod of the marginals fits any generated node")
    milli_draw, qos_draw = _Draw(m.share_milli), _Draw(m.qos)
    spec_chance = {kind: m.spec_chance(kind) for kind in kinds if kind}

    pod_list = []
    now = 0
    for i in range(pods):
        drawn: int = kind_draw(rng)
        shape: PodShape = shape_draws[drawn](rng)
        gpus, per = _gpus_of(drawn)
        gpu_milli = 0 if not gpus else milli_draw(rng) if drawn == -1 else 1000
        spec: tuple[str, ...] = ()
        if gpus and rng.random() < spec_chance[drawn] and spec_draws[(drawn, shape)]:
            spec = spec_draws[(drawn, shape)](rng)
        if i:
            now += max(1, round(rng.expovariate(1 / m.mean_interarrival_s)))
        lifetime = max(1, round(rng.lognormvariate(math.log(m.lifetime_median_s), m.lifetime_log_sd)))
        pod_list.append(TracePod(f"openb-pod-{i:0{width}d}", shape.cpu_milli * per, shape.memory_mib * per, gpus,
                                 gpu_milli, spec, qos_draw(rng), "Pending", now, now + lifetime, None))
    return node_list, pod_list
