"""The simulator's input side (scheduler/trace/): the production trace's CSV files, the Node / Device / Pod objects
they stand for, the seeded workload generator and nodes read back from the agent's own reports."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from doubles import fakenvml
from doubles.crdschema import CrdSchemas
from koordlet.base import wire
from koordlet.base.quantity import parse_quantity
from koordlet.cli import main as koordlet_main
from koordlet.host.cgroup import CgroupVersion, Driver
from koordlet.host.nvml import Gpu, GpuInventory, NvLink
from koordlet.ops.config import build
from koordlet.reporters import device as agent_device
from koordlet.states.node import NodeInfo
from scheduler.devices import parse_device
from scheduler.requests import CORE, GPU, RATIO, pod_device_request
from scheduler.trace import agent_reports, cluster, generator, records
from scheduler.trace.generator import Marginals
from scheduler.trace.records import TraceNode, TracePod
from tests.fakehost import FakeHost

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = CrdSchemas.load(REPO_ROOT / "deploy" / "crds")
MiB = 1 << 20

# A few lines of cluster-trace-gpu-v2023 exactly as its CSVs have them (openb_node_list_all_node.csv,
# openb_pod_list_default.csv and openb_pod_list_gpuspec33.csv): a CPU-only node with its empty model, a Pending pod
# without scheduled_time, gpu_spec sets (one with a model twice), a shared GPU, a CPU-only pod and an 8-GPU pod.
TRACE_NODES = """\
sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0022,128000,786432,8,G3
openb-node-0023,96000,786432,8,V100M32
openb-node-0036,104000,524288,2,T4
openb-node-1328,128000,1048576,1,A10
"""
TRACE_PODS = """\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
openb-pod-0009,12000,16384,1,1000,V100M16|V100M32,LS,Running,4975773,12902960,4975773
openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
openb-pod-0021,8000,30517,1,440,G2|P100|T4|V100M16|V100M32,LS,Running,9671707,12902960,9671708
openb-pod-0048,8000,30517,0,0,,BE,Running,9992086,10013821,9992086
openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,
openb-pod-0527,3152,5600,1,1000,V100M16|V100M32|V100M32,BE,Pending,10218024,10218029,
"""


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ============================================================================================ 1. CSV files


def test_the_traces_own_lines_load_and_write_back_unchanged(tmp_path):
    nodes = records.read_nodes(write(tmp_path / "nodes.csv", TRACE_NODES))
    pods = records.read_pods(write(tmp_path / "pods.csv", TRACE_PODS))
    assert nodes[0] == TraceNode("openb-node-0000", 32000, 262144, 0, "")
    assert nodes[1] == TraceNode("openb-node-0022", 128000, 786432, 8, "G3")
    assert [n.gpus for n in nodes] == [0, 8, 8, 2, 1]
    assert pods[1] == TracePod("openb-pod-0001", 6000, 12288, 1, 460, (), "LS", "Running", 427061, 12902960, 427061)
    assert pods[2].gpu_spec == ("V100M16", "V100M32")
    assert pods[3].num_gpu == 8 and pods[3].qos == "Burstable" and pods[3].phase == "Succeeded"
    assert pods[5].num_gpu == 0 and pods[5].gpu_milli == 0
    assert (pods[6].phase, pods[6].deletion_time, pods[6].scheduled_time) == ("Pending", 10001403, None)
    assert pods[7].gpu_spec == ("V100M16", "V100M32", "V100M32")        # kept as written
    records.write_nodes(str(tmp_path / "nodes2.csv"), nodes)
    records.write_pods(str(tmp_path / "pods2.csv"), pods)
    assert (tmp_path / "nodes2.csv").read_text() == TRACE_NODES
    assert (tmp_path / "pods2.csv").read_text() == TRACE_PODS


def test_generated_csvs_round_trip(tmp_path):
    nodes, pods = generator.generate(3, 60, 400, Marginals(gpu_spec_share=0.5))
    records.write_nodes(str(tmp_path / "n.csv"), nodes)
    records.write_pods(str(tmp_path / "p.csv"), pods)
    assert records.read_nodes(str(tmp_path / "n.csv")) == nodes
    assert records.read_pods(str(tmp_path / "p.csv")) == pods
    assert any(p.gpu_spec for p in pods) and any(not n.gpus for n in nodes)


def test_columns_in_another_order_pandas_floats_and_blank_lines_are_read(tmp_path):
    text = ("model,gpu,sn,memory_mib,cpu_milli,rack\n"
            "T4,2,openb-node-0036,524288.0,104000,r1\n\n"
            ",0,openb-node-0000,262144,32000,r2\n")
    assert records.read_nodes(write(tmp_path / "n.csv", text)) == [
        TraceNode("openb-node-0036", 104000, 524288, 2, "T4"), TraceNode("openb-node-0000", 32000, 262144, 0, "")]


@pytest.mark.parametrize("header,row,want", [
    # the multi-GPU and GPU-sharing lists: five columns
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli", "openb-pod-0001,8000,30517,2,1000",
     TracePod("openb-pod-0001", 8000, 30517, 2, 1000, (), "LS", "Pending", 1, None, None)),
    # gpu_spec kept, the times gone
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec", "openb-pod-0001,4000,15258,1,220,T4|G2",
     TracePod("openb-pod-0001", 4000, 15258, 1, 220, ("T4", "G2"), "LS", "Pending", 1, None, None)),
    # the converter's bare minimum: no gpu_milli means whole cards, no memory_mib no memory request
    ("name,cpu_milli,num_gpu", "openb-pod-0001,4000,1", TracePod("openb-pod-0001", 4000, 0, 1, 1000, (), "LS",
                                                                 "Pending", 1, None, None)),
    ("name,cpu_milli,num_gpu", "openb-pod-0001,4000,0", TracePod("openb-pod-0001", 4000, 0, 0, 0, (), "LS",
                                                                 "Pending", 1, None, None)),
])
def test_every_published_pod_column_set_parses_with_its_defaults(tmp_path, header, row, want):
    """A pods CSV lacking optional columns reads as POD_DEFAULTS says; creation_time is the row's position, so a
    second row arrives after the first."""
    first = row.replace("openb-pod-0001", "openb-pod-0000")
    pods = records.read_pods(write(tmp_path / "p.csv", f"{header}\n{first}\n{row}\n"))
    assert pods[1] == want and pods[0].creation_time == 0
    assert set(records.POD_DEFAULTS) == set(records.POD_COLUMNS) - {"name", "cpu_milli", "num_gpu"}


def test_a_pods_csv_without_a_required_column_is_refused(tmp_path):
    with pytest.raises(ValueError, match="the header has no column 'num_gpu'"):
        records.read_pods(write(tmp_path / "p.csv", "name,cpu_milli,memory_mib\nopenb-pod-0001,8000,30517\n"))


POD_HEADER = TRACE_PODS.splitlines()[0]
GOOD_POD = "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061"


@pytest.mark.parametrize("rows,where,problem", [
    (["openb-pod-0001,6k,12288,1,460,,LS,Running,427061,12902960,427061"],
     "line 2, column 2 (cpu_milli)", "'6k' is not an integer"),
    (["openb-pod-0001,6000,12288,2,500,,LS,Running,427061,12902960,427061"],
     "line 2, column 5 (gpu_milli)", "only one GPU can be shared"),
    (["openb-pod-0001,6000,12288,0,300,,LS,Running,427061,12902960,427061"],
     "line 2, column 5 (gpu_milli)", "without GPUs"),
    (["openb-pod-0001,6000,12288,1,0,,LS,Running,427061,12902960,427061"],
     "line 2, column 5 (gpu_milli)", "must be 1..1000"),
    (["openb-pod-0001,6000,12288,-1,0,,LS,Running,427061,12902960,427061"],
     "line 2, column 4 (num_gpu)", "below 0"),
    ([GOOD_POD, "openb-pod-0002,6000,12288,1,460,,LS,Running,427061"],
     "line 3, column 10", "9 cells where the header has 11"),
    ([GOOD_POD, GOOD_POD], "line 3, column 1 (name)", "again (first on line 2)"),
    (["openb-pod-0001,6000,12288,1,460,V100 M16,LS,Running,427061,12902960,427061"],
     "line 2, column 6 (gpu_spec)", "not a label value"),
    (["openb-pod-0001,6000,12288,0,0,T4,LS,Running,427061,12902960,427061"],
     "line 2, column 6 (gpu_spec)", "without GPUs"),
    (["openb-pod-0001,6000,12288,1,460,,LS,,427061,12902960,427061"], "line 2, column 8 (pod_phase)", "empty"),
    (["openb-pod-0001,6000,12288,1,460,,LS,Running,,12902960,427061"],
     "line 2, column 9 (creation_time)", "empty (an integer is due)"),
    (["Openb_Pod,6000,12288,1,460,,LS,Running,427061,12902960,427061"], "line 2, column 1 (name)", "DNS subdomain"),
])
def test_bad_pod_rows_name_the_line_and_column(tmp_path, rows, where, problem):
    path = write(tmp_path / "pods.csv", "\n".join([POD_HEADER, *rows]) + "\n")
    with pytest.raises(ValueError) as e:
        records.read_pods(path)
    assert str(e.value).startswith(f"{path}: {where}: ")
    assert problem in str(e.value)


@pytest.mark.parametrize("text,where,problem", [
    ("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,64000,262144,8,\n", "line 2, column 5 (model)",
     "needs its GPU model"),
    ("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,64000,262144,0,T4\n", "line 2, column 5 (model)",
     "without GPUs"),
    ("gpu,model,sn,cpu_milli,memory_mib\n2,T4,Node_1,64000,262144\n", "line 2, column 3 (sn)", "DNS subdomain"),
    ("sn,cpu_milli,memory_mib,gpus,model\nopenb-node-0001,64000,262144,2,T4\n", "line 1",
     "the header has no column 'gpu'"),
    ("sn,cpu_milli,memory_mib,gpu,model,sn\n", "line 1, column 6", "column 'sn' appears twice"),
    ("", "line 1", "no header row"),
    ("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,64000,262144,2,T4\nopenb-node-0002," + "9" * 200_000,
     "line 3", "not CSV: field larger than field limit"),
])
def test_bad_node_files_name_the_line_and_column(tmp_path, text, where, problem):
    path = write(tmp_path / "nodes.csv", text)
    with pytest.raises(ValueError) as e:
        records.read_nodes(path)
    assert str(e.value).startswith(f"{path}: {where}: ")
    assert problem in str(e.value)


# ============================================================================================ 2. Node and Device


def test_a_cpu_only_node_has_no_device():
    node, device = cluster.node_objects(TraceNode("openb-node-0000", 32000, 262144, 0, ""))
    assert device is None
    assert node["metadata"]["name"] == "openb-node-0000"
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "openb-node-0000"}
    assert node["status"]["allocatable"] == {"cpu": "32", "memory": "256Gi", "pods": "110"}
    assert node["status"]["capacity"] == node["status"]["allocatable"]


@pytest.mark.parametrize("model", sorted(cluster.PROFILES))
@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_every_profile_gives_a_valid_device_the_scheduler_reads(model, gpus):
    profile = cluster.model_profile(model)
    node, device = cluster.node_objects(TraceNode("n-1", 96000, 393216, gpus, model))
    assert device is not None
    assert SCHEMAS.validate(device) == []
    assert node["status"]["allocatable"][wire.WHOLE_GPU_RESOURCES[0]] == str(gpus)
    assert node["metadata"]["labels"][wire.LABEL_GPU_MODEL] == model
    assert device["metadata"]["labels"] == {wire.LABEL_GPU_VENDOR: "nvidia", wire.LABEL_GPU_MODEL: model,
                                            wire.LABEL_GPU_PARTITION_POLICY: "Prefer"}
    entries = device["spec"]["devices"]
    assert [d["minor"] for d in entries] == list(range(gpus))
    assert len({d["id"] for d in entries}) == gpus and len({d["topology"]["busID"] for d in entries}) == gpus
    assert {parse_quantity(d["resources"][wire.RESOURCE_GPU_MEMORY]) for d in entries} == {profile.memory_bytes}
    inventory = parse_device(device, node)
    assert sorted(inventory.total(GPU)) == list(range(gpus))
    assert inventory.partitions is not None and set(inventory.partitions) == {n for n in (1, 2, 4, 8) if n <= gpus}
    assert inventory.gpu_scopes is not None
    switches = [scope.minors for numa in inventory.gpu_scopes.children for scope in numa.children]
    assert switches == [tuple(range(i, min(i + profile.per_pcie_switch, gpus)))
                        for i in range(0, gpus, profile.per_pcie_switch)]
    assert [numa.minors for numa in inventory.gpu_scopes.children] == [
        tuple(range(i, min(i + profile.per_numa, gpus))) for i in range(0, gpus, profile.per_numa)]


# DGX-1V as `nvidia-smi topo -m` prints its NVLinks (NV<n> = n links); the PCIe layout: GPUs 2k and 2k+1 share a
# PCIe switch, 0-3 and 4-7 a NUMA node.
DGX1V_TOPO = """\
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
GPU0   X   NV1  NV1  NV2  NV2  SYS  SYS  SYS
GPU1  NV1   X   NV2  NV1  SYS  NV2  SYS  SYS
GPU2  NV1  NV2   X   NV2  SYS  SYS  NV1  SYS
GPU3  NV2  NV1  NV2   X   SYS  SYS  SYS  NV1
GPU4  NV2  SYS  SYS  SYS   X   NV1  NV1  NV2
GPU5  SYS  NV2  SYS  SYS  NV1   X   NV2  NV1
GPU6  SYS  SYS  NV1  SYS  NV1  NV2   X   NV2
GPU7  SYS  SYS  SYS  NV1  NV2  NV1  NV2   X
"""


def dgx1v_inventory(device: dict[str, Any]) -> GpuInventory:
    """What NVML would tell the agent on a DGX-1V whose cards have the bus ids, roots and NUMA nodes of ``device``."""
    entries = device["spec"]["devices"]
    bus = [d["topology"]["busID"] for d in entries]
    rows = [line.split()[1:] for line in DGX1V_TOPO.splitlines()[1:]]
    gpus = []
    for d in entries:
        minor = d["minor"]
        peers = [peer for peer, cell in enumerate(rows[minor]) if cell.startswith("NV") for _ in range(int(cell[2:]))]
        gpus.append(Gpu(minor, minor, d["id"], "Tesla V100-SXM2-16GB", 16160 * MiB, bus[minor],
                        d["topology"]["nodeID"], d["topology"]["pcieID"],
                        nvlinks=tuple(NvLink(i, bus[peer], "gpu", 2) for i, peer in enumerate(peers))))
    levels = {frozenset((bus[a], bus[b])): 10 if a // 2 == b // 2 else 40 if a // 4 == b // 4 else 50
              for a in range(8) for b in range(a + 1, 8)}
    return GpuInventory(tuple(gpus), "535.104.05", "12.2", ("Tesla V100-SXM2-16GB",) * 8, levels)


def test_an_nvlink_board_gets_the_agents_own_partition_table():
    """The 8×V100 Device is what the agent's reporter writes for a DGX-1V: same devices, same partition table."""
    _, device = cluster.node_objects(TraceNode("v100-node", 96000, 786432, 8, "V100M16"))
    assert device is not None
    agent = agent_device.desired(NodeInfo("v100-node"), dgx1v_inventory(device), lambda bus: None, [], "Prefer", 0.0)
    assert device["spec"] == agent["spec"]
    assert device["metadata"]["annotations"] == agent["metadata"]["annotations"]
    table = json.loads(device["metadata"]["annotations"][wire.ANNOTATION_GPU_PARTITIONS])
    assert [p["minors"] for p in table["4"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]            # the two fully linked quads
    assert [p["minors"] for p in table["2"]] == [[0, 3], [1, 2], [4, 7], [5, 6]]        # the double links
    assert {p["gpuLinkType"] for size in table.values() for p in size} == {"NVLink"}
    assert table["8"][0]["ringBusBandwidth"] == "50G"                  # 8-card ring over double links: 2 × 25 GB/s


def test_partition_policy_is_the_agents_option():
    node = TraceNode("h-1", 192000, 2097152, 8, "H100")
    _, none = cluster.node_objects(node, partition_policy="none")
    assert none is not None and "annotations" not in none["metadata"]
    assert wire.LABEL_GPU_PARTITION_POLICY not in none["metadata"]["labels"]
    _, honor = cluster.node_objects(node, partition_policy="Honor")
    assert honor is not None and honor["metadata"]["labels"][wire.LABEL_GPU_PARTITION_POLICY] == "Honor"
    table = json.loads(honor["metadata"]["annotations"][wire.ANNOTATION_GPU_PARTITIONS])
    assert [[p["minors"] for p in table[k]] for k in ("2", "4", "8")] == [
        [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2, 3], [4, 5, 6, 7]], [list(range(8))]]   # the Hopper table
    assert {p["ringBusBandwidth"] for size in table.values() for p in size} == {"450G"}
    assert parse_device(honor).honor_partitions
    with pytest.raises(ValueError, match="partition policy 'Strict'"):
        cluster.node_objects(node, partition_policy="Strict")


def test_an_unknown_model_gets_the_default_profile_logged_once(caplog):
    caplog.set_level(logging.WARNING, logger="scheduler.trace")
    for _ in range(3):
        profile = cluster.model_profile("L40S-test")
    assert profile == cluster.GpuModel("L40S-test", 16 << 30, 2, 4, "PCIe")
    assert [r.getMessage() for r in caplog.records].count(
        "gpu model unknown model=L40S-test; using the default profile link=PCIe memory=16Gi per_switch=2 "
        "per_numa=4") == 1


@pytest.mark.parametrize("args,problem", [
    (("X", 1, 2, 4, "InfiniBand"), "is not NVLink, NVSwitch or PCIe"),
    (("X", 1, 4, 2, "PCIe"), "a NUMA node holds whole PCIe switches"),
    (("X", 1, 2, 0, "PCIe"), "a NUMA node holds whole PCIe switches"),
    (("X", 1, 2, 4, "NVSwitch"), "switch_links go with the NVSwitch"),
    (("X", 1, 2, 4, "PCIe", 0, 2), "an NVLink generation goes with NVLink and NVSwitch only"),
    (("X", 1, 2, 4, "NVLink"), "an NVLink generation goes with NVLink and NVSwitch only"),
])
def test_inconsistent_profiles_are_refused(args, problem):
    with pytest.raises(ValueError, match=problem):
        cluster.GpuModel(*args)


# ============================================================================================ 3. Pods


def pod(num_gpu: int, gpu_milli: int, spec: tuple[str, ...] = (), name: str = "p-1") -> TracePod:
    return TracePod(name, 12500, 16384, num_gpu, gpu_milli, spec, "LS", "Pending", 0, None, None)


@pytest.mark.parametrize("num_gpu,gpu_milli,whole,want,count,per_gpu", [
    (0, 0, False, {}, 0, None),
    (1, 1000, False, {"nvidia.com/gpu": "1"}, 1, {CORE: 100, RATIO: 100}),
    (1, 460, False, {CORE: "46", RATIO: "46"}, 1, {CORE: 46, RATIO: 46}),
    (1, 455, False, {CORE: "46", RATIO: "46"}, 1, {CORE: 46, RATIO: 46}),       # rounded up: never less than asked
    (1, 5, False, {CORE: "1", RATIO: "1"}, 1, {CORE: 1, RATIO: 1}),
    (4, 1000, False, {"nvidia.com/gpu": "4"}, 4, {CORE: 100, RATIO: 100}),
    (8, 1000, False, {"nvidia.com/gpu": "8"}, 8, {CORE: 100, RATIO: 100}),
    (0, 0, True, {}, 0, None),
    (1, 460, True, {"nvidia.com/gpu": "1"}, 1, {CORE: 100, RATIO: 100}),        # kube's default: a whole card
    (2, 1000, True, {"nvidia.com/gpu": "2"}, 2, {CORE: 100, RATIO: 100}),
])
def test_pod_requests_are_what_the_extender_accepts(num_gpu, gpu_milli, whole, want, count, per_gpu):
    obj = cluster.pod_object(pod(num_gpu, gpu_milli), whole_gpus=whole)
    (container,) = obj["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "12500m", "memory": "16Gi", **want}
    assert container["resources"]["limits"] == container["resources"]["requests"]
    assert obj["spec"]["schedulerName"] == "koord-companion" and obj["metadata"]["namespace"] == "default"
    assert obj["status"]["phase"] == "Pending" and "nodeName" not in obj["spec"]
    request = pod_device_request(obj)
    if not count:
        assert not request
        return
    assert request.gpu is not None
    assert (request.gpu.count, dict(request.gpu.per_gpu)) == (count, per_gpu)
    assert request.gpu.shared == (per_gpu[RATIO] < 100)


def test_gpu_request_milli():
    assert [cluster.gpu_request_milli(pod(n, m)) for n, m in ((0, 0), (1, 460), (1, 1000), (8, 1000))] == [
        0, 460, 1000, 8000]


def test_gpu_spec_is_a_required_node_affinity_and_uids_are_unique_and_stable():
    obj = cluster.pod_object(pod(1, 1000, ("V100M16", "V100M32", "V100M32")))
    terms = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "node.koordinator.sh/gpu-model", "operator": "In", "values": ["V100M16", "V100M32"]}]}]}
    assert "affinity" not in cluster.pod_object(pod(1, 1000))["spec"]
    _, pods = generator.generate(5, 20, 500)
    uids = [cluster.pod_object(p)["metadata"]["uid"] for p in pods]
    assert len(set(uids)) == len(pods)
    assert uids == [cluster.pod_object(p, whole_gpus=True)["metadata"]["uid"] for p in pods]


# ============================================================================================ 4. The generator


def test_the_generator_is_deterministic_per_seed():
    first = generator.generate(11, 300, 2000)
    assert generator.generate(11, 300, 2000) == first
    assert generator.generate(12, 300, 2000) != first
    nodes, pods = first
    assert [n.name for n in nodes[:2]] == ["openb-node-0000", "openb-node-0001"]
    assert [p.name for p in pods[:2]] == ["openb-pod-0000", "openb-pod-0001"]
    times = [p.creation_time for p in pods]
    assert times[0] == 0 and all(a < b for a, b in itertools.pairwise(times))
    assert all(p.deletion_time is not None and p.deletion_time > p.creation_time for p in pods)
    assert {(p.phase, p.scheduled_time) for p in pods} == {("Pending", None)}


def test_the_trace_sized_cluster_is_the_traces_population():
    nodes, _ = generator.generate(1, 1523, 0)
    want = Counter({(s.model, s.gpus, s.cpu_milli, s.memory_mib): w
                    for s, w in generator.TRACE_GPU_NODES + generator.TRACE_CPU_NODES})
    assert Counter((n.model, n.gpus, n.cpu_milli, n.memory_mib) for n in nodes) == want
    assert sum(n.gpus for n in nodes) == 6212 and sum(1 for n in nodes if not n.gpus) == 310


def within(observed: float, p: float, n: int) -> bool:
    """An observed share of n draws lies within 4 standard deviations of the share p."""
    return abs(observed - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_marginals_hold_over_10000_pods():
    m = Marginals(gpu_spec_share=0.338)
    _, pods = generator.generate(2023, 1523, 10_000, m)
    n = len(pods)
    kinds, shares = m.pod_kinds()
    total = sum(shares)

    def kind(p: TracePod) -> int:
        return -1 if p.num_gpu == 1 and p.gpu_milli < 1000 else p.num_gpu

    observed = Counter(kind(p) for p in pods)
    assert set(observed) <= set(kinds)
    for k, share in zip(kinds, shares, strict=True):
        assert within(observed[k] / n, share / total, n), (k, observed[k], share)

    shared = [p.gpu_milli for p in pods if kind(p) == -1]
    weight = sum(w for _, w in m.share_milli)
    counts = Counter(shared)
    for value, w in m.share_milli:
        assert within(counts[value] / len(shared), w / weight, len(shared)), value
    assert set(counts) <= {v for v, _ in m.share_milli}

    whole = [p for p in pods if kind(p) == 1]
    cpu = [p.cpu_milli for p in whole]
    weight = sum(w for _, w in m.whole_pod_shapes)
    mean = sum(s.cpu_milli * w for s, w in m.whole_pod_shapes) / weight
    sd = math.sqrt(sum((s.cpu_milli - mean) ** 2 * w for s, w in m.whole_pod_shapes) / weight)
    assert abs(sum(cpu) / len(cpu) - mean) <= 4 * sd / math.sqrt(len(cpu))
    multi = [p for p in pods if p.num_gpu > 1]
    per_gpu = {(s.cpu_milli, s.memory_mib) for s, _ in m.multi_gpu_pod_shapes}
    assert multi and all((p.cpu_milli // p.num_gpu, p.memory_mib // p.num_gpu) in per_gpu for p in multi)

    gpu_pods = [p for p in pods if p.num_gpu]
    with_spec = [p for p in gpu_pods if p.gpu_spec]
    assert within(len(with_spec) / len(gpu_pods), 0.338, len(gpu_pods))
    assert {p.gpu_spec for p in with_spec} <= {s for _, _, table in m.gpu_specs for s, _ in table}
    assert not any(p.gpu_spec for p in pods if not p.num_gpu)
    qos = Counter(p.qos for p in pods)
    weight = sum(w for _, w in m.qos)
    assert all(within(qos[name] / n, w / weight, n) for name, w in m.qos)


def test_pinned_models_follow_the_pod_kind_as_in_the_gpuspec33_list():
    """openb_pod_list_gpuspec33 pins by kind: 884 of 3,078 GPU shares (593 T4, 278 P100, 13 a five-model set, never
    G2 alone), 1,476 of 3,911 one-GPU pods (698 T4, 321 G2, ...). The generator keeps that, not one table for all."""
    _, pods = generator.generate(11, 1213, 20_000, Marginals(cpu_node_share=0.0, gpu_spec_share=2388 / 7064))
    shares = [p for p in pods if p.num_gpu == 1 and p.gpu_milli < 1000]
    whole = [p for p in pods if p.num_gpu == 1 and p.gpu_milli == 1000]
    pinned_shares = [p.gpu_spec for p in shares if p.gpu_spec]
    pinned_whole = [p.gpu_spec for p in whole if p.gpu_spec]
    assert within(len(pinned_shares) / len(shares), 884 / 3078, len(shares))
    assert within(len(pinned_whole) / len(whole), 1476 / 3911, len(whole))
    assert set(pinned_shares) == {("T4",), ("P100",), ("G2", "P100", "T4", "V100M16", "V100M32")}
    assert within(pinned_shares.count(("P100",)) / len(pinned_shares), 278 / 884, len(pinned_shares))
    assert within(pinned_whole.count(("G2",)) / len(pinned_whole), 321 / 1476, len(pinned_whole))
    assert within(pinned_whole.count(("P100",)) / len(pinned_whole), 1 / 1476, len(pinned_whole))
    gpu_pods = [p for p in pods if p.num_gpu]
    assert within(sum(1 for p in gpu_pods if p.gpu_spec) / len(gpu_pods), 2388 / 7064, len(gpu_pods))
    m = Marginals(gpu_spec_share=2388 / 7064)
    assert [m.spec_chance(k) for k in (-1, 1, 8)] == pytest.approx([884 / 3078, 1476 / 3911, 28 / 75])
    assert Marginals(gpu_spec_share=0.0).spec_chance(-1) == 0.0 and Marginals(gpu_spec_share=1.0).spec_chance(-1) == 1.0


@pytest.mark.parametrize("kw,kind,share", [
    ({"share_gpu": 1.0}, "share", 1.0),          # openb_pod_list_gpushare100: every GPU pod a share
    ({"share_gpu": 0.6}, "share", 0.6),
    ({"multi_gpu": 0.5}, "multi", 0.5),          # openb_pod_list_multigpu50
])
def test_the_published_workload_variants_ask_their_share_of_gpu_requests(kw, kind, share):
    """The emphasized kind asks its share of all GPU requests (within the sampling error of 10,000 pods); CPU-only
    pods keep their share of pods and the other GPU kinds their proportions among themselves."""
    base = Marginals(cpu_node_share=0.0)
    m = base.emphasize(**kw)
    _, pods = generator.generate(7, 1213, 10_000, m)

    def kind_of(p: TracePod) -> str:
        return "share" if p.num_gpu == 1 and p.gpu_milli < 1000 else "multi" if p.num_gpu > 1 else "whole"

    asked = Counter()
    for p in pods:
        if p.num_gpu:
            asked[kind_of(p)] += cluster.gpu_request_milli(p)
    assert abs(asked[kind] / sum(asked.values()) - share) < 0.03, asked
    assert m.cpu_pod_share == base.cpu_pod_share
    assert sum(m.pod_kinds()[1]) == pytest.approx(sum(base.pod_kinds()[1]))
    if kind == "multi":
        assert m.share_pod_share / m.whole_pod_share == pytest.approx(base.share_pod_share / base.whole_pod_share)
    assert base.emphasize(gpu_spec=0.33).gpu_spec_share == 0.33


@pytest.mark.parametrize("kw", [{"share_gpu": 1.5}, {"share_gpu": 0.7, "multi_gpu": 0.5}])
def test_impossible_workload_variants_are_refused(kw):
    with pytest.raises(ValueError, match="shares of GPU requests"):
        Marginals().emphasize(**kw)


def test_every_generated_pod_fits_an_empty_node_even_on_a_tiny_cluster():
    nodes, pods = generator.generate(9, 4, 2000, Marginals(gpu_spec_share=1.0))
    for p in pods:
        assert any(n.gpus >= p.num_gpu and n.cpu_milli >= p.cpu_milli and n.memory_mib >= p.memory_mib
                   and (not p.gpu_spec or n.model in p.gpu_spec) for n in nodes), p
    assert all(p.gpu_spec for p in pods if p.num_gpu)


@pytest.mark.parametrize("bad,field", [
    ({"cpu_node_share": 1.5}, "cpu_node_share"),
    ({"share_milli": ((1000, 1.0),)}, "share_milli"),
    ({"multi_gpu_pod_shares": ((1, 1.0),)}, "multi_gpu_pod_shares"),
    ({"qos": (("LS", -1.0),)}, "qos"),
    ({"gpu_specs": (("share", 10, ((("T4",), 1.0),)),)}, "gpu_specs"),
    ({"gpu_specs": (("share", 1, ((("T4",), 2.0),)), ("whole", 1, ()), ("multi", 1, ()))}, "gpu_specs"),
    ({"cpu_pod_share": 0, "share_pod_share": 0, "whole_pod_share": 0, "multi_gpu_pod_shares": ()}, "pod kind"),
])
def test_bad_marginals_are_refused(bad, field):
    with pytest.raises(ValueError, match=field):
        Marginals(**bad)


# ============================================================================================ 5. The agent's reports


def agent_flags(host: FakeHost) -> list[str]:
    return ["--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", host.paths.proc_root,
            "--sys-root-dir", host.paths.sys_root, "--sys-fs-root-dir", host.paths.sys_fs_root]


def fake_host(tmp_path: Path, node: str) -> FakeHost:
    """A host of 2 NUMA nodes: 4 + 2 CPUs, 3 + 1 GiB."""
    host = FakeHost(str(tmp_path / f"host-{node}"), CgroupVersion.V2, Driver.SYSTEMD)
    host.set_numa({0: [0, 1, 2, 3], 1: [4, 5]})
    host.set_node_meminfo(0, total_kb=3 << 20, free_kb=3 << 20)
    return host


def agent_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, output: str, gpus: bool) -> str:
    """`koordlet report --once -o <output> --node-name <node>` on a fake host with 8 H100s or no GPU driver; the
    printed text."""
    host = fake_host(tmp_path, node)
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.h100_sxm8(host.paths) if gpus else fakenvml.absent())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert koordlet_main(["report", "--once", "--standalone", "--node-name", node, "-o", output,
                              "--collect-res-used-interval", "0.1"] + agent_flags(host)) == 0
    return out.getvalue()


def test_nodes_from_the_agents_own_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "gpu-a.yaml").write_text(agent_report(tmp_path, monkeypatch, "gpu-a", "yaml", gpus=True))
    (reports / "cpu-b.json").write_text(agent_report(tmp_path, monkeypatch, "cpu-b", "json", gpus=False))
    # and one node through the standalone sink, which writes one file per object into its report-dir
    from koordlet.agent import Agent
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.absent())
    host = fake_host(tmp_path, "n9")
    config = build(environ={}, flags={
        "standalone": True, "node-name": "n9", "report-dir": str(reports / "n9"), "reconcile-interval-seconds": 0,
        "cgroup-root-dir": host.paths.cgroup_root, "proc-root-dir": host.paths.proc_root,
        "sys-root-dir": host.paths.sys_root, "sys-fs-root-dir": host.paths.sys_fs_root})
    agent = Agent.build(config, persist=False)
    agent.informer.sync()
    agent.collect_once()
    agent.write_reports()
    assert sorted(p.name for p in (reports / "n9").iterdir()) == [
        "device.yaml", "nodemetric.yaml", "noderesourcetopology.yaml"]

    nodes = agent_reports.read_report_dir(str(reports))
    assert [n["metadata"]["name"] for n, _ in nodes] == ["cpu-b", "gpu-a", "n9"]
    (cpu_node, cpu_device), (gpu_node, gpu_device), (n9, _) = nodes

    reported = list(yaml.safe_load_all((reports / "gpu-a.yaml").read_text()))
    assert gpu_device == next(o for o in reported if o["kind"] == "Device")
    assert gpu_node["status"]["allocatable"] == {"cpu": "6", "memory": "4Gi", "pods": "110", "nvidia.com/gpu": "8"}
    assert gpu_node["status"]["capacity"] == gpu_node["status"]["allocatable"]
    assert gpu_node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "gpu-a", "node.koordinator.sh/gpu-vendor": "nvidia",
        "node.koordinator.sh/gpu-model": "H100-80GB-HBM3", "node.koordinator.sh/gpu-driver-version": "550.54.15"}
    inventory = parse_device(gpu_device, gpu_node)
    assert sorted(inventory.total(GPU)) == list(range(8)) and inventory.partitions is not None

    assert cpu_device is not None and cpu_device["spec"] == {}          # the agent reports an empty Device
    assert cpu_node["status"]["allocatable"] == {"cpu": "6", "memory": "4Gi", "pods": "110"}
    assert cpu_node["metadata"]["labels"] == {"kubernetes.io/hostname": "cpu-b"}
    assert n9["status"]["allocatable"] == {"cpu": "6", "memory": "4Gi", "pods": "110"}


def nrt(name: str, cpu: str = "8", memory: str = "32Gi") -> dict[str, Any]:
    return {"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology", "metadata": {"name": name},
            "zones": [{"name": "node-0", "type": "Node", "resources": [
                {"name": "cpu", "capacity": cpu, "allocatable": cpu, "available": cpu},
                {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory}]}]}


@pytest.mark.parametrize("files,problem", [
    ({"a.yaml": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}]}, "not an object the agent reports"),
    ({"a.yaml": [nrt("a")], "b.yaml": [nrt("a")]}, "a second NodeResourceTopology for node a"),
    ({"a.yaml": [{"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device", "metadata": {"name": "a"},
                  "spec": {}}]}, "node a has no NodeResourceTopology"),
    ({"a.yaml": [nrt("a", cpu="eight")]}, "zone node-0 cpu"),
    ({"a.yaml": [{**nrt("a"), "metadata": {}}]}, "NodeResourceTopology without metadata.name"),
])
def test_bad_report_directories_are_refused_by_name(tmp_path, files, problem):
    for name, docs in files.items():
        (tmp_path / name).write_text(yaml.safe_dump_all(docs))
    with pytest.raises(ValueError, match=problem):
        agent_reports.read_report_dir(str(tmp_path))


def test_report_files_in_the_agents_formats_with_other_files_around(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [nrt("b")]}))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([nrt("a", cpu="3500m", memory="1Gi")]))
    (tmp_path / ".a.yaml.tmp123").write_text("half a report")
    (tmp_path / "notes.txt").write_text("not a report")
    nodes = agent_reports.read_report_dir(str(tmp_path))
    assert [(n["metadata"]["name"], n["status"]["allocatable"]["cpu"], n["status"]["allocatable"]["memory"], d)
            for n, d in nodes] == [("a", "3500m", "1Gi", None), ("b", "8", "32Gi", None)]
