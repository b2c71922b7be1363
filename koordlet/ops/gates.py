"""The koordlet's feature gates: upstream's gate set with each gate's stage and default, and the
``feature-gates`` option's value (``A=true,B=false`` or a YAML mapping, ``AllAlpha`` / ``AllBeta``) read and
resolved as component-base's featuregate reads and resolves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordlet.ops.values import parse_bool, parse_str

# Upstream's koordlet feature gates with their stage and default: pkg/features/koordlet_features.go plus the
# runtime-hook gates pkg/koordlet/runtimehooks/config.go adds to the same gate set (GroupIdentity ... OOMScoreAdj).
# Every beta gate defaults on, every alpha gate off; upstream has no GA or deprecated koordlet gate. An unknown
# gate is refused, as upstream's SetFromMap refuses it ("unrecognized feature gate").
BETA_GATES = ("BECPUSuppress", "CPUBurst", "RdtResctrl", "NodeTopologyReport", "GroupIdentity",
              "CPUSetAllocator", "BatchResource")
ALPHA_GATES = ("AuditEvents", "AuditEventsHTTPHandler", "BECPUManager", "BECPUEvict", "BEMemoryEvict",
               "CPUEvict", "MemoryEvict", "CPUAllocatableEvict", "MemoryAllocatableEvict", "SystemConfig",
               "ResctrlCollector", "CgroupReconcile", "Accelerators", "RDMADevices", "CPICollector", "Libpfm4",
               "PSICollector", "BlkIOReconcile", "ColdPageCollector", "HugePageReport", "PodResourcesProxy",
               "HamiCoreVGPUMonitor", "PerCPUMetric", "NodeMetricPromMetrics", "GPUEnvInject",
               "RDMADeviceInject", "CPUNormalization", "CoreSched", "TerwayQoS", "TCNetworkQoS", "Resctrl",
               "OOMScoreAdj")
DEFAULT_GATES: dict[str, bool] = {**dict.fromkeys(BETA_GATES, True), **dict.fromkeys(ALPHA_GATES, False)}
# the eviction gates that ask the YARN Copilot agent first when they would evict a NodeManager pod
# (evict-by-copilot-agent): the usage-driven ones; killing YARN containers lowers no pod's request
COPILOT_EVICT_GATES = ("BECPUEvict", "CPUEvict", "BEMemoryEvict", "MemoryEvict")
# component-base's special gates: each sets every gate of its stage that is not set explicitly
BULK_GATES: dict[str, tuple[str, ...]] = {"AllAlpha": ALPHA_GATES, "AllBeta": BETA_GATES}


def parse_gates(raw: Any) -> dict[str, bool]:
    """``A=true,B=false`` (flag/env form, as component-base's MapStringBool: pairs split on ``,``, names and
    values trimmed, a repeated name keeps its last value) or a YAML mapping. ``AllAlpha``/``AllBeta`` stay in the
    result as they are: :func:`resolve_gates` applies them, after every layer is merged."""
    if isinstance(raw, Mapping):
        items = [(str(k).strip(), v) for k, v in raw.items()]
    else:
        items = []
        for part in parse_str(raw).split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"feature gate {part.strip()!r} needs =true or =false")
            items.append((name.strip(), value))
    gates: dict[str, bool] = {}
    for name, value in items:
        try:
            enabled = parse_bool(value)
        except ValueError as e:
            raise ValueError(f"feature gate {name}: {e}") from None
        if name not in DEFAULT_GATES and name not in BULK_GATES:
            raise ValueError(f"unknown feature gate {name!r} (unrecognized upstream too; known: "
                             f"{', '.join(sorted(DEFAULT_GATES))}, AllAlpha, AllBeta)")
        gates[name] = enabled
    return gates


def resolve_gates(settings: Mapping[str, bool]) -> dict[str, bool]:
    """The gates an operator set, with ``AllAlpha``/``AllBeta`` expanded as upstream (component-base
    featuregate ``SetFromMap``): a gate set by name keeps its value whatever the bulk setting and wherever it
    stands in the list; ``AllAlpha=X`` sets every alpha gate not named to X, ``AllBeta=X`` every beta gate not
    named. Gates left unset are absent (their default applies, :meth:`koordlet.ops.config.Config.gate`)."""
    gates = {name: on for name, on in settings.items() if name not in BULK_GATES}
    for bulk, members in BULK_GATES.items():
        if bulk in settings:
            for name in members:
                gates.setdefault(name, settings[bulk])
    return gates

