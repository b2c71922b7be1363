"""koord-scheduler's DeviceShare unit-test outcomes, run through our allocator (tests/unit/sched_goldens).

Each golden case builds the node from its Device CR (and Node), counts the assigned pods' ``device-allocated``
annotations, normalizes the incoming pod and allocates it as koord-scheduler's Filter trial (unscored) or Reserve
(scored) would. The result must be the exact ``device-allocated`` string upstream's PreBind marshals, or the failure
upstream reports (its reason text and whether it is unresolvable). The expectations are upstream's; a failing case
here is a difference from koord-scheduler, not a table to edit.
"""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.states.deviceallocation import parse_device_allocated
from scheduler.allocator import AllocationFailure, Allocator
from scheduler.annotations import format_device_allocated
from scheduler.devices import NodeDevices
from scheduler.requests import RequestError, pod_device_request
from tests.unit.sched_goldens import ALLOCATION_CASES, FORMATS
from tests.unit.sched_goldens.skipped import SKIPPED

ANNOTATION = "scheduling.koordinator.sh/device-allocated"

# Where we differ from koord-scheduler on purpose, because upstream's behaviour is a bug; each case must still
# fail (strict), so a change that silently adopts upstream's behaviour is noticed. README "Companion scheduler".
_PCIE = ("upstream's nodeDevice.filter computes minors.Intersection(...) and discards the result, so PCIeLevel "
         "exclusivity restricts nothing; we keep devices on partly used PCIe switches out, as the policy says")
_SWAPPED = ("upstream's allocateFromScope calls scoreDevice(request, free, total) against its (request, total, free) "
            "signature, so every fitting partly used card scores alike and the lowest minor wins; we score as the "
            "strategy says (MostAllocated packs onto the fuller card, LeastAllocated the emptier)")
_NO_CR = ("upstream's Filter passes a node with no Device CR (no cache entry) and Reserve writes nothing; with the "
          "device resources ignoredByScheduler that would bind a GPU pod to a node without GPUs, so we refuse it "
          "(unresolvable)")
DEVIATIONS = {
    "TestAutopilotAllocatorWithExclusivePolicyAndRequiredScope/allocate 3 GPU and 2 VF with assigned devices": _PCIE,
    "TestAllocateByTopology/allocate 1 GPU and 1 VF with assigned devices; topology scope BinPack": _PCIE,
    "TestAllocateSharedGPU/allocate 1 GPU and 1 VF with assigned devices; topology scope BinPack": _PCIE,
    "derived: PCIeLevel exclusive policy filters nothing": _PCIE,
    "derived: shared GPU in a topology scope: MostAllocated ties partly used cards": _SWAPPED,
    "derived: shared GPU in a topology scope: LeastAllocated ties partly used cards": _SWAPPED,
    "Test_Plugin_Filter/error missing nodecache": _NO_CR,
}


def _params(cases: list[dict[str, Any]]) -> list[Any]:
    return [pytest.param(c, id=c["name"], marks=[pytest.mark.xfail(reason=DEVIATIONS[c["name"]], strict=True)]
                         if c["name"] in DEVIATIONS else []) for c in cases]


def _assigned_pod(i: int, annotation: str) -> dict[str, Any]:
    """An assigned pod as upstream's tests create it: bound to the node, holding its annotation."""
    return {
        "metadata": {"namespace": "default", "name": f"assigned-pod-{i}", "uid": f"assigned-uid-{i}",
                     "annotations": {ANNOTATION: annotation}},
        "spec": {"nodeName": "test-node-1",
                 "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
    }


def _outcome(case: dict[str, Any]) -> tuple[str, str, bool]:
    """("ok", annotation, False) or ("fail", reason, unresolvable): what our scheduler does with the case."""
    nd = NodeDevices.build(case["device"], node=case["node"])
    for i, annotation in enumerate(case["assigned"]):
        nd.add_pod(_assigned_pod(i, annotation))
    allocator = Allocator(strategy=case["strategy"], weights=case.get("weights"))
    try:
        request = pod_device_request(case["pod"])
        if not request:
            return "ok", "", False
        result = allocator.allocate(nd, request, scored=case["scored"])
    except RequestError as e:
        return "fail", str(e), True
    except AllocationFailure as e:
        return "fail", e.reason, e.unresolvable
    return "ok", format_device_allocated(result, nd), False


@pytest.mark.parametrize("case", _params(ALLOCATION_CASES))
def test_allocation_golden(case: dict[str, Any]) -> None:
    kind, text, unresolvable = _outcome(case)
    fail = case["fail"]
    if fail is None:
        assert (kind, text) == ("ok", case["expect"]), case.get("note", "")
        return
    assert kind == "fail", f"allocated {text!r}; upstream fails with {fail}"
    reasons = fail.get("reason_any_of") or [fail["reason"]]
    assert text in reasons, case.get("note", "")
    assert unresolvable == fail["unresolvable"], f"{text}: unresolvable={unresolvable}, upstream {fail['unresolvable']}"


@pytest.mark.parametrize("case", FORMATS, ids=[c["name"] for c in FORMATS])
def test_format_golden(case: dict[str, Any]) -> None:
    nd = NodeDevices.build(case["device"]) if case["device"] is not None else None
    assert format_device_allocated(parse_device_allocated(case["allocations"]), nd) == case["expect"]


def test_tables_are_well_formed() -> None:
    """Every case says exactly one outcome, names are unique (they are the test ids), skips carry a reason."""
    names = [c["name"] for c in ALLOCATION_CASES] + [c["name"] for c in FORMATS]
    assert len(names) == len(set(names))
    for c in ALLOCATION_CASES:
        assert (c["expect"] is None) != (c["fail"] is None), c["name"]
        assert c["strategy"] in ("LeastAllocated", "MostAllocated"), c["name"]
    assert all(test and why for test, why in SKIPPED)
    assert set(DEVIATIONS) <= set(names)
