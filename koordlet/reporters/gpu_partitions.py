"""The GPU partition table (Device annotation ``scheduling.koordinator.sh/gpu-partitions``), derived from topology.

Facts: the format is ``apis/extension/device_share.go: GPUPartitionTable``; what upstream koordlet emits,
``pkg/koordlet/statesinformer/impl/states_device_linux.go: getPartitionTableFromXPUDevices``. Upstream koordlet
emits no table for NVIDIA GPUs (the scheduler then falls back to a built-in Hopper table for H100/H800/H20 only).
We derive one from the node's real NVLink and PCIe topology, so the scheduler keeps a multi-GPU pod on GPUs that
talk fast to each other, and can honour a pod's ``ringBusBandwidth`` requirement.

How koord-scheduler reads the table (pkg/scheduler/plugins/deviceshare): ``GetGPUPartitionIndexer``
(allocator_gpu_helper.go) groups the partitions of one size by ``allocationScore`` and sorts the groups by
*ascending* score; ``allocateByPartition`` (allocator_gpu.go) walks them in that order and stops at the first group
holding a feasible partition (all its GPUs free and healthy, ``ringBusBandwidth`` >= the pod's when the pod asks for
one - a partition without the field never passes that test); a ``Restricted`` pod stops after the first group
whatever it holds. Inside the group it takes the candidate that leaves the most partitions of the lowest-score group
of each size 8, 4, 2 (>= the request) intact. Upstream's comments say "higher score is preferred", but the code
takes the LOWEST score first, and the code is what places pods. So the lowest score must go to the partitions whose
loss costs least: the ones inside the weakest larger groups. Hence the rule below.

The rule
--------
1. Per-link bandwidth (bytes/s, one direction) by NVML NVLink version: 1 (NVLink 1.0) -> 20e9; 2, 3, 4, 5, 6
   (2.0, 2.2, 3.0, 3.1, 4.0) -> 25e9; 7 (5.0) -> 50e9; anything else -> unknown.
2. Pair bandwidth bw(a, b) = direct links a<->b x per-link, plus, when both GPUs have NVSwitch links,
   min(a's switch links x a's per-link, b's switch links x b's per-link) (one switch fabric per node).
   The direct part takes the smaller of the two GPUs' views (a's count of links to b x a's per-link, and b's count
   to a x b's per-link), so bw is symmetric and a link counts only when both ends report it.
   If any GPU that has NVLinks has an unknown version, the whole table omits ``ringBusBandwidth`` and every
   comparison below uses raw link counts instead of bytes/s (per-link = 1 for every GPU), so grouping still
   follows NVLink connectivity.
3. Ring bandwidth of a group G (the bottleneck of a ring all-reduce over G):
   |G| = 1: that GPU's own NVLink bandwidth, (all its direct links + its switch links) x per-link, so a 1-GPU pod
   with a bandwidth requirement still matches an NVLink GPU;
   |G| = 2: bw(a, b);
   3 <= |G| <= 8: the maximum, over all rings (Hamiltonian cycles) through G, of the minimum bw on the ring's
   edges (brute force: the lowest minor fixed, at most 7!/2 = 2520 rings);
   |G| > 8: one greedy ring - start at the lowest minor, always step to the unvisited GPU with the highest bw from
   the current one (tie -> lowest minor), close back to the start - and its minimum edge bw.
4. Link type: "NVLink" when the ring bandwidth is > 0 (size 1: the GPU has any NVLink), else "PCIe";
   ``ringBusBandwidth`` is written only for NVLink partitions with known versions, as a DecimalSI quantity of
   bytes/s ("450G").
5. Quality Q(G) = (ring bandwidth, -worst PCIe level among G's pairs), compared lexicographically; the level is
   NVML's common-ancestor level (0 internal, 10 same switch, 20 several switches, 30 host bridge, 40 same NUMA
   node, 50 across sockets; a pair not given counts as 50). Size 1: worst level = 0.
6. Laminar, bottom-up construction. Level 1 = every GPU alone. The groups of size k are paired into groups of
   size 2k:
   * <= 8 groups: every maximum matching is tried; the winner has the lexicographically greatest ascending list of
     pair qualities (its weakest pair as strong as possible, then the next weakest, ...). With an odd count one
     group stays unpaired; which one falls out of that comparison, and on a tie the group with the highest minors
     stays out. Remaining ties: the lexicographically smallest sorted list of the pairs' minors.
   * > 8 groups: greedy - repeatedly take the best-quality pair of still unpaired groups (tie -> smallest minors
     of the merged pair); with an odd count the one group no pair took stays unpaired.
   Groups left unpaired do not go further up. Stop when fewer than 2 groups of a size are left. Every group built
   at any level is a partition of its size, so partitions of one size never overlap and every partition of size
   k lies inside at most one partition of size 2k (its parent).
7. allocationScore (LOWER = taken first by koord-scheduler): taking a partition P breaks every larger group that
   contains P (its parent, the parent's parent, ...). P's cost key lists, from the largest size down to P's parent's
   size, the Q of P's ancestor of that size, or "none" (below every Q) where P has no ancestor that big.  Keys compare
   lexicographically: P is cheaper when the biggest group it breaks is weaker, then the next biggest, and so on; a
   partition no larger group contains (left over by an odd count) breaks nothing and is cheapest of all. The score
   is 1 + the number of distinct smaller keys among the partitions of its size, so the cheapest partitions score 1
   and the scheduler takes the weakest groups apart first, keeping the strong NVLink groups whole for the pods that
   need them. Comparing the whole chain, not just the parent, matters when the pairs are equal but the quads they
   form are not. The top size scores 1. When all groups are equal every score is 1, as in upstream's built-in
   Hopper table.

Output: ``{"1": [...], "2": [...], ...}`` with keys in numeric order, partitions of a size sorted by minors, each
``{"minors", "gpuLinkType", "ringBusBandwidth" (when known), "allocationScore"}``; no GPUs -> ``{}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, permutations
from typing import Any

from koordlet.base import wire
from koordlet.base.quantity import format_milli

# NVML nvmlGpuTopologyLevel_t, as returned by nvmlDeviceGetTopologyCommonAncestor for a pair of GPUs (INTERNAL, 0,
# two GPUs on one board, is only ever compared as a number).
PCIE_SINGLE, PCIE_MULTIPLE, PCIE_HOSTBRIDGE, PCIE_NODE, PCIE_SYSTEM = 10, 20, 30, 40, 50

# Bytes per second, one direction, of one NVLink by NVML nvmlNvlinkVersion_t (1=1.0 ... 7=5.0).
NVLINK_LINK_BANDWIDTH: Mapping[int, int] = {1: 20 * 10**9, 2: 25 * 10**9, 3: 25 * 10**9, 4: 25 * 10**9,
                                            5: 25 * 10**9, 6: 25 * 10**9, 7: 50 * 10**9}

# Largest group whose rings are all tried, and largest set of groups whose matchings are all tried.
_BRUTE_FORCE_LIMIT = 8


@dataclass(frozen=True)
class GpuLinks:
    """One GPU's NVLink wiring as NVML reports it; the collector fills it, derive_partitions only reads it."""
    minor: int
    bus_id: str                      # normalized PCI BDF, e.g. "0000:3b:00.0"
    peers: Mapping[str, int]         # peer GPU bus id -> number of ACTIVE NVLinks going directly to that GPU
    switch_links: int = 0            # number of ACTIVE NVLinks going to an NVSwitch (one fabric per node)
    link_version: int = 0            # NVML NVLink version enum, 1=1.0 ... 7=5.0 (rule 1); 0 = unknown


Group = tuple[int, ...]              # sorted minors
Quality = tuple[int, int]            # (ring bandwidth, -worst PCIe level)


@dataclass(frozen=True)
class _Fabric:
    """Pairwise facts about one node's GPUs keyed by minor, worked out once per derivation."""
    bw: Mapping[frozenset[int], int]      # bytes/s, or link counts when bandwidth_known is False
    level: Mapping[frozenset[int], int]   # PCIe common-ancestor level
    own: Mapping[int, int]                # a single GPU's total NVLink bandwidth
    bandwidth_known: bool


def derive_partitions(gpus: Sequence[GpuLinks],
                      pcie_levels: Mapping[frozenset[str], int]) -> dict[str, list[dict[str, Any]]]:
    """The partition table for these GPUs (see the module docstring for the rule), JSON-ready."""
    if not gpus:
        return {}
    fabric = _fabric(gpus, pcie_levels)
    levels, parent, quality = _build_levels(sorted(g.minor for g in gpus), fabric)
    table: dict[str, list[dict[str, Any]]] = {}
    for index, groups in enumerate(levels):
        scores = _scores(groups, parent, quality, sizes_above=len(levels) - 1 - index)
        table[str(len(groups[0]))] = [
            _partition(group, quality[group][0], fabric.bandwidth_known, scores[group]) for group in sorted(groups)]
    return table


def _fabric(gpus: Sequence[GpuLinks], pcie_levels: Mapping[frozenset[str], int]) -> _Fabric:
    """Pair bandwidths and PCIe levels by minor; link counts stand in for bytes/s when a version is unknown."""
    def total_links(g: GpuLinks) -> int:
        return sum(g.peers.values()) + g.switch_links

    known = all(g.link_version in NVLINK_LINK_BANDWIDTH for g in gpus if total_links(g) > 0)
    per_link = {g.minor: NVLINK_LINK_BANDWIDTH.get(g.link_version, 0) if known else 1 for g in gpus}
    bw: dict[frozenset[int], int] = {}
    level: dict[frozenset[int], int] = {}
    for a, b in combinations(gpus, 2):
        direct = min(a.peers.get(b.bus_id, 0) * per_link[a.minor], b.peers.get(a.bus_id, 0) * per_link[b.minor])
        switched = 0
        if a.switch_links > 0 and b.switch_links > 0:
            switched = min(a.switch_links * per_link[a.minor], b.switch_links * per_link[b.minor])
        key = frozenset((a.minor, b.minor))
        bw[key] = direct + switched
        level[key] = pcie_levels.get(frozenset((a.bus_id, b.bus_id)), PCIE_SYSTEM)
    own = {g.minor: total_links(g) * per_link[g.minor] for g in gpus}
    return _Fabric(bw=bw, level=level, own=own, bandwidth_known=known)


def _ring_bandwidth(group: Group, fabric: _Fabric) -> int:
    """Bottleneck bandwidth of the best ring through the group (rule 3)."""
    if len(group) == 1:
        return fabric.own[group[0]]
    if len(group) > _BRUTE_FORCE_LIMIT:
        return _ring_min(_greedy_ring(group, fabric), fabric)
    first, rest = group[0], group[1:]
    # A ring and its mirror image are the same ring: keep the orientation whose second GPU is the lower one.
    return max(_ring_min((first, *order), fabric) for order in permutations(rest) if order[0] <= order[-1])


def _ring_min(ring: Sequence[int], fabric: _Fabric) -> int:
    """The weakest edge of a closed ring (the last GPU links back to the first)."""
    return min(fabric.bw[frozenset((ring[i], ring[i - 1]))] for i in range(len(ring)))


def _greedy_ring(group: Group, fabric: _Fabric) -> list[int]:
    """Nearest-neighbour ring for groups too big to try every ring: strongest next hop, tie -> lowest minor."""
    ring = [group[0]]
    left = set(group[1:])
    while left:
        here = ring[-1]
        step = min(left, key=lambda m: (-fabric.bw[frozenset((here, m))], m))
        ring.append(step)
        left.remove(step)
    return ring


def _quality(group: Group, fabric: _Fabric) -> Quality:
    """Q(G) = (ring bandwidth, -worst PCIe level among the pairs); bigger is better (rule 5)."""
    worst = max((fabric.level[frozenset(pair)] for pair in combinations(group, 2)), default=0)
    return _ring_bandwidth(group, fabric), -worst


def _build_levels(minors: list[int], fabric: _Fabric
                  ) -> tuple[list[list[Group]], dict[Group, Group], dict[Group, Quality]]:
    """Groups of size 1, 2, 4, ... (rule 6), the size-2k group each paired size-k group went into, and Q of each."""
    levels: list[list[Group]] = [[(m,) for m in minors]]
    parent: dict[Group, Group] = {}
    quality = {group: _quality(group, fabric) for group in levels[0]}
    while len(levels[-1]) >= 2:
        groups = levels[-1]
        pair_quality = {(a, b): _quality(_merge(a, b), fabric) for a, b in combinations(groups, 2)}
        pairs = (_best_matching(groups, pair_quality) if len(groups) <= _BRUTE_FORCE_LIMIT
                 else _greedy_matching(groups, pair_quality))
        merged = []
        for a, b in pairs:
            group = parent[a] = parent[b] = _merge(a, b)
            quality[group] = pair_quality[(a, b)]
            merged.append(group)
        levels.append(merged)
    return levels, parent, quality


def _merge(a: Group, b: Group) -> Group:
    return tuple(sorted(a + b))


def _best_matching(groups: list[Group], pair_quality: Mapping[tuple[Group, Group], Quality]
                   ) -> list[tuple[Group, Group]]:
    """The maximum matching whose weakest pairs are strongest; ties as rule 6 says."""
    candidates = list(_maximum_matchings(groups))

    def qualities(pairs: list[tuple[Group, Group]]) -> list[Quality]:
        return sorted(pair_quality[p] for p in pairs)

    best = max(qualities(pairs) for pairs, _ in candidates)
    candidates = [(pairs, out) for pairs, out in candidates if qualities(pairs) == best]
    highest_out = max(out for _, out in candidates)
    candidates = [(pairs, out) for pairs, out in candidates if out == highest_out]
    return min((pairs for pairs, _ in candidates), key=lambda pairs: sorted(_merge(a, b) for a, b in pairs))


def _maximum_matchings(groups: list[Group]) -> Iterator[tuple[list[tuple[Group, Group]], Group]]:
    """Every maximum matching as (pairs, the group left out or () when the count is even)."""
    if len(groups) % 2 == 0:
        for pairs in _perfect_matchings(groups):
            yield pairs, ()
        return
    for i, out in enumerate(groups):
        for pairs in _perfect_matchings(groups[:i] + groups[i + 1:]):
            yield pairs, out


def _perfect_matchings(groups: list[Group]) -> Iterator[list[tuple[Group, Group]]]:
    """Every way to split an even list into pairs; each pair keeps the list's order (as pair_quality's keys do)."""
    if not groups:
        yield []
        return
    first = groups[0]
    for i in range(1, len(groups)):
        for rest in _perfect_matchings(groups[1:i] + groups[i + 1:]):
            yield [(first, groups[i]), *rest]


def _greedy_matching(groups: list[Group], pair_quality: Mapping[tuple[Group, Group], Quality]
                     ) -> list[tuple[Group, Group]]:
    """Best-quality pair first (tie -> smallest merged minors), for too many groups to try every matching."""
    used: set[Group] = set()
    pairs = []
    for a, b in sorted(pair_quality, key=lambda p: (_negate(pair_quality[p]), _merge(*p))):
        if a not in used and b not in used:
            pairs.append((a, b))
            used.update((a, b))
    return pairs


def _negate(q: Quality) -> Quality:
    return -q[0], -q[1]


# One place of a cost key (rule 7): (0, _NO_QUALITY) where the partition has no ancestor of that size, which sorts
# below (1, Q) for every real ancestor Q.
_CostPlace = tuple[int, Quality]
_NO_QUALITY: Quality = (0, 0)


def _cost_key(group: Group, parent: Mapping[Group, Group], quality: Mapping[Group, Quality],
              sizes_above: int) -> tuple[_CostPlace, ...]:
    """What taking this partition breaks (rule 7): its ancestors' Q, largest size first; smaller = cheaper."""
    chain: list[_CostPlace] = []             # nearest ancestor first
    ancestor = parent.get(group)
    while ancestor is not None:
        chain.append((1, quality[ancestor]))
        ancestor = parent.get(ancestor)
    chain += [(0, _NO_QUALITY)] * (sizes_above - len(chain))
    return tuple(reversed(chain))


def _scores(groups: list[Group], parent: Mapping[Group, Group], quality: Mapping[Group, Quality],
            sizes_above: int) -> dict[Group, int]:
    """allocationScore of each partition of one size (rule 7): 1 for the cheapest to take, as koord-scheduler sorts
    ascending and takes the first group that fits - so the weak groups go first and the strong ones stay whole."""
    keys = {group: _cost_key(group, parent, quality, sizes_above) for group in groups}
    rank = {key: index + 1 for index, key in enumerate(sorted(set(keys.values())))}
    return {group: rank[key] for group, key in keys.items()}


def _partition(group: Group, ring_bandwidth: int, bandwidth_known: bool, score: int) -> dict[str, Any]:
    """One table entry; ringBusBandwidth only where it is NVLink and in bytes/s."""
    entry: dict[str, Any] = {"minors": list(group),
                   "gpuLinkType": wire.GPU_LINK_NVLINK if ring_bandwidth > 0 else wire.GPU_LINK_PCIE}
    if ring_bandwidth > 0 and bandwidth_known:
        entry["ringBusBandwidth"] = format_milli(ring_bandwidth * 1000)
    entry["allocationScore"] = score
    return entry
