"""scheduler.numa (NodeNUMAResource) against koord-scheduler's pkg/scheduler/plugins/nodenumaresource.

Hand-worked cases on small topologies, and cases ported from koord-scheduler's
``pkg/scheduler/plugins/nodenumaresource``: cpu_accumulator_test.go (TestTakeFullPCPUs*, TestTakeSpreadByPCPUs*,
TestTakeCPUsWithExclusivePolicy, TestCPUSpreadByPCPUs), plugin_test.go (TestPlugin_Filter, TestPlugin_Reserve,
TestPlugin_PreBind*, Test_appendResourceSpecIfMissed, TestFilterWithNUMANodeScoring). Upstream's test topology
(buildCPUTopologyForTest) numbers the threads of a core next to each other: core k is CPUs {2k, 2k+1}.
"""

from __future__ import annotations

import json
import logging
from functools import partial

import pytest

from koordlet.base import wire
from koordlet.host.topology import CPU, CPUBasicInfo, NUMANode, Topology
from koordlet.reporters import nrt as nrt_report
from koordlet.states.kubelet import KubeletCPUConfig
from koordlet.states.node import NodeInfo
from koordlet.states.pools import cpu_pools
from scheduler.numa.allocation import _go_position_sort
from scheduler.numa.args import NumaArgs, ScoringStrategy
from scheduler.numa.cpu_accumulator import take_cpus
from scheduler.numa.hints import Hint
from scheduler.numa.names import (
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_SPEC,
    ERR_CPU_BIND_POLICY_CONFLICT,
    ERR_INVALID_CPU_TOPOLOGY,
    ERR_INVALID_REQUESTED_CPUS,
    ERR_MISSING_NUMA_RESOURCES,
    ERR_NOT_ENOUGH_CPUS,
    ERR_NOT_MATCH_NUMA_TOPOLOGY,
    ERR_SMT_ALIGNMENT,
    LABEL_CPU_BIND_POLICY,
    LABEL_NUMA_ALLOCATE_STRATEGY,
    LABEL_NUMA_TOPOLOGY_POLICY,
)
from scheduler.numa.plugin import NodeNUMAResource, NumaResult, Verdict
from scheduler.numa.topology import parse_topology
from scheduler.numa.usage import NumaUsage
from tests.builders import pod_object

GiB = 2**30
STATUS = wire.ANNOTATION_RESOURCE_STATUS


# --- builders -----------------------------------------------------------------------------------------------------

def detail(sockets: int, nodes_per_socket: int, cores_per_node: int, threads: int, *, linux: bool = False) -> list:
    """cpu-topology entries. Default numbering as upstream's buildCPUTopologyForTest (siblings adjacent); ``linux``:
    first threads of every core, then the second threads (siblings i and i + cores)."""
    cores = sockets * nodes_per_socket * cores_per_node
    out = []
    core = node = 0
    for s in range(sockets):
        for _ in range(nodes_per_socket):
            for _ in range(cores_per_node):
                for t in range(threads):
                    cpu = t * cores + core if linux else core * threads + t
                    out.append({"id": cpu, "core": core, "socket": s, "node": node})
                core += 1
            node += 1
    return sorted(out, key=lambda d: d["id"])


def nrt(cpus: list, *, zones: dict | None = None, memory: str = "16Gi", policies: tuple = ("None",),
        annotations: dict | None = None) -> dict:
    """An NRT as the agent writes it: one zone per NUMA node with its logical CPUs and ``memory``."""
    if zones is None:
        per_node: dict[int, int] = {}
        for d in cpus:
            per_node[d["node"]] = per_node.get(d["node"], 0) + 1
        zones = {n: {"cpu": str(c), "memory": memory} for n, c in per_node.items()}
    ann = {wire.ANNOTATION_CPU_TOPOLOGY: json.dumps({"detail": cpus})} if cpus else {}
    ann.update(annotations or {})
    return {"metadata": {"name": "n1", "annotations": ann}, "topologyPolicies": list(policies),
            "zones": [{"name": f"node-{n}", "type": "Node",
                       "resources": [{"name": k, "capacity": v, "allocatable": v, "available": v}
                                     for k, v in sorted(res.items())]} for n, res in sorted(zones.items())]}


def node(labels: dict | None = None, allocatable: dict | None = None) -> dict:
    return {"metadata": {"name": "n1", "labels": labels or {}},
            "status": {"allocatable": allocatable or {"cpu": "32", "memory": "64Gi"}}}


def topology(cpus: list, labels: dict | None = None, **kw):
    topo = parse_topology(nrt(cpus, **kw), node(labels))
    assert topo is not None
    return topo


def asks(cpu: str | None = None, memory: str | None = None) -> dict[str, dict]:
    """The resources of a pod's one container, c, requesting this cpu and memory."""
    return {"c": {"requests": {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}}}


def holding(status: dict | str) -> dict[str, str]:
    """The resource-status annotation of a pod the scheduler assigned this (a string: as it is, malformed on
    purpose)."""
    return {STATUS: status if isinstance(status, str) else json.dumps(status)}


# a pod as the scheduler sees it: metadata (uid and name alike) and a spec, no status; LSR asking for 4 CPUs unless a
# test says otherwise
pod = partial(pod_object, uid="p", name="p", qos_class="LSR", resources=asks(cpu="4"), annotations={}, qos=None,
              phase=None, status_key=False, statuses=False, api_version=False)


def usage(*pods: dict) -> NumaUsage:
    u = NumaUsage()
    for p in pods:
        u.add(p)
    return u


PLUGIN = NodeNUMAResource(NumaArgs())


def allocate(p: dict, topo, u: NumaUsage | None = None, plugin: NodeNUMAResource = PLUGIN, **kw) -> NumaResult:
    result = plugin.allocate(p, topo, u or NumaUsage(), **kw)
    assert isinstance(result, NumaResult), result
    return result


def cpus(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


# --- the CPU accumulator, ported from cpu_accumulator_test.go ----------------------------------------------------

def _take(shape, allocated: str, needed: int, policy: str, strategy: str, exclusive: str = "None",
          allocated_policy: str = "") -> frozenset[int]:
    topo = topology(detail(*shape))
    taken = cpus(allocated) if allocated else frozenset()
    return take_cpus(topo, frozenset(topo.cpus) - taken, dict.fromkeys(taken, allocated_policy), needed, policy,
                     exclusive, strategy)


@pytest.mark.parametrize(("shape", "allocated", "needed", "want"), [
    ((1, 1, 4, 2), "", 2, "0-1"),                   # allocate on non-NUMA node
    ((1, 1, 4, 2), "0-1", 2, "2-3"),                # with allocated cpus
    ((2, 1, 4, 2), "", 8, "0-7"),                   # allocate whole socket
    ((2, 1, 4, 2), "", 12, "0-11"),                 # allocate across socket
    ((2, 1, 4, 2), "0-1", 8, "8-15"),               # whole socket with partially-allocated socket
    ((2, 2, 4, 2), "0-5,16-23", 6, "24-29"),        # in the smallest idle socket
    ((2, 2, 4, 2), "0-5,16-23", 12, "6-15,24-25"),  # the most of CPUs on the same socket
    ((2, 2, 4, 2), "0-3,8-11", 4, "4-7"),           # from first socket
    ((2, 2, 2, 2), "0,2,4,8,12", 4, "10-11,14-15"),  # with less spread cpus
    ((2, 2, 2, 2), "0,2,4,8,10,12", 6, "5-7,13-15"),  # with the most spread cpus
    ((2, 2, 2, 2), "0,2,4,8-10,12", 6, "6-7,11,13-15"),  # most spread cpus on the smallest idle socket
])
def test_take_full_pcpus_most_allocated(shape, allocated, needed, want):
    assert _take(shape, allocated, needed, "FullPCPUs", "MostAllocated") == cpus(want)


@pytest.mark.parametrize(("shape", "allocated", "needed", "want"), [
    ((1, 1, 4, 2), "", 2, "0-1"),
    ((1, 1, 4, 2), "0-1", 2, "2-3"),
    ((2, 1, 4, 2), "", 8, "0-7"),
    ((2, 1, 4, 2), "", 12, "0-11"),
    ((2, 1, 4, 2), "0-1", 8, "8-15"),
    ((2, 2, 4, 2), "0-5,16-23", 6, "8-13"),         # in the most idle socket
    ((2, 2, 4, 2), "0-5,16-23", 12, "6-15,24-25"),
    ((2, 2, 4, 2), "0-3,8-11", 4, "16-19"),         # from second socket
    ((2, 2, 2, 2), "0,2,4,8,12", 4, "10-11,14-15"),
    ((2, 2, 2, 2), "0,2,4,8,10,12", 6, "1,3,6-7,14-15"),
    ((2, 2, 4, 2), "0,2,4,8-10,12", 6, "16-21"),
])
def test_take_full_pcpus_least_allocated(shape, allocated, needed, want):
    assert _take(shape, allocated, needed, "FullPCPUs", "LeastAllocated") == cpus(want)


@pytest.mark.parametrize(("strategy", "allocated", "needed", "want"), [
    ("MostAllocated", "0,2", 4, "1,3-4,6"),         # satisfied the partially-allocated socket
    ("MostAllocated", "0-3", 4, "8,10,12,14"),      # cpus on full-free socket
    ("MostAllocated", "0,2", 6, "1,3-7"),           # most of CPUs in the same socket and overlapped cores
    ("LeastAllocated", "0,2", 4, "8,10,12,14"),
    ("LeastAllocated", "0-3", 4, "8,10,12,14"),
    ("LeastAllocated", "0,2", 6, "8-12,14"),
])
def test_take_spread_by_pcpus(strategy, allocated, needed, want):
    assert _take((2, 1, 4, 2), allocated, needed, "SpreadByPCPUs", strategy) == cpus(want)


def test_take_spread_on_non_numa_node():
    assert _take((1, 1, 4, 2), "", 4, "SpreadByPCPUs", "MostAllocated") == cpus("0,2,4,6")


@pytest.mark.parametrize(("shape", "allocated", "allocated_policy", "bind", "exclusive", "needed", "want"), [
    ((2, 1, 4, 2), "0,2", "PCPULevel", "SpreadByPCPUs", "PCPULevel", 4, "8,10,12,14"),
    ((2, 1, 4, 2), "", "PCPULevel", "SpreadByPCPUs", "PCPULevel", 10, "0-4,6,8,10,12,14"),
    ((2, 1, 8, 2), "0,2", "PCPULevel", "SpreadByPCPUs", "PCPULevel", 4, "4,6,8,10"),
    ((2, 1, 8, 2), "0,2", "PCPULevel", "SpreadByPCPUs", "None", 4, "1,3-4,6"),
    ((2, 1, 4, 2), "0,2", "NUMANodeLevel", "SpreadByPCPUs", "NUMANodeLevel", 4, "8,10,12,14"),
    ((2, 1, 4, 2), "0,2", "NUMANodeLevel", "SpreadByPCPUs", "None", 4, "1,3-4,6"),
    ((2, 1, 4, 2), "0,2", "NUMANodeLevel", "FullPCPUs", "NUMANodeLevel", 4, "8-11"),
    ((2, 1, 4, 2), "0,2", "NUMANodeLevel", "FullPCPUs", "None", 4, "4-7"),
])
def test_take_cpus_with_exclusive_policy(shape, allocated, allocated_policy, bind, exclusive, needed, want):
    assert _take(shape, allocated, needed, bind, "MostAllocated", exclusive, allocated_policy) == cpus(want)


def test_take_cpus_fails_when_too_few_are_free():
    with pytest.raises(Exception, match=ERR_NOT_ENOUGH_CPUS):
        _take((1, 1, 4, 2), "0-3", 6, "FullPCPUs", "MostAllocated")


# --- topology parsing ---------------------------------------------------------------------------------------------

def test_parse_topology_counts_and_reserved_cpus():
    topo = topology(detail(2, 2, 4, 2), annotations={
        wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: json.dumps({"policy": "static", "reservedCPUs": "0-1"}),
        wire.ANNOTATION_POD_CPU_ALLOCS: json.dumps([
            {"namespace": "d", "name": "k", "uid": "u1", "cpuset": "2-3", "managedByKubelet": True},
            {"namespace": "d", "name": "x", "uid": "u2", "cpuset": "8-9"}]),       # not kubelet's: not reserved
        wire.ANNOTATION_NODE_RESERVATION: json.dumps({"reservedCPUs": "4-5"}),
        wire.ANNOTATION_SYSTEM_QOS_RESOURCE: json.dumps({"cpuset": "16", "cpusetExclusive": False})})
    assert (topo.num_sockets, topo.num_nodes, topo.num_cores, len(topo.cpus)) == (2, 4, 16, 32)
    assert (topo.cpus_per_core, topo.cpus_per_node, topo.cpus_per_socket) == (2, 8, 16)
    assert topo.reserved == cpus("0-5")
    assert topo.numa_resources[0]["cpu"].milli == 2000          # 8 CPUs less the 6 reserved there
    assert topo.numa_resources[1]["cpu"].milli == 8000
    assert topo.cpu_bind_policy == "None"                       # static without full-pcpus-only


def test_parse_topology_policies_and_labels():
    assert parse_topology(None, node()) is None
    assert topology([], policies=("SingleNUMANodePodLevel",)).numa_policy == "SingleNUMANode"
    # what koordlet writes for the kubelet's pod-scope restricted policy is not one koord-scheduler recognizes
    assert topology([], policies=("RestrictedPodLevel",)).numa_policy == ""
    assert topology([], {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"}, policies=("BestEffort",)).numa_policy \
        == "Restricted"
    full = topology([], annotations={wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: json.dumps(
        {"policy": "static", "options": {"full-pcpus-only": "true"}})})
    assert full.cpu_bind_policy == "FullPCPUsOnly"


def test_parse_topology_bad_annotation_reads_as_absent(caplog):
    with caplog.at_level(logging.WARNING):
        topo = topology(detail(1, 1, 2, 2), annotations={wire.ANNOTATION_CPU_TOPOLOGY: "{not json"})
    assert not topo.valid
    assert "key=node.koordinator.sh/cpu-topology" in caplog.text
    with caplog.at_level(logging.WARNING):
        assert topology([], {LABEL_NUMA_TOPOLOGY_POLICY: "Bogus"}).numa_policy == ""


def _agent_topology() -> Topology:
    """2 NUMA nodes (one per socket), 2 cores each, 2 threads: siblings {0,4} {1,5} on node 0, {2,6} {3,7} on 1."""
    host_cpus = []
    for c in range(8):
        core = c % 4
        host_cpus.append(CPU(id=c, online=True, node=core // 2, socket=core // 2, core=core,
                             physical_package_id=core // 2, core_id=core % 2, siblings=(core, core + 4)))
    nodes = (NUMANode(0, (0, 1, 4, 5), {"MemTotal": 16 * 2**20}, {}), NUMANode(1, (2, 3, 6, 7),
                                                                              {"MemTotal": 16 * 2**20}, {}))
    return Topology(cpus=tuple(host_cpus), nodes=nodes, packages=(), cores=(), caches=(), online=tuple(range(8)),
                    offline=(), present=tuple(range(8)), possible=tuple(range(8)), numa_from_sysfs=True,
                    basic=CPUBasicInfo(hyper_thread_enabled=True))


def test_the_agents_own_nrt_drives_placement():
    """koordlet's NRT writer -> parse_topology -> a SingleNUMANode FullPCPUs pod, with the kubelet's reserved CPU."""
    host = _agent_topology()
    info = NodeInfo("n1")
    kubelet = KubeletCPUConfig(policy="static", reserved_system_cpus=(0,), topology_manager_policy="single-numa-node",
                               topology_manager_scope="pod")
    obj = nrt_report.apply(nrt_report.new_object(info), nrt_report.build_status(
        host, cpu_pools(host, [], info, kubelet), info, kubelet))
    topo = parse_topology(obj, node())
    assert topo is not None and topo.valid
    assert topo.numa_policy == "SingleNUMANode" and topo.reserved == {0}
    assert topo.numa_resources[0]["cpu"].milli == 3000 and topo.numa_resources[0]["memory"].milli == 16 * GiB * 1000
    result = allocate(pod(resources=asks(cpu="4", memory="1Gi")), topo)
    # node 0 has no 4 whole free cores left (CPU 0 is the kubelet's): the pod goes to node 1, both of its cores
    assert result.affinity == {1} and result.cpuset == cpus("2-3,6-7")
    assert PLUGIN.annotations(pod(), result)[STATUS] == \
        '{"cpuset":"2-3,6-7","numaNodeResources":[{"node":1,"resources":{"cpu":"4","memory":"1Gi"}}]}'


# --- CPU binding (hand-worked, 2 sockets x 2 NUMA x 4 cores x 2 threads = 32 CPUs) -------------------------------

def test_full_pcpus_fit_in_one_numa_node_with_linux_numbering():
    topo = topology(detail(2, 2, 4, 2, linux=True))            # siblings i and i + 16
    result = allocate(pod(), topo)
    assert result.cpuset == cpus("0-1,16-17")                  # two whole cores of NUMA node 0
    assert (result.bind_policy, result.required, result.affinity, dict(result.numa_resources)) == \
        ("FullPCPUs", False, None, {})
    assert PLUGIN.annotations(pod(), result) == {
        STATUS: '{"cpuset":"0-1,16-17"}', ANNOTATION_RESOURCE_SPEC: '{"preferredCPUBindPolicy":"FullPCPUs"}'}


def test_full_pcpus_spread_across_sockets_around_existing_pods():
    topo = topology(detail(2, 2, 4, 2))
    assert allocate(pod(resources=asks(cpu="24")), topo).cpuset == cpus("0-23")
    # socket 0 has 12 free CPUs, socket 1 all 16: socket 1 is taken whole, the rest from socket 0, core by core
    u = usage(pod(uid="a", name="a", annotations=holding({"cpuset": "0-3"}), node="n1"))
    assert allocate(pod(resources=asks(cpu="24")), topo, u).cpuset == cpus("4-11,16-31")


def test_spread_by_pcpus_one_thread_per_core():
    topo = topology(detail(2, 2, 4, 2))
    spec = {ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"SpreadByPCPUs"}'}
    result = allocate(pod(annotations=spec), topo)
    assert result.cpuset == cpus("0,2,4,6") and result.required
    assert ANNOTATION_RESOURCE_SPEC not in PLUGIN.annotations(pod(annotations=spec), result)


def test_smt_alignment_failure():
    topo = topology(detail(2, 2, 4, 2))
    required = {ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"FullPCPUs"}'}
    assert PLUGIN.filter(pod(resources=asks(cpu="3"), annotations=required), topo, NumaUsage()) == \
        Verdict(ERR_SMT_ALIGNMENT, True)
    assert PLUGIN.filter(pod(annotations=required), topo, NumaUsage()) is None
    # preferred FullPCPUs is not checked for alignment
    assert PLUGIN.filter(pod(resources=asks(cpu="3")), topo, NumaUsage()) is None


def test_ls_pods_are_not_pinned_and_non_integer_bind_requests_are_refused():
    topo = topology(detail(2, 2, 4, 2))
    assert PLUGIN.allocate(pod(qos_class="LS"), topo, NumaUsage()) is None
    assert PLUGIN.allocate(pod(labels={wire.LABEL_PRIORITY_CLASS: "koord-batch"}), topo,
                           NumaUsage()) is None
    assert PLUGIN.filter(pod(resources=asks(cpu="1500m")), topo, NumaUsage()) == \
        Verdict(ERR_INVALID_REQUESTED_CPUS, True)
    assert PLUGIN.filter(pod(resources=asks(memory="1Gi")), topo, NumaUsage()) is None


def test_reserved_cpus_are_never_given_and_the_allocate_strategy_label():
    ann = {wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: json.dumps({"policy": "static", "reservedCPUs": "0-1"}),
           wire.ANNOTATION_POD_CPU_ALLOCS: json.dumps([{"uid": "k", "cpuset": "2-3", "managedByKubelet": True}]),
           wire.ANNOTATION_NODE_RESERVATION: json.dumps({"reservedCPUs": "4-5"})}
    # LeastAllocated (default): the NUMA node with the most free CPUs, then the socket with the most
    assert allocate(pod(resources=asks(cpu="2")), topology(detail(2, 2, 4, 2), annotations=ann)).cpuset == cpus("16-17")
    most = topology(detail(2, 2, 4, 2), {LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"}, annotations=ann)
    assert allocate(pod(resources=asks(cpu="2")), most).cpuset == cpus("6-7")


def test_no_nrt_and_invalid_topology():
    assert PLUGIN.filter(pod(), None, NumaUsage()) == Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
    assert PLUGIN.filter(pod(), topology([]), NumaUsage()) == Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
    assert PLUGIN.filter(pod(qos_class="LS"), None, NumaUsage()) is None
    single = {ANNOTATION_NUMA_TOPOLOGY_SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'}
    assert PLUGIN.filter(pod(qos_class="LS", annotations=single), None, NumaUsage()) == \
        Verdict(ERR_MISSING_NUMA_RESOURCES, True)


# --- ported from plugin_test.go TestPlugin_Filter (topology 2 sockets x 1 NUMA x 4 cores x 2 threads) ------------

KUBELET_FULL = {wire.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: json.dumps(
    {"policy": "static", "options": {"full-pcpus-only": "true"}})}
REQUIRED_SPREAD = '{"requiredCPUBindPolicy":"SpreadByPCPUs"}'


@pytest.mark.parametrize(("labels", "annotations", "p", "want"), [
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {}, pod(resources=asks(cpu="5")), Verdict(ERR_SMT_ALIGNMENT, True)),
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {}, pod(resources=asks(cpu="5"), qos_class="LS"),
     Verdict(ERR_SMT_ALIGNMENT, True)),
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {}, pod(resources=asks(cpu="5200m"), qos_class="LS"),
     Verdict(ERR_INVALID_REQUESTED_CPUS, True)),
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {}, pod(), None),
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {},
     pod(annotations={ANNOTATION_RESOURCE_SPEC: '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'}), None),
    ({LABEL_CPU_BIND_POLICY: "SpreadByPCPUs"}, {},
     pod(annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"FullPCPUs"}'}),
     Verdict(ERR_CPU_BIND_POLICY_CONFLICT, True)),
    ({LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"}, {},
     pod(annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"FullPCPUs"}'}), None),
    ({}, KUBELET_FULL, pod(resources=asks(cpu="5")), Verdict(ERR_SMT_ALIGNMENT, True)),
    ({}, KUBELET_FULL, pod(annotations={ANNOTATION_RESOURCE_SPEC: REQUIRED_SPREAD}),
     Verdict(ERR_CPU_BIND_POLICY_CONFLICT, True)),
    ({}, KUBELET_FULL, pod(annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"FullPCPUs"}'}),
     None),
    ({LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"}, {},
     pod(annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":"FullPCPUs"}'}), None),
])
def test_filter_ported(labels, annotations, p, want):
    topo = topology(detail(2, 1, 4, 2), labels, memory="32Gi", annotations=annotations)
    assert PLUGIN.filter(p, topo, NumaUsage()) == want


# --- ported from plugin_test.go TestPlugin_Reserve (zones carry cpu only) -----------------------------------------

def _cpu_zones(shape) -> dict:
    d = detail(*shape)
    return {n: {"cpu": str(sum(1 for c in d if c["node"] == n))} for n in {c["node"] for c in d}}


@pytest.mark.parametrize(("shape", "labels", "allocated", "p", "want"), [
    ((2, 1, 4, 2), {}, "", pod(), "0-3"),
    ((2, 1, 4, 2), {LABEL_CPU_BIND_POLICY: "SpreadByPCPUs"}, "", pod(qos_class="LS"), "0,2,4,6"),
    ((2, 1, 8, 2), {LABEL_NUMA_ALLOCATE_STRATEGY: "LeastAllocated"}, "0-3", pod(), "16-19"),
    ((2, 1, 8, 2), {LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"}, "0-3", pod(), "4-7"),
])
def test_reserve_ported(shape, labels, allocated, p, want):
    topo = topology(detail(*shape), labels, zones=_cpu_zones(shape))
    u = usage(pod(uid="a", name="a", node="n1", annotations=holding({"cpuset": allocated}))) if allocated else \
        NumaUsage()
    assert allocate(p, topo, u).cpuset == cpus(want)


def test_reserve_ported_big_request():
    topo = topology(detail(2, 1, 4, 2), zones=_cpu_zones((2, 1, 4, 2)))
    assert PLUGIN.allocate(pod(resources=asks(cpu="24")), topo, NumaUsage()) == Verdict(ERR_NOT_ENOUGH_CPUS, False)


def test_be_pod_with_batch_resources_is_not_bound():
    topo = topology(detail(2, 1, 4, 2), {LABEL_CPU_BIND_POLICY: "SpreadByPCPUs"})
    be = pod(resources=asks(), qos_class="BE")
    be["spec"]["containers"][0]["resources"]["requests"] = {wire.BATCH_CPU: "4000"}
    assert PLUGIN.allocate(be, topo, NumaUsage()) is None


# --- NUMA policies, hints and their merge ---------------------------------------------------------------------

def test_single_numa_node_rejection_with_upstream_reason():
    topo = topology(detail(1, 2, 4, 2))                         # 2 NUMA nodes of 8 CPUs
    spec = {ANNOTATION_NUMA_TOPOLOGY_SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'}
    too_big = pod(resources=asks(cpu="10", memory="1Gi"), annotations=spec)
    # 10 CPUs need both NUMA nodes: no single-NUMA hint for cpu, and memory only fits where the cpus do
    want = Verdict("Unaligned NUMA Hint cause cpu prefer [11] among [11],memory prefer [11] among [11]", False)
    assert PLUGIN.filter(too_big, topo, NumaUsage()) == want
    assert PLUGIN.allocate(too_big, topo, NumaUsage()) == want
    fits = allocate(pod(resources=asks(cpu="4", memory="1Gi"), annotations=spec), topo)
    assert fits.affinity == {0} and fits.cpuset == cpus("0-3")


def test_numa_policy_mismatch_between_pod_and_node():
    topo = topology(detail(1, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    spec = {ANNOTATION_NUMA_TOPOLOGY_SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'}
    assert PLUGIN.filter(pod(annotations=spec), topo, NumaUsage()) == Verdict(ERR_NOT_MATCH_NUMA_TOPOLOGY, True)


def test_restricted_merge_with_a_device_hint():
    topo = topology(detail(2, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    p = pod(resources=asks(cpu="4", memory="1Gi"))
    assert allocate(p, topo).affinity == {0}                   # every NUMA node alike: the lowest
    gpu = {"gpu": [Hint(frozenset({2}), True, 0), Hint(frozenset({2, 3}), False, 0)]}
    assert PLUGIN.filter(p, topo, NumaUsage(), gpu) is None
    result = allocate(p, topo, extra_hints=gpu)
    assert result.affinity == {2} and result.cpuset == cpus("16-19")
    assert dict(result.numa_resources[2]) == {"cpu": 4000, "memory": GiB}
    assert PLUGIN.annotations(p, result)[STATUS] == \
        '{"cpuset":"16-19","numaNodeResources":[{"node":2,"resources":{"cpu":"4","memory":"1Gi"}}]}'


def test_restricted_rejects_an_unaligned_or_unsatisfiable_device_hint():
    topo = topology(detail(2, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    p = pod(resources=asks(cpu="4", memory="1Gi"))
    only_pair = {"gpu": [Hint(frozenset({2, 3}), False)]}
    verdict = PLUGIN.filter(p, topo, NumaUsage(), only_pair)
    assert isinstance(verdict, Verdict) and not verdict.unresolvable
    assert verdict.reason.startswith("Unaligned NUMA Hint cause cpu prefer [01 10 100 1000 11 ")
    assert " & gpu prefer [] among [1100] & memory prefer [01 10 100 1000 11 " in verdict.reason
    assert PLUGIN.filter(p, topo, NumaUsage(), {"gpu": []}) == Verdict("Unsatisfied NUMA gpu", False)


def test_single_numa_exclusivity_against_pods_spanning_numa_nodes():
    topo = topology(detail(2, 2, 4, 2))
    u = usage(pod(uid="a", name="a", node="n1", annotations=holding({"cpuset": "0-1,8-9"})))  # NUMA 0 and 1 "shared"
    required = pod(resources=asks(cpu="2"),
                   annotations={ANNOTATION_NUMA_TOPOLOGY_SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'})
    result = allocate(required, topo, u)
    assert result.affinity == {2} and result.cpuset == cpus("16-17")
    preferred = pod(resources=asks(cpu="2"), annotations={ANNOTATION_NUMA_TOPOLOGY_SPEC: json.dumps(
        {"numaTopologyPolicy": "SingleNUMANode", "singleNUMANodeExclusive": "Preferred"})})
    result = allocate(preferred, topo, u)
    assert result.affinity == {0} and result.cpuset == cpus("2-3")


def test_single_numa_rejection_by_exclusivity_lists_every_hint():
    topo = topology(detail(1, 2, 4, 2))
    u = usage(pod(uid="a", name="a", node="n1", annotations=holding({"cpuset": "0,8"})))      # both NUMA nodes "shared"
    p = pod(resources=asks(cpu="2"),
            annotations={ANNOTATION_NUMA_TOPOLOGY_SPEC: '{"numaTopologyPolicy":"SingleNUMANode"}'})
    # single-node hints exist but break the required exclusivity; the reason still lists the two-node hint
    assert PLUGIN.filter(p, topo, u) == Verdict("Unaligned NUMA Hint cause cpu prefer [01 10] among [01 10 11]", False)


def test_best_effort_is_admitted_and_falls_back_to_all_numa_nodes():
    topo = topology(detail(1, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "BestEffort"})
    spread = allocate(pod(resources=asks(cpu="10", memory="1Gi"), qos_class="LS"), topo)
    assert spread.affinity == {0, 1} and spread.cpuset == frozenset()
    assert dict(spread.numa_resources) == {0: {"cpu": 5000, "memory": GiB // 2}, 1: {"cpu": 5000, "memory": GiB // 2}}
    # more than the node has: no hint at all; BestEffort still admits at filter, the allocation fails
    assert PLUGIN.filter(pod(resources=asks(cpu="20"), qos_class="LS"), topo, NumaUsage()) is None
    assert PLUGIN.allocate(pod(resources=asks(cpu="20"), qos_class="LS"), topo, NumaUsage()) == \
        Verdict("Insufficient NUMA cpu", False)


def test_existing_pods_cpusets_and_numa_shares_are_excluded():
    topo = topology(detail(2, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"})
    u = usage(pod(uid="a", name="a", node="n1", annotations=holding(
                  {"cpuset": "0-7", "numaNodeResources": [{"node": 0, "resources": {"cpu": "8"}}]})),
              pod(uid="b", name="b", node="n1", annotations=holding(
                  {"cpuset": "8-13", "numaNodeResources": [{"node": 1, "resources": {"cpu": "6"}}]})))
    result = allocate(pod(), topo, u)
    assert result.affinity == {2} and result.cpuset == cpus("16-19")
    u.remove("a")
    assert allocate(pod(), topo, u).cpuset == cpus("0-3")


@pytest.mark.parametrize(("policy", "numa_nodes", "existing", "strategy", "want"), [
    ("SingleNUMANode", 2, {0: "4", 1: "40"}, "MostAllocated", {1}),
    ("SingleNUMANode", 2, {0: "4", 1: "40"}, "LeastAllocated", {0}),
    ("SingleNUMANode", 2, {0: "4", 1: "52"}, "LeastAllocated", {0}),
    ("Restricted", 4, {0: "24", 1: "23", 2: "4", 3: "8"}, "MostAllocated", {3}),
    ("Restricted", 4, {0: "24", 1: "23", 2: "4", 3: "8"}, "LeastAllocated", {2}),
])
def test_filter_with_numa_node_scoring_ported(policy, numa_nodes, existing, strategy, want):
    """TestFilterWithNUMANodeScoring: a 104-CPU, 256Gi node split evenly; existing pods hold NUMA shares only."""
    cores = 104 // 2 // numa_nodes
    zones = {n: {"cpu": str(104 // numa_nodes), "memory": f"{256 // numa_nodes}Gi"} for n in range(numa_nodes)}
    topo = topology(detail(numa_nodes, 1, cores, 2), {LABEL_NUMA_TOPOLOGY_POLICY: policy}, zones=zones)
    u = usage(*(pod(uid=f"e{n}", name=f"e{n}", qos_class=None, node="n1", annotations=holding(
                    {"numaNodeResources": [{"node": n, "resources": {"cpu": c, "memory": "8Gi"}}]}))
                for n, c in existing.items()))
    plugin = NodeNUMAResource(NumaArgs(numa_scoring_strategy=ScoringStrategy(strategy)))
    p = pod(resources=asks(cpu="4", memory="40Gi"), qos_class=None)
    assert plugin.filter(p, topo, u) is None
    assert allocate(p, topo, u, plugin).affinity == want


def test_even_split_keeps_upstreams_position_indexed_order():
    # intended: order NUMA nodes 1 and 2 by their availability (node 2 has less: [2, 1]); upstream compares the
    # availability of NUMA ids 0 and 1 (the positions), which are equal, so it keeps [1, 2]
    assert _go_position_sort([1, 2], [8000, 8000, 2000]) == [1, 2]
    assert _go_position_sort([0, 1], [8000, 2000]) == [1, 0]           # two nodes from 0: as intended
    # three: insertion sort swaps node 2 to position 1, then compares positions 1 and 0 (ids 1 and 0: 9 vs 5) and
    # stops; sorting by availability would give [2, 0, 1]
    assert _go_position_sort([0, 1, 2], [5, 9, 1]) == [0, 2, 1]


# --- scores -----------------------------------------------------------------------------------------------------

def test_score_node_level_without_numa_policy():
    topo = topology(detail(2, 2, 4, 2))
    u = usage(pod(uid="a", name="a", resources=asks(cpu="8", memory="16Gi"), qos_class="LS", node="n1",
                  annotations=holding({})))
    assert PLUGIN.score(pod(resources=asks(cpu="8", memory="16Gi"), qos_class="LS"), node(), topo, u) == 50
    assert PLUGIN.score(pod(resources=asks(cpu="8", memory="16Gi"), qos_class="LS"), node(), None, u) == 50
    most = NodeNUMAResource(NumaArgs(scoring_strategy=ScoringStrategy("MostAllocated")))
    assert most.score(pod(resources=asks(cpu="8", memory="16Gi"), qos_class="LS"), node(), topo, u) == 50
    assert most.score(pod(resources=asks(cpu="16", memory="16Gi"), qos_class="LS"), node(), topo, u) == 62  # (75+50)//2


def test_score_numa_level_uses_the_chosen_numa_nodes():
    topo = topology(detail(2, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "Restricted"})
    # NUMA node 0: 8 CPUs, 16Gi; the pod takes 2 and 2Gi: cpu 75, memory 87 -> 81
    assert PLUGIN.score(pod(resources=asks(cpu="2", memory="2Gi"), qos_class="LS"), node(), topo, NumaUsage()) == 81
    # a pinned pod: requested cpu is every pinned CPU of the node (here 4 already) plus its own 2
    u = usage(pod(uid="a", name="a", annotations=holding({"cpuset": "16-19"}), node="n1"))
    assert PLUGIN.score(pod(resources=asks(cpu="2", memory="2Gi")), node(), topo, u) == (((8 - 6) * 100 // 8) + 87) // 2


# --- annotations -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("request_memory", "zone_memory", "want"), [
    ("8Gi", "16Gi", '"memory":"8Gi"'),                     # the request's BinarySI format
    ("8G", "16Gi", '"memory":"8G"'),                       # the request's DecimalSI format
    ("17179869184", "16Gi", '"memory":"16Gi"'),            # all of the zone: the zone's quantity and format
])
def test_resource_status_quantity_formats(request_memory, zone_memory, want):
    topo = topology(detail(1, 2, 4, 2), {LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"}, memory=zone_memory)
    p = pod(resources=asks(cpu="2", memory=request_memory), qos_class="LS")
    status = PLUGIN.annotations(p, allocate(p, topo))[STATUS]
    assert status == '{"numaNodeResources":[{"node":0,"resources":{"cpu":"2",' + want + '}}]}'


def test_prebind_ported():
    assert PLUGIN.annotations(pod(), NumaResult(cpus("0-3"), {}, "")) == {STATUS: '{"cpuset":"0-3"}'}
    got = PLUGIN.annotations(pod(), NumaResult(cpus("0-3"), {}, "FullPCPUs"))
    assert got == {STATUS: '{"cpuset":"0-3"}', ANNOTATION_RESOURCE_SPEC: '{"preferredCPUBindPolicy":"FullPCPUs"}'}


@pytest.mark.parametrize(("spec", "policy", "required", "want"), [
    ('{"preferredCPUBindPolicy":"SpreadByPCPUs"}', "SpreadByPCPUs", False, None),
    ('{"preferredCPUBindPolicy":"Default"}', "SpreadByPCPUs", False, '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'),
    ('{"requiredCPUBindPolicy":"SpreadByPCPUs"}', "SpreadByPCPUs", True, None),
    ('{"requiredCPUBindPolicy":"SpreadByPCPUs","preferredCPUBindPolicy":"Default"}', "SpreadByPCPUs", True,
     '{"requiredCPUBindPolicy":"SpreadByPCPUs","preferredCPUBindPolicy":"SpreadByPCPUs"}'),
    (('{"requiredCPUBindPolicy":"SpreadByPCPUs","preferredCPUBindPolicy":"Default",'
      '"preferredCPUExclusivePolicy":"PCPULevel"}'), "SpreadByPCPUs", True,
     ('{"requiredCPUBindPolicy":"SpreadByPCPUs","preferredCPUBindPolicy":"SpreadByPCPUs",'
      '"preferredCPUExclusivePolicy":"PCPULevel"}')),
    (None, "FullPCPUs", True, '{"requiredCPUBindPolicy":"FullPCPUs"}'),     # LS pod on a FullPCPUsOnly node
])
def test_append_resource_spec_if_missed_ported(spec, policy, required, want):
    p = pod(annotations={ANNOTATION_RESOURCE_SPEC: spec} if spec else {})
    got = PLUGIN.annotations(p, NumaResult(cpus("0-3"), {}, policy, required))
    assert got.get(ANNOTATION_RESOURCE_SPEC) == want


def test_ls_pod_on_full_pcpus_only_node_gets_its_policy_written():
    topo = topology(detail(2, 1, 4, 2), {LABEL_CPU_BIND_POLICY: "FullPCPUsOnly"})
    p = pod(qos_class="LS")
    result = allocate(p, topo)
    assert result.cpuset == cpus("0-3") and result.required
    assert PLUGIN.annotations(p, result)[ANNOTATION_RESOURCE_SPEC] == '{"requiredCPUBindPolicy":"FullPCPUs"}'


# --- bad input costs only its pod --------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "raw", "problem"), [
    (ANNOTATION_RESOURCE_SPEC, "{not json", "not JSON"),
    (ANNOTATION_RESOURCE_SPEC, '{"requiredCPUBindPolicy":"Fastest"}', "requiredCPUBindPolicy"),
    (ANNOTATION_NUMA_TOPOLOGY_SPEC, '{"numaTopologyPolicy":7}', "numaTopologyPolicy"),
    (ANNOTATION_NUMA_TOPOLOGY_SPEC, "[" * 100, "nested deeper"),
])
def test_bad_pod_annotation_makes_only_that_pod_unresolvable(key, raw, problem):
    topo = topology(detail(2, 2, 4, 2))
    verdict = PLUGIN.filter(pod(annotations={key: raw}), topo, NumaUsage())
    assert isinstance(verdict, Verdict) and verdict.unresolvable
    assert verdict.reason.startswith(key + ": ") and problem in verdict.reason
    assert PLUGIN.score(pod(annotations={key: raw}), node(), topo, NumaUsage()) == 0
    assert PLUGIN.filter(pod(), topo, NumaUsage()) is None


def test_bad_resource_status_of_an_assigned_pod_counts_as_nothing(caplog):
    topo = topology(detail(2, 2, 4, 2), {LABEL_NUMA_ALLOCATE_STRATEGY: "MostAllocated"})
    with caplog.at_level(logging.WARNING):
        u = usage(pod(uid="bad", name="bad", node="n1", annotations=holding("{not json")),
                  pod(uid="good", name="good", node="n1", annotations=holding({"cpuset": "0-3"})),
                  pod(uid="bad-spec", name="bad-spec", node="n1",
                      annotations={**holding({"cpuset": "4-5"}), ANNOTATION_RESOURCE_SPEC: "[]"}))
    assert "uid=bad" in caplog.text and "key=scheduling.koordinator.sh/resource-status" in caplog.text
    assert "uid=bad-spec" in caplog.text
    assert set(u.allocated_cpus()) == cpus("0-5")              # the bad-spec pod keeps its cpuset
    # the fullest NUMA node's last free core
    assert allocate(pod(resources=asks(cpu="2")), topo, u).cpuset == cpus("6-7")


def test_usage_re_add_replaces_and_terminated_pods_leave():
    u = usage(pod(uid="a", name="a", node="n1", annotations=holding(
        {"cpuset": "0-3", "numaNodeResources": [{"node": 0, "resources": {"cpu": "4"}}]})))
    u.add(pod(uid="a", name="a", resources=asks(cpu="2"), annotations=holding({"cpuset": "4-5"}), node="n1"))
    assert set(u.allocated_cpus()) == cpus("4-5")
    assert u.numa_allocated()[0]["cpu"] == 0 and u.requested()["cpu"] == 2000
    done = pod(uid="a", name="a", annotations=holding({"cpuset": "4-5"}), node="n1")
    done["status"] = {"phase": "Succeeded"}
    u.add(done)
    assert not u.allocated_cpus() and u.requested()["cpu"] == 0


# --- configuration ---------------------------------------------------------------------------------------------

def test_args_from_config():
    assert NumaArgs.from_config({}) == NumaArgs()
    args = NumaArgs.from_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeNUMAResourceArgs",
                                 "defaultCPUBindPolicy": "SpreadByPCPUs",
                                 "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu",
                                                                                             "weight": 3}]}})
    assert args.default_cpu_bind_policy == "SpreadByPCPUs"
    assert args.scoring_strategy == ScoringStrategy("MostAllocated", (("cpu", 3),))
    assert args.numa_scoring_strategy == ScoringStrategy()
    for bad, match in (({"defaultCpuBindPolicy": "FullPCPUs"}, "unknown key"),
                       ({"defaultCPUBindPolicy": "Whatever"}, "defaultCPUBindPolicy"),
                       ({"scoringStrategy": {"type": "BalancedAllocation"}}, "not supported"),
                       ({"numaScoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu",
                                                                                          "weight": 0}]}},
                        r"not in valid range"),
                       ({"scoringStrategy": {"type": "LeastAllocated", "extra": 1}}, "unknown key")):
        with pytest.raises(ValueError, match=match):
            NumaArgs.from_config(bad)


def test_default_cpu_bind_policy_empty_means_no_binding():
    topo = topology(detail(2, 2, 4, 2))
    plugin = NodeNUMAResource(NumaArgs(default_cpu_bind_policy=""))
    assert plugin.allocate(pod(), topo, NumaUsage()) is None
    spread = {ANNOTATION_RESOURCE_SPEC: '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'}
    assert allocate(pod(annotations=spread), topo, plugin=plugin).cpuset == cpus("0,2,4,6")
