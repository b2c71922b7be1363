"""Names that travel on the wire (labels, annotations, resource names, enum values), spelled as upstream.

Kept in one module so a typo cannot hide in a feature module; see reference/qos-enforcement.md §1 and
reference/metrics-and-reports.md §9.
"""

from __future__ import annotations

# Koordinator QoS classes (label koordinator.sh/qosClass) and priority classes.
LABEL_QOS_CLASS = "koordinator.sh/qosClass"
QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM, QOS_NONE = "LSE", "LSR", "LS", "BE", "SYSTEM", ""
QOS_CLASSES = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"
PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE, PRIORITY_NONE = (
    "koord-prod", "koord-mid", "koord-batch", "koord-free", "")
# (class, lowest, highest) of spec.priority
PRIORITY_RANGES = ((PRIORITY_PROD, 9000, 9999), (PRIORITY_MID, 7000, 7999),
                   (PRIORITY_BATCH, 5000, 5999), (PRIORITY_FREE, 3000, 3999))

# Extended resources (milli-cores for *-cpu, bytes for *-memory).
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
DEPRECATED_BATCH_CPU, DEPRECATED_BATCH_MEMORY = "koordinator.sh/batch-cpu", "koordinator.sh/batch-memory"

# Kubernetes QoS classes as they appear in pod.status.qosClass.
KUBE_GUARANTEED, KUBE_BURSTABLE, KUBE_BESTEFFORT = "Guaranteed", "Burstable", "BestEffort"
