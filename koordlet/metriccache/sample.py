"""What collectors hand the metric cache: :class:`Sample` s of series named by a metric and a label set.

A label set is a tuple of ``(key, value)`` pairs sorted by key (:data:`Labels`), so equal sets are equal,
hashable tuples that key a dict directly on the append path. The memory tier (:mod:`koordlet.metriccache.store`)
and the sqlite tier (:mod:`koordlet.metriccache.disk`) both find series by it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["Labels", "Sample", "canonical", "labels", "make_labels", "matches"]

#: A label set: ``(key, value)`` pairs sorted by key, so that equal label sets
#: are equal, hashable tuples and can key a dict directly on the hot path.
Labels = tuple[tuple[str, str], ...]


def make_labels(mapping: Mapping[str, str]) -> Labels:
    """Canonical :data:`Labels` for a mapping (sorted by key)."""
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


def labels(**kv: str) -> Labels:
    """``labels(pod_uid="abc")`` -> ``(("pod_uid", "abc"),)``."""
    return make_labels(kv)


class Sample(NamedTuple):
    """One observation of one series.

    The cache keys series by ``(name, labels)`` with ``labels`` canonical (sorted by key, as :func:`make_labels`
    builds them, and as every collector builds its own): a sample is looked up as given, and only a lookup that
    misses puts its labels in canonical form. A named tuple, not a dataclass: collectors make ~4,000 a second on a
    node of 500 containers, and one costs half a dataclass's construction.
    """

    name: str
    labels: Labels
    ts: float
    value: float


def canonical(lb: Iterable[tuple[str, str]]) -> Labels:
    """``lb`` sorted by key, as a tuple of pairs (itself when it already is one)."""
    if type(lb) is tuple and all(type(p) is tuple for p in lb) and \
            all(lb[i][0] <= lb[i + 1][0] for i in range(len(lb) - 1)):
        return lb
    return tuple(sorted((str(k), str(v)) for k, v in lb))


def matches(lb: Labels, want: Mapping[str, str] | None) -> bool:
    """Subset match: the series has every requested pair (None/{} matches all)."""
    if not want:
        return True
    have = dict(lb)
    # a plain loop: this runs once per (query, series), and all() over a generator costs 2.5x here
    for k, v in want.items():  # noqa: SIM110
        if have.get(k) != v:
            return False
    return True
