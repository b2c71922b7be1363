"""NodeNUMAResource's arguments (upstream's ``NodeNUMAResourceArgs``, ``pkg/scheduler/apis/config``, with its v1
defaults): the default CPU bind policy and the node- and NUMA-level scoring strategies, read from the extender's
configuration file.

Separate because the configuration loader reads them without the plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.numa.names import CPU, FULL_PCPUS, LEAST_ALLOCATED, MEMORY, MOST_ALLOCATED, SPREAD_BY_PCPUS

_SCORING_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED)
_DEFAULT_WEIGHTS = ((CPU, 1), (MEMORY, 1))


@dataclass(frozen=True)
class ScoringStrategy:
    """``{type, resources: [{name, weight}]}``; upstream defaults the whole strategy, never its parts."""

    type: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = _DEFAULT_WEIGHTS

    @classmethod
    def from_config(cls, where: str, doc: Any) -> ScoringStrategy:
        if not isinstance(doc, Mapping):
            raise ValueError(f"{where}: expected a mapping, got {type(doc).__name__}")
        _known_keys(where, doc, ("type", "resources"))
        kind = doc.get("type", "")
        if kind not in _SCORING_TYPES:
            raise ValueError(f"{where}.type: scoring strategy {kind!r:.40} is not supported "
                             f"(one of {', '.join(_SCORING_TYPES)})")
        raw = doc.get("resources") or []
        if not isinstance(raw, list):
            raise ValueError(f"{where}.resources: expected a list, got {type(raw).__name__}")
        resources = []
        for i, r in enumerate(raw):
            at = f"{where}.resources[{i}]"
            if not isinstance(r, Mapping):
                raise ValueError(f"{at}: expected a mapping, got {type(r).__name__}")
            _known_keys(at, r, ("name", "weight"))
            name, weight = r.get("name", ""), r.get("weight", 0)
            if not isinstance(name, str):
                raise ValueError(f"{at}.name: expected a string, got {name!r:.40}")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 0 < weight <= 100:
                raise ValueError(f"{at}.weight: resource weight of {name} not in valid range (0, 100]")
            resources.append((name, weight))
        return cls(str(kind), tuple(resources))


def _known_keys(where: str, doc: Mapping[str, Any], known: Iterable[str]) -> None:
    extra = sorted(str(k) for k in set(doc) - set(known))
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(extra)}")


@dataclass(frozen=True)
class NumaArgs:
    """The subset of upstream's NodeNUMAResourceArgs this plugin uses, with upstream's v1 defaults."""

    default_cpu_bind_policy: str = FULL_PCPUS          # "" means: no binding unless the pod asks
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)
    numa_scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)

    @classmethod
    def from_config(cls, doc: Mapping[str, Any]) -> NumaArgs:
        """From the camelCase document (``pluginConfig[].args``); ValueError names an unknown key or a bad value."""
        _known_keys("NodeNUMAResourceArgs", doc,
                    ("apiVersion", "kind", "defaultCPUBindPolicy", "scoringStrategy", "numaScoringStrategy"))
        policy = doc.get("defaultCPUBindPolicy", FULL_PCPUS)
        if policy not in ("", FULL_PCPUS, SPREAD_BY_PCPUS):
            raise ValueError(f"defaultCPUBindPolicy: {policy!r:.40}: must specified CPU bind policy FullPCPUs or "
                             "SpreadByPCPUs")
        scoring = (ScoringStrategy.from_config("scoringStrategy", doc["scoringStrategy"])
                   if doc.get("scoringStrategy") is not None else ScoringStrategy())
        numa = (ScoringStrategy.from_config("numaScoringStrategy", doc["numaScoringStrategy"])
                if doc.get("numaScoringStrategy") is not None else ScoringStrategy())
        return cls(str(policy), scoring, numa)
