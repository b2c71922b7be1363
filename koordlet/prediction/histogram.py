"""A decaying histogram with exponentially growing buckets, as upstream borrows from the VPA recommender.

Upstream (``pkg/util/histogram``) keeps, per bucket, the summed weight of the samples that fell into it; a
sample's weight is multiplied by ``2 ** ((t - reference) / half_life)``, so relative to a newer sample an old
one loses half its importance every half-life. Only ratios between weights matter, so when the exponent would
exceed ``MAX_DECAY_EXPONENT`` the reference moves forward (to a multiple of the half-life) and every weight is
scaled down by the same power of two: that keeps the floats finite however long the agent runs.

The checkpoint dict has exactly the JSON shape of upstream's ``HistogramCheckpoint`` (integer bucket weights
scaled so the heaviest is ``MAX_CHECKPOINT_WEIGHT``), so the Go koordlet and this one can read each other's
checkpoints. The scaling quantises weights to about 1/10,000 of the heaviest bucket; a percentile whose threshold
falls exactly on a bucket boundary can therefore move one bucket after a round trip (upstream behaves the same).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# pkg/util/histogram/decaying_histogram.go: renormalise once weights would reach 2**100.
MAX_DECAY_EXPONENT = 100
# pkg/util/histogram/histogram.go: the heaviest bucket of a checkpoint carries this integer weight.
MAX_CHECKPOINT_WEIGHT = 10_000
_UINT32_MAX = 2**32 - 1

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Go's zero time.Time (0001-01-01T00:00:00Z) in Unix seconds: the initial reference timestamp, and the origin
# that time.Round(halfLife) counts multiples of half-lives from.
GO_ZERO_TIME = (datetime(1, 1, 1, tzinfo=UTC) - _UNIX_EPOCH).total_seconds()
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)")


@dataclass(frozen=True)
class ExponentialBuckets:
    """Bucket ``n >= 1`` starts at ``first_bucket_size * (ratio**n - 1) / (ratio - 1)``; bucket 0 is
    ``[0, first_bucket_size)`` and the last bucket (whose start is >= ``max_value``) has no upper bound.

    ``epsilon`` is the weight below which a bucket counts as empty.
    """

    max_value: float
    first_bucket_size: float
    ratio: float
    epsilon: float
    num_buckets: int = field(init=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.ratio <= 1 or self.epsilon <= 0:
            raise ValueError("buckets: max_value, first_bucket_size and epsilon must be > 0, ratio > 1")
        n = math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first_bucket_size + 1)
                      / math.log(self.ratio)) + 1
        object.__setattr__(self, "num_buckets", n)

    def find_bucket(self, value: float) -> int:
        """Index of the bucket holding ``value``; values past either end land in the first or last bucket."""
        if value < self.first_bucket_size:
            return 0
        bucket = int(math.log(value * (self.ratio - 1) / self.first_bucket_size + 1) / math.log(self.ratio))
        return min(bucket, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if bucket == 0:
            return 0.0
        return self.first_bucket_size * (self.ratio**bucket - 1) / (self.ratio - 1)


class DecayingHistogram:
    """Approximate distribution of one usage series, newer samples weighing more (see the module docstring).

    ``percentile`` answers with the upper bound of the bucket where the cumulative weight reaches the
    requested fraction (no interpolation), like upstream; an empty histogram answers 0.
    """

    def __init__(self, buckets: ExponentialBuckets, half_life: float) -> None:
        if half_life <= 0:
            raise ValueError(f"histogram half-life {half_life!r}: must be > 0 seconds")
        self.buckets = buckets
        self.half_life = half_life
        self._weights = array("d", bytes(8 * buckets.num_buckets))
        self._total = 0.0
        # First and last bucket holding at least epsilon; (last, 0) while empty, as upstream.
        self._min = buckets.num_buckets - 1
        self._max = 0
        self._reference = GO_ZERO_TIME

    @property
    def reference(self) -> float:
        """Unix time that undecayed weights are relative to; always a whole number of half-lives since Go's
        zero time once a sample has arrived."""
        return self._reference

    def add_sample(self, value: float, weight: float, when: float) -> None:
        if weight < 0:
            raise ValueError(f"histogram sample weight {weight!r}: must not be negative")
        weight *= self._decay_factor(when)
        bucket = self.buckets.find_bucket(value)
        self._weights[bucket] += weight
        self._total += weight
        if self._weights[bucket] >= self.buckets.epsilon:
            self._min = min(self._min, bucket)
            self._max = max(self._max, bucket)

    def is_empty(self) -> bool:
        return self._weights[self._min] < self.buckets.epsilon

    def percentile(self, p: float) -> float:
        """Smallest bucket end at which the cumulative weight reaches ``p`` (0..1) of the total."""
        if self.is_empty():
            return 0.0
        threshold = p * self._total
        partial = 0.0
        bucket = self._min
        while bucket < self._max:
            partial += self._weights[bucket]
            if partial >= threshold:
                break
            bucket += 1
        if bucket < self.buckets.num_buckets - 1:
            return self.buckets.bucket_start(bucket + 1)
        return self.buckets.bucket_start(bucket)

    def _decay_factor(self, when: float) -> float:
        if when > self._reference + self.half_life * MAX_DECAY_EXPONENT:
            self._shift_reference(when)
        factor: float = 2.0 ** ((when - self._reference) / self.half_life)
        return factor

    def _shift_reference(self, when: float) -> None:
        """Move the reference to ``when`` rounded to a whole number of half-lives (Go's time.Round, halves
        up) and scale every weight by the matching power of two, which leaves all percentiles unchanged."""
        new_reference = GO_ZERO_TIME + math.floor((when - GO_ZERO_TIME) / self.half_life + 0.5) * self.half_life
        exponent = math.floor((self._reference - new_reference) / self.half_life + 0.5)
        factor = math.ldexp(1.0, exponent)          # exponent <= -100 here; underflow gives 0.0, never raises
        for bucket in range(self._min, self._max + 1):
            self._weights[bucket] *= factor
        self._total *= factor
        self._reference = new_reference
        self._refresh_bounds()

    def _refresh_bounds(self) -> None:
        eps, last = self.buckets.epsilon, self.buckets.num_buckets - 1
        while self._weights[self._min] < eps and self._min < last:
            self._min += 1
        while self._weights[self._max] < eps and self._max > 0:
            self._max -= 1

    def to_checkpoint(self) -> dict[str, Any]:
        """Upstream's HistogramCheckpoint JSON: referenceTimestamp (RFC 3339), bucketWeights (bucket index
        as a string -> integer weight, heaviest = 10000; omitted when empty), totalWeight (omitted when 0)."""
        out: dict[str, Any] = {"referenceTimestamp": format_go_time(self._reference)}
        heaviest = max(self._weights[self._min:self._max + 1], default=0.0)
        if heaviest > 0:
            ratio = MAX_CHECKPOINT_WEIGHT / heaviest
            weights = {str(b): math.floor(self._weights[b] * ratio + 0.5) for b in range(self._min, self._max + 1)}
            weights = {b: w for b, w in weights.items() if w > 0}
            if weights:
                out["bucketWeights"] = weights
        if self._total:
            out["totalWeight"] = self._total
        return out

    @classmethod
    def from_checkpoint(cls, buckets: ExponentialBuckets, half_life: float,
                        data: object) -> DecayingHistogram:
        """Rebuild a histogram from ``to_checkpoint``'s dict (or upstream's); ValueError naming the field
        when the dict does not fit these buckets. Weights are spread so they sum to ``totalWeight``."""
        if not isinstance(data, Mapping):
            raise ValueError(f"histogram checkpoint: expected an object, got {type(data).__name__}")
        hist = cls(buckets, half_life)
        total = data.get("totalWeight", 0.0)
        if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total) or total < 0:
            raise ValueError(f"histogram checkpoint totalWeight {total!r}: must be a finite number >= 0")
        raw_weights = data.get("bucketWeights") or {}
        if not isinstance(raw_weights, Mapping):
            raise ValueError("histogram checkpoint bucketWeights: expected an object")
        weights: dict[int, int] = {}
        for key, weight in raw_weights.items():
            if not (isinstance(key, str) and re.fullmatch(r"\d+", key)) or int(key) >= buckets.num_buckets:
                raise ValueError(f"histogram checkpoint bucket {key!r}: not an index below {buckets.num_buckets}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= _UINT32_MAX:
                raise ValueError(f"histogram checkpoint bucket {key} weight {weight!r}: not a uint32")
            weights[int(key)] = weight
        if "referenceTimestamp" in data:
            hist._reference = parse_go_time(data["referenceTimestamp"])
        weight_sum = sum(weights.values())
        if weight_sum == 0:
            return hist
        scale = total / weight_sum
        for bucket, weight in weights.items():
            hist._weights[bucket] = weight * scale
        hist._total = float(total)
        hist._min, hist._max = min(weights), max(weights)
        return hist


def format_go_time(unix: float) -> str:
    """RFC 3339 in UTC, microsecond precision, trailing zeros dropped: Go's time.Time JSON for our values."""
    seconds = math.floor(unix)
    dt = _UNIX_EPOCH + timedelta(seconds=seconds, microseconds=round((unix - seconds) * 1_000_000))
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if dt.microsecond:
        text += f".{dt.microsecond:06d}".rstrip("0")
    return text + "Z"


def parse_go_time(raw: object) -> float:
    """Unix seconds of an RFC 3339 timestamp as Go writes it (any fraction length, ``Z`` or an offset)."""
    m = _RFC3339.fullmatch(raw) if isinstance(raw, str) else None
    if m is None:
        raise ValueError(f"timestamp {raw!r}: not RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"timestamp {raw!r}: {exc}") from None
    zone = m.group(8)
    offset = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return (dt - _UNIX_EPOCH).total_seconds() - offset + float(m.group(7) or 0.0)
