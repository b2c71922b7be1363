"""The ``slo-controller-config`` ConfigMap turned into one node's NodeSLO spec, as koord-manager's slo-controller
does (``pkg/slo-controller/nodeslo/*``): the cluster strategy of each key, the first node strategy whose selector
matches the node, the node's bandwidth annotation. Standalone and host mode read it from a local file
(``koordlet.states.nodeslo.source``), where no koord-manager writes the NodeSLO.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.states import decode
from koordlet.states.nodeslo.decoder import DecodeContext, decode_obj, decode_value, show
from koordlet.states.nodeslo.merge import DEFAULT_CPU_BURST, DEFAULT_SYSTEM, DEFAULT_THRESHOLD
from koordlet.states.nodeslo.schema import (
    ABSENT,
    CPUBurstStrategy,
    HostApplicationSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
    WireField,
)
from koordlet.states.nodeslo.selector import check_selector_types, match_label_selector

log = logging.getLogger(__name__)

__all__ = ["CONFIGMAP_MAX_BYTES", "SLOControllerConfig"]


@dataclass(frozen=True)
class _NodeStrategy:
    name: str
    selector: Mapping[str, Any] | None
    value: Any                     # strategy pre-merged over the cluster strategy; host apps: tuple of specs


@dataclass(frozen=True)
class _KeyConfig:
    cluster: Any
    nodes: tuple[_NodeStrategy, ...] = ()


# ConfigMap key -> (NodeSLO spec field, type, the controller's default cluster strategy). resource-qos defaults
# to an empty strategy (the koordlet fills it); system to totalNetworkBandwidth "0" (DefaultSLOCfg()).
_STRATEGY_KEYS: dict[str, tuple[str, Any, Any]] = {
    wire.SLO_CFG_RESOURCE_THRESHOLD: ("resourceUsedThresholdWithBE", ResourceThresholdStrategy, DEFAULT_THRESHOLD),
    wire.SLO_CFG_RESOURCE_QOS: ("resourceQOSStrategy", ResourceQOSStrategy, ResourceQOSStrategy()),
    wire.SLO_CFG_CPU_BURST: ("cpuBurstStrategy", CPUBurstStrategy, DEFAULT_CPU_BURST),
    wire.SLO_CFG_SYSTEM: ("systemStrategy", SystemStrategy, DEFAULT_SYSTEM),
}
_HOST_APPS_WIRE = WireField("applications", "list", cls=HostApplicationSpec)


CONFIGMAP_MAX_BYTES = 1024 * 1024      # the API server's limit on a whole ConfigMap


class _KeyRejected(ValueError):
    pass


def _load_key(text: Any) -> Any:
    """A ConfigMap key's JSON, bounded by the decoder (size: what a ConfigMap can hold at all)."""
    if isinstance(text, str):
        try:
            return decode.loads("", text, max_bytes=CONFIGMAP_MAX_BYTES)
        except decode.DecodeError as e:
            raise _KeyRejected(f"not valid JSON: {e.problem}") from None
    return text          # a local-file convenience: the value written as a YAML mapping instead of a string


def _rejected(ctx: DecodeContext) -> _KeyRejected:
    return _KeyRejected("; ".join(f"{e.path}: {e.problem}" for e in ctx.errors))


def _node_entries(raw: Mapping[str, Any], key: str, ctx: DecodeContext) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """The per-node entries of a ConfigMap key (``nodeStrategies`` / ``nodeConfigs``): (path, entry, name), with
    the list, entry, name and nodeSelector shapes checked (problems go to ``ctx``; a non-object entry is skipped)."""
    entries = raw.get(key)
    if entries is not None and not isinstance(entries, list):
        ctx.bad(key, f"expected a list, got {show(entries)}")
        return
    for i, item in enumerate(entries or ()):
        path = f"{key}[{i}]"
        if not isinstance(item, Mapping):
            ctx.bad(path, f"expected an object, got {show(item)}")
            continue
        name = item.get("name")
        if name is not None and not isinstance(name, str):
            ctx.bad(f"{path}.name", f"expected a string, got {show(name)}")
        check_selector_types(item.get("nodeSelector"), f"{path}.nodeSelector", ctx)
        yield path, item, name if isinstance(name, str) else ""


def _parse_strategy_key(text: Any, cls: Any, default: Any) -> tuple[_KeyConfig, list[tuple[str, str]]]:
    raw = _load_key(text)
    if raw is None:
        return _KeyConfig(default), []
    if not isinstance(raw, Mapping):
        raise _KeyRejected(f"expected a JSON object with clusterStrategy/nodeStrategies, got {show(raw)}")
    ctx = DecodeContext(check=False)
    for k in raw:
        if k not in ("clusterStrategy", "nodeStrategies"):
            ctx.warnings.append((str(k), "unknown field"))
    cluster = default
    if raw.get("clusterStrategy") is not None:
        value = decode_obj(cls, raw["clusterStrategy"], default, "clusterStrategy", ctx)
        if value is not ABSENT:
            cluster = value
    nodes = []
    for path, item, name in _node_entries(raw, "nodeStrategies", ctx):
        rest = {k: v for k, v in item.items() if k not in ("name", "nodeSelector")}
        value = decode_obj(cls, rest, cluster, path, ctx)
        nodes.append(_NodeStrategy(name, item.get("nodeSelector"), cluster if value is ABSENT else value))
    if ctx.errors:
        raise _rejected(ctx)
    return _KeyConfig(cluster, tuple(nodes)), ctx.warnings


def _parse_host_apps_key(text: Any) -> tuple[_KeyConfig, list[tuple[str, str]]]:
    raw = _load_key(text)
    if raw is None:
        return _KeyConfig(()), []
    if not isinstance(raw, Mapping):
        raise _KeyRejected(f"expected a JSON object with applications/nodeConfigs, got {show(raw)}")
    ctx = DecodeContext(check=False)
    for k in raw:
        if k not in ("applications", "nodeConfigs"):
            ctx.warnings.append((str(k), "unknown field"))

    def apps(value: Any, path: str) -> tuple[HostApplicationSpec, ...]:
        if value is None:
            return ()
        decoded = decode_value(_HOST_APPS_WIRE, value, None, path, ctx)
        return () if decoded is ABSENT else decoded

    cluster = apps(raw.get("applications"), "applications")
    nodes = []
    for path, item, name in _node_entries(raw, "nodeConfigs", ctx):
        for k in item:
            if k not in ("name", "nodeSelector", "applications"):
                ctx.warnings.append((f"{path}.{k}", "unknown field"))
        nodes.append(_NodeStrategy(name, item.get("nodeSelector"),
                                   apps(item.get("applications"), f"{path}.applications")))
    if ctx.errors:
        raise _rejected(ctx)
    return _KeyConfig(cluster, tuple(nodes)), ctx.warnings


_DEFAULT_KEYS: dict[str, _KeyConfig] = {
    **{key: _KeyConfig(default) for key, (_, _, default) in _STRATEGY_KEYS.items()},
    wire.SLO_CFG_HOST_APPLICATION: _KeyConfig(()),
}


class SLOControllerConfig:
    """The ``slo-controller-config`` ConfigMap as koord-manager's slo-controller digests it.

    Upstream rules (``nodeslo_cm_event_handler.go``, ``resource_strategy.go``, ``nodeslo_controller.go``):

    - Keys used: resource-threshold-config, resource-qos-config, cpu-burst-config, system-config (each
      ``{"clusterStrategy": {...}, "nodeStrategies": [{"name", "nodeSelector", ...strategy fields inline}]}``)
      and host-application-config (``{"applications": [...], "nodeConfigs": [{"name", "nodeSelector",
      "applications"}]}``). colocation-config, cpu-normalization-config and resource-amplification-config do
      not feed NodeSLO; plugin extension keys are not read (upstream registers no extension plugin).
    - The cluster strategy is merged onto the controller default (threshold, cpu-burst and system defaults as
      in the koordlet; resource-qos ``{}``). Each node strategy is merged onto a copy of the merged cluster
      strategy (JSON overlay: present fields override, nested objects merge, arrays replace).
    - For a node, the **first** node strategy whose ``nodeSelector`` matches its labels is used as a whole
      (already merged over the cluster strategy); with no match, the cluster strategy. A nodeSelector that
      does not parse skips that entry. A missing selector matches nothing, an empty one everything.
    - host-application-config: the first matching ``nodeConfigs[].applications`` replaces (is not merged
      with) the top-level ``applications``.
    - A missing key gives the defaults; a key whose JSON does not decode (bad JSON or a wrong type) keeps
      that key's previous result (``previous``), or the defaults when there is none.
    - The node annotation ``node.koordinator.sh/network-bandwidth`` overrides
      ``systemStrategy.totalNetworkBandwidth``.

    Differences: upstream re-marshals each node strategy with Go's non-omitted ``totalNetworkBandwidth``
    (a struct), so a node strategy that does not set it resets the cluster's value to "0"; here it inherits
    the cluster's value. An unparseable bandwidth annotation is reported and ignored; upstream drops the whole
    systemStrategy for that node (the koordlet then uses its defaults).
    """

    def __init__(self, keys: Mapping[str, _KeyConfig] | None = None) -> None:
        self._keys = dict(_DEFAULT_KEYS)
        self._keys.update(keys or {})

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, previous: SLOControllerConfig | None = None,
              source: str = "slo-controller-config") -> tuple[SLOControllerConfig, list[str]]:
        """(config, one error per rejected key) from a ConfigMap's ``data``."""
        data = data or {}
        keys: dict[str, _KeyConfig] = {}
        errors: list[str] = []
        for key in (*_STRATEGY_KEYS, wire.SLO_CFG_HOST_APPLICATION):
            if key not in data:
                continue
            try:
                if key == wire.SLO_CFG_HOST_APPLICATION:
                    keys[key], warnings = _parse_host_apps_key(data[key])
                else:
                    _, type_, default = _STRATEGY_KEYS[key]
                    keys[key], warnings = _parse_strategy_key(data[key], type_, default)
            except _KeyRejected as e:
                kept = previous._keys[key] if previous is not None else _DEFAULT_KEYS[key]
                keys[key] = kept
                text = (f"{source}: key {key}: {e}; keeping the "
                        f"{'previous' if previous is not None else 'default'} {key}")
                log.error("ConfigMap key rejected source=%s key=%s problem=%s; keeping %s", source, key, e,
                          "previous" if previous is not None else "defaults")
                errors.append(text)
                continue
            for path, reason in warnings:
                log.warning("ConfigMap field ignored source=%s key=%s path=%s reason=%s", source, key, path, reason)
        return cls(keys), errors

    def node_slo_spec(self, labels: Mapping[str, str] | None = None,
                      annotations: Mapping[str, str] | None = None,
                      source: str = "slo-controller-config") -> tuple[dict[str, Any], list[str]]:
        """(NodeSLO ``spec`` in wire shape as koord-manager would write it for this node, errors)."""
        labels = labels or {}
        annotations = annotations or {}
        errors: list[str] = []
        spec: dict[str, Any] = {}

        def pick(key: str) -> Any:
            config = self._keys[key]
            for i, node in enumerate(config.nodes):
                try:
                    if match_label_selector(node.selector, labels):
                        return node.value
                except ValueError as e:
                    label = node.name or f"#{i}"
                    errors.append(f"{source}: key {key}: node strategy {label}: invalid nodeSelector: {e}; skipped")
                    log.error("ConfigMap node strategy skipped source=%s key=%s strategy=%s problem=%s",
                              source, key, label, e)
            return config.cluster

        for key, (spec_field, _, _) in _STRATEGY_KEYS.items():
            chosen = pick(key)
            if key == wire.SLO_CFG_SYSTEM and wire.ANNOTATION_NODE_NETWORK_BANDWIDTH in annotations:
                value = annotations[wire.ANNOTATION_NODE_NETWORK_BANDWIDTH]
                try:
                    parse_quantity(value)
                    chosen = replace(chosen, total_network_bandwidth=str(value))
                except ValueError as e:
                    errors.append(f"node annotation {wire.ANNOTATION_NODE_NETWORK_BANDWIDTH}: {e}; ignored")
                    log.error("node annotation ignored annotation=%s problem=%s",
                              wire.ANNOTATION_NODE_NETWORK_BANDWIDTH, e)
            spec[spec_field] = chosen.to_wire()
        apps = pick(wire.SLO_CFG_HOST_APPLICATION)
        if apps:
            spec["hostApplications"] = [a.to_wire() for a in apps]
        return spec, errors
