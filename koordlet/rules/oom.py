"""Per-container ``oom_score_adj`` from pod annotations (gate OOMScoreAdj; upstream
``pkg/koordlet/runtimehooks/hooks/oomscoreadj``).

``koordinator.sh/oom-score-adj-spec`` = ``{"<container>": int}`` beats ``koordinator.sh/oom-score-adj`` = int, for
regular containers only (never the sandbox). Upstream writes ``/proc/<pid>/oom_score_adj`` after the fact; through
NRI the value is part of the container's creation, so its first process already has it.
"""

from __future__ import annotations

from collections.abc import Mapping

from koordlet.base import wire
from koordlet.states import decode
from koordlet.states.decode import decoder

OOM_SCORE_ADJ_MIN, OOM_SCORE_ADJ_MAX = -1000, 1000


def _checked(key: str, value: object, where: str) -> int:
    return decode.integer(key, value, where, OOM_SCORE_ADJ_MIN, OOM_SCORE_ADJ_MAX)


@decoder(wire.ANNOTATION_OOM_SCORE_ADJ_SPEC)
def _from_spec(raw: str, container: str) -> tuple[bool, int]:
    doc = decode.json_object(wire.ANNOTATION_OOM_SCORE_ADJ_SPEC, raw)
    if container not in doc:
        return False, 0
    return True, _checked(wire.ANNOTATION_OOM_SCORE_ADJ_SPEC, doc[container], f"[{container}]")


@decoder(wire.ANNOTATION_OOM_SCORE_ADJ)
def _from_pod(raw: str) -> int:
    key = wire.ANNOTATION_OOM_SCORE_ADJ
    text = raw.strip()
    if len(text) > 8 or not text.lstrip("+-").isdigit():      # -1000..1000: a longer text is never in range
        raise decode.DecodeError(key, f"{raw!r:.40} is not an integer in {OOM_SCORE_ADJ_MIN}..{OOM_SCORE_ADJ_MAX}")
    return _checked(key, int(text), "")


def container_oom_score_adj(annotations: Mapping[str, str], container: str) -> int | None:
    """The container's value, or None when the pod sets none for it; DecodeError (naming the annotation) when
    the one that applies is malformed. A malformed spec annotation yields no value at all (as upstream), not the
    pod-wide one."""
    spec = annotations.get(wire.ANNOTATION_OOM_SCORE_ADJ_SPEC)
    if spec:
        found, value = _from_spec(spec, container)
        if found:
            return value
    raw = annotations.get(wire.ANNOTATION_OOM_SCORE_ADJ)
    return None if raw is None else _from_pod(raw)
