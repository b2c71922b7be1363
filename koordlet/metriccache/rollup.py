"""Per-minute rollups of one series: what the metric cache's disk tier keeps of the history beyond its memory window.

Raw 1 s points cost 16 bytes each; 12 h of them for ~3000 series is 2 GB.
Reporters only ever ask a window for ``avg``, a percentile, ``last`` or
``count`` (see :mod:`koordlet.metriccache.aggregate`), so older history is kept
as one :class:`Rollup` per series per minute: count, sum, min, max, last value,
first/last timestamp and a mergeable quantile sketch
(:class:`koordlet.metriccache.sketch.Sketch`).  From a run of
rollups (plus any raw points) ``count`` and ``last`` are exact, ``avg`` is
exact up to float rounding, and every percentile is within
:data:`koordlet.metriccache.sketch.RELATIVE_ACCURACY` of the exact one.
On disk a run of rollups is one blob (:mod:`koordlet.metriccache.rollup_codec`).

In CPython 3.11 on the development host: summarising a minute of 1 s points
~17 us; the four percentiles, avg and last of 12 h of rollups (merging 720
sketches) ~4 ms.
"""

from __future__ import annotations

import bisect
import math
import operator
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice

from koordlet.metriccache.sketch import Sketch

__all__ = ["STEP_MS", "Rollup", "summarize", "total"]

#: One rollup per series per minute.
STEP_MS = 60_000


@dataclass(slots=True)
class Rollup:
    """The points of one series in one minute ``[start_ms, start_ms + STEP_MS)``.

    ``count`` includes NaN points and equals ``sketch.count``; ``sum`` is
    :func:`total` of the values (NaN if any is NaN); ``min``/``max`` ignore
    NaN (NaN only when every point is); ``last`` is the value at ``last_ts``,
    the later-arriving one on a timestamp tie; ``first_ts``/``last_ts`` are the
    earliest and latest timestamps (ms).
    """

    start_ms: int
    count: int
    sum: float
    min: float
    max: float
    last: float
    first_ts: int
    last_ts: int
    sketch: Sketch


def total(values: Iterable[float]) -> float:
    """Sum of ``values``: correctly rounded (``math.fsum``) where that exists.

    ``fsum`` refuses an intermediate overflow (1e308 + 1e308 - 1e308) and
    ``inf + -inf``; there the IEEE result of adding in order (inf or NaN) is
    returned instead of an exception, since a rollup must always be built.
    """
    vals = values if isinstance(values, (list, tuple, array)) else list(values)
    try:
        return math.fsum(vals)
    except (OverflowError, ValueError):
        return sum(vals, 0.0)


def summarize(ts: Sequence[int], vals: Sequence[float]) -> list[Rollup]:
    """One :class:`Rollup` per minute that has points, sorted by ``start_ms``.

    ``ts`` are milliseconds in any order; ``vals`` the matching values.  Among
    points of one minute the order of arrival (their order here) decides only
    which value is ``last`` on a timestamp tie.
    """
    n = len(ts)
    if n != len(vals):
        raise ValueError(f"timestamps and values differ in length: {n} != {len(vals)}")
    minutes = [t // STEP_MS for t in ts]
    if not all(map(operator.le, minutes, islice(minutes, 1, None))):
        order = sorted(range(n), key=minutes.__getitem__)  # stable: arrival order kept within a minute
        minutes = [minutes[i] for i in order]
        ts = [ts[i] for i in order]
        vals = [vals[i] for i in order]
    out = []
    i = 0
    while i < n:
        m = minutes[i]
        j = bisect.bisect_right(minutes, m, i)
        out.append(_rollup(m * STEP_MS, ts[i:j], vals[i:j]))
        i = j
    return out


def _rollup(start_ms: int, ts: Sequence[int], vals: Sequence[float]) -> Rollup:
    """The rollup of one minute's points (at least one), given in arrival order."""
    sketch = Sketch()
    sketch.add_many(vals)
    if sketch.nans:
        numbers = [v for v in vals if not math.isnan(v)]
        lo, hi = (min(numbers), max(numbers)) if numbers else (math.nan, math.nan)
    else:
        lo, hi = min(vals), max(vals)
    newest = max(ts)
    last = vals[len(ts) - 1 - ts[::-1].index(newest)]
    return Rollup(start_ms, len(vals), total(vals), lo, hi, last, min(ts), newest, sketch)
