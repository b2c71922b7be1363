"""What is submitted, in which order, how often, and how the runs are summed up: the simulator's protocol.

**Orders** (:data:`ORDERS`):

* ``arrival``: the trace in creation order, deletions ignored (the cluster only fills); when it ends before the
  load asked for it is submitted again (new names), up to :data:`MAX_PASSES` times.
* ``shuffle``: the paper's protocol (its artifact's ``--shuffle-pod`` and workload tuning): the pods sorted by name
  and shuffled with the seed; then, if they ask less than the load asked for, pods drawn from the trace with
  replacement (seeded, new names) are appended until the next one would pass it; if they ask more, pods are
  removed at random until they do not.
* ``churn``: departures (:mod:`scheduler.simulate.churn`): each pod arrives at its creation_time and leaves at its
  deletion_time, the gaps between arrivals compressed so that the offered load (Little's law) is ``max_load``
  percent; measured over time, not arrived load. Pods that fail are not retried.

With ``arrival`` and ``shuffle`` the pods submitted ask at most ``max_load`` percent of the cluster's GPU capacity.

**Seeds.** Each of ``seeds`` seeds (``seed``, ``seed + 1``, ...) gives its own order (shuffle; with arrival and
churn the order is the trace's times) and its own draws among equally good nodes; every policy sees the same
orders. Runs go to a pool of processes (``jobs``), and each
load (or time) level's measures are reported as the median over the seeds, with the minimum and maximum.

**The target mix** fragmentation is measured against, as the paper defines it: the shapes of the trace's pods
(cpu, GPU share, GPU count, GPU models: :func:`~scheduler.simulate.simulator.task_shape`), the most frequent
covering 95 % of the pods (:func:`scheduler.fgd.typical`).
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from scheduler.fgd import Shape, typical
from scheduler.simulate import churn
from scheduler.simulate.policies import Policy
from scheduler.simulate.simulator import Curve, Point, Run, Simulator, task_shape
from scheduler.trace import cluster, records

ORDERS = ("arrival", "shuffle", "churn")
MAX_PASSES = 5

Nodes = Sequence[tuple[dict[str, Any], dict[str, Any] | None]]


@dataclass(frozen=True)
class Protocol:
    """How pods are submitted and runs repeated (the module docstring)."""

    order: str = "arrival"
    seed: int = 0
    seeds: int = 1
    max_load: int = 100                    # percent of GPU capacity the submitted pods ask at most (churn: offer)
    max_pods: int | None = 110             # pods per node (None: no limit); the kubelet's default is 110
    known_mix: bool = False                # fgd scores with the target mix instead of learning one

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r}: expected one of {', '.join(ORDERS)}")
        if self.seeds < 1 or self.max_load < 1 or (self.max_pods is not None and self.max_pods < 1):
            raise ValueError("seeds, max_load and max_pods must be positive")

    def describe(self) -> str:
        """One line saying which protocol produced a table."""
        order = {"arrival": "the trace in creation order, resubmitted whole (renamed) until the load",
                 "shuffle": "shuffled by seed, then inflated by sampling with replacement (or thinned at random) to",
                 "churn": "pods arrive at creation_time and leave at deletion_time (failed ones are not retried), "
                          "arrivals compressed to an offered load of"}[self.order]
        seeds = (f"seed {self.seed}" if self.seeds == 1
                 else f"{self.seeds} seeds ({self.seed}..{self.seed + self.seeds - 1}), median [min-max]")
        if self.order == "churn":
            seeds += " (the order is the trace's times: seeds change only the draws among equally good nodes)"
        limit = "no pod limit" if self.max_pods is None else f"at most {self.max_pods} pods a node"
        return f"protocol: {self.order}: {order} {self.max_load} % of GPU capacity; {seeds}; {limit}"


@dataclass(frozen=True)
class Workload:
    """The pods one seed submits, in order, and why their number differs from the trace's; with churn, the factor
    the gaps between their arrivals are divided by."""

    pods: list[records.TracePod]
    notes: list[str]
    compression: float = 1.0


def _renamed(pod: records.TracePod, suffix: str) -> records.TracePod:
    return replace(pod, name=f"{pod.name}-{suffix}")


def workload(pods: Sequence[records.TracePod], capacity: int, protocol: Protocol, seed: int) -> Workload:
    """The pods submitted for one seed (the module docstring); ValueError when they ask no GPU at all."""
    asks = [cluster.gpu_request_milli(p) for p in pods]
    total = sum(asks)
    if total == 0:
        raise ValueError("the trace's pods ask no GPU: there is no load to reach")
    limit = capacity * protocol.max_load // 100
    asked = f"the trace asks {100 * total / capacity:.1f} % of GPU capacity"
    notes: list[str] = []
    out: list[records.TracePod] = []
    arrived = 0
    if protocol.order == "churn":
        factor = churn.compression(pods, capacity, protocol.max_load)
        notes.append(f"arrivals compressed ×{factor:.4g} so the offered load is {protocol.max_load} % of GPU "
                     f"capacity (Σ GPU asked × lifetime / (arrival span × capacity); {asked} in all)")
        return Workload(sorted(pods, key=lambda p: p.creation_time), notes, factor)
    if protocol.order == "arrival":
        ordered = sorted(range(len(pods)), key=lambda i: pods[i].creation_time)
        for n in range(MAX_PASSES * len(pods)):
            i = ordered[n % len(pods)]
            if arrived + asks[i] > limit:
                break
            arrived += asks[i]
            out.append(pods[i] if n < len(pods) else _renamed(pods[i], f"r{n // len(pods)}"))
        if len(out) < len(pods):
            notes.append(f"{len(pods) - len(out)} of {len(pods)} pods not submitted: the next would have passed "
                         f"--max-load {protocol.max_load} % ({asked})")
        elif len(out) > len(pods):
            passes = -(-len(out) // len(pods))
            notes.append(f"{len(out) - len(pods)} pods submitted again (renamed) in {passes - 1} more pass(es): "
                         f"{asked}" + (f", and {MAX_PASSES} passes ask less than --max-load"
                                       if len(out) == MAX_PASSES * len(pods) else ""))
        return Workload(out, notes)
    rng = random.Random(f"order-{seed}")
    by_name = sorted(range(len(pods)), key=lambda i: pods[i].name)
    shuffled = list(by_name)
    rng.shuffle(shuffled)
    arrived = total
    removed = 0
    while arrived > limit:
        arrived -= asks[shuffled.pop(rng.randrange(len(shuffled)))]
        removed += 1
    out = [pods[i] for i in shuffled]
    if removed:
        notes.append(f"{removed} of {len(pods)} pods removed at random: {asked}, more than --max-load "
                     f"{protocol.max_load} %")
        return Workload(out, notes)
    added = 0
    while True:
        i = by_name[rng.randrange(len(pods))]
        if arrived + asks[i] > limit:
            break
        arrived += asks[i]
        out.append(_renamed(pods[i], f"s{added}"))
        added += 1
    if added:
        notes.append(f"{added} pods added, drawn from the trace with replacement: {asked}, less than --max-load "
                     f"{protocol.max_load} %")
    return Workload(out, notes)


def target_mix(pods: Iterable[records.TracePod]) -> dict[Shape, float]:
    """The target mix of a trace (the module docstring)."""
    return typical(Counter(task_shape(p) for p in pods))


def run(nodes: Nodes, submitted: Sequence[records.TracePod], policy: Policy, protocol: Protocol, seed: int,
        target: Mapping[Shape, float], compression: float = 1.0) -> Run:
    """One policy's run over the pods of one seed's workload (with churn, their arrivals compressed by
    ``compression``)."""
    sim = Simulator(nodes, policy, seed=seed, target=target, known_mix=protocol.known_mix,
                    max_pods=protocol.max_pods)
    out = Run(policy.name, seed)
    if sim.capacity == 0:
        return out
    if protocol.order == "churn":
        out.submitted = len(submitted)
        out.points, out.placed = churn.replay(sim, submitted, compression, seed)
        return out
    curve = Curve(sim, seed)
    arrived = 0
    for tp in submitted:
        out.submitted += 1
        if sim.place(tp) is not None:
            out.placed += 1
        arrived += cluster.gpu_request_milli(tp)
        curve.add(arrived, sim)
    out.points = curve.points(protocol.max_load)
    return out


def _run_task(task: tuple[Nodes, Sequence[records.TracePod], Policy, Protocol, int, Mapping[Shape, float], float]
              ) -> Run:
    return run(*task)


@dataclass
class Results:
    """Every run of every policy and seed, and the notes on each seed's workload."""

    protocol: Protocol
    runs: list[Run]
    notes: dict[int, list[str]]            # seed -> notes
    pods: int                              # in the trace

    def by_policy(self) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {}
        for r in self.runs:
            out.setdefault(r.policy, []).append(r)
        return out


def simulate(nodes: Nodes, pods: Sequence[records.TracePod], policies: Sequence[Policy], protocol: Protocol, *,
             capacity: int, jobs: int = 1) -> Results:
    """Every policy over every seed's workload, ``jobs`` runs at a time (in processes when more than one)."""
    target = target_mix(pods)
    seeds = range(protocol.seed, protocol.seed + protocol.seeds)
    loads = {s: workload(pods, capacity, protocol, s) for s in seeds}
    tasks = [(nodes, loads[s].pods, p, protocol, s, target, loads[s].compression) for s in seeds for p in policies]
    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
            runs = list(pool.map(_run_task, tasks))
    else:
        runs = [_run_task(t) for t in tasks]
    return Results(protocol, runs, {s: loads[s].notes for s in seeds}, len(pods))


@dataclass(frozen=True)
class Spread:
    """A measure over the seeds: median, minimum, maximum."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(statistics.median(values), min(values), max(values))


def at(run_: Run, level: int, axis: str = "load") -> Point | None:
    """A run's point at a level of ``axis`` (``load``, or ``time`` with churn): the last one at or below it."""
    best = None
    for p in run_.points:
        if getattr(p, axis) <= level:
            best = p
    return best


def spread(runs: Sequence[Run], level: int, measure: str, axis: str = "load") -> Spread | None:
    """A measure (a :class:`Point` field) at a level of ``axis`` over the runs that reached it (None: none did)."""
    values = [float(getattr(p, measure)) for r in runs
              if (p := at(r, level, axis)) is not None and getattr(p, axis) == level]
    return Spread.of(values) if values else None
