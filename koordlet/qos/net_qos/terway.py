"""The two files Terway's own QoS agent reads (policy ``terway-qos``; upstream
``pkg/koordlet/runtimehooks/hooks/terwayqos/terwayqos.go``): ``global_bps_config`` (the node's bandwidth) and
``pod.json`` (each pod's priority, net_cls dir and limits), pure."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from koordlet.base import wire
from koordlet.host.cgroup import KubeQOS
from koordlet.qos.net_qos.config import Bandwidth

if TYPE_CHECKING:
    from koordlet.states.informer import PodMeta
    from koordlet.states.pod import Pod

TERWAY_DIR = "/var/lib/terway/qos"                              # upstream: /host-var-lib/terway/qos in its pod
TERWAY_NODE_FILE, TERWAY_POD_FILE = "global_bps_config", "pod.json"
TERWAY_NET_CLS_ROOT = "/sys/fs/cgroup/net_cls"                  # as Terway sees the host (hard-coded upstream)

_TERWAY_PRIO = {wire.QOS_SYSTEM: 0, wire.QOS_LSE: 1, wire.QOS_LSR: 1, wire.QOS_LS: 1, wire.QOS_BE: 2}


def terway_global_config(bw: Bandwidth) -> str:
    """``global_bps_config``: one ``<key> <bytes/s>`` line per field, in Terway's order."""
    return "".join(f"{name} {getattr(bw, name)}\n" for name in Bandwidth.LINES)


def terway_prio(pod: Pod) -> int:
    """SYSTEM 0, LSE/LSR/LS 1, BE 2; unlabeled: Guaranteed/Burstable 1, BestEffort 2."""
    prio = _TERWAY_PRIO.get(pod.raw_qos_class)
    if prio is not None:
        return prio
    return 2 if pod.kube_qos is KubeQOS.BESTEFFORT else 1


def terway_pod_entry(meta: PodMeta, ingress: int, egress: int) -> dict[str, Any]:
    pod = meta.pod
    return {"podName": pod.name, "podNamespace": pod.namespace, "podUID": pod.uid, "prio": terway_prio(pod),
            "cgroupDir": posixpath.normpath(posixpath.join(TERWAY_NET_CLS_ROOT, meta.cgroup_dir)),
            "qosConfig": {"ingressBandwidth": ingress, "egressBandwidth": egress}}


def terway_pods_json(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """``pod.json`` exactly as Go's ``json.Marshal(map[uid]*Pod)``: keys sorted, no spaces."""
    return json.dumps({uid: entries[uid] for uid in sorted(entries)}, separators=(",", ":"), ensure_ascii=False)
