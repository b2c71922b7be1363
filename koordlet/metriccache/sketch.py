"""A mergeable quantile sketch: what a metric cache rollup (:mod:`koordlet.metriccache.rollup`) keeps of its
minute's values so that any run of rollups answers every percentile within :data:`RELATIVE_ACCURACY`.

DDSketch-style logarithmic buckets: a magnitude ``x`` falls in
bucket ``k = ceil(log_gamma(x))``, i.e. ``gamma**(k-1) < x <= gamma**k``, and
the bucket answers with ``2 * gamma**k / (gamma + 1)``, which is within a
relative ``(gamma - 1) / (gamma + 1)`` of every value in it.  Upstream's
percentile returns the value of rank ``floor(n*p) - 1``; the sketch returns the
representative of the bucket that holds that rank, so its answer is within the
relative accuracy of the exact answer whatever the distribution, the window or
the number of merged rollups (the bound is tight: over sliding 1, 6 and 12 h
windows of the test series the worst error is 0.9996 %).  Buckets are sparse (a dict per sign): a minute
of noisy CPU samples keeps ~20 of them, 12 h merged a few hundred.  Special
values are kept apart and ranked the way Go's ``sort.Float64s`` orders them
(upstream's agent is written in Go):

* NaN: counted (it holds a rank) and ranked below every number; a percentile
  whose rank falls among them is NaN.
* ``-inf``/``+inf``: counted, ranked at the two ends, answered exactly.
* zero, ``-0.0`` and subnormal magnitudes (below ``sys.float_info.min``): one
  zero bucket answered with ``0.0`` (absolute error below 2.3e-308).
* negative values: a mirrored set of buckets over ``-x``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator

__all__ = ["RELATIVE_ACCURACY", "Sketch", "bucket"]

#: Bound on the relative error of any percentile read from sketches:
#: ``|answer - exact| <= RELATIVE_ACCURACY * |exact|`` for every finite normal
#: exact answer.  1 % keeps a minute of noisy samples at ~20 buckets.  Encoded
#: sketches hold bucket indexes under this accuracy: changing it needs a new
#: encoding version.
RELATIVE_ACCURACY = 0.01

# The buckets are built for a hair less than RELATIVE_ACCURACY so that the
# rounding of log() and exp() at a bucket edge (relative 1e-12 at worst, at
# the ends of the float range) cannot push an answer past the documented bound.
_ALPHA = RELATIVE_ACCURACY * (1.0 - 1e-6)
_GAMMA = (1.0 + _ALPHA) / (1.0 - _ALPHA)
_LN_GAMMA = math.log(_GAMMA)
_INV_LN_GAMMA = 1.0 / _LN_GAMMA
# log of 2 / (gamma + 1): moves gamma**k down to the bucket's representative.
_LN_REP = math.log1p(-_ALPHA)
_MIN_NORMAL = sys.float_info.min
_INF = math.inf
_NAN = math.nan


def bucket(magnitude: float) -> int:
    """Index of the bucket holding a finite magnitude >= the smallest normal float."""
    return math.ceil(math.log(magnitude) * _INV_LN_GAMMA)


def _representative(key: int) -> float:
    """The value bucket ``key`` answers with.

    Finite for every key from ``bucket(sys.float_info.min)`` to
    ``bucket(sys.float_info.max)``, the only ones a sketch holds: the
    representative of the largest float's bucket is 1 % below it.
    """
    return math.exp(key * _LN_GAMMA + _LN_REP)


class Sketch:
    """Mergeable quantile sketch: counts per logarithmic bucket (module docstring).

    ``positive``/``negative`` map a bucket index (of the magnitude) to a count
    greater than zero; ``zeros``, ``nans``, ``pos_infs`` and ``neg_infs``
    count the special values.  Read them, but change a sketch only through
    :meth:`add`, :meth:`add_many` and :meth:`merge`, which keep :attr:`count`.
    """

    __slots__ = ("positive", "negative", "zeros", "nans", "pos_infs", "neg_infs", "_count")

    def __init__(self) -> None:
        self.positive: dict[int, int] = {}
        self.negative: dict[int, int] = {}
        self.zeros = 0
        self.nans = 0
        self.pos_infs = 0
        self.neg_infs = 0
        self._count = 0

    @property
    def count(self) -> int:
        """Number of values added, NaN included (each holds a rank)."""
        return self._count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sketch):
            return NotImplemented
        return self._parts() == other._parts()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"Sketch(count={self._count}, buckets={len(self.positive) + len(self.negative)}, zeros={self.zeros}, "
            f"nans={self.nans}, infs=-{self.neg_infs}/+{self.pos_infs})"
        )

    def _parts(self) -> tuple[dict[int, int], dict[int, int], int, int, int, int]:
        return (self.positive, self.negative, self.zeros, self.nans, self.pos_infs, self.neg_infs)

    def add(self, value: float) -> None:
        """Count one value."""
        self.add_many((value,))

    def add_many(self, values: Iterable[float]) -> None:
        """Count every value of ``values`` (one loop with local names: the summarising hot path)."""
        pos, neg = self.positive, self.negative
        log, ceil, inv = math.log, math.ceil, _INV_LN_GAMMA
        n = 0
        for v in values:
            n += 1
            if v > 0.0:
                if v >= _MIN_NORMAL:
                    if v == _INF:
                        self.pos_infs += 1
                    else:
                        k = ceil(log(v) * inv)
                        pos[k] = pos.get(k, 0) + 1
                else:
                    self.zeros += 1
            elif v < 0.0:
                if v <= -_MIN_NORMAL:
                    if v == -_INF:
                        self.neg_infs += 1
                    else:
                        k = ceil(log(-v) * inv)
                        neg[k] = neg.get(k, 0) + 1
                else:
                    self.zeros += 1
            elif v == 0.0:
                self.zeros += 1
            else:
                self.nans += 1
        self._count += n

    def merge(self, other: Sketch) -> None:
        """Add ``other``'s counts to this sketch (in place; ``other`` is unchanged)."""
        for mine, theirs in ((self.positive, other.positive), (self.negative, other.negative)):
            for k, c in theirs.items():
                mine[k] = mine.get(k, 0) + c
        self.zeros += other.zeros
        self.nans += other.nans
        self.pos_infs += other.pos_infs
        self.neg_infs += other.neg_infs
        self._count += other._count

    def copy(self) -> Sketch:
        """An independent sketch with the same counts."""
        out = Sketch()
        out.merge(self)
        return out

    def quantile_at_rank(self, idx: int) -> float:
        """The answer for the ``idx``-th smallest value (0-based) of everything added.

        That is the representative of the bucket holding it: within
        :data:`RELATIVE_ACCURACY` of the exact value for finite normal values,
        exact for infinities, NaN and zero.  Raises IndexError outside
        ``[0, count)``.
        """
        if not 0 <= idx < self._count:
            raise IndexError(f"rank {idx} outside a sketch of {self._count} values")
        for n, value in self._ascending():
            if idx < n:
                return value
            idx -= n
        raise AssertionError("sketch counts do not add up to its count")  # unreachable while count is kept

    def _ascending(self) -> Iterator[tuple[int, float]]:
        """``(count, answer)`` of every bucket in ascending order of value."""
        yield self.nans, _NAN
        yield self.neg_infs, -_INF
        neg = self.negative
        for k in sorted(neg, reverse=True):
            yield neg[k], -_representative(k)
        yield self.zeros, 0.0
        pos = self.positive
        for k in sorted(pos):
            yield pos[k], _representative(k)
        yield self.pos_infs, _INF

    @classmethod
    def restore(
        cls, positive: dict[int, int], negative: dict[int, int], zeros: int, nans: int, pos_infs: int, neg_infs: int
    ) -> Sketch:
        """A sketch from decoded parts (counts already checked positive)."""
        out = cls()
        out.positive, out.negative = positive, negative
        out.zeros, out.nans, out.pos_infs, out.neg_infs = zeros, nans, pos_infs, neg_infs
        out._count = sum(positive.values()) + sum(negative.values()) + zeros + nans + pos_infs + neg_infs
        return out
