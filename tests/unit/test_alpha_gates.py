"""Upstream's ten alpha gates that need a component of their own: each is implemented by a component that declares
it, or (Libpfm4, and gates whose companion is off) announced with one start-up line. The behaviour of each is tested
in its own file:

| gate | where | behaviour test |
|---|---|---|
| AuditEvents, AuditEventsHTTPHandler | koordlet/ops/audit.py, Executor, Agent.events_handler | test_audit.py |
| ResctrlCollector | collectors/resctrl.py | test_resctrl_collector.py |
| Libpfm4 | compat.gate_notes (the CPI collector always counts as its libpfm4 path) | here, test_cpi.py |
| HamiCoreVGPUMonitor | collectors/hami_vgpu.py, host/hamicore.py | test_hami_vgpu.py |
| PerCPUMetric | states/nodestate.py -> AgentMetrics.share_pools | test_metric_owners.py |
| NodeMetricPromMetrics | reporters/nodemetric.py record_metrics | test_metric_owners.py |
| CPUNormalization | qos/pod_resources.py, qos/cpu_burst.py | test_cpu_normalization.py |
| CPUAllocatableEvict, MemoryAllocatableEvict | qos/evict.py | test_allocatable_evict.py |
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from koordlet import collectors, qos
from koordlet.ops.compat import gate_notes
from koordlet.ops.config import build
from koordlet.qos import evict

TEN = ("AuditEvents", "AuditEventsHTTPHandler", "ResctrlCollector", "Libpfm4", "HamiCoreVGPUMonitor",
       "PerCPUMetric", "NodeMetricPromMetrics", "CPUNormalization", "CPUAllocatableEvict", "MemoryAllocatableEvict")


def config(tmp_path: Any, gates: dict[str, bool], **flags: Any) -> Any:
    return build(environ={}, hostname=lambda: "n", flags={"standalone": True, "tsdb-path": str(tmp_path),
                                                          "feature-gates": gates, **flags})


def test_components_declare_their_gates() -> None:
    declared = {g for plugin in (*collectors.COLLECTORS, *qos.STRATEGIES) for g in plugin.gates}
    assert {"ResctrlCollector", "HamiCoreVGPUMonitor", "CPUNormalization", "CPUAllocatableEvict",
            "MemoryAllocatableEvict"} <= declared
    # upstream's order within a round: BE first, then the allocatable gate, then the usage gate
    assert evict.CPU_GATES == ("BECPUEvict", "CPUAllocatableEvict", "CPUEvict")
    assert evict.MEMORY_GATES == ("BEMemoryEvict", "MemoryAllocatableEvict", "MemoryEvict")


def test_all_alpha_starts_with_one_line_per_inert_gate(tmp_path: Any) -> None:
    """The upstream manifest's AllAlpha=true: nothing refused, and only the gates that do nothing here say so."""
    notes = gate_notes(config(tmp_path, {"AllAlpha": True}))
    assert {n.flag: n.level for n in notes} == {"Libpfm4": logging.WARNING, "ResctrlCollector": logging.WARNING}
    assert all("has no effect here" in n.text for n in notes)
    assert gate_notes(config(tmp_path, {})) == ()                       # upstream's defaults: all quiet


@pytest.mark.parametrize("gates,flags,flag,level,words", [
    ({"Libpfm4": True}, {}, "Libpfm4", logging.WARNING, "CPICollector is off"),
    ({"Libpfm4": True, "CPICollector": True}, {}, "Libpfm4", logging.WARNING, "one perf group per CPU"),
    ({"ResctrlCollector": True}, {}, "ResctrlCollector", logging.WARNING, "-enable-resctrl-collector is false"),
    ({}, {"enable-resctrl-collector": True}, "enable-resctrl-collector", logging.WARNING, "gate ResctrlCollector"),
    ({"HamiCoreVGPUMonitor": True}, {}, "HamiCoreVGPUMonitor", logging.WARNING, "GPUEnvInject is off"),
    ({"AuditEventsHTTPHandler": True}, {}, "AuditEventsHTTPHandler", logging.INFO, "in-memory trail"),
    ({"NodeMetricPromMetrics": True}, {"enable-node-metric-report": False}, "NodeMetricPromMetrics",
     logging.WARNING, "no NodeMetric report"),
])
def test_gate_notes(tmp_path: Any, gates: dict[str, bool], flags: dict[str, Any], flag: str, level: int,
                    words: str) -> None:
    (note,) = gate_notes(config(tmp_path, gates, **flags))
    assert (note.flag, note.level) == (flag, level) and words in note.text


def test_companions_present_no_note(tmp_path: Any) -> None:
    on = dict.fromkeys(TEN, True) | {"CPICollector": True, "GPUEnvInject": True}
    notes = gate_notes(config(tmp_path, on, **{"enable-resctrl-collector": True}))
    assert [n.flag for n in notes] == ["Libpfm4"]                       # the one gate with no separate effect
