"""NUMA hints and their merge, as koord-scheduler's topology manager does it (``frameworkext/topologymanager``,
after the kubelet's): each provider's hints per resource, every combination tried, the best merged hint chosen and
admitted by the BestEffort, Restricted or SingleNUMANode policy, with upstream's reasons on rejection.

Separate because other providers feed it too: DeviceShare's hints (:class:`Hint`) are merged with the plugin's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from types import MappingProxyType
from typing import NamedTuple

from scheduler.numa.names import (
    BEST_EFFORT,
    ERR_UNALIGNED_HINT,
    ERR_UNSATISFIED_NUMA,
    EXCLUSIVE_REQUIRED,
    RESTRICTED,
    STATUS_IDLE,
    STATUS_SHARED,
    STATUS_SINGLE,
)


@dataclass(frozen=True)
class Hint:
    """A NUMA affinity one provider can live with for one resource. An empty mask means "no preference" (upstream's
    nil affinity)."""

    mask: frozenset[int]
    preferred: bool
    score: int = 0


class TopologyHint(NamedTuple):
    """A hint as the merge carries it (upstream's NUMATopologyHint): the plugin's own, another provider's, or a merged
    one, which may be unsatisfied."""

    mask: frozenset[int] | None           # None: no preference
    preferred: bool
    unsatisfied: bool = False
    score: int = 0


NO_HINTS: Mapping[str, Sequence[Hint]] = MappingProxyType({})      # no other provider's hints
_DONT_CARE = TopologyHint(None, True)


def _mask_text(mask: frozenset[int] | None) -> str:
    """A mask as upstream's BitMask.String() prints it in reasons ("01" is NUMA node 0, "10" node 1)."""
    v = sum(1 << b for b in mask or ())
    for shift in range(62, 0, -2):
        if v > 1 << shift:
            return format(v, f"0{shift + 2}b")
    return format(v, "02b")


def _narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """Fewer NUMA nodes, or as many with lower-numbered ones (``IsNarrowerThan``)."""
    if len(a) == len(b):
        return sum(1 << x for x in a) < sum(1 << x for x in b)
    return len(a) < len(b)


def _filter_providers(providers: Sequence[Mapping[str, Sequence[TopologyHint]]]
                      ) -> tuple[list[list[TopologyHint]], list[str]]:
    """Per provider and resource the hint list to merge; a resource with none becomes an unsatisfied entry and a
    reason."""
    lists: list[list[TopologyHint]] = []
    reasons: list[str] = []
    for hints in providers:
        if not hints:
            lists.append([_DONT_CARE])
            continue
        for resource in sorted(hints):
            entries = list(hints[resource])
            if not entries:
                lists.append([TopologyHint(None, False, unsatisfied=True)])
                reasons.append(ERR_UNSATISFIED_NUMA.format(resource))
                continue
            lists.append(entries)
    return lists, reasons


def _summary(providers: Sequence[Mapping[str, Sequence[TopologyHint]]], sep: str) -> str:
    """The per-resource "prefer [...] among [...]" of the reason for an unaligned hint (only built on rejection)."""
    summary = []
    for hints in providers:
        for resource, entries in hints.items():
            usable = [h for h in entries if not h.unsatisfied]
            if usable:
                summary.append(f"{resource} prefer [{' '.join(_mask_text(h.mask) for h in usable if h.preferred)}] "
                               f"among [{' '.join(_mask_text(h.mask) for h in usable)}]")
    return ERR_UNALIGNED_HINT.format(sep.join(sorted(summary)))


def _exclusive_ok(mask: frozenset[int] | None, exclusive: str, status: Sequence[str]) -> bool:
    """Required exclusivity: a multi-NUMA placement avoids nodes held by single-NUMA pods, and the reverse."""
    if mask is None:
        return False
    if exclusive == EXCLUSIVE_REQUIRED:
        def of(n: int) -> str:
            return status[n] if 0 <= n < len(status) else STATUS_IDLE
        if len(mask) > 1:
            return all(of(n) != STATUS_SINGLE for n in mask)
        return of(next(iter(mask))) != STATUS_SHARED
    return True


def _merge_lists(numa_nodes: Sequence[int], lists: Sequence[Sequence[TopologyHint]], exclusive: str,
                 status: Sequence[str]) -> TopologyHint:
    """The best of every combination of one hint per list (``mergeFilteredHints``)."""
    default = frozenset(numa_nodes)
    best = TopologyHint(default, False)
    for combo in product(*lists):
        masks = [h.mask for h in combo if h.mask is not None]
        merged = default.intersection(*masks)
        if not merged:
            continue
        preferred = all(h.preferred for h in combo) and all(m == masks[0] for m in masks)
        satisfied = (not masks or max(len(m) for m in masks) == len(merged)) and not any(h.unsatisfied for h in combo)
        if not _exclusive_ok(merged, exclusive, status):
            preferred = False
        score = sum(h.score for h in combo if h.mask is not None and h.mask == merged)
        hint = TopologyHint(merged, preferred, not satisfied, score)
        if hint.preferred != best.preferred:
            if hint.preferred:
                best = hint
            continue
        assert best.mask is not None
        if not _narrower(merged, best.mask):
            if len(merged) == len(best.mask) and score > best.score:
                best = hint
            continue
        best = hint
    return best


def merge_hints(policy: str, numa_nodes: Sequence[int], providers: Sequence[Mapping[str, Sequence[TopologyHint]]],
                exclusive: str, status: Sequence[str]) -> tuple[TopologyHint, bool, list[str]]:
    """``Policy.Merge`` for BestEffort, Restricted and SingleNUMANode: the best hint, whether the pod is admitted,
    and upstream's reasons when it is not."""
    lists, reasons = _filter_providers(providers)
    default = frozenset(numa_nodes)
    if policy == BEST_EFFORT:
        best = _merge_lists(numa_nodes, lists, exclusive, status)
        return (TopologyHint(default, False) if best.unsatisfied else best), True, []
    if policy == RESTRICTED:
        if reasons:
            return TopologyHint(default, False), False, reasons
        best = _merge_lists(numa_nodes, lists, exclusive, status)
        if not best.preferred:
            return best, False, [_summary(providers, " & ")]
        return best, True, []
    if reasons:
        return TopologyHint(None, False), False, reasons
    single = [[h for h in hs if h.preferred and (h.mask is None or len(h.mask) == 1)] for hs in lists]
    best = _merge_lists(numa_nodes, single, exclusive, status)
    if best.mask == default:
        best = TopologyHint(None, best.preferred)
    if not best.preferred:
        return best, False, [_summary(providers, ",")]
    return best, True, []
