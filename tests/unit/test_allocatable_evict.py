"""Gates CPUAllocatableEvict and MemoryAllocatableEvict: low-priority pods' batch-/mid- requests against the node's
allocatable, as upstream's cpuevict/memoryevict with the allocatable policy (qos/evict.py; upstream
qosmanager/plugins/cpuevict/cpu_evict.go: calculateMilliReleaseByAllocatableThresholdPercent,
memoryevict/memory_evict.go: calculateReleaseByAllocatableThresholdPercent). Release amounts as tables, then the
strategy in the shared release account, and one eviction recorded in the audit log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from koordlet.metriccache import Sample
from koordlet.ops.audit import AuditLog
from koordlet.qos.evict_release import allocatable_release, allocatable_value, check_allocatable_config
from koordlet.qos.evict_victims import RES_CPU, RES_MEMORY, pod_request
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.schema import ResourceThresholdStrategy
from tests.builders import agent_pod, pod_object
from tests.unit.test_evict import NOW, Env, GiB, cid, slo, uid

MID = {"koordinator.sh/priority-class": "koord-mid", "koordinator.sh/eviction-enabled": "true"}
BATCH = {"koordinator.sh/priority-class": "koord-batch", "koordinator.sh/eviction-enabled": "true"}
ALLOC_SLO = dict(enable=True, cpuAllocatableEvictThresholdPercent=100, cpuAllocatableEvictLowerPercent=80,
                 memoryAllocatableEvictThresholdPercent=100, memoryAllocatableEvictLowerPercent=90,
                 allocatableEvictPriorityThreshold=7999)
BESTEFFORT = {"qos": "BestEffort"}         # the Kubernetes QoS class of these batch and mid pods


# --- the pure parts --------------------------------------------------------------------------------------------

def test_requests_by_priority_class_with_sidecars() -> None:
    mid = agent_pod(uid(1), "m", labels=MID, qos="BestEffort", containers={"c": cid(1)},
                    resources={"c": {"requests": {"kubernetes.io/mid-cpu": "2000", "kubernetes.io/mid-memory": "1Gi"}}},
                    init_containers=[{"name": "side", "restartPolicy": "Always",
                                      "resources": {"requests": {"kubernetes.io/mid-cpu": "500"}}}])
    batch = agent_pod(uid(2), "b", labels=BATCH, qos="BestEffort", containers={"c": cid(2)}, resources={
        "c": {"requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}}})
    prod = agent_pod(uid(3), "p", labels={}, priority=1000, containers={"c": cid(3)},
                     resources={"c": {"requests": {"cpu": "1", "memory": "1Gi"}}})
    assert pod_request(mid, RES_CPU) == ("kubernetes.io/mid-cpu", 2500)        # the sidecar runs alongside
    assert pod_request(mid, RES_MEMORY) == ("kubernetes.io/mid-memory", GiB)
    assert pod_request(batch, RES_CPU) == ("kubernetes.io/batch-cpu", 1000)
    assert pod_request(batch, RES_MEMORY) == ("kubernetes.io/batch-memory", 2 * GiB)
    assert pod_request(prod, RES_CPU) == ("cpu", 1000)


@pytest.mark.parametrize("name,raw,value", [("cpu", "4", 4000), ("cpu", "3500m", 3500),
                                            ("kubernetes.io/batch-cpu", "12000", 12000),
                                            ("kubernetes.io/batch-cpu", "12k", 12000),
                                            ("kubernetes.io/mid-memory", "1Gi", GiB), ("memory", "1.5Ki", 1536)])
def test_allocatable_units(name: str, raw: str, value: int) -> None:
    assert allocatable_value(name, raw) == value


@pytest.mark.parametrize("fields,problem", [
    ({}, "cpuAllocatableEvictThresholdPercent not set"),
    ({"cpu_allocatable_evict_threshold_percent": 100}, "cpuAllocatableEvictLowerPercent not set"),
    ({"cpu_allocatable_evict_threshold_percent": 100, "cpu_allocatable_evict_lower_percent": 100}, "must be below"),
    ({"cpu_allocatable_evict_threshold_percent": 100, "cpu_allocatable_evict_lower_percent": 80},
     "allocatableEvictPriorityThreshold not set"),
    ({"cpu_allocatable_evict_threshold_percent": 100, "cpu_allocatable_evict_lower_percent": 80,
      "allocatable_evict_priority_threshold": 7999}, None),
])
def test_config_check(fields: dict[str, int], problem: str | None) -> None:
    got = check_allocatable_config(ResourceThresholdStrategy(**fields), RES_CPU)  # type: ignore[arg-type]
    assert (got is None) if problem is None else (got is not None and problem in got)


def test_release_amounts() -> None:
    """mid-cpu: 9000 of 8000 requested = 112.5% > 100%: release 9000 - 80%·8000 = 2600. batch-cpu 3000 of 4000:
    below. A finished pod and a pod above the priority threshold are not summed. Native cpu of a low-priority
    prod pod over its allocatable cannot be released by evicting batch/mid pods: reported apart."""
    pods = [agent_pod(uid(n), name, labels=labels, containers={"c": cid(n)}, resources={"c": {"requests": requests}},
                      **kw)
            for n, name, labels, requests, kw in [
                (1, "m1", MID, {"kubernetes.io/mid-cpu": "5000"}, BESTEFFORT),
                (2, "m2", MID, {"kubernetes.io/mid-cpu": "4000"}, BESTEFFORT),
                (3, "m-done", MID, {"kubernetes.io/mid-cpu": "9000"}, dict(phase="Succeeded", **BESTEFFORT)),
                (4, "b1", BATCH, {"kubernetes.io/batch-cpu": "3000"}, BESTEFFORT),
                (5, "m-high", MID, {"kubernetes.io/mid-cpu": "9000"}, dict(priority=7999, **BESTEFFORT)),
                (6, "odd", {}, {"cpu": "3"}, dict(priority=1000))]]
    allocatable = {"kubernetes.io/mid-cpu": 8000, "kubernetes.io/batch-cpu": 4000, "cpu": 2000}
    release, stuck = allocatable_release(pods, allocatable, 100, 80, 7998, RES_CPU)
    assert release == {"kubernetes.io/mid-cpu": 2600}
    assert stuck == {"cpu": 3000 - 1600}
    # the node has none of a resource its pods request: all of it is released
    release, _ = allocatable_release(pods, {"kubernetes.io/mid-cpu": 8000}, 100, 80, 7998, RES_CPU)
    assert release == {"kubernetes.io/mid-cpu": 2600, "kubernetes.io/batch-cpu": 3000}


# --- the strategy ----------------------------------------------------------------------------------------------

def node(**allocatable: str) -> NodeInfo:
    return NodeInfo("n1", capacity={"cpu": "4", "memory": "16Gi"}, allocatable=allocatable)


def test_cpu_allocatable_evicts_largest_request_first_until_covered(tmp_path: Any, caplog: Any) -> None:
    env = Env(tmp_path, {"CPUAllocatableEvict"})
    for n, name, labels, requests in [
            (1, "small", MID, {"kubernetes.io/mid-cpu": "1000"}),
            (2, "large", MID, {"kubernetes.io/mid-cpu": "3000"}),
            (3, "medium", MID, {"kubernetes.io/mid-cpu": "2000"}),
            (4, "batch", BATCH, {"kubernetes.io/batch-cpu": "8000"}),         # batch-cpu is within its allocatable
            (5, "no-label", {"koordinator.sh/priority-class": "koord-mid"}, {"kubernetes.io/mid-cpu": "9000"})]:
        env.add(pod_object(uid(n), name, labels=labels, qos="BestEffort", containers={"c": cid(n)},
                           resources={"c": {"requests": requests}}))
    env.cache.append([Sample("pod_cpu_usage", (("pod_uid", uid(n)),), NOW - 0.5, 0.1) for n in range(1, 6)])
    caplog.set_level(logging.WARNING, "koordlet.qos.evict")
    env.clock.t += 30                                   # past the CPU cool-down that runs from start
    # mid-cpu: 15000 requested of 10000 allocatable: release 15000 - 80%·10000 = 7000; no-label (9000) is not a
    # candidate, so large (3000) + medium (2000) + small (1000) = 6000 is all there is
    env.evictor.reconcile(env.view(slo(**ALLOC_SLO), node=node(**{"kubernetes.io/mid-cpu": "10000",
                                                                   "kubernetes.io/batch-cpu": "8000"})),
                          env.executor)
    would = [r.message for r in caplog.records if "would evict" in r.message]
    assert [w.split("pod=default/")[1].split()[0] for w in would] == ["large", "medium", "small"]
    assert all("trigger by koordlet feature CPUAllocatableEvict" in w for w in would)
    assert env.count("CPUAllocatableEvict", "would_evict") == 3
    assert any("cannot release enough" in r.message for r in caplog.records)


def test_memory_allocatable_evicts_only_what_is_needed_and_audits(tmp_path: Any) -> None:
    """One batch pod covers the release: only it goes. The eviction is an audit-log event at verbosity 0, as
    upstream's evictor writes it (gate AuditEvents), even with audit-verbose 1."""
    audit = AuditLog(str(tmp_path / "audit"), verbose=1)
    env = Env(tmp_path / "host", {"MemoryAllocatableEvict"}, kill_standalone=True)
    env.executor.audit_log = audit
    for n, name, memory in [(1, "big", "6Gi"), (2, "small", "2Gi")]:
        env.add(pod_object(uid(n), name, labels=BATCH, qos="BestEffort", containers={"c": cid(n)},
                           resources={"c": {"requests": {"kubernetes.io/batch-memory": memory}}}))
    env.memory(1 * GiB, {uid(1): GiB, uid(2): GiB})
    # 8 GiB requested of 7 GiB allocatable (114% > 100%): release 8 - 90%·7 = 1.7 GiB: "big" covers it
    env.evictor.reconcile(env.view(slo(**ALLOC_SLO), node=node(**{"kubernetes.io/batch-memory": "7Gi"})),
                          env.executor)
    assert env.count("MemoryAllocatableEvict", "killed") == 1
    events = [json.loads(line) for line in (tmp_path / "audit" / "audit.log").read_text().splitlines()]
    assert [(e["type"], e["name"], e["reason"]) for e in events] == [("pod", "big", "evicted")]
    assert events[0]["message"] == "trigger by koordlet feature MemoryAllocatableEvict, kill pod: big"
    # within the allocatable threshold nothing happens (after the 4 s cool-down)
    env.clock.t += 10
    env.evictor.reconcile(env.view(slo(**ALLOC_SLO), node=node(**{"kubernetes.io/batch-memory": "16Gi"})),
                          env.executor)
    assert env.count("MemoryAllocatableEvict", "killed") == 1


def test_unknown_node_allocatable_is_skipped(tmp_path: Any, caplog: Any) -> None:
    env = Env(tmp_path, {"MemoryAllocatableEvict"})
    env.add(pod_object(uid(1), "big", labels=BATCH, qos="BestEffort", containers={"c": cid(1)},
                       resources={"c": {"requests": {"kubernetes.io/batch-memory": "6Gi"}}}))
    env.memory(1 * GiB, {uid(1): GiB})
    caplog.set_level(logging.WARNING, "koordlet.qos.evict")
    env.evictor.reconcile(env.view(slo(**ALLOC_SLO)), env.executor)        # NodeInfo("n1"): nothing known
    assert env.count("MemoryAllocatableEvict", "would_evict") == 0
    assert any("allocatable is unknown" in r.message for r in caplog.records)
