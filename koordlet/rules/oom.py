"""Per-container ``oom_score_adj`` from pod annotations (gate OOMScoreAdj; reference/qos-enforcement.md §3f).

``koordinator.sh/oom-score-adj-spec`` = ``{"<container>": int}`` beats ``koordinator.sh/oom-score-adj`` = int, for
regular containers only (never the sandbox). Upstream writes ``/proc/<pid>/oom_score_adj`` after the fact; through
NRI the value is part of the container's creation, so its first process already has it.
"""

from __future__ import annotations

from typing import Mapping

from koordlet import wire
from koordlet.states.nodeslo import json_object

OOM_SCORE_ADJ_MIN, OOM_SCORE_ADJ_MAX = -1000, 1000


def _checked(value: object, where: str) -> tuple[int | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"{where}: {value!r} is not an integer"
    if not OOM_SCORE_ADJ_MIN <= value <= OOM_SCORE_ADJ_MAX:
        return None, f"{where}: {value} is outside {OOM_SCORE_ADJ_MIN}..{OOM_SCORE_ADJ_MAX}"
    return value, None


def container_oom_score_adj(annotations: Mapping[str, str], container: str) -> tuple[int | None, str | None]:
    """(value or None when the pod sets none for this container, problem with the annotations or None).
    A malformed spec annotation yields no value at all (as upstream), not the pod-wide one."""
    spec_key, pod_key = wire.ANNOTATION_OOM_SCORE_ADJ_SPEC, wire.ANNOTATION_OOM_SCORE_ADJ
    spec = annotations.get(spec_key)
    if spec:
        doc, problem = json_object(spec)
        if doc is None:
            return None, f"{spec_key}: {problem}"
        if container in doc:
            return _checked(doc[container], f"{spec_key}[{container}]")
    raw = annotations.get(pod_key)
    if raw is None:
        return None, None
    try:
        value = int(raw.strip())
    except ValueError:
        return None, f"{pod_key}: {raw!r} is not an integer"
    return _checked(value, pod_key)
