"""koord-scheduler's device allocator (DeviceShare), on one node's :class:`~scheduler.devices.NodeDevices`.

Facts: koord-scheduler ``pkg/scheduler/plugins/deviceshare/``: ``device_allocator.go`` (``AutopilotAllocator.Allocate``,
``defaultAllocateDevices``, ``allocateVF``, ``jointAllocate``), ``allocator_gpu.go`` (``GPUAllocator.Allocate``,
``allocateByPartition``, ``allocateByDeviceTopology``), ``allocator_gpu_helper.go: GetGPUPartitionIndexer`` (the
partition order), ``devicehandler_*.go`` and ``scoring.go``. The same inputs give the same minors, VFs and order as
upstream, so the ``device-allocated`` annotation is the one koord-scheduler would write.

The flow for one pod on one node:

1. per type, the per-device request and count (GPU: card count and per-card request; RDMA/FPGA: whole devices
   for multiples of 100, else the hint's strategy); a type the node has none of is unresolvable;
2. the candidate devices: a hint's label selector, a NUMA restriction (the NUMA filter's trial), a PCIe-exclusive
   hint; devices left out count as used for partitions;
3. joint allocation first when the pod asks for it (the primary type, then the others preferring its PCIe
   switches), then every other type on its own: GPUs through partitions → topology scopes → default, the rest
   through the default allocator;
4. GPU entries get both memory and memory-ratio (``fill_gpu_memory``), and ids from the CR (``annotations``).

Filter runs it without a scorer (device order by minor); bind runs it with the scorer, as koord-scheduler's
Reserve does, so the final choice can differ from the filter's trial; both must succeed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from koordlet.states.deviceallocation import DeviceAllocation, VirtualFunction
from scheduler.devices import DeviceInfo, NodeDevices, Partition, PartitionIndex, Scope, mask_of
from scheduler.fgd import NodeFree, Shape, WorkloadMix, card_growth, card_milli, shape_milli
from scheduler.requests import (
    APPLY_FOR_ALL,
    EXCLUSIVE_DEVICE,
    EXCLUSIVE_PCIE,
    GPU,
    MEMORY,
    RATIO,
    REQUESTS_AS_COUNT,
    SAME_PCIE,
    SCOPE_LEVELS,
    TYPE_RESOURCES,
    DeviceHint,
    GpuRequirements,
    PodDeviceRequest,
    value,
)

LEAST_ALLOCATED, MOST_ALLOCATED, FRAGMENTATION_AWARE = "LeastAllocated", "MostAllocated", "FragmentationAware"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, FRAGMENTATION_AWARE)
DEFAULT_WEIGHTS: Mapping[str, int] = {RATIO: 1, MEMORY: 1, "koordinator.sh/rdma": 1, "koordinator.sh/fpga": 1}
MAX_SCORE = 100

# upstream's status texts (allocator_gpu.go, device_allocator.go)
INSUFFICIENT_PARTITIONED = "Insufficient Partitioned GPU Devices"
INSUFFICIENT_SCOPED = "Insufficient Topology Scoped GPU Devices"
INSUFFICIENT_GPUS = "Insufficient GPU Devices"
MISSING_PARTITION_TABLE = "node(s) missing GPU Partition Table"
UNSUPPORTED_COUNT = "node(s) Unsupported number of GPU requests"
UNSUPPORTED_MULTI_SHARED = "node(s) Unsupported Multi-Shared GPU"
MISSING_TOPOLOGY_TREE = "node(s) missing GPU Device Topology Tree"
JOINT_VIOLATION = "node(s) Device Joint-Allocate rules violation"
NO_PRIMARY = "node(s) Insufficient primary device"


class AllocationFailure(Exception):
    """The pod does not fit this node; ``unresolvable``: it never will as the node is (preemption cannot help)."""

    def __init__(self, reason: str, unresolvable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unresolvable = unresolvable


Allocations = dict[str, list[DeviceAllocation]]
Resources = Mapping[str, int]


def node_cards(nd: NodeDevices) -> tuple[int, ...]:
    """The free milli-GPUs of each card, by minor (what fragmentation reads of a node); once per generation."""
    def cards() -> tuple[int, ...]:
        totals = nd.inventory.total(GPU)
        free = nd.free(GPU)
        return tuple(card_milli(free[m], totals[m]) for m in sorted(totals))
    return nd.memo("cards", cards)


def _fits(request: Resources, free: Resources) -> bool:
    """quotav1.LessThanOrEqual: every requested name within what is free (names not requested do not matter)."""
    return all(v <= free.get(k, 0) for k, v in request.items())


def _zero(r: Resources) -> bool:
    return all(v == 0 for v in r.values())


def _least(requested: int, capacity: int) -> int:
    return 0 if capacity == 0 or requested > capacity else (capacity - requested) * MAX_SCORE // capacity


def _most(requested: int, capacity: int) -> int:
    return 0 if capacity == 0 else min(requested, capacity) * MAX_SCORE // capacity


@dataclass(frozen=True)
class Scorer:
    """DeviceShare's resourceAllocationScorer: LeastAllocated spreads, MostAllocated packs."""

    strategy: str = LEAST_ALLOCATED
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def _combine(self, requested: Mapping[str, int], capacity: Mapping[str, int]) -> int:
        fn: Callable[[int, int], int] = _most if self.strategy == MOST_ALLOCATED else _least
        total = weight_sum = 0
        for name, req in requested.items():
            w = self.weights[name]
            total += fn(req, capacity[name]) * w
            weight_sum += w
        return total // weight_sum if weight_sum else 0

    def device(self, request: Resources, total: Resources, free: Resources) -> int:
        requested, capacity = {}, {}
        for name in self.weights:
            t = total.get(name, 0)
            if t == 0:
                continue
            f = free.get(name, 0)
            requested[name] = t - f + request.get(name, 0) if t >= f else t
            capacity[name] = t
        return self._combine(requested, capacity)

    def node(self, request: Resources, totals: Sequence[Resources], frees: Sequence[Resources]) -> int:
        requested, capacity = {}, {}
        for name in self.weights:
            t = sum(r.get(name, 0) for r in totals)
            if t == 0:
                continue
            f = sum(r.get(name, 0) for r in frees)
            requested[name] = t - f + request.get(name, 0) if t >= f else t
            capacity[name] = t
        return self._combine(requested, capacity)


@dataclass
class _View:
    """The candidate devices of one type for this allocation (upstream's filtered nodeDevice)."""

    total: Mapping[int, Resources]           # candidates with something to offer
    free: Mapping[int, Mapping[str, int]]
    used_mask: int                           # minors in use on the node, candidates or not (getRealUsed)


@dataclass
class _Context:
    nd: NodeDevices
    request: PodDeviceRequest
    scorer: Scorer | None
    per_instance: dict[str, Resources]
    counts: dict[str, int]
    views: dict[str, _View]
    card_score: Callable[[int], float] | None = None     # FragmentationAware: a GPU share's card by −ΔF


class Allocator:
    """Allocates a pod's devices on one node; stateless apart from its scoring configuration."""

    def __init__(self, strategy: str = LEAST_ALLOCATED, weights: Mapping[str, int] | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"deviceShare.scoringStrategy.type: {strategy!r} is not one of {', '.join(STRATEGIES)}")
        self.scorer = Scorer(strategy, dict(weights) if weights is not None else dict(DEFAULT_WEIGHTS))
        # FragmentationAware (scheduler/fgd.py): the workload mix learned from the pods seen, which scores nodes
        # (growth) and picks the card of a GPU share at bind; other devices are ordered as LeastAllocated does
        self.mix: WorkloadMix | None = WorkloadMix() if strategy == FRAGMENTATION_AWARE else None

    # --- entry points ----------------------------------------------------------------------------------------------

    def allocate(self, nd: NodeDevices, request: PodDeviceRequest, *, scored: bool = False,
                 numa_nodes: frozenset[int] | None = None) -> Allocations:
        """The pod's devices on this node (GPU entries with memory and ratio filled in, no ids yet); raises
        AllocationFailure. ``scored``: order candidate devices by the scorer (bind) rather than by minor
        (filter); ``numa_nodes``: only devices on these NUMA nodes (the NUMA filter's trial)."""
        ctx = self._prepare(nd, request, self.scorer if scored else None, numa_nodes)
        joint = request.joint
        if (not scored and joint is not None and joint.device_types and nd.inventory.secondary_well_planned
                and not (request.gpu is not None and request.gpu.shared)):
            # the CR says every GPU has its NIC planned beside it: the filter trial checks the primary type only,
            # bind allocates the rest (koord-scheduler skips secondaries outside Reserve the same way)
            for dtype in joint.device_types[1:]:
                ctx.per_instance.pop(dtype, None)
        result: Allocations = {}
        if len(ctx.per_instance) > 1 and joint is not None and joint.device_types:
            result = self._joint(ctx)
        for dtype in ctx.per_instance:
            if dtype not in result:
                found = self._allocate_type(ctx, dtype, ctx.counts[dtype], frozenset())
                if found:
                    result[dtype] = found
        if not result:
            raise AllocationFailure(", ".join(f"Insufficient {t} devices" for t in sorted(ctx.per_instance)))
        return fill_gpu_memory(result, nd)

    def growth(self, nd: NodeDevices, shape: Shape, cpu_free: int, memory_free: int, model: str = "") -> float | None:
        """FragmentationAware's node measure: the smallest growth of the node's expected fragmentation over the
        placements of ``shape`` (None: it does not fit) on a node of GPU ``model``; the extender turns it into a
        score."""
        assert self.mix is not None
        return self.mix.best_growth(NodeFree(cpu_free, memory_free, node_cards(nd), model), shape)

    def score(self, nd: NodeDevices, request: PodDeviceRequest) -> int:
        """DeviceShare's node score before normalization (0 when the pod asks nothing of this node)."""
        try:
            ctx = self._prepare(nd, request, self.scorer, None)
        except AllocationFailure:
            return 0
        return sum(self.scorer.node(ctx.per_instance[t], list(v.total.values()), list(v.free.values()))
                   for t, v in ctx.views.items() if v.total)

    # --- 1. per-instance requests and counts -----------------------------------------------------------------------

    def _prepare(self, nd: NodeDevices, request: PodDeviceRequest, scorer: Scorer | None,
                 numa_nodes: frozenset[int] | None) -> _Context:
        per_instance: dict[str, Resources] = {}
        counts: dict[str, int] = {}
        for dtype, req in request.requests.items():
            # a node with devices of the type that are all unhealthy still "has" them (resolvable), as upstream
            if not nd.inventory.devices.get(dtype):
                raise AllocationFailure(f"Insufficient {dtype} devices", unresolvable=True)
            total = nd.inventory.total(dtype)
            hint = request.hints.get(dtype)
            if dtype == GPU and request.gpu is not None:
                per_instance[dtype], counts[dtype] = request.gpu.per_gpu, request.gpu.count
            else:
                per_instance[dtype], counts[dtype] = _default_count(nd, dtype, req, hint, len(total))
            needs_vf = hint is not None and hint.needs_vf
            if needs_vf and not any(d.vf_groups for d in nd.inventory.devices[dtype].values()):
                raise AllocationFailure(f"Insufficient {dtype} VirtualFunctions", unresolvable=True)
        views = {t: self._view(nd, t, request.hints.get(t), numa_nodes) for t in per_instance}
        return _Context(nd, request, scorer, per_instance, counts, views)

    @staticmethod
    def _view(nd: NodeDevices, dtype: str, hint: DeviceHint | None, numa_nodes: frozenset[int] | None) -> _View:
        free = nd.free(dtype)
        used_mask = mask_of(nd.used_minors(dtype))
        restricted = numa_nodes is not None or (hint is not None and (hint.selector is not None
                                                                      or hint.exclusive_policy == EXCLUSIVE_PCIE))
        if not restricted:
            return _View(nd.inventory.total(dtype), free, used_mask)
        devices = nd.inventory.devices.get(dtype, {})
        keep = set()
        for minor, d in devices.items():
            if numa_nodes is not None and ((d.numa is None and d.pcie is None)
                                           or (d.numa is not None and d.numa != -1 and d.numa not in numa_nodes)):
                continue
            if hint is not None and hint.selector is not None and not hint.selector.matches(d.labels):
                continue
            keep.add(minor)
        if hint is not None and hint.exclusive_policy == EXCLUSIVE_PCIE:
            keep &= _wholly_free_pcie_minors(nd, dtype, free)
        if all(_zero(f) for f in free.values()):
            keep = set()
        total = {m: t for m, t in nd.inventory.total(dtype).items() if m in keep}
        return _View(total, {m: free[m] for m in total}, used_mask)

    # --- 3. joint and per-type allocation --------------------------------------------------------------------------

    def _joint(self, ctx: _Context) -> Allocations:
        joint = ctx.request.joint
        assert joint is not None
        primary, secondaries = joint.device_types[0], joint.device_types[1:]
        found = self._allocate_type(ctx, primary, ctx.counts[primary], frozenset())
        if not found:
            raise AllocationFailure(NO_PRIMARY)
        result: Allocations = {primary: found}
        pcies = _pcies(ctx.nd, primary, found)
        for dtype in secondaries:
            count = ctx.counts[dtype]
            if joint.required_scope == SAME_PCIE and count < len(pcies):
                count = len(pcies)
            got = self._allocate_type(ctx, dtype, count, pcies)
            if got:
                result[dtype] = got
        if joint.required_scope == SAME_PCIE:
            for dtype in secondaries:
                if _pcies(ctx.nd, dtype, result.get(dtype, [])) != pcies:
                    raise AllocationFailure(JOINT_VIOLATION)
        return result

    def _allocate_type(self, ctx: _Context, dtype: str, count: int,
                       preferred_pcies: frozenset[str]) -> list[DeviceAllocation]:
        count = max(count, 1)
        max_count = max(count, len(preferred_pcies))
        if dtype == GPU and ctx.request.gpu is not None:
            return self._gpu(ctx, ctx.request.gpu, count, max_count)
        return self._default(ctx, dtype, ctx.per_instance[dtype], count, max_count, preferred_pcies)

    # --- GPUs: partitions, then topology scopes, then the default allocator ----------------------------------------

    def _gpu(self, ctx: _Context, gpu: GpuRequirements, count: int, max_count: int) -> list[DeviceAllocation]:
        view = ctx.views[GPU]
        required = (ctx.request.hints.get(GPU) or DeviceHint()).required_scope
        if ctx.scorer is not None and self.mix is not None and gpu.shared:
            ctx.card_score = self._card_scorer(view, gpu)
            if gpu.count == 1 and not required:
                # FragmentationAware places a share of one card where fragmentation grows least, over every card
                # of the node: the topology stage would first narrow to the scope already in use (its binpacking)
                # and could miss the card the node's score was computed for
                return self._default(ctx, GPU, gpu.per_gpu, 1, 1, frozenset())
        inv = ctx.nd.inventory
        honor = (ctx.request.partition is not None) or inv.honor_partitions
        try:
            found = self._by_partition(ctx, gpu, inv.partitions, view)
        except AllocationFailure:
            if honor:
                raise
            found = []
        if found:
            return found
        try:
            found = self._by_topology(ctx, gpu, view, required)
        except AllocationFailure as e:
            if required or not e.unresolvable:
                raise
            found = []
        if found:
            return found
        return self._default(ctx, GPU, gpu.per_gpu, count, max_count, frozenset())

    def _card_scorer(self, view: _View, gpu: GpuRequirements) -> Callable[[int], float]:
        """−ΔF of putting the share on each card (higher is better), from the node's cards as they are now."""
        assert self.mix is not None
        mix = self.mix
        cards = {m: card_milli(view.free.get(m, {}), t) for m, t in view.total.items()}
        share = shape_milli(gpu.per_gpu)
        return lambda minor: -card_growth(mix, cards, minor, share)

    def _by_partition(self, ctx: _Context, gpu: GpuRequirements, index: PartitionIndex | None,
                      view: _View) -> list[DeviceAllocation]:
        if gpu.shared:
            return []
        if index is None:
            raise AllocationFailure(MISSING_PARTITION_TABLE, unresolvable=True)
        groups = index.get(gpu.count)
        if not groups:
            raise AllocationFailure(UNSUPPORTED_COUNT, unresolvable=True)
        total_mask = mask_of(m for m, t in view.total.items() if not _zero(t))
        spec = ctx.request.partition
        feasible: list[Partition] = []
        for group in groups:
            for p in group:
                if p.mask & view.used_mask or total_mask & p.mask != p.mask:
                    continue
                if spec is not None and spec.ring_bus_bandwidth is not None and (
                        p.bandwidth is None or spec.ring_bus_bandwidth > p.bandwidth):
                    continue
                feasible.append(p)
            if feasible or (spec is not None and spec.restricted):
                break
        if not feasible:
            raise AllocationFailure(INSUFFICIENT_PARTITIONED)
        chosen = _binpack_partition(view.used_mask, feasible, index, gpu.count)
        return [_entry(GPU, m, gpu.per_gpu) for m in chosen.minors]

    def _by_topology(self, ctx: _Context, gpu: GpuRequirements, view: _View, required: str) -> list[DeviceAllocation]:
        tree = ctx.nd.inventory.gpu_scopes
        if tree is None:
            raise AllocationFailure(MISSING_TOPOLOGY_TREE, unresolvable=True)
        if gpu.shared and gpu.count > 1:
            raise AllocationFailure(UNSUPPORTED_MULTI_SHARED, unresolvable=True)
        walk = _ScopeWalk(gpu, view, ctx.scorer, SCOPE_LEVELS.get(required, 0), ctx.card_score)
        best = walk.allocate(tree, 0, 0)
        if best is None:
            raise AllocationFailure(INSUFFICIENT_SCOPED if required else INSUFFICIENT_GPUS)
        return [_entry(GPU, m, gpu.per_gpu) for m in best.minors]

    # --- the default allocator (RDMA, FPGA, GPU fallback) ----------------------------------------------------------

    def _default(self, ctx: _Context, dtype: str, request: Resources, count: int, max_count: int,
                 preferred_pcies: frozenset[str]) -> list[DeviceAllocation]:
        view = ctx.views[dtype]
        devices = ctx.nd.inventory.devices.get(dtype, {})
        hint = ctx.request.hints.get(dtype)
        if ctx.card_score is not None and dtype == GPU:
            scores: dict[int, float] = {m: ctx.card_score(m) for m in view.free}
        else:
            scores = {m: ctx.scorer.device(request, view.total[m], f) if ctx.scorer else 0.0
                      for m, f in view.free.items()}
        order = _order(sorted(view.free), scores, preferred_pcies, devices)
        taken_vfs = ctx.nd.used_vfs.get(dtype, {})
        out: list[DeviceAllocation] = []
        for minor in order:
            free = view.free[minor]
            if _zero(free) or not _fits(request, free):
                continue
            vfs: tuple[VirtualFunction, ...] = ()
            if hint is not None and hint.needs_vf:
                vf = _pick_vf(devices.get(minor), hint, taken_vfs.get(minor, set()))
                if vf is None:
                    continue
                vfs = (vf,)
            out.append(_entry(dtype, minor, request, vfs))
            if len(out) == max_count:
                break
        if len(out) < count:
            raise AllocationFailure(f"Insufficient {dtype} devices")
        return out


def _default_count(nd: NodeDevices, dtype: str, req: Resources, hint: DeviceHint | None,
                   n_total: int) -> tuple[Resources, int]:
    """RDMA/FPGA: whole devices for multiples of 100, else the hint's strategy (devicehandler_default.go)."""
    (name,) = TYPE_RESOURCES[dtype]
    q = req.get(name, 0)
    if q > 100 and q % 100 == 0:
        return {name: 100}, q // 100
    if hint is None:
        return req, 1
    if hint.allocate_strategy == APPLY_FOR_ALL:
        count = n_total
        if hint.selector is not None:
            count = sum(1 for d in nd.inventory.devices.get(dtype, {}).values() if hint.selector.matches(d.labels))
        if count == 0:
            raise AllocationFailure(f"Insufficient {dtype} devices", unresolvable=True)
        return req, count
    if hint.allocate_strategy == REQUESTS_AS_COUNT:
        return {name: 100 if hint.exclusive_policy == EXCLUSIVE_DEVICE else 1}, q
    return req, 1


def _entry(dtype: str, minor: int, resources: Resources, vfs: tuple[VirtualFunction, ...] = ()) -> DeviceAllocation:
    return DeviceAllocation(dtype, minor, "", {k: Fraction(v) for k, v in resources.items()}, vfs)


def _pcies(nd: NodeDevices, dtype: str, allocations: Sequence[DeviceAllocation]) -> frozenset[str]:
    out = set()
    for a in allocations:
        d = nd.device(dtype, a.minor)
        if d is not None and d.pcie is not None:
            out.add(d.pcie)
    return frozenset(out)


def _wholly_free_pcie_minors(nd: NodeDevices, dtype: str, free: Mapping[int, Resources]) -> set[int]:
    """Devices on PCIe switches whose devices of this type are all completely free (PCIeLevel exclusivity)."""
    by_pcie: dict[tuple[int | None, str | None], list[int]] = {}
    for minor, d in nd.inventory.devices.get(dtype, {}).items():
        by_pcie.setdefault((d.numa, d.pcie), []).append(minor)
    totals = nd.inventory.total(dtype)
    out: set[int] = set()
    for minors in by_pcie.values():
        if all(m in totals and dict(free.get(m, {})) == dict(totals[m]) for m in minors):
            out.update(minors)
    return out


def _order(minors: list[int], scores: Mapping[int, float], preferred_pcies: frozenset[str],
           devices: Mapping[int, DeviceInfo]) -> list[int]:
    """Higher score first, then lower minor; with preferred PCIe switches, round-robin over them first."""
    ranked = sorted(minors, key=lambda m: (-scores[m], m))
    if not preferred_pcies:
        return ranked
    groups: dict[str, list[int]] = {}
    rest = []
    for m in ranked:
        d = devices.get(m)
        if d is not None and d.pcie is not None and d.pcie in preferred_pcies:
            groups.setdefault(d.pcie, []).append(m)
        else:
            rest.append(m)
    out: list[int] = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        out += sorted((g[i] for g in groups.values() if i < len(g)), key=lambda m: (-scores[m], m))
    return out + rest


def _pick_vf(device: DeviceInfo | None, hint: DeviceHint, taken: set[str]) -> VirtualFunction | None:
    """The free VF with the lowest bus id among the groups the hint's vfSelector matches."""
    if device is None:
        return None
    selector = hint.vf_selector
    free = [vf for g in device.vf_groups if selector is None or selector.matches(g.labels)
            for vf in g.vfs if vf.bus_id not in taken]
    return min(free, key=lambda vf: vf.bus_id) if free else None


_PARTITION_WEIGHTS = ((8, 10000), (4, 100), (2, 1))


def _binpack_partition(used_mask: int, feasible: Sequence[Partition], index: PartitionIndex, count: int) -> Partition:
    """Among feasible partitions, the one that keeps the most (and largest) partitions of the first group intact."""
    if len(feasible) == 1:
        return feasible[0]
    best, best_score = feasible[0], -1
    for p in feasible:
        taken = used_mask | p.mask
        score = 0
        for size, weight in _PARTITION_WEIGHTS:
            if size < count or not index.get(size):
                continue
            score += sum(weight * q.score for q in index[size][0] if not q.mask & taken)
        if score > best_score:          # a stable sort by descending score keeps the first of equals
            best, best_score = p, score
    return best


@dataclass(frozen=True)
class _ScopeResult:
    minors: tuple[int, ...]
    not_empties: int
    depth: int
    score: float


class _ScopeWalk:
    """allocateFromScope: the narrowest scope that holds the request, preferring scopes already in use."""

    def __init__(self, gpu: GpuRequirements, view: _View, scorer: Scorer | None, required_level: int,
                 card_score: Callable[[int], float] | None = None) -> None:
        self.gpu, self.view, self.scorer, self.required_level = gpu, view, scorer, required_level
        self.card_score = card_score
        self._fit: dict[int, tuple[bool, float]] = {}    # minor -> (fits, score), shared by the whole walk

    def _device(self, minor: int) -> tuple[bool, float]:
        known = self._fit.get(minor)
        if known is None:
            free = self.view.free.get(minor, {})
            fits = minor in self.view.total and _fits(self.gpu.per_gpu, free)
            score: float = 0
            if fits and self.gpu.shared and self.card_score is not None:
                score = self.card_score(minor)
            elif fits and self.gpu.shared and self.scorer is not None:
                score = self.scorer.device(self.gpu.per_gpu, self.view.total[minor], free)
            known = self._fit[minor] = (fits, score)
        return known

    def allocate(self, scope: Scope, depth: int, not_empties: int) -> _ScopeResult | None:
        need = self.gpu.count
        if len(scope.minors) < need:
            return None
        depth += 1
        if scope.mask & self.view.used_mask:
            not_empties += 1
        best: _ScopeResult | None = None
        for child in scope.children:
            if len(child.minors) < need:
                continue
            got = self.allocate(child, depth, not_empties)
            if got is None:
                continue
            if best is None or (best.depth, best.not_empties) < (got.depth, got.not_empties) or (
                    self.gpu.shared and (best.depth, best.not_empties) == (got.depth, got.not_empties)
                    and best.score < got.score):
                best = got
        if best is not None:
            return best
        if self.required_level > scope.level:
            return None
        picked: list[int] = []
        best_minor, best_score = -1, -math.inf
        for minor in scope.minors:
            fits, score = self._device(minor)
            if not fits:
                continue
            if not self.gpu.shared:
                picked.append(minor)
                if len(picked) == need:
                    break
            elif score > best_score:
                best_minor, best_score = minor, score
        if self.gpu.shared:
            return _ScopeResult((best_minor,), not_empties, depth, best_score) if best_minor >= 0 else None
        return _ScopeResult(tuple(picked), not_empties, depth, best_score) if len(picked) == need else None


# --- what goes into the annotation ---------------------------------------------------------------------------------

def fill_gpu_memory(result: Allocations, nd: NodeDevices) -> Allocations:
    """Every GPU entry with both gpu-memory and gpu-memory-ratio, from the card's total (fillGPUTotalMem)."""
    gpus = result.get(GPU)
    if not gpus:
        return result
    totals = nd.inventory.total(GPU)
    filled = []
    for a in gpus:
        res = dict(a.resources)
        card = totals.get(a.minor, {}).get(MEMORY, 0)
        if MEMORY in res and RATIO not in res and card:
            # upstream converts through float64 and truncates: int64(float64(bytes)/float64(total)*100)
            res[RATIO] = Fraction(int(float(value(res[MEMORY])) / float(card) * 100))
        elif RATIO in res and MEMORY not in res:
            res[MEMORY] = Fraction(value(res[RATIO]) * card // 100)
        filled.append(DeviceAllocation(a.type, a.minor, a.id, res, a.vfs))
    return {**result, GPU: filled}
