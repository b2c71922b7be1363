"""The extender's configuration file: koord-scheduler's plugin args under their upstream names.

```yaml
deviceShare:                 # DeviceShareArgs
  scoringStrategy: {type: LeastAllocated, resources: [{name: koordinator.sh/gpu-memory-ratio, weight: 1}, ...]}
                             # type also MostAllocated, or FragmentationAware (scheduler/fgd.py: beyond upstream)
loadAware: {...}             # LoadAwareSchedulingArgs (usageThresholds, estimatedScalingFactors, ...)
nodeNUMAResource: {...}      # NodeNUMAResourceArgs (defaultCPUBindPolicy, scoringStrategy, ...)
pluginWeights: {deviceShare: 1, loadAware: 1, nodeNUMAResource: 1}
assumeTTLSeconds: 30         # how long a bound pod is counted before its watch event confirms it
prioritizeMaxScore: 10       # prioritize's range, 0..10 as kube's MaxExtenderPriority; kube multiplies by the
                             # entry's weight × 10 without clamping, so 100 gives finer ordering at a tenth the weight
```

Every key is optional (upstream defaults); an unknown key or a bad value is refused at start with a message that
names it, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.base.yamlfile import load_yaml
from scheduler.allocator import LEAST_ALLOCATED, STRATEGIES
from scheduler.loadaware.args import LoadAwareArgs
from scheduler.numa.args import NumaArgs

_TOP = ("deviceShare", "loadAware", "nodeNUMAResource", "pluginWeights", "assumeTTLSeconds", "prioritizeMaxScore")


@dataclass(frozen=True)
class PluginWeights:
    """How much each plugin counts in the node's score (koord-scheduler's profile gives each weight 1)."""

    device_share: int = 1
    load_aware: int = 1
    node_numa_resource: int = 1


@dataclass(frozen=True)
class ExtenderConfig:
    """The parsed configuration file."""

    strategy: str = "LeastAllocated"
    device_weights: Mapping[str, int] | None = None
    load_aware: LoadAwareArgs = field(default_factory=LoadAwareArgs)
    numa: NumaArgs = field(default_factory=NumaArgs)
    weights: PluginWeights = field(default_factory=PluginWeights)
    assume_ttl: float = 30.0
    max_score: int = 10      # prioritize answers 0..max_score (kube's MaxExtenderPriority is 10; kube does not clamp)


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the key."""


def _mapping(doc: Any, where: str) -> Mapping[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(doc).__name__}")
    return doc


def _unknown(doc: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    extra = sorted(set(doc) - set(known))
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, extra))} (known: {', '.join(known)})")


def _weight(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{where}: expected a non-negative integer, got {v!r:.40}")
    return v


def parse(doc: Any) -> ExtenderConfig:
    top = _mapping(doc, "config")
    _unknown(top, _TOP, "config")
    device = _mapping(top.get("deviceShare"), "deviceShare")
    _unknown(device, ("scoringStrategy",), "deviceShare")
    scoring = _mapping(device.get("scoringStrategy"), "deviceShare.scoringStrategy")
    _unknown(scoring, ("type", "resources"), "deviceShare.scoringStrategy")
    strategy = scoring.get("type", LEAST_ALLOCATED)
    if strategy not in STRATEGIES:
        raise ConfigError(f"deviceShare.scoringStrategy.type: {strategy!r:.40} is not one of {', '.join(STRATEGIES)}")
    weights: dict[str, int] | None = None
    if "resources" in scoring:
        weights = {}
        for i, r in enumerate(scoring["resources"] or []):
            r = _mapping(r, f"deviceShare.scoringStrategy.resources[{i}]")
            _unknown(r, ("name", "weight"), f"deviceShare.scoringStrategy.resources[{i}]")
            weights[str(r.get("name", ""))] = _weight(r.get("weight", 1), f"deviceShare.scoringStrategy.resources[{i}]")
    plugin = _mapping(top.get("pluginWeights"), "pluginWeights")
    _unknown(plugin, ("deviceShare", "loadAware", "nodeNUMAResource"), "pluginWeights")
    max_score = top.get("prioritizeMaxScore", 10)
    if isinstance(max_score, bool) or not isinstance(max_score, int) or not 1 <= max_score <= 100:
        raise ConfigError(f"prioritizeMaxScore: expected an integer in 1..100, got {max_score!r:.40}")
    ttl = top.get("assumeTTLSeconds", 30)
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        raise ConfigError(f"assumeTTLSeconds: expected a positive number, got {ttl!r:.40}")
    try:
        load_aware = LoadAwareArgs.from_config(_mapping(top.get("loadAware"), "loadAware"))
    except ValueError as e:
        raise ConfigError(f"loadAware: {e}") from None
    try:
        numa = NumaArgs.from_config(_mapping(top.get("nodeNUMAResource"), "nodeNUMAResource"))
    except ValueError as e:
        raise ConfigError(f"nodeNUMAResource: {e}") from None
    return ExtenderConfig(
        strategy=str(strategy), device_weights=weights, load_aware=load_aware, numa=numa,
        weights=PluginWeights(*(_weight(plugin.get(k, 1), f"pluginWeights.{k}")
                                for k in ("deviceShare", "loadAware", "nodeNUMAResource"))),
        assume_ttl=float(ttl), max_score=max_score)


def load(path: str | None) -> ExtenderConfig:
    """The configuration in ``path`` (None: every default)."""
    if not path:
        return ExtenderConfig()
    doc = load_yaml(path, "extender config", ConfigError)
    try:
        return parse(doc)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
