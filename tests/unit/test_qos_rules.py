"""Rules as tables: every QoS class x NodeSLO policy x annotation, including malformed annotations."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import pytest

from koordlet.host.cgroup import KubeQOS
from koordlet.rules import cpu_qos, resources
from koordlet.states.decode import DecodeError
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.pod import resource_status
from tests.builders import agent_pod, node_view


def slo(policy=None, lsr=None, ls=None, be=None, threshold=None):
    qos: dict = {}
    if policy is not None:
        qos["policies"] = {"cpuPolicy": policy}
    for key, cfg in (("lsrClass", lsr), ("lsClass", ls), ("beClass", be)):
        if cfg is not None:
            qos[key] = {"cpuQOS": cfg}
    spec: dict = {"resourceQOSStrategy": qos}
    if threshold:
        spec["resourceUsedThresholdWithBE"] = threshold
    merged, errors = merge_node_slo_spec(spec)
    assert errors == []
    return merged


# the one pod of these tables, as the kubelet reports it before a phase; each test gives its QoS classes,
# annotations and containers
pod = partial(agent_pod, "u-1", "p", namespace="ns", phase=None)
C0, C1 = f"{0:064x}", f"{1:064x}"          # container ids


ALL_ON = {"enable": True}


# --- group identity ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("label,kube,expected", [
    ("LSE", "Guaranteed", 2), ("LSR", "Guaranteed", 2), ("LS", "Burstable", 2), ("BE", "BestEffort", -1),
    ("SYSTEM", "Guaranteed", 2),          # SYSTEM has no class value: falls back to the k8s class
    (None, "Guaranteed", 2), (None, "Burstable", 2), (None, "BestEffort", -1),
    ("bogus", "Burstable", 2),            # unknown label value = no class
])
def test_pod_bvt_all_classes_enabled(label, kube, expected):
    rule = cpu_qos.cpu_qos_rule(slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON))
    assert cpu_qos.pod_bvt(rule, pod(qos_class=label, qos=kube)) == expected


def test_defaults_disable_everything_and_root_dir_is_always_zero():
    rule = cpu_qos.cpu_qos_rule(slo())
    assert not rule.enabled
    assert [rule.kube_dir_bvt(q) for q in KubeQOS] == [0, 0, 0]
    assert cpu_qos.pod_bvt(rule, pod(qos_class="BE", qos="BestEffort")) == 0
    on = cpu_qos.cpu_qos_rule(slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON))
    assert [on.kube_dir_bvt(q) for q in KubeQOS] == [0, 2, -1]


def test_guaranteed_without_class_uses_ls_when_lsr_is_off():
    rule = cpu_qos.cpu_qos_rule(slo(ls={"enable": True, "groupIdentity": 1}))
    assert cpu_qos.pod_bvt(rule, pod(qos="Guaranteed")) == 1
    assert cpu_qos.pod_bvt(rule, pod(qos_class="LSR", qos="Guaranteed")) == 0


def test_core_sched_policy_turns_group_identity_off():
    rule = cpu_qos.cpu_qos_rule(slo("coreSched", lsr=ALL_ON, ls=ALL_ON, be={"enable": True, "schedIdle": 1}))
    assert not rule.enabled and cpu_qos.pod_bvt(rule, pod(qos_class="BE", qos="BestEffort")) == 0
    assert rule.idle == {KubeQOS.GUARANTEED: 0, KubeQOS.BURSTABLE: 0, KubeQOS.BESTEFFORT: 1}


@pytest.mark.parametrize("annotation,expected", [
    ({"enable": True, "groupIdentity": 1}, 1),
    ({"enable": True}, 2),                               # class value kept
    ({"enable": False, "groupIdentity": 2}, 0),
    ({"groupIdentity": 2}, 0),                           # enable missing = off
])
def test_cpu_qos_annotation_for_ls_pods(annotation, expected):
    rule = cpu_qos.cpu_qos_rule(slo(ls=ALL_ON))
    p = pod(qos_class="LS", annotations={"koordinator.sh/cpuQOS": json.dumps(annotation)})
    assert cpu_qos.pod_bvt(rule, p) == expected


@pytest.mark.parametrize("raw,problem", [
    ("{not json", "not JSON"), ('{"enable": true, "groupIdentity": 7}', "-1..2"),
    ('{"enable": "yes"}', "boolean"), ("[1]", "object"), ('{"enable": true, "groupIdentity": true}', "integer"),
])
def test_malformed_cpu_qos_annotation_keeps_the_class_value(raw, problem):
    rule = cpu_qos.cpu_qos_rule(slo(ls=ALL_ON))
    p = pod(qos_class="LS", annotations={"koordinator.sh/cpuQOS": raw})
    with pytest.raises(DecodeError) as e:
        cpu_qos.pod_bvt(rule, p)
    assert problem in str(e.value) and e.value.key == "koordinator.sh/cpuQOS"
    assert cpu_qos.class_pod_bvt(rule, p) == 2          # what the callers fall back to


def test_cpu_qos_annotation_ignored_for_other_classes():
    rule = cpu_qos.cpu_qos_rule(slo(lsr=ALL_ON, be=ALL_ON))
    ann = {"koordinator.sh/cpuQOS": '{"enable": true, "groupIdentity": 1}'}
    assert cpu_qos.pod_bvt(rule, pod(qos_class="BE", qos="BestEffort", annotations=ann)) == -1
    bad = pod(qos_class="LSR", qos="Guaranteed", annotations={"koordinator.sh/cpuQOS": "{"})
    assert cpu_qos.pod_bvt(rule, bad) == 2


@pytest.mark.parametrize("be,bvt_supported,expected_be", [
    (ALL_ON, False, 1),                                 # GI wanted, kernel lacks bvt: cpu.idle stands in
    (ALL_ON, True, None),                               # bvt works: cpu.idle untouched
    ({"enable": False}, False, 0),                      # BE off: idle reset
    ({"enable": True, "groupIdentity": 0}, False, 0),   # BE identity 0 is not "yield to everyone"
])
def test_idle_fallback(be, bvt_supported, expected_be):
    values = cpu_qos.idle_values(cpu_qos.cpu_qos_rule(slo(be=be)), bvt_supported)
    assert (values or {}).get(KubeQOS.BESTEFFORT) == expected_be


def test_host_app_bvt():
    rule = cpu_qos.cpu_qos_rule(slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON))
    assert [cpu_qos.host_app_bvt(rule, q) for q in ("LSE", "LSR", "LS", "BE", "SYSTEM", "")] == [2, 2, 2, -1, 0, 0]


# --- cpuset -------------------------------------------------------------------------------------------------

VIEW = node_view(slo=slo(), ls_pools={0: (2, 3), 1: (6, 7)}, be_pools={0: (0, 1, 2, 3), 1: (4, 5, 6, 7)},
                 system_cpus=(0,))


def status(p):
    return resource_status(p)


@pytest.mark.parametrize("label,kube,annotations,policy,expected", [
    ("LSR", "Guaranteed", {"scheduling.koordinator.sh/resource-status": '{"cpuset": "4-5"}'}, "none", "4-5"),
    ("LSE", "Guaranteed", {"scheduling.koordinator.sh/resource-status": '{"cpuset": "5,4"}'}, "static", "4-5"),
    ("LS", "Burstable", {}, "static", "2-3,6-7"),
    ("LS", "Burstable", {"scheduling.koordinator.sh/resource-status":
                         '{"numaNodeResources": [{"node": 1, "resources": {"cpu": "2"}}]}'}, "none", "6-7"),
    ("SYSTEM", "Burstable", {}, "none", "0"),
    ("BE", "BestEffort", {}, "none", None),            # CPU suppress owns the BE tier
    (None, "BestEffort", {}, "none", None),
    (None, "Guaranteed", {}, "none", "2-3,6-7"),
    (None, "Guaranteed", {}, "static", None),           # the kubelet's static policy owns it
])
def test_container_cpuset(label, kube, annotations, policy, expected):
    p = pod(qos_class=label, qos=kube, annotations=annotations)
    assert resources.container_cpuset(p, status(p), replace(VIEW, cpu_manager_policy=policy)) == expected


@pytest.mark.parametrize("raw", ["{", '{"cpuset": 3}', '{"cpuset": "x-y"}', '{"numaNodeResources": [{"node": "a"}]}',
                                 "[]"])
def test_malformed_resource_status_is_refused_with_the_key(raw):
    with pytest.raises(DecodeError, match="scheduling.koordinator.sh/resource-status"):
        resource_status(pod(qos_class="LSR", qos="Guaranteed",
                                      annotations={"scheduling.koordinator.sh/resource-status": raw}))


def test_host_app_cpuset_only_for_ls():
    assert resources.host_app_cpuset("LS", VIEW) == "2-3,6-7"
    assert resources.host_app_cpuset("BE", VIEW) is None


# --- batch resources ----------------------------------------------------------------------------------------

BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
         "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "2Gi"}}
UNLIMITED = {"requests": {"kubernetes.io/batch-cpu": "250"}}


def test_batch_container_and_pod():
    p = pod(qos_class="BE", qos="BestEffort", containers={"c0": C0, "c1": C1},
            resources={"c0": BATCH, "c1": UNLIMITED})
    c0, c1 = p.containers
    assert resources.batch_container(p, c0) == resources.Settings(cpu_shares=512, cfs_quota=200000,
                                                                  memory_limit=2 << 30)
    assert resources.batch_container(p, c1) == resources.Settings(cpu_shares=256, cfs_quota=-1, memory_limit=-1)
    assert resources.batch_pod(p, p.containers) == resources.Settings(cpu_shares=768, cfs_quota=-1,
                                                                      memory_limit=-1)
    one = pod(qos_class="BE", qos="BestEffort", containers={"c0": C0}, resources={"c0": BATCH})
    assert resources.batch_pod(one, one.containers).cfs_quota == 200000
    assert resources.batch_pod(one, one.containers, ratio=1.25).cfs_quota == 160000
    assert resources.batch_pod(one, one.containers, quota_enabled=False).cfs_quota == -1


def test_batch_only_for_be_and_minimum_shares():
    ls = pod(qos_class="LS", containers={"c0": C0}, resources={"c0": BATCH})
    assert resources.batch_container(ls, ls.containers[0]) == resources.Settings()
    p = pod(qos_class="BE", qos="BestEffort", containers={"c0": C0}, resources={"c0": {}})
    assert resources.batch_container(p, p.containers[0]).cpu_shares == 2


@pytest.mark.parametrize("raw,ratio,bad", [(None, 1.0, False), ("1.5", 1.5, False), ("abc", 1.0, True),
                                           ("-2", 1.0, True), ("nan", 1.0, True)])
def test_normalization_ratio(raw, ratio, bad):
    value, problem = resources.normalization_ratio({} if raw is None else
                                                   {"node.koordinator.sh/cpu-normalization-ratio": raw})
    assert value == ratio and bool(problem) == bad
