"""NodeResourceTopology status: zones, annotations and merge rules against upstream
pkg/koordlet/statesinformer/impl/states_noderesourcetopology.go."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from koordlet.host.topology import CPU, CPUBasicInfo, CPUManagerState, NUMANode, Topology
from koordlet.reporters import nrt
from koordlet.states.kubelet import KubeletCPUConfig
from koordlet.states.node import NodeInfo
from koordlet.states.pools import cpu_pools, take_by_topology
from tests.builders import pod_meta

GiB = 2**30



def nrt_status(topo: Topology, pods, node: NodeInfo, kubelet: KubeletCPUConfig | None,
               **kw) -> nrt.NRTStatus:
    """The NRT status as the agent builds it: pools from the same inputs, then the report."""
    return nrt.build_status(topo, cpu_pools(topo, pods, node, kubelet), node, kubelet, **kw)

def two_socket_topology(*, cpu_manager: CPUManagerState | None = None, offline: tuple[int, ...] = ()) -> Topology:
    """2 sockets = 2 NUMA nodes, 2 cores each, 2 threads per core. Siblings: {0,4} {1,5} on node 0, {2,6} {3,7}
    on node 1 (the usual "first threads, then second threads" numbering)."""
    cpus = []
    for cpu in range(8):
        node = (cpu % 4) // 2
        core = cpu % 4
        cpus.append(CPU(id=cpu, online=cpu not in offline, node=node, socket=node, core=core,
                        physical_package_id=node, core_id=core % 2, siblings=(core, core + 4)))
    nodes = (NUMANode(0, (0, 1, 4, 5), {"MemTotal": 16 * 2**20}, {2048: 512, 1048576: 2}),
             NUMANode(1, (2, 3, 6, 7), {"MemTotal": 16 * 2**20}, {2048: 0}))
    return Topology(cpus=tuple(cpus), nodes=nodes, packages=(), cores=(), caches=(),
                    online=tuple(c for c in range(8) if c not in offline), offline=offline,
                    present=tuple(range(8)), possible=tuple(range(8)), numa_from_sysfs=True,
                    basic=CPUBasicInfo(cpu_model="Xeon", vendor_id="GenuineIntel", hyper_thread_enabled=True),
                    cpu_manager=cpu_manager)


def ann(status: nrt.NRTStatus, key: str):
    return json.loads(status.annotations[key])


UID_A, UID_B, UID_K = ("aaaaaaaa-0000-0000-0000-000000000001", "aaaaaaaa-0000-0000-0000-000000000002",
                       "aaaaaaaa-0000-0000-0000-000000000003")


def test_standalone_status_has_every_key_with_upstream_empty_values():
    s = nrt_status(two_socket_topology(), [], NodeInfo("n1"), None)
    assert s.topology_policy == "None"
    assert set(s.annotations) == set(nrt.MANAGED_ANNOTATIONS)
    assert s.annotations["kubelet.koordinator.sh/cpu-manager-policy"] == "{}"
    assert s.annotations["node.koordinator.sh/pod-cpu-allocs"] == "null"
    assert s.annotations["node.koordinator.sh/reservation"] == "{}"
    assert s.annotations["node.koordinator.sh/system-qos-resource"] == "{}"
    assert ann(s, "node.koordinator.sh/cpu-shared-pools") == [{"socket": 0, "node": 0, "cpuset": "0-1,4-5"},
                                                               {"socket": 1, "node": 1, "cpuset": "2-3,6-7"}]
    assert ann(s, "node.koordinator.sh/cpu-basic-info") == {"cpuModel": "Xeon", "hyperThreadEnabled": True,
                                                            "vendorID": "GenuineIntel"}
    assert s.labels == {}


def test_zones_count_cpus_and_memory_per_numa_node_hugepages_only_with_the_gate():
    topo = two_socket_topology()
    zones = nrt_status(topo, [], NodeInfo("n1"), None).zones
    assert [z["name"] for z in zones] == ["node-0", "node-1"]
    res = {r["name"]: r for r in zones[0]["resources"]}
    assert [r["name"] for r in zones[0]["resources"]] == ["cpu", "hugepages-1Gi", "hugepages-2Mi", "memory"]
    assert res["cpu"] == {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"}
    assert res["memory"]["capacity"] == "16Gi" and res["hugepages-2Mi"]["capacity"] == "0"
    with_gate = nrt_status(topo, [], NodeInfo("n1"), None, hugepage_report=True).zones
    res = {r["name"]: r for r in with_gate[0]["resources"]}
    assert res["hugepages-2Mi"]["capacity"] == "1Gi"          # 512 × 2 MiB
    assert res["hugepages-1Gi"]["capacity"] == "2Gi"
    assert res["memory"]["capacity"] == "13Gi"                # 16 GiB − 1 GiB − 2 GiB
    assert all(z["type"] == "Node" for z in with_gate)


def test_offline_cpus_are_not_counted():
    zones = nrt_status(two_socket_topology(offline=(5,)), [], NodeInfo("n1"), None).zones
    assert {r["name"]: r["capacity"] for r in zones[0]["resources"]}["cpu"] == "3"


def test_numa_reservation_spreads_kubelet_reserve_with_ceiling():
    node = NodeInfo("n1", labels={"node.koordinator.sh/enable-numa-reservation": "true"},
                        capacity={"cpu": "8", "memory": "32Gi"}, allocatable={"cpu": "7", "memory": "31Gi"})
    s = nrt_status(two_socket_topology(), [], node, None)
    res = {r["name"]: r for r in s.zones[1]["resources"]}
    # cpu reserve 1000m over 2 zones -> 500m each; memory 1 GiB -> 512 MiB each
    assert res["cpu"] == {"name": "cpu", "capacity": "4", "allocatable": "3500m", "available": "3500m"}
    assert res["memory"]["capacity"] == "16Gi" and res["memory"]["allocatable"] == "15872Mi"
    assert s.labels == {"node.koordinator.sh/enable-numa-reservation": "true"}
    # an odd reserve rounds up per zone: 1001m / 2 -> 501m
    odd = dataclasses.replace(node, allocatable={"cpu": "6999m", "memory": "32Gi"})
    res = {r["name"]: r for r in nrt_status(two_socket_topology(), [], odd, None).zones[0]["resources"]}
    assert res["cpu"]["allocatable"] == "3499m" and res["memory"]["allocatable"] == "16Gi"


def test_shared_pools_exclude_lse_lsr_cpusets_and_be_pool_only_lse():
    pods = [pod_meta(UID_A, "lse", qos_class="LSE",
                     annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"0,4"}'}),
            pod_meta(UID_B, "lsr", qos_class="LSR",
                     annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"2-3"}'})]
    s = nrt_status(two_socket_topology(), pods, NodeInfo("n1"), None)
    assert ann(s, "node.koordinator.sh/cpu-shared-pools") == [{"socket": 0, "node": 0, "cpuset": "1,5"},
                                                               {"socket": 1, "node": 1, "cpuset": "6-7"}]
    assert ann(s, "node.koordinator.sh/be-cpu-shared-pools") == [{"socket": 0, "node": 0, "cpuset": "1,5"},
                                                                  {"socket": 1, "node": 1, "cpuset": "2-3,6-7"}]


def test_malformed_resource_status_skips_that_pod_only(caplog):
    pods = [pod_meta(UID_A, "bad", qos_class="LSR",
                     annotations={"scheduling.koordinator.sh/resource-status": "{not json"}),
            pod_meta(UID_B, "good", qos_class="LSR",
                     annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"7"}'})]
    with caplog.at_level(logging.ERROR):
        s = nrt_status(two_socket_topology(), pods, NodeInfo("n1"), None)
    assert ann(s, "node.koordinator.sh/cpu-shared-pools")[1]["cpuset"] == "2-3,6"
    assert "default/bad" in caplog.text and "resource-status" in caplog.text


def test_static_kubelet_policy_reports_reserved_cpus_and_kubelet_pinned_pods():
    state = CPUManagerState("static", (0, 2, 3, 4, 6, 7), {
        UID_K: {"app": (1, 5)},                       # kubelet-pinned, unknown to koordinator
        UID_B: {"app": (3,)},                         # a koordinator LS pod: not kubelet's
        "dddddddd-0000-0000-0000-000000000009": {"x": ()}})   # empty: skipped
    kubelet = KubeletCPUConfig.from_configz({"kubeletconfig": {
        "cpuManagerPolicy": "static", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "kubeReserved": {"cpu": "500m"}, "systemReserved": {"cpu": "1"},
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"}})
    pods = [pod_meta(UID_K, "pinned"), pod_meta(UID_B, "ls", qos_class="LS")]
    s = nrt_status(two_socket_topology(cpu_manager=state), pods, NodeInfo("n1"), kubelet)
    # 1.5 reserved cpus -> 2, taken as one whole core: {0,4}
    assert ann(s, "kubelet.koordinator.sh/cpu-manager-policy") == {
        "policy": "static", "options": {"full-pcpus-only": "true"}, "reservedCPUs": "0,4"}
    assert ann(s, "node.koordinator.sh/pod-cpu-allocs") == [
        {"namespace": "default", "name": "pinned", "uid": UID_K, "cpuset": "1,5", "managedByKubelet": True}]
    # kubelet-pinned CPUs leave both pools; kubelet reserved CPUs do not
    assert ann(s, "node.koordinator.sh/cpu-shared-pools")[0]["cpuset"] == "0,4"
    assert ann(s, "node.koordinator.sh/be-cpu-shared-pools")[0]["cpuset"] == "0,4"
    assert s.topology_policy == "SingleNUMANodePodLevel"


def test_reserved_system_cpus_override_and_none_policy():
    kubelet = KubeletCPUConfig.from_configz({"kubeletconfig": {
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "6-7", "kubeReserved": {"cpu": "3"}}})
    s = nrt_status(two_socket_topology(), [], NodeInfo("n1"), kubelet)
    assert ann(s, "kubelet.koordinator.sh/cpu-manager-policy") == {"policy": "static", "reservedCPUs": "6-7"}
    none = KubeletCPUConfig.from_configz({"kubeletconfig": {"topologyManagerPolicy": "restricted"}})
    s = nrt_status(two_socket_topology(), [], NodeInfo("n1"), none)
    assert ann(s, "kubelet.koordinator.sh/cpu-manager-policy") == {"policy": "none"}
    assert s.topology_policy == "RestrictedContainerLevel"


@pytest.mark.parametrize("doc, problem", [
    ({}, "no kubeletconfig"),
    ({"kubeletconfig": {"cpuManagerPolicy": 3}}, "cpuManagerPolicy"),
    ({"kubeletconfig": {"reservedSystemCPUs": "a-b"}}, "reservedSystemCPUs"),
    ({"kubeletconfig": {"kubeReserved": {"cpu": "lots"}}}, "kubeReserved.cpu"),
])
def test_bad_configz_names_the_field(doc, problem):
    with pytest.raises(ValueError, match=problem):
        KubeletCPUConfig.from_configz(doc)


def test_take_by_topology_takes_numa_nodes_then_cores_then_threads():
    topo = two_socket_topology()
    assert take_by_topology(topo, 1) == [0]
    assert take_by_topology(topo, 2) == [0, 4]
    assert take_by_topology(topo, 3) == [0, 1, 4]
    assert take_by_topology(topo, 5) == [0, 1, 2, 4, 5]     # node 0 whole, then cpu 2 of the next core
    assert take_by_topology(topo, 0) == []


def test_node_reservation_and_system_qos_leave_the_pools():
    node = NodeInfo("n1", annotations={
        "node.koordinator.sh/reservation": '{"resources":{"cpu":"2"},"applyPolicy":"ReservedCPUsOnly"}',
        "node.koordinator.sh/system-qos-resource": '{"cpuset":"7"}'})
    s = nrt_status(two_socket_topology(), [], node, None)
    assert ann(s, "node.koordinator.sh/reservation") == {"resources": {"cpu": "2"}, "reservedCPUs": "0,4",
                                                         "applyPolicy": "ReservedCPUsOnly"}
    assert ann(s, "node.koordinator.sh/system-qos-resource") == {"cpuset": "7"}
    pools = ann(s, "node.koordinator.sh/cpu-shared-pools")
    assert pools == [{"socket": 0, "node": 0, "cpuset": "1,5"}, {"socket": 1, "node": 1, "cpuset": "2-3,6"}]
    # explicit reservedCPUs win over the cpu quantity; non-exclusive system CPUs stay in the pools
    node = NodeInfo("n1", annotations={
        "node.koordinator.sh/reservation": '{"resources":{"cpu":"2"},"reservedCPUs":"3,1-2"}',
        "node.koordinator.sh/system-qos-resource": '{"cpuset":"7","cpusetExclusive":false}'})
    s = nrt_status(two_socket_topology(), [], node, None)
    assert ann(s, "node.koordinator.sh/reservation")["reservedCPUs"] == "1-3"
    assert ann(s, "node.koordinator.sh/be-cpu-shared-pools") == [{"socket": 0, "node": 0, "cpuset": "0,4-5"},
                                                                  {"socket": 1, "node": 1, "cpuset": "6-7"}]


def test_malformed_system_qos_annotation_is_reported_empty_not_fatal(caplog):
    node = NodeInfo("n1", annotations={"node.koordinator.sh/system-qos-resource": "[1,2"})
    with caplog.at_level(logging.ERROR):
        s = nrt_status(two_socket_topology(), [], node, None)
    assert s.annotations["node.koordinator.sh/system-qos-resource"] == "{}"
    assert "system-qos-resource" in caplog.text and "n1" in caplog.text


def test_new_object_and_apply_keep_what_others_wrote():
    node = NodeInfo("n1", uid="node-uid", labels={"node.koordinator.sh/enable-numa-reservation": "true"})
    s = nrt_status(two_socket_topology(), [], node, None)
    created = nrt.new_object(node)
    assert created["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1",
                                                       "uid": "node-uid", "controller": True,
                                                       "blockOwnerDeletion": True}]
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Koordinator"}
    existing = nrt.apply(created, s)
    existing["metadata"]["annotations"]["other.io/x"] = "1"
    existing["zones"][0]["resources"].append({"name": "example.com/fpga", "capacity": "1", "allocatable": "1",
                                              "available": "1"})
    existing["zones"].append({"name": "node-9", "type": "Node", "resources": []})
    assert nrt.difference(existing, s) == "zones"
    node2 = dataclasses.replace(node, labels={})        # the Node lost the label
    s2 = nrt_status(two_socket_topology(), [], node2, None)
    out = nrt.apply(existing, s2)
    assert out["metadata"]["annotations"]["other.io/x"] == "1"
    assert "node.koordinator.sh/enable-numa-reservation" not in out["metadata"]["labels"]
    assert out["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Koordinator"
    assert [z["name"] for z in out["zones"]] == ["node-0", "node-1"]
    assert "example.com/fpga" in [r["name"] for r in out["zones"][0]["resources"]]
    assert nrt.difference(out, s2) == ""


def test_difference_finds_each_managed_change_and_ignores_formatting():
    topo = two_socket_topology()
    s = nrt_status(topo, [], NodeInfo("n1"), None)
    obj = nrt.apply(nrt.new_object(NodeInfo("n1")), s)
    assert nrt.difference(obj, s) == ""
    assert nrt.difference(None, s) == "no object"
    reformatted = json.loads(json.dumps(obj))
    key = "node.koordinator.sh/cpu-shared-pools"
    reformatted["metadata"]["annotations"][key] = json.dumps(json.loads(s.annotations[key]), indent=2)
    reformatted["zones"][0]["resources"][3]["capacity"] = str(16 * GiB)     # same quantity, other spelling
    assert nrt.difference(reformatted, s) == ""
    changed = json.loads(json.dumps(obj))
    changed["metadata"]["annotations"][key] = "[]"
    assert nrt.difference(changed, s) == f"annotation {key}"
    changed = json.loads(json.dumps(obj))
    changed["zones"][1]["resources"][0]["allocatable"] = "3"
    assert nrt.difference(changed, s) == "zone node-1 resources"
    changed = json.loads(json.dumps(obj))
    changed["topologyPolicies"] = ["BestEffortPodLevel"]
    assert nrt.difference(changed, s) == "topologyPolicies"


def test_cpu_less_numa_nodes_memory_only_is_a_zone_gpu_memory_is_not():
    topo = two_socket_topology()
    topo = dataclasses.replace(topo, nodes=topo.nodes + (
        NUMANode(2, (), {"MemTotal": 2**20}, {}), NUMANode(3, (), {"MemTotal": 2**20}, {}, gpu_memory=True)))
    zones = nrt_status(topo, [], NodeInfo("n1"), None).zones
    assert [z["name"] for z in zones] == ["node-0", "node-1", "node-2"]
    assert {r["name"]: r["capacity"] for r in zones[2]["resources"]}["cpu"] == "0"
