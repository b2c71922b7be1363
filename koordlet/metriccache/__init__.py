"""Local time-series store of the koordlet ("metric cache").

Collectors append :class:`Sample` s, reporters :meth:`MetricCache.query` a window
and read an aggregate from the :class:`AggregateResult`.  See
:mod:`koordlet.metriccache.store` for the memory/sqlite design.
"""

from koordlet.metriccache.aggregate import AGGREGATION_KINDS, AggregateResult, EmptyError, percentile
from koordlet.metriccache.history import ROLLUP_MS
from koordlet.metriccache.kinds import KINDS, schema_problem
from koordlet.metriccache.sample import Labels, Sample, labels, make_labels
from koordlet.metriccache.sketch import RELATIVE_ACCURACY
from koordlet.metriccache.store import MetricCache

__all__ = [
    "AGGREGATION_KINDS",
    "AggregateResult",
    "EmptyError",
    "KINDS",
    "Labels",
    "MetricCache",
    "RELATIVE_ACCURACY",
    "ROLLUP_MS",
    "Sample",
    "labels",
    "make_labels",
    "percentile",
    "schema_problem",
]
