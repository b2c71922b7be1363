"""What net QoS is asked for: the pod's class, the policy, the node's bandwidth and the pods' own limits, from the
NodeSLO, the Node's annotation and the pod annotation (pure). An int is a percent of the total, a string a quantity
in bits/s; everything becomes bytes/s by dividing by 8 exactly once (upstream
``pkg/koordlet/runtimehooks/hooks/tc/helper.go``, ``pkg/koordlet/runtimehooks/hooks/terwayqos/terwayqos.go``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder

if TYPE_CHECKING:
    from koordlet.states.nodeslo.schema import NetworkQOSCfg, NodeSLOSpec
    from koordlet.states.pod import Pod

NET_SYSTEM, NET_LS, NET_BE, NET_NONE = "system_class", "ls_class", "be_class", ""
_NET_CLASS = {wire.QOS_SYSTEM: NET_SYSTEM, wire.QOS_LSE: NET_LS, wire.QOS_LSR: NET_LS, wire.QOS_LS: NET_LS,
              wire.QOS_BE: NET_BE}


def quantity_bits(raw: object) -> int:
    """A bandwidth quantity in bits/s, rounded up as Go's ``Quantity.Value()``; ValueError when bad/negative."""
    q = parse_quantity(raw)
    if q < 0:
        raise ValueError(f"quantity {raw!r}: must not be negative")
    return -((-q.numerator) // q.denominator)


def net_class(pod: Pod) -> str:
    """SYSTEM -> system, LSE/LSR/LS -> LS, BE -> BE, no koordinator QoS label -> none (the label only)."""
    return _NET_CLASS.get(pod.raw_qos_class, NET_NONE)


def net_qos_policy(slo: NodeSLOSpec) -> str:
    """``tc`` when unset (the hook's reading), else the configured value (``terway-qos`` or ``""``)."""
    policies = slo.resource_qos.policies if slo.resource_qos is not None else None
    if policies is None or policies.net_qos_policy is None:
        return wire.NET_QOS_POLICY_TC
    return policies.net_qos_policy


def total_bandwidth_bits(slo: NodeSLOSpec, node_annotations: Mapping[str, str]) -> tuple[int, str | None]:
    """``systemStrategy.totalNetworkBandwidth`` (bits/s), the node annotation taking precedence when it parses."""
    base = slo.system.total_network_bandwidth_value if slo.system is not None else 0
    raw = node_annotations.get(wire.ANNOTATION_NODE_NETWORK_BANDWIDTH)
    if raw is None:
        return max(base, 0), None
    try:
        return quantity_bits(raw), None
    except ValueError as e:
        return max(base, 0), (f"node annotation {wire.ANNOTATION_NODE_NETWORK_BANDWIDTH}={raw!r}: {e}; using "
                              f"systemStrategy.totalNetworkBandwidth")


def class_bytes(value: int | str | None, total_bits: int, where: str) -> tuple[int, str | None]:
    """One ``networkQOS`` value in bytes/s: an int is a percent of the total, a string a quantity in bits/s.
    Bad values count as 0 (unset), values above the total are clamped to it; both with a problem text."""
    if value is None:
        return 0, None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return 0, f"{where}: expected a percent or a quantity, got {value!r}; treated as unset"
    if isinstance(value, int):
        if not 0 <= value <= 100:
            return 0, f"{where}: percent {value} outside 0..100; treated as unset"
        return total_bits * value // 100 // 8, None
    try:
        bits = quantity_bits(value)
    except ValueError as e:
        return 0, f"{where}: {e}; treated as unset"
    if bits > total_bits:
        return total_bits // 8, f"{where}: {value} is above the total bandwidth {total_bits} bit/s; clamped"
    return bits // 8, None


@dataclass(frozen=True)
class Bandwidth:
    """Node-level egress (tx) / ingress (rx) bandwidth in bytes/s: the hardware total, L1 = LS, L2 = BE.
    Field order is Terway's ``global_bps_config`` line order."""
    hw_tx_bps_max: int = 0
    hw_rx_bps_max: int = 0
    offline_l1_tx_bps_min: int = 0
    offline_l1_tx_bps_max: int = 0
    offline_l1_rx_bps_min: int = 0
    offline_l1_rx_bps_max: int = 0
    offline_l2_tx_bps_min: int = 0
    offline_l2_tx_bps_max: int = 0
    offline_l2_rx_bps_min: int = 0
    offline_l2_rx_bps_max: int = 0
    l1_enabled: bool = False
    l2_enabled: bool = False

    LINES = ("hw_tx_bps_max", "hw_rx_bps_max", "offline_l1_tx_bps_min", "offline_l1_tx_bps_max",
             "offline_l1_rx_bps_min", "offline_l1_rx_bps_max", "offline_l2_tx_bps_min", "offline_l2_tx_bps_max",
             "offline_l2_rx_bps_min", "offline_l2_rx_bps_max")


def _class_values(cfg: NetworkQOSCfg | None, total: int, where: str,
                  problems: list[str]) -> tuple[bool, tuple[int, int, int, int]]:
    """(enabled, (tx min, tx max, rx min, rx max)) of lsClass/beClass networkQOS; zeros when not enabled."""
    if cfg is None or not cfg.enable:
        return False, (0, 0, 0, 0)
    out = []
    for attr, wire_name in (("egress_request", "egressRequest"), ("egress_limit", "egressLimit"),
                            ("ingress_request", "ingressRequest"), ("ingress_limit", "ingressLimit")):
        value, problem = class_bytes(getattr(cfg, attr), total, f"{where}.networkQOS.{wire_name}")
        if problem:
            problems.append(problem)
        out.append(value)
    return True, (out[0], out[1], out[2], out[3])


def bandwidth(slo: NodeSLOSpec, node_annotations: Mapping[str, str]) -> tuple[Bandwidth, list[str]]:
    """The node's bandwidth config from the NodeSLO (and node annotation), with a problem text per bad value."""
    problems: list[str] = []
    total, problem = total_bandwidth_bits(slo, node_annotations)
    if problem:
        problems.append(problem)
    rq = slo.resource_qos
    l1_on, l1 = _class_values(rq.ls.network_qos if rq and rq.ls else None, total, "lsClass", problems)
    l2_on, l2 = _class_values(rq.be.network_qos if rq and rq.be else None, total, "beClass", problems)
    hw = total // 8
    return Bandwidth(hw, hw, l1[0], l1[1], l1[2], l1[3], l2[0], l2[1], l2[2], l2[3], l1_on, l2_on), problems


@decoder(wire.ANNOTATION_POD_NETWORK_QOS)
def pod_limits(pod: Pod) -> tuple[int, int]:
    """(ingress, egress) bytes/s from ``koordinator.sh/networkQOS`` (bits/s quantities; missing key = 0);
    DecodeError when the annotation is malformed (the caller then sets no pod-level limit)."""
    key = wire.ANNOTATION_POD_NETWORK_QOS
    raw = pod.annotations.get(key, "")
    if not raw:
        return 0, 0
    doc = decode.json_object(key, raw)
    out = []
    for name in ("ingressLimit", "egressLimit"):
        value = doc.get(name)
        if value is None or value == "":
            out.append(0)
            continue
        text = decode.string(key, value, name)
        try:
            out.append(quantity_bits(text) // 8)
        except ValueError as e:
            raise DecodeError(key, f"{name}: {e}") from None
    return out[0], out[1]
