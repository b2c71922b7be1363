"""One pod's allocation on one node (upstream's ``resource_manager.go``): what is free per NUMA node, the pod's
requests split evenly over a NUMA mask, its cpuset taken within that split, and the NUMA hints (every NUMA subset the
pod fits in).

Separate because Filter, Reserve and Score all run it, one :class:`NodeAllocator` per (pod, node) decision, and it
is the one place that joins the node's topology, its usage and the CPU accumulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

from scheduler.numa.cpu_accumulator import Unfit, filter_by_policy, satisfies, take_cpus
from scheduler.numa.hints import TopologyHint
from scheduler.numa.names import (
    CPU,
    ERR_INSUFFICIENT_NUMA,
    ERR_NOT_ENOUGH_CPUS,
    ERR_REQUIRED_POLICY,
    FULL_PCPUS,
    RESTRICTED,
)
from scheduler.numa.quantity import ZERO, Quantity, framework_units, value_of
from scheduler.numa.scoring import resource_score
from scheduler.numa.topology import NodeTopology
from scheduler.numa.usage import NumaUsage


@dataclass(frozen=True)
class ResourceOptions:
    """What the pod asks of this node (upstream's ResourceOptions, from getResourceOptions)."""

    requests: Mapping[str, Quantity]
    num_cpus: int
    bind: bool                 # requestCPUBind on this node
    policy: str                # the CPU bind policy used
    required: bool             # the policy is required (the pod's, or the node's)
    exclusive: str
    strategy: str              # NUMA allocate strategy


class Allocation(NamedTuple):
    """The pod's NUMA shares (NUMA id -> resource -> quantity) and its cpuset (empty when it does not bind)."""

    numa: dict[int, dict[str, Quantity]]
    cpus: frozenset[int]


def _go_position_sort(nodes: Sequence[int], available_at: Sequence[int]) -> list[int]:
    """Upstream's ``sort.Slice`` in tryBestToDistributeEvenly compares ``totalAvailable[i]`` and
    ``totalAvailable[j]`` with i and j the *positions* being compared, not the NUMA ids there. Go sorts up to 12
    elements by insertion sort, so the swaps are fully determined by the availability of NUMA ids 0, 1, ...; this
    replays them (``available_at[i]``: what NUMA id i has free). Only for the mask {0, 1} is it the intended sort
    by availability."""
    out = list(nodes)
    for i in range(1, len(out)):
        j = i
        while j > 0 and available_at[j] < available_at[j - 1]:
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


class NodeAllocator:
    """One node's state for one pod's decision: what is free, and how to allocate from it."""

    def __init__(self, topo: NodeTopology, usage: NumaUsage, opts: ResourceOptions) -> None:
        self.topo, self.opts = topo, opts
        self.allocated = usage.allocated_cpus()
        self.free_cpus = frozenset(c for c in topo.cpus if c not in self.allocated and c not in topo.reserved)
        self.held = usage.numa_allocated()
        self.numa_free = self._numa_free()
        self.numa_names = {k for free in self.numa_free.values() for k in free}
        # a NUMA node's take depends only on (node, count) within one decision: the hints try every NUMA subset
        self._taken: dict[tuple[int, int], frozenset[int] | Unfit] = {}

    def _numa_free(self) -> dict[int, dict[str, Quantity]]:
        """Per NUMA node: allocatable less what pods hold (never below zero), cpu trimmed to what a required bind
        policy could use there."""
        out: dict[int, dict[str, Quantity]] = {}
        for numa, allocatable in self.topo.numa_resources.items():
            held = self.held.get(numa, {})
            free = {}
            for k, q in allocatable.items():
                left = q.milli - held.get(k, 0)
                free[k] = Quantity(left, q.fmt) if left > 0 else ZERO
            for k in held:
                free.setdefault(k, ZERO)
            out[numa] = free
        if self.opts.required:
            for numa, free in out.items():
                cpu = free.get(CPU, ZERO)
                if cpu.milli == 0:
                    continue
                usable = filter_by_policy(self.topo, self.opts.policy,
                                          self.free_cpus & self.topo.cpus_in_numa.get(numa, frozenset()))
                if 1000 * len(usable) < cpu.milli:
                    free[CPU] = Quantity(1000 * len(usable), cpu.fmt)
        return out

    def _split(self, name: str, remaining: Quantity, parts: int) -> Quantity:
        """A NUMA node's share of what is left (``splitQuantity``)."""
        if name != CPU:
            return Quantity(value_of(remaining.milli) // parts * 1000, remaining.fmt)
        if not self.opts.bind:
            return Quantity(remaining.milli // parts, remaining.fmt)
        if self.opts.required and self.opts.policy == FULL_PCPUS:
            per_core = self.topo.cpus_per_core
            return Quantity(value_of(remaining.milli) // per_core // parts * per_core * 1000, remaining.fmt)
        return Quantity(value_of(remaining.milli) // parts * 1000, remaining.fmt)

    def distribute(self, mask: frozenset[int]) -> dict[int, dict[str, Quantity]]:
        """Each requested resource spread over the mask's NUMA nodes, the least available first, each taking at
        most an even share of what is left (``tryBestToDistributeEvenly``); Unfit when some is left over."""
        bits = sorted(mask)
        out: dict[int, dict[str, Quantity]] = {}
        short = []
        for name in sorted(self.opts.requests):
            if name not in self.numa_names:
                continue
            remaining = self.opts.requests[name]
            order = _go_position_sort(bits, [self.numa_free.get(i, {}).get(name, ZERO).milli
                                             for i in range(len(bits))])
            for i, numa in enumerate(order):
                share = self._split(name, remaining, len(bits) - i)
                free = self.numa_free.get(numa, {}).get(name, ZERO)
                taken = share if free.milli > share.milli else free
                if taken.milli != 0:
                    out.setdefault(numa, {})[name] = taken
                    remaining = Quantity(remaining.milli - taken.milli, remaining.fmt)
            if remaining.milli != 0:
                short.append(ERR_INSUFFICIENT_NUMA.format(name))
        if short:
            raise Unfit(", ".join(short))
        return {k: out[k] for k in sorted(out)}

    def cpuset(self, numa: Mapping[int, Mapping[str, Quantity]]) -> frozenset[int]:
        """The pod's CPUs: each NUMA node's cpu share taken there, or all from the node (``allocateCPUSet``)."""
        opts, topo = self.opts, self.topo
        free = self.free_cpus
        if opts.required:
            free = filter_by_policy(topo, opts.policy, free)
        if len(free) < opts.num_cpus:
            raise Unfit(ERR_NOT_ENOUGH_CPUS)
        result: frozenset[int] = frozenset()
        needed = opts.num_cpus
        if numa:
            for node in sorted(numa):
                result |= self._take_in(node, numa[node].get(CPU, ZERO).milli // 1000, free)
            needed -= len(result)
            if needed != 0:
                raise Unfit(ERR_NOT_ENOUGH_CPUS)
        if needed > 0:
            result |= take_cpus(topo, free - result, self.allocated, needed, opts.policy, opts.exclusive,
                                opts.strategy)
        if opts.required and not satisfies(topo, opts.policy, result):
            raise Unfit(ERR_REQUIRED_POLICY.format(opts.policy))
        return result

    def _take_in(self, node: int, share: int, free: frozenset[int]) -> frozenset[int]:
        """The CPUs of one NUMA node's share (at most what is free there)."""
        here = free & self.topo.cpus_in_numa.get(node, frozenset())
        count = min(share, len(here))
        taken = self._taken.get((node, count))
        if taken is None:
            opts = self.opts
            try:
                taken = take_cpus(self.topo, here, self.allocated, count, opts.policy, opts.exclusive, opts.strategy)
            except Unfit as e:
                taken = e
            self._taken[(node, count)] = taken
        if isinstance(taken, Unfit):
            raise taken
        return taken

    def allocate(self, mask: frozenset[int] | None) -> Allocation:
        """NUMA shares within ``mask`` (none when None) and the cpuset when binding; Unfit when it does not fit."""
        numa = self.distribute(mask) if mask is not None else {}
        return Allocation(numa, self.cpuset(numa) if self.opts.bind else frozenset())

    def hints(self, policy: str, kind: str, weights: Sequence[tuple[str, int]],
              max_size: int | None = None) -> dict[str, list[TopologyHint]]:
        """Per requested NRT resource, every NUMA subset (of at most ``max_size`` nodes) the pod fits in
        (``generateResourceHints``)."""
        zones = self.topo.numa_resources
        names = {k for r in zones.values() for k in r}
        lacking = {k: {n for n, free in self.numa_free.items() if free.get(k, ZERO).milli == 0} for k in names}
        smallest = dict.fromkeys(self.opts.requests, len(zones))
        found: dict[str, list[tuple[frozenset[int], int]]] = {}
        requested_names: set[str] = set()
        pod = framework_units(self.opts.requests)
        for size in range(1, min(len(zones), max_size or len(zones)) + 1):
            for combo in combinations(sorted(zones), size):
                mask = frozenset(combo)
                total: dict[str, int] = {}
                free: dict[str, int] = {}
                for n in combo:
                    for k, q in zones[n].items():
                        total[k] = total.get(k, 0) + q.milli
                    for k, q in self.numa_free[n].items():
                        free[k] = free.get(k, 0) + q.milli
                requested_names.update(k for k in self.opts.requests if k in total)
                used = {k: max(total.get(k, 0) - free.get(k, 0), 0) for k in total.keys() | free.keys()}
                score = resource_score(kind, weights, framework_units(used), framework_units(total), pod)
                try:
                    self.allocate(mask)
                except Unfit:
                    continue
                for k in sorted(requested_names):
                    if mask & lacking.get(k, set()):
                        continue
                    smallest[k] = min(smallest[k], size)
                    found.setdefault(k, []).append((mask, score))
        out: dict[str, list[TopologyHint]] = {}
        for k in requested_names:
            out[k] = [TopologyHint(m, len(m) == smallest[k] or policy == RESTRICTED, False, s)
                      for m, s in found.get(k, [])]
        return out
