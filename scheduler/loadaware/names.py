"""LoadAware's vocabulary: the annotation names it reads, its rejection reasons worded as upstream
(``apis/extension``, ``plugins/loadaware/load_aware.go``), the resource names it treats apart, and the vector and
pod-key types every module passes around.

Separate because every module of the package and the tests use these names, and it imports nothing.
"""

from __future__ import annotations

CPU, MEMORY = "cpu", "memory"

# Node annotation: {"usageThresholds": {...}, "prodUsageThresholds": {...}, "aggregatedUsage": {...}}
ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
# Pod annotations read only with allowCustomizeEstimation: a JSON map of factors, and two decimal integers.
ANNOTATION_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANNOTATION_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANNOTATION_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"

REASON_EXPIRED = "node(s) nodeMetric expired"
REASON_USAGE = "node(s) {} usage exceed threshold"
REASON_AGGREGATED_USAGE = "node(s) {} aggregated usage exceed threshold"

INT64 = (-(2**63), 2**63 - 1)                 # Go's int64, the range of integers in annotations and arguments

Vec = tuple[int, ...]
PodKey = tuple[str, str]                      # (namespace, name), how NodeMetric names a pod
