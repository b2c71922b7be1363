"""Departures: the ``churn`` order, a cluster where pods come and go as in a real one (the paper ignores them).

**Events.** Each pod arrives at its ``creation_time`` and, if it was placed and has a ``deletion_time``, leaves
then (:meth:`~scheduler.simulate.simulator.Simulator.remove`: the extender's cache gets its DELETED watch event).
At one instant departures go before arrivals, as the capacity a pod frees is there for the next; a pod that lives
0 s leaves after the arrivals of its instant. A pod that finds no node when it arrives is not retried.

**Offered load** (Little's law): Σ over pods of (milli-GPUs asked × lifetime) / (arrival span × GPU capacity), the
arrival span running from the first ``creation_time`` to the last, which is also where the trace ends: a pod
without ``deletion_time`` lives until then. It is the mean share of capacity the live pods would ask if arrivals
went on at the same pace. The generated traces (a mean gap of 1,583 s, a median lifetime of 540 s) replayed at
their own pace leave the cluster nearly empty, so the *gaps between arrivals* are divided by the factor
(:func:`compression`) that makes the offered load ``max_load`` percent; lifetimes are kept.

**Measures** at each 1 % of the (compressed) arrival span, after the events up to that instant
(:func:`replay`): the share of GPU capacity the live pods ask (arrived, ``deletion_time`` not passed, placed or
not: the demand), the unallocated and fragmented shares, and the pods failed so far.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.simulate.simulator import Point, Simulator, load_level
from scheduler.trace import cluster, records

log = logging.getLogger(__name__)

LEVELS = 100                 # measures per run: one at each 1 % of the arrival span

DEPART, ARRIVE, DEPART_AFTER = 0, 1, 2          # an event's rank among the events of its instant


@dataclass(frozen=True)
class Timeline:
    """The pods' times after compression, in seconds from the first arrival: when each arrives and leaves (None:
    never), and the arrival span."""

    arrivals: list[float]
    departures: list[float | None]
    span: float


@dataclass(frozen=True, order=True)
class Event:
    """A pod arriving or leaving; events sort in the order they are played."""

    time: float
    rank: int                # DEPART, ARRIVE or DEPART_AFTER
    index: int               # the pod's position in the pods replayed

    @property
    def arrives(self) -> bool:
        return self.rank == ARRIVE


def _lifetime(pod: records.TracePod) -> int | None:
    return None if pod.deletion_time is None else max(0, pod.deletion_time - pod.creation_time)


def timeline(pods: Sequence[records.TracePod], factor: float) -> Timeline:
    """The pods' times with the gaps between arrivals divided by ``factor``, lifetimes kept."""
    first = min(p.creation_time for p in pods)
    arrivals = [(p.creation_time - first) / factor for p in pods]
    departures = [None if (life := _lifetime(p)) is None else a + life for p, a in zip(pods, arrivals, strict=True)]
    return Timeline(arrivals, departures, max(arrivals))


def offered_load(pods: Sequence[records.TracePod], capacity: int, factor: float) -> float:
    """The offered load of the module docstring, in percent of ``capacity`` (milli-GPUs), arrivals compressed by
    ``factor``."""
    t = timeline(pods, factor)
    asked = sum(cluster.gpu_request_milli(p) * ((t.span if d is None else d) - a)
                for p, a, d in zip(pods, t.arrivals, t.departures, strict=True))
    return 100 * asked / (t.span * capacity)


def compression(pods: Sequence[records.TracePod], capacity: int, max_load: int) -> float:
    """The factor the gaps between arrivals are divided by so that the offered load is ``max_load`` percent of
    ``capacity``; ValueError when no factor can (no pod leaves, all arrive at once, or the pods that never leave
    offer more on their own).

    With the span ``T`` and the lifetimes ``L`` of the pods that leave kept, and the pods that never leave living
    ``(last arrival − arrival) / k``: load(k) = (k·Σ g·L + Σ g·(last − c)) / (T·capacity), linear in ``k``."""
    if all(p.deletion_time is None for p in pods):
        raise ValueError("--order churn: no pod has a deletion_time (the pods CSV's deletion_time column is empty or "
                         "missing): there is nothing to depart")
    first = min(p.creation_time for p in pods)
    last = max(p.creation_time for p in pods)
    if last == first:
        raise ValueError("--order churn: every pod has the same creation_time: the arrivals span no time")
    leaving = sum(cluster.gpu_request_milli(p) * life for p in pods if (life := _lifetime(p)) is not None)
    staying = sum(cluster.gpu_request_milli(p) * (last - p.creation_time) for p in pods if p.deletion_time is None)
    if leaving == 0:
        raise ValueError("--order churn: no pod that asks a GPU has a deletion_time after its creation_time: no GPU "
                         "is ever freed")
    wanted = max_load / 100 * (last - first) * capacity
    if staying >= wanted:
        raise ValueError(f"--order churn: the pods without deletion_time alone offer "
                         f"{100 * staying / ((last - first) * capacity):.1f} % of GPU capacity, at least --max-load "
                         f"{max_load} %")
    return (wanted - staying) / leaving


def events(t: Timeline) -> list[Event]:
    """Every arrival and departure in the order they are played (the module docstring)."""
    out = [Event(a, ARRIVE, i) for i, a in enumerate(t.arrivals)]
    out += [Event(d, DEPART if d > a else DEPART_AFTER, i)
            for i, (a, d) in enumerate(zip(t.arrivals, t.departures, strict=True)) if d is not None]
    return sorted(out)


class Replay:
    """The pods' events played on a simulator, up to the end of the arrival span; what the live pods ask."""

    def __init__(self, sim: Simulator, pods: Sequence[records.TracePod], factor: float) -> None:
        self.sim, self.pods = sim, pods
        self.timeline = timeline(pods, factor)
        self.demand = 0              # milli-GPUs the live pods ask, placed or not
        self.arrived = 0             # milli-GPUs the pods arrived so far asked
        self.placed = self.departed = 0

    def events(self) -> list[Event]:
        """The events to play: those up to the last arrival."""
        return [e for e in events(self.timeline) if e.time <= self.timeline.span]

    def play(self, e: Event) -> None:
        """One arrival (the pod placed, or counted failed) or departure (the pod removed if it was placed)."""
        tp = self.pods[e.index]
        asked = cluster.gpu_request_milli(tp)
        if e.arrives:
            self.arrived += asked
            self.demand += asked
            if self.sim.place(tp) is not None:
                self.placed += 1
            return
        self.demand -= asked
        if self.sim.placed(tp.name) is not None:
            node = self.sim.remove(tp)
            self.departed += 1
            log.debug("churn departure pod=%s node=%s time=%.1f", tp.name, node, e.time)

    def point(self, level: int, seed: int) -> Point:
        """The measures now, as the point of time level ``level``."""
        sim, capacity = self.sim, self.sim.capacity
        return Point(sim.policy.name, load_level(self.arrived, capacity), 1 - sim.allocated / capacity,
                     sim.fragmented / capacity, sim.failed, sim.multi_gpu, sim.in_partition, sim.in_pcie, seed=seed,
                     time=level, demand=self.demand / capacity)


def replay(sim: Simulator, pods: Sequence[records.TracePod], factor: float, seed: int) -> tuple[list[Point], int]:
    """The pods' events played on ``sim`` (arrivals compressed by ``factor``); a point at each 1 % of the arrival
    span, taken after the events up to that instant, and the pods placed."""
    r = Replay(sim, pods, factor)
    instants = [r.timeline.span * level / LEVELS for level in range(1, LEVELS)] + [r.timeline.span]
    points: list[Point] = []
    for e in r.events():
        while len(points) < LEVELS and instants[len(points)] < e.time:
            points.append(r.point(len(points) + 1, seed))
        r.play(e)
    while len(points) < LEVELS:
        points.append(r.point(len(points) + 1, seed))
    log.info("churn replayed policy=%s seed=%d factor=%.4g pods=%d placed=%d departed=%d failed=%d",
             sim.policy.name, seed, factor, len(pods), r.placed, r.departed, sim.failed)
    return points, r.placed
