"""Node- and NUMA-level scores (upstream's ``scoring.go``, ``least_allocated.go``, ``most_allocated.go``):
LeastAllocated / MostAllocated over weighted resources in framework units, and the node's allocatable in those units.

Separate because the plugin scores nodes with it and the allocation scores each NUMA hint with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koordlet.states import decode
from scheduler.numa.names import CPU, EPHEMERAL_STORAGE, MEMORY, MOST_ALLOCATED
from scheduler.numa.quantity import framework_unit, quantity_of

MAX_SCORE = 100


def resource_score(kind: str, weights: Sequence[tuple[str, int]], requested: Mapping[str, int],
                   allocatable: Mapping[str, int], pod: Mapping[str, int]) -> int:
    """LeastAllocated/MostAllocated over the weighted resources, in framework units; 0..100."""
    total = weight_sum = 0
    for name, weight in dict(weights).items():
        ask = pod.get(name, 0)
        if name not in (CPU, MEMORY, EPHEMERAL_STORAGE) and (ask == 0 or name not in allocatable):
            continue                            # scalar resources count only when the pod asks for them
        cap, used = allocatable.get(name, 0), requested.get(name, 0) + ask
        if cap == 0:
            continue
        if kind == MOST_ALLOCATED:
            total += min(used, cap) * MAX_SCORE // cap * weight
        else:
            total += ((cap - used) * MAX_SCORE // cap if used <= cap else 0) * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def node_allocatable(node: Mapping[str, Any] | None) -> dict[str, int]:
    """The Node's ``status.allocatable`` in framework units; a value that is not a quantity is left out."""
    out: dict[str, int] = {}
    for k, v in (((node or {}).get("status") or {}).get("allocatable") or {}).items():
        try:
            out[str(k)] = framework_unit(str(k), quantity_of("status.allocatable", v, str(k)).milli)
        except decode.DecodeError:
            continue
    return out
