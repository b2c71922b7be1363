"""Which CPUs a pod gets on one node: upstream's CPU accumulator and takeCPUs (``cpu_accumulator.go``), whole cores,
one NUMA node and one socket first, in the NUMA allocate strategy's order, with PCPULevel / NUMANodeLevel
exclusivity; and what a required bind policy can use.

Separate because it is upstream's own file and the longest single algorithm of the plugin; it reads only the node's
topology and the CPUs already held.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping

from scheduler.numa.names import (
    ERR_FAILED_TO_ALLOCATE_CPUS,
    ERR_NOT_ENOUGH_CPUS,
    FULL_PCPUS,
    MOST_ALLOCATED,
    NUMA_NODE_LEVEL,
    PCPU_LEVEL,
    SPREAD_BY_PCPUS,
)
from scheduler.numa.topology import CPUInfo, NodeTopology


class Unfit(Exception):
    """The pod does not fit; the message is upstream's reason."""


class _Accumulator:
    """Takes CPUs for one pod out of ``free``, preferring whole cores, one NUMA node, one socket, as upstream."""

    def __init__(self, topo: NodeTopology, available: Iterable[int], allocated: Mapping[int, str], needed: int,
                 exclusive: str, strategy: str) -> None:
        self.topo = topo
        self.free = {c: topo.cpus[c] for c in available if c in topo.cpus}
        self.excl_cores = {topo.cpus[c].core for c, p in allocated.items() if p == PCPU_LEVEL and c in topo.cpus}
        self.excl_nodes = {topo.cpus[c].node for c, p in allocated.items() if p == NUMA_NODE_LEVEL and c in topo.cpus}
        self.exclusive = exclusive
        self.most = strategy == MOST_ALLOCATED
        self.needed = needed
        self.result: set[int] = set()

    def order(self, free: int) -> int:
        """Sort key for a free count: fewest first under MostAllocated, most first otherwise."""
        return free if self.most else -free

    def take(self, cpus: Iterable[int]) -> None:
        for c in cpus:
            self.result.add(c)
            info = self.free.pop(c, None) or self.topo.cpus[c]
            if self.exclusive == PCPU_LEVEL:
                self.excl_cores.add(info.core)
            elif self.exclusive == NUMA_NODE_LEVEL:
                self.excl_nodes.add(info.node)
            self.needed -= 1

    def needs(self, n: int) -> bool:
        return self.needed >= n

    def satisfied(self) -> bool:
        return self.needed < 1

    def _excl_pcpu(self, info: CPUInfo) -> bool:
        return self.exclusive == PCPU_LEVEL and info.core in self.excl_cores

    def _excl_numa(self, info: CPUInfo) -> bool:
        return self.exclusive == NUMA_NODE_LEVEL and info.node in self.excl_nodes

    def _cores(self, skip: Callable[[CPUInfo], bool]) -> dict[int, list[int]]:
        cores: dict[int, list[int]] = defaultdict(list)
        for c, info in self.free.items():
            if not skip(info):
                cores[info.core].append(c)
        return cores

    def _by_group(self, cores: Mapping[int, list[int]], group: Callable[[CPUInfo], int],
                  full_only: bool) -> dict[int, list[int]]:
        """Group -> its (whole, when ``full_only``) cores' CPUs, cores with the most free CPUs first, then by id."""
        grouped: dict[int, list[int]] = defaultdict(list)
        for core, cpus in cores.items():
            if not full_only or len(cpus) == self.topo.cpus_per_core:
                grouped[group(self.free[min(cpus)])].append(core)
        return {g: [c for core in sorted(cs, key=lambda k: (-len(cores[k]), k)) for c in sorted(cores[core])]
                for g, cs in grouped.items()}

    def free_cores_in_node(self, full_only: bool, filter_exclusive: bool) -> list[list[int]]:
        cores = self._cores(lambda i: filter_exclusive and self._excl_numa(i))
        socket_free = Counter(self.free[c].socket for cs in cores.values() for c in cs)
        lists = self._by_group(cores, lambda i: i.node, full_only)
        return [lists[n] for n in sorted(lists, key=lambda n: (
            self.order(len(lists[n])), self.order(socket_free[self.free[lists[n][0]].socket]), n))]

    def free_cores_in_socket(self, full_only: bool) -> list[list[int]]:
        lists = self._by_group(self._cores(lambda i: False), lambda i: i.socket, full_only)
        return [lists[s] for s in sorted(lists, key=lambda s: (self.order(len(lists[s])), s))]

    def extract(self, cpus: list[int]) -> list[int]:
        """The first CPU of each core, in order."""
        seen: set[int] = set()
        out = []
        for c in cpus:
            core = self.topo.cpus[c].core
            if core not in seen:
                seen.add(core)
                out.append(c)
        return out

    def free_cpus_in_node(self, filter_exclusive: bool) -> list[list[int]]:
        nodes: dict[int, list[int]] = defaultdict(list)
        node_free: Counter[int] = Counter()
        socket_free: Counter[int] = Counter()
        for c, info in self.free.items():
            if filter_exclusive and (self._excl_pcpu(info) or self._excl_numa(info)):
                continue
            nodes[info.node].append(c)
            node_free[info.node] += 1
            socket_free[info.socket] += 1
        lists = {n: self.extract(sorted(cs)) if filter_exclusive else sorted(cs) for n, cs in nodes.items()}
        return [lists[n] for n in sorted(lists, key=lambda n: (
            self.order(node_free[n]), self.order(socket_free[self.free[lists[n][0]].socket]), n))]

    def free_cpus_in_socket(self, filter_exclusive: bool) -> list[list[int]]:
        sockets: dict[int, list[int]] = defaultdict(list)
        for c, info in self.free.items():
            if not (filter_exclusive and self._excl_pcpu(info)):
                sockets[info.socket].append(c)
        lists = {s: self.extract(sorted(cs)) if filter_exclusive else sorted(cs) for s, cs in sockets.items()}
        return [lists[s] for s in sorted(lists, key=lambda s: (self.order(len(lists[s])), s))]

    def free_cpus(self, filter_exclusive: bool) -> list[int]:
        """Every free CPU, core by core: sockets already used by the result first, then by free CPUs per socket and
        per NUMA node (strategy order), cores with fewer free CPUs first, then socket and core id."""
        cores = self._cores(lambda i: filter_exclusive and (self._excl_pcpu(i) or self._excl_numa(i)))
        node_free = Counter(self.free[c].node for cs in cores.values() for c in cs)
        socket_free = Counter(self.free[c].socket for cs in cores.values() for c in cs)
        colo = {s: len(self.topo.cpus_in_socket.get(s, frozenset()) & self.result) for s in socket_free}

        def key(core: int) -> tuple[int, ...]:
            info = self.free[cores[core][0]]
            return (-colo[info.socket], self.order(socket_free[info.socket]), self.order(node_free[info.node]),
                    len(cores[core]), info.socket, core)
        return [c for core in sorted(cores, key=key) for c in sorted(cores[core])]

    def spread(self, cpus: list[int]) -> list[int]:
        """One CPU per core in order, then the second CPUs, ... (SMT siblings last)."""
        if len(cpus) <= self.topo.cpus_per_core:
            return cpus
        out: list[int] = []
        rest = cpus
        while rest:
            seen: set[int] = set()
            later = []
            for c in rest:
                core = self.topo.cpus[c].core
                if core in seen:
                    later.append(c)
                else:
                    seen.add(core)
                    out.append(c)
            rest = later
        return out


def take_cpus(topo: NodeTopology, available: Iterable[int], allocated: Mapping[int, str], needed: int,
              bind_policy: str, exclusive: str, strategy: str) -> frozenset[int]:
    """``needed`` CPUs out of ``available`` as upstream's takeCPUs picks them; ``allocated`` (CPU -> exclusive policy
    of its holder) feeds the PCPULevel/NUMANodeLevel exclusivity. Raises :class:`Unfit` when they cannot be found."""
    acc = _Accumulator(topo, available, allocated, needed, exclusive, strategy)
    if acc.satisfied():
        return frozenset()
    if acc.needed > len(acc.free):
        raise Unfit(ERR_NOT_ENOUGH_CPUS)
    full = bind_policy == FULL_PCPUS
    per_core = topo.cpus_per_core
    if full or per_core == 1:
        # whole free cores in one NUMA node, then in one socket (strategy order)
        if acc.needed <= topo.cpus_per_node:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cores_in_node(True, filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(cpus[:acc.needed])
                        return frozenset(acc.result)
        if acc.needed <= topo.cpus_per_socket:
            for cpus in acc.free_cores_in_socket(True):
                if len(cpus) >= acc.needed:
                    acc.take(cpus[:acc.needed])
                    return frozenset(acc.result)
        # every socket whose free whole cores all fit, most free first; then core by core from the fewest
        unsatisfied = []
        for cpus in sorted(acc.free_cores_in_socket(True), key=len, reverse=True):
            if not acc.needs(len(cpus)):
                unsatisfied.append(cpus)
            else:
                acc.take(cpus)
                if acc.satisfied():
                    return frozenset(acc.result)
        if acc.needs(per_core):
            for cpus in sorted(unsatisfied, key=len):
                for i in range(0, len(cpus), per_core):
                    acc.take(cpus[i:i + per_core])
                    if acc.satisfied():
                        return frozenset(acc.result)
                    if not acc.needs(per_core):
                        break
    if not full:
        # one NUMA node, then one socket, spreading over cores, even when the spread cannot be kept
        if acc.needed <= topo.cpus_per_node:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cpus_in_node(filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(acc.spread(cpus)[:acc.needed])
                        return frozenset(acc.result)
        if acc.needed <= topo.cpus_per_socket:
            for filter_exclusive in (True, False):
                for cpus in acc.free_cpus_in_socket(filter_exclusive):
                    if len(cpus) >= acc.needed:
                        acc.take(acc.spread(cpus)[:acc.needed])
                        return frozenset(acc.result)
    for filter_exclusive in (True, False):
        for c in acc.spread(acc.free_cpus(filter_exclusive)):
            if acc.needs(1):
                acc.take((c,))
            if acc.satisfied():
                return frozenset(acc.result)
    raise Unfit(ERR_FAILED_TO_ALLOCATE_CPUS)


def _cores_of(topo: NodeTopology, cpus: Iterable[int]) -> dict[int, list[int]]:
    cores: dict[int, list[int]] = defaultdict(list)
    for c in cpus:
        if c in topo.cpus:
            cores[topo.cpus[c].core].append(c)
    return cores


def filter_by_policy(topo: NodeTopology, policy: str, cpus: Iterable[int]) -> frozenset[int]:
    """What a required policy can use: whole free cores (FullPCPUs) or one CPU per core (SpreadByPCPUs)."""
    cores = _cores_of(topo, cpus)
    if policy == FULL_PCPUS:
        return frozenset(c for cs in cores.values() if len(cs) == topo.cpus_per_core for c in cs)
    if policy == SPREAD_BY_PCPUS:
        return frozenset(min(cs) for cs in cores.values())
    return frozenset(cpus)


def satisfies(topo: NodeTopology, policy: str, cpus: frozenset[int]) -> bool:
    cores = len(_cores_of(topo, cpus))
    if policy == FULL_PCPUS:
        return cores * topo.cpus_per_core == len(cpus)
    if policy == SPREAD_BY_PCPUS:
        return cores == len(cpus)
    return True
