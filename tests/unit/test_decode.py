"""koordlet.states.decode (the one annotation decoder), the bounded parsers under it, and what a hostile annotation
costs: only that part of that pod, in the reconciler's strategies and in the NRI hooks alike."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordlet.base import quantity, wire
from koordlet.base.quantity import MAX_EXPONENT, parse_quantity
from koordlet.host.cgroup import MAX_CPUS, parse_cpu_list
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos import blkio, cpu_burst, cpu_suppress, memory_qos
from koordlet.qos import evict_victims as evict
from koordlet.qos.cpu_qos import CPUQOS
from koordlet.qos.net_qos.config import pod_limits
from koordlet.qos.pod_resources import PodResources
from koordlet.qos.reconciler import Reconciler
from koordlet.qos.resctrl.annotation import parse_pod_resctrl
from koordlet.rules import cpu_qos, oom
from koordlet.states import decode
from koordlet.states.decode import MAX_BYTES, MAX_DEPTH, DecodeError
from koordlet.states.deviceallocation import parse_device_allocated
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.pod import extended_resource_spec
from koordlet.states.pod import resource_status as pod_resource_status
from koordlet.writer.executor import Executor
from nri_plugin.hooks import Hooks
from tests.budget import within_budget
from tests.builders import agent_pod, node_view, pod_meta
from tests.hookfeatures import hook_features
from tests.unit.test_nri_hooks import POOLS, be_spec, container, hooks, sandbox
from tests.unit.test_nri_hooks import resources as adjusted
from tests.unit.test_qos_rules import ALL_ON, BATCH, slo
from tests.unit.test_qos_strategies import build, fake_host, mkcg, value

STATUS = wire.ANNOTATION_RESOURCE_STATUS
DEEP = "[" * 5000                                   # json.loads alone raises RecursionError on this
NUMA_INT = '{"numaNodeResources":5}'                # a TypeError deep in the old resource-status parser

# every input here once broke a parser (exception other than ValueError) or cost seconds
HOSTILE = {
    "deep-list": DEEP,
    "deep-object": '{"a":' * 5000 + "1" + "}" * 5000,
    "deep-in-field": '{"numaNodeResources":' + "[" * 3000 + "]" * 3000 + "}",
    "numa-int": NUMA_INT,
    "numa-str-entries": '{"numaNodeResources":"abc"}',
    "numa-node-bool": '{"numaNodeResources":[{"node":true}]}',
    "numa-resources-list": '{"numaNodeResources":[{"node":0,"resources":[1]}]}',
    "huge-exponent": '{"numaNodeResources":[{"node":0,"resources":{"cpu":"1e10000000"}}]}',
    "huge-cpu-range": '{"cpuset":"0-20000000"}',
    "oversize": '"' + "a" * (MAX_BYTES + 10) + '"',
    "nan": '{"enable": NaN}',
    "long-int": "1" * 5000,
    "not-json": "{oops",
    "scalar": "5",
}


# the pod every parser is handed its annotation on; the isolation tests' pods are reported before a phase
mkpod = partial(agent_pod, "u-1", "p", namespace="ns", qos_class="LS")
pod = partial(agent_pod, namespace="ns", phase=None)
C0 = f"{0:064x}"                           # container id


RULE = cpu_qos.cpu_qos_rule(slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON))
NODE_BURST = merge_node_slo_spec(None)[0].cpu_burst
QOS_STRATEGY = merge_node_slo_spec(None)[0].resource_qos

# every annotation parser: (annotation key, call with the raw value); each raises DecodeError naming the key or
# returns its value, and nothing else
PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "resource_status": (STATUS, lambda raw: pod_resource_status(mkpod(annotations={STATUS: raw}))),
    "pod_bvt": (wire.ANNOTATION_POD_CPU_QOS,
                lambda raw: cpu_qos.pod_bvt(RULE, mkpod(annotations={wire.ANNOTATION_POD_CPU_QOS: raw}))),
    "oom_score_adj_spec": (wire.ANNOTATION_OOM_SCORE_ADJ_SPEC, lambda raw: oom.container_oom_score_adj(
        {wire.ANNOTATION_OOM_SCORE_ADJ_SPEC: raw}, "c")),
    "oom_score_adj": (wire.ANNOTATION_OOM_SCORE_ADJ, lambda raw: oom.container_oom_score_adj(
        {wire.ANNOTATION_OOM_SCORE_ADJ: raw}, "c")),
    "device_allocated": (wire.ANNOTATION_DEVICE_ALLOCATED, parse_device_allocated),
    "extended_resource_spec": (wire.ANNOTATION_EXTENDED_RESOURCE_SPEC, lambda raw: extended_resource_spec(
        {wire.ANNOTATION_EXTENDED_RESOURCE_SPEC: raw})),
    "pod_resctrl": (wire.ANNOTATION_POD_RESCTRL, parse_pod_resctrl),
    "pod_limits": (wire.ANNOTATION_POD_NETWORK_QOS,
                   lambda raw: pod_limits(mkpod(annotations={wire.ANNOTATION_POD_NETWORK_QOS: raw}))),
    "pod_burst_config": (wire.ANNOTATION_POD_CPU_BURST, lambda raw: cpu_burst.pod_burst_config(
        mkpod(annotations={wire.ANNOTATION_POD_CPU_BURST: raw}), NODE_BURST)),
    "pod_memory_qos": (wire.ANNOTATION_POD_MEMORY_QOS, lambda raw: memory_qos.pod_memory_qos(
        mkpod(annotations={wire.ANNOTATION_POD_MEMORY_QOS: raw}), QOS_STRATEGY)),
    "pod_blocks": (wire.ANNOTATION_POD_BLKIO_QOS,
                   lambda raw: blkio.pod_blocks(mkpod(annotations={wire.ANNOTATION_POD_BLKIO_QOS: raw}))),
    "eviction_policy": (wire.ANNOTATION_EVICTION_POLICY, lambda raw: evict.eviction_policy_allows(
        mkpod(annotations={wire.ANNOTATION_EVICTION_POLICY: raw}), "BECPUEvict")),
    "eviction_priority": (wire.ANNOTATION_EVICTION_PRIORITY, lambda raw: evict.eviction_priority(
        mkpod(annotations={wire.ANNOTATION_EVICTION_PRIORITY: raw}))),
    "node_reservation": (wire.ANNOTATION_NODE_RESERVATION, cpu_suppress._reserved_milli),
}


def fastest(fn: Callable[[], Any], rounds: int = 5, inner: int = 20) -> float:
    """Best per-call time over a few rounds (the minimum is the least noisy estimate of the work done)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            try:
                fn()
            except ValueError:
                pass
        best = min(best, (time.perf_counter() - start) / inner)
    return best


# --------------------------------------------------------------------------------------------------------------
# the decoder


def test_many_bad_fields_make_one_short_problem():
    raw = json.dumps({"blocks": [{"name": "v", "type": "disk"}] * 1000})       # about 32 KiB
    with pytest.raises(DecodeError) as e:
        blkio.pod_blocks(mkpod(annotations={wire.ANNOTATION_POD_BLKIO_QOS: raw}))
    assert len(e.value.problem) <= decode.MAX_PROBLEM and e.value.problem.endswith("...")


def test_decode_error_is_a_value_error_naming_the_key():
    with pytest.raises(DecodeError) as e:
        decode.json_object("example.com/key", "[1]")
    assert isinstance(e.value, ValueError)
    assert (e.value.key, e.value.problem) == ("example.com/key", "expected an object, got list")
    assert str(e.value) == "example.com/key: expected an object, got list"


@pytest.mark.parametrize("raw,problem", [
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}"),
    (DEEP, f"nested deeper than {MAX_DEPTH}"),
    ('"' + "x" * MAX_BYTES + '"', f"larger than {MAX_BYTES} bytes"),
    ('"' + "é" * (MAX_BYTES // 2) + '"', f"larger than {MAX_BYTES} bytes"),       # counted in UTF-8 bytes
    ('{"a": NaN}', "not JSON"), ("[Infinity]", "not JSON"), ("1" * 5000, "not JSON"), ("{", "not JSON"),
    ("", "not JSON"),
])
def test_loads_refuses_unbounded_input(raw, problem):
    with pytest.raises(DecodeError, match=problem):
        decode.loads("k", raw)


def test_loads_refuses_non_strings():
    for raw in (None, b"{}", 5, {"a": 1}):
        with pytest.raises(DecodeError, match="expected a JSON string"):
            decode.loads("k", raw)


def test_loads_accepts_the_limits_themselves():
    at_depth = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decode.loads("k", at_depth) is not None
    assert decode.loads("k", '"' + "x" * (MAX_BYTES - 2) + '"') == "x" * (MAX_BYTES - 2)
    # brackets inside strings (escaped quotes too) are not nesting
    text = json.dumps({"s": "[" * 500 + '\\"[' * 100, "t": ["]]]{{{"]})
    assert decode.loads("k", text) == json.loads(text)


@pytest.mark.parametrize("value,depth", [
    (1, 0), ([], 1), ({"a": [1, {"b": []}]}, 4), ("[[[[", 0), (['"[\\', ["]"]], 2), ([[[[[]]]]], 5),
])
def test_nesting_depth_counts_only_structure(value, depth):
    assert decode.nesting_depth(json.dumps(value), limit=0) == depth


def test_typed_fields_name_the_path():
    assert decode.obj("k", None) == {} and decode.array("k", None) == []
    with pytest.raises(DecodeError, match=re.escape("k: a.b: expected an object, got int")):
        decode.obj("k", 5, "a.b")
    with pytest.raises(DecodeError, match="expected a list, got null"):
        decode.array("k", None, null=False)
    with pytest.raises(DecodeError, match="expected an integer"):
        decode.integer("k", True)
    with pytest.raises(DecodeError, match=re.escape("outside -1..2")):
        decode.integer("k", 3, lo=-1, hi=2)
    with pytest.raises(DecodeError, match="expected a boolean"):
        decode.boolean("k", "yes")
    with pytest.raises(DecodeError, match="expected a string"):
        decode.string("k", 1)
    assert decode.quantity("k", "250m") == Fraction(1, 4) and decode.quantity("k", 3) == 3
    assert decode.quantity("k", 1.5) == Fraction(3, 2)              # a bare JSON number, as Quantity takes it
    for bad in (None, True, [], {}, "1e10000000"):
        with pytest.raises(DecodeError):
            decode.quantity("k", bad)
    assert decode.cpu_list("k", "0-2,5") == [0, 1, 2, 5]
    with pytest.raises(DecodeError, match="cpu list"):
        decode.cpu_list("k", "0-20000000")


def test_decoder_turns_any_failure_into_a_decode_error_about_its_key():
    @decode.decoder("k")
    def broken(kind: type[BaseException]) -> None:
        raise kind("boom")

    for kind in (TypeError, KeyError, RecursionError, AttributeError, ValueError, OverflowError, MemoryError):
        with pytest.raises(DecodeError) as e:
            broken(kind)
        assert e.value.key == "k" and "boom" in e.value.problem


def test_json_value_compares_by_value_and_keeps_what_it_cannot_decode():
    assert decode.json_value('{"a": [1, 2]}') == decode.json_value('{ "a":[1,2] }')
    assert decode.json_value(DEEP) == DEEP and decode.json_value(None) is None


# --------------------------------------------------------------------------------------------------------------
# bounded quantity and cpu list parsing


def test_quantity_bounds_refuse_instead_of_computing():
    assert parse_quantity("1e3") == 1000 and parse_quantity(f"1e{MAX_EXPONENT}") == 10 ** MAX_EXPONENT
    assert parse_quantity("1e-9") == Fraction(1, 10 ** 9) and parse_quantity("16Gi") == 16 << 30
    for raw in ("1e10000000", "1e-10000000", f"1e{MAX_EXPONENT + 1}", "1" * 65, "1." + "0" * 100, "9" * 10 ** 6,
                10 ** 100):
        with pytest.raises(ValueError):
            parse_quantity(raw)


def test_hostile_quantity_costs_no_more_than_a_normal_one():
    # before the bound, "1e10000000" computed Fraction(10) ** 10_000_000 (8 s on this VM). A refused quantity is
    # never kept, so every hostile one is parsed afresh: the control is a normal quantity parsed afresh too (a
    # repeated one is a cache hit, 20 times cheaper than any parse)
    normal = fastest(lambda: quantity._parse("1e3"))
    assert fastest(lambda: parse_quantity("1e10000000")) < 20 * normal
    assert fastest(lambda: parse_quantity("1" * 10 ** 6), inner=3) < 2000 * normal      # one length check + str()


def test_cpu_list_ids_are_capped():
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list(f"{MAX_CPUS - 1}") == [MAX_CPUS - 1]
    for raw in ("0-20000000", str(MAX_CPUS), f"0-{MAX_CPUS}"):
        with pytest.raises(ValueError, match=f"outside 0..{MAX_CPUS - 1}"):
            parse_cpu_list(raw)


def test_overlapping_cpu_ranges_cost_linear_work():
    # 10,000 full ranges would add 80 million ids to a set one by one; each range beyond a few is merged by its start
    hostile = ",".join([f"0-{MAX_CPUS - 1}"] * 10_000)
    normal = ",".join(str(i % MAX_CPUS) for i in range(len(hostile) // 5))       # about as long, one id each
    assert len(parse_cpu_list(hostile)) == MAX_CPUS
    assert fastest(lambda: parse_cpu_list(hostile), 3, 2) < 5 * fastest(lambda: parse_cpu_list(normal), 3, 2)
    assert parse_cpu_list(",".join(["5-6", "0-3"] * 20_000 + ["2-9"])) == list(range(10))


def test_nodeslo_quantities_are_bounded_and_a_bad_one_costs_only_its_section():
    spec = {"systemStrategy": {"totalNetworkBandwidth": "1e8000000"},
            "resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": True, "groupIdentity": 1}}}}
    start = time.perf_counter()
    merged, errors = merge_node_slo_spec(spec)
    hostile = time.perf_counter() - start
    assert any("totalNetworkBandwidth" in e for e in errors)
    assert merged.system.total_network_bandwidth_value == 0                   # the default
    assert merged.resource_qos.ls.cpu_qos.group_identity == 1                 # the rest applies
    start = time.perf_counter()
    merge_node_slo_spec({**spec, "systemStrategy": {"totalNetworkBandwidth": "1e3"}})
    assert hostile < 50 * (time.perf_counter() - start) + 0.01


def test_hostile_json_costs_no_more_than_a_valid_document_of_its_size():
    normal = "[" + "0," * 2499 + "0]"                                   # 5,001 bytes, depth 1
    for hostile in (DEEP, '["a",' * 1000 + "1" + "]" * 1000, '"\\"' * 1600 + "[" * 40):
        assert fastest(lambda h=hostile: decode.loads("k", h)) < 20 * fastest(lambda: decode.loads("k", normal))


# --------------------------------------------------------------------------------------------------------------
# every parser: the documented error and nothing else


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_parser_refuses_hostile_input_with_a_decode_error(name, case):
    key, parse = PARSERS[name]
    try:
        parse(HOSTILE[case])
    except DecodeError as e:
        assert e.key == key
        assert len(str(e)) < 2000                     # a log line, not the whole value


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_hostile_values_cost_each_parser_little(name):
    _, parse = PARSERS[name]
    budget = time.perf_counter()
    for raw in HOSTILE.values():
        try:
            parse(raw)
        except DecodeError:
            pass
    assert time.perf_counter() - budget < 0.5        # all of them; before: seconds (exponent) or RecursionError


# --------------------------------------------------------------------------------------------------------------
# isolation: the bad pod loses only its bad part, the others are enforced in the same cycle


@pytest.mark.parametrize("bad_status", [NUMA_INT, DEEP, '{"cpuset":"0-20000000"}',
                                        '{"numaNodeResources":[{"node":0,"resources":{"cpu":"1e10000000"}}]}'],
                         ids=["numa-int", "deep", "huge-cpu-range", "huge-exponent"])
def test_bad_resource_status_costs_only_that_pods_pin(tmp_path, caplog, bad_status):
    _, cg, files = fake_host(tmp_path, files=())
    batch = {"containers": {"c0": C0}, "resources": {"c0": BATCH}}
    bad = pod("u-bad", "u-bad", qos_class="BE", qos="BestEffort", annotations={STATUS: bad_status}, **batch)
    other = pod("u-other", "u-other", qos_class="BE", qos="BestEffort", **batch)
    pinned = pod("u-lsr", "u-lsr", qos_class="LSR", qos="Guaranteed", annotations={STATUS: '{"cpuset": "4-5"}'},
                 containers={"c0": C0}, resources={"c0": {}})
    metas = build(cg, files, [bad, other, pinned])
    view = node_view(pods=metas, ls_pools={0: (0, 1, 2, 3)})
    metrics = AgentMetrics("n")
    rec = Reconciler(Executor(cg), [PodResources()], metrics)
    with caplog.at_level(logging.WARNING):
        rec.run_once(view)
        rec.run_once(view)
    assert metrics.registry.get_sample_value("koordlet_qos_strategy_errors_total",
                                             {"node": "n", "strategy": "pod-resources"}) is None
    for m in metas[:2]:                              # both BE pods get their batch resources, the bad one too
        assert value(cg, "cpu", m.cgroup_dir, "cpu.shares") == "512"
        assert value(cg, "cpu", m.containers[0][1], "cpu.cfs_quota_us") == "200000"
    assert value(cg, "cpuset", metas[2].containers[0][1], "cpuset.cpus") == "4-5"
    assert caplog.text.count("ns/u-bad") == 1 and STATUS in caplog.text       # once per pod and value
    assert "u-other" not in caplog.text


def test_bad_cpu_qos_annotation_costs_only_that_pods_annotation(tmp_path, caplog):
    paths, cg, files = fake_host(tmp_path)
    one = {"containers": {"c0": C0}, "resources": {"c0": {}}}
    good = pod("u-good", "u-good", qos_class="LS", **one,
               annotations={wire.ANNOTATION_POD_CPU_QOS: '{"enable": true, "groupIdentity": 1}'})
    bad = pod("u-bad", "u-bad", qos_class="LS", **one, annotations={wire.ANNOTATION_POD_CPU_QOS: DEEP})
    metas = build(cg, files, [good, bad])
    view = node_view(pods=metas, slo=slo(lsr=ALL_ON, ls=ALL_ON, be=ALL_ON))
    metrics = AgentMetrics("n")
    rec = Reconciler(Executor(cg), [PodResources(), CPUQOS(cg, paths)], metrics)
    with caplog.at_level(logging.WARNING):
        rec.run_once(view)
        rec.run_once(view)
    assert metrics.registry.get_sample_value("koordlet_qos_strategy_errors_total",
                                             {"node": "n", "strategy": "cpu-qos"}) is None
    assert value(cg, "cpu", metas[0].cgroup_dir, "cpu.bvt_warp_ns") == "1"      # its annotation
    assert value(cg, "cpu", metas[1].cgroup_dir, "cpu.bvt_warp_ns") == "2"      # the LS class value
    assert caplog.text.count("ns/u-bad") == 1


@pytest.mark.parametrize("bad_status", [NUMA_INT, DEEP], ids=["numa-int", "deep"])
def test_nri_bad_resource_status_loses_only_the_pin(tmp_path, caplog, bad_status):
    h = hooks(tmp_path, node_view(ls_pools=POOLS), features=hook_features("oom_score_adj"))
    bad = sandbox("u-bad", "BE", "besteffort", {STATUS: bad_status, **be_spec("c0"),
                                                 wire.ANNOTATION_OOM_SCORE_ADJ: "500"}, name="bad")
    other = sandbox("u-other", "LSR", "guaranteed", {STATUS: '{"cpuset": "4-5"}'})
    with caplog.at_level(logging.WARNING):
        got = adjusted(h.create_container(bad, container(bad)))
        h.create_container(bad, container(bad, "c1"))
    assert got == {"shares": 512, "quota": 200000, "memory": 2 << 30, "oom": 500}   # batch and oom kept
    assert adjusted(h.create_container(other, container(other, quota=400000))) == {"cpus": "4-5", "quota": -1}
    assert caplog.text.count("ns/bad") == 1 and STATUS in caplog.text


@pytest.mark.parametrize("annotation,lost", [
    (wire.ANNOTATION_EXTENDED_RESOURCE_SPEC, {"shares", "quota", "memory"}),
    (wire.ANNOTATION_OOM_SCORE_ADJ_SPEC, {"oom"}),
])
def test_nri_other_hostile_annotations_lose_only_their_part(tmp_path, annotation, lost):
    h = hooks(tmp_path, node_view(ls_pools=POOLS), features=hook_features("oom_score_adj"))
    full = {**be_spec("c0"), wire.ANNOTATION_OOM_SCORE_ADJ_SPEC: '{"c0": 500}'}
    whole = sandbox("u-whole", "BE", "besteffort", full)
    want = adjusted(h.create_container(whole, container(whole)))
    assert want == {"shares": 512, "quota": 200000, "memory": 2 << 30, "oom": 500}
    for hostile in (DEEP, NUMA_INT, HOSTILE["oversize"]):
        bad = sandbox("u-bad", "BE", "besteffort", {**full, annotation: hostile})
        assert adjusted(h.create_container(bad, container(bad))) == {k: v for k, v in want.items() if k not in lost}


def test_nri_sandbox_with_bad_cpu_qos_gets_the_class_bvt(tmp_path):
    _, cg, _ = fake_host(tmp_path, files=("cpu.bvt_warp_ns",))
    h = Hooks(hook_features(), cg.layout, lambda: node_view(slo=slo(ls=ALL_ON), ls_pools=POOLS), Executor(cg), bvt=True)
    bad = sandbox("u-bad", "LS", annotations={wire.ANNOTATION_POD_CPU_QOS: DEEP})
    mkcg(cg, "kubepods/burstable/podu-bad", ("cpu.bvt_warp_ns",))
    h.run_pod_sandbox(bad)
    assert value(cg, "cpu", "kubepods/burstable/podu-bad", "cpu.bvt_warp_ns") == "2"   # the LS class value


# --------------------------------------------------------------------------------------------------------------
# properties: any value in any annotation gives the parser's value or DecodeError about that annotation

_KEYS = ["cpuset", "numaNodeResources", "node", "resources", "cpu", "memory", wire.BATCH_CPU, wire.BATCH_MEMORY,
         "enable", "groupIdentity", "gpu", "rdma", "minor", "id", "extension", "vfs", "busID", "containers",
         "requests", "limits", "c", "c0", "llc", "LLC", "mb", "schemata", "range", "percent", "schemataPerCache",
         "cacheID", "ingressLimit", "egressLimit", "policy", "cpuBurstPercent", "cfsQuotaBurstPercent", "blocks",
         "name", "type", "ioCfg", "readBPS", "writeIOPS", "minLimitPercent", "wmarkRatio", "reservedCPUs",
         wire.RESOURCE_GPU_MEMORY, wire.RESOURCE_GPU_CORE, wire.RESOURCE_GPU_MEMORY_RATIO]
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["1", "250m", "16Gi", "-5M", "1e10000000", "1e-99", "0-3", "0-20000000", "3-1", "x-y", "none",
                     "auto", "default", "podvolume", "device", "cpuBurstOnly", "", "1.5", "+1", "0x10"]))
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=6), inner, max_size=5),
                       max_leaves=24)
_RAW = st.one_of(_VALUES.map(json.dumps), st.text(max_size=40), st.sampled_from(sorted(HOSTILE.values())),
                 st.integers(min_value=0, max_value=6000).map(lambda n: "[" * n + "]" * n))
_FAST = settings(max_examples=40, deadline=None,        # database, home directory: tests/conftest.py
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_LONG = settings(max_examples=10_000, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(name: str, raw: str) -> None:
    key, parse = PARSERS[name]
    try:
        within_budget(name, parse, raw)
    except DecodeError as e:
        assert e.key == key


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FAST
@given(raw=_RAW)
def test_property_parsers_raise_only_decode_error(name, raw):
    _check(name, raw)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
@_LONG
@given(raw=_RAW)
def test_property_parsers_raise_only_decode_error_long(name, raw):
    _check(name, raw)


def _depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    return 0


@_FAST
@given(v=_VALUES)
def test_property_loads_is_json_loads_within_the_bounds(v):
    text = json.dumps(v)
    assert decode.nesting_depth(text, limit=0) == _depth(v)
    assert decode.loads("k", text) == json.loads(text)


@_FAST
@given(raw=st.one_of(st.text(max_size=30), _LEAVES.map(str),
                     st.from_regex(r"[+-]?\d{0,80}(\.\d{0,80})?([eE][+-]?\d{1,9}|Ki|Mi|Gi|m|k|M)?", fullmatch=True)))
def test_property_quantity_raises_only_value_error_and_stays_small(raw):
    try:
        q = parse_quantity(raw)
    except ValueError:
        return
    assert abs(q.numerator).bit_length() < 1024 and q.denominator.bit_length() < 1024


@_FAST
@given(raw=st.one_of(st.text(alphabet="0123456789-, ", max_size=40), st.text(max_size=20)))
def test_property_cpu_list_raises_only_value_error_and_ids_are_in_range(raw):
    try:
        cpus = parse_cpu_list(raw)
    except ValueError:
        return
    assert cpus == sorted(set(cpus)) and all(0 <= c < MAX_CPUS for c in cpus)


def test_valid_annotations_decode_as_before():
    """The shapes the scheduler and users write, through the routed parsers (values as before the decoder)."""
    status = pod_resource_status(mkpod(annotations={STATUS: json.dumps(
        {"cpuset": "5,4", "numaNodeResources": [{"node": 1, "resources": {"cpu": "2"}}, {"node": 0}]})}))
    assert (status.cpuset, status.numa_nodes) == ("4-5", (1,))
    empty = mkpod(annotations={STATUS: '{"cpuset": "", "numaNodeResources": null}'})
    assert pod_resource_status(empty).cpuset == ""
    with pytest.raises(DecodeError, match="more than 1024 entries"):
        pod_resource_status(mkpod(annotations={STATUS: json.dumps({"numaNodeResources": [{"node": 0}] * 1025})}))
    alloc = parse_device_allocated(json.dumps({"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "50"},
                                                         "id": "GPU-x"}], "rdma": None}))
    assert alloc["gpu"][0].minor == 1 and alloc["gpu"][0].resources == {"koordinator.sh/gpu-core": 50}
    assert oom.container_oom_score_adj({wire.ANNOTATION_OOM_SCORE_ADJ: " -5 "}, "c") == -5
    assert oom.container_oom_score_adj({wire.ANNOTATION_OOM_SCORE_ADJ_SPEC: '{"d": 1}',
                                        wire.ANNOTATION_OOM_SCORE_ADJ: "7"}, "c") == 7
    assert oom.container_oom_score_adj({}, "c") is None
    assert cpu_suppress._reserved_milli('{"resources": {"cpu": "1500m"}}') == 1500
    assert cpu_suppress._reserved_milli('{"resources": {"cpu": "1500m"}, "reservedCPUs": "0-2"}') == 3000
    assert evict.eviction_priority(mkpod(annotations={wire.ANNOTATION_EVICTION_PRIORITY: "-3"})) == -3
    assert not evict.eviction_policy_allows(mkpod(annotations={wire.ANNOTATION_EVICTION_POLICY: "null"}), "BECPUEvict")
    spec = extended_resource_spec({wire.ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps({"containers": {"c": BATCH}})})
    assert spec["c"].batch_cpu_request == 500 and spec["c"].batch_memory_limit == 2 << 30


@pytest.mark.parametrize("hostile", [DEEP, NUMA_INT, HOSTILE["oversize"],
                                     '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1e10000000"}}]}'],
                         ids=["deep", "scalar-field", "oversize", "huge-exponent"])
def test_podresources_merge_lists_the_bad_pod_without_devices_and_the_others_with(hostile):
    from koordlet.podresources.merge import merge
    from tests.unit.test_podresources_merge import RDMA_PF, UID, VF_A, allocated, limited, rdma
    nic = [limited("app", {wire.RESOURCE_RDMA: "1"})]
    good = agent_pod(UID, "good", qos=None, spec_containers=nic, annotations=allocated({"rdma": [rdma(RDMA_PF, VF_A)]}))
    bad = agent_pod("99999999-2222-3333-4444-555555555555", "bad", qos=None, spec_containers=nic,
                    annotations=allocated(hostile))
    merged = merge([], [bad, good])
    listed = {p.name: [(d.resource_name, list(d.device_ids)) for c in p.containers for d in c.devices]
              for p in merged.response.pod_resources}
    assert listed == {"bad": [], "good": [(wire.RESOURCE_RDMA, [VF_A])]}
    assert [k for k, _ in merged.problems] == ["default/bad"]
    assert wire.ANNOTATION_DEVICE_ALLOCATED in merged.problems[0][1]


def test_hami_plan_refuses_a_hostile_allocation_with_a_decode_error():
    from hami_bridge.inject import plan
    for hostile in (DEEP, NUMA_INT, '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-memory":"1e10000000"}}]}'):
        with pytest.raises(DecodeError) as e:
            plan({wire.ANNOTATION_DEVICE_ALLOCATED: hostile}, {}, "11111111-2222-3333-4444-555555555555", "c")
        assert e.value.key == wire.ANNOTATION_DEVICE_ALLOCATED


@pytest.mark.parametrize("hostile", [DEEP, NUMA_INT, '{"cpuset":"0-20000000"}', HOSTILE["oversize"]],
                         ids=["deep", "numa-int", "huge-cpu-range", "oversize"])
def test_node_pools_ignore_only_the_bad_pin(hostile):
    """The pools every strategy and the NRT report use: a bad pod's pin is ignored, the other pins are taken out
    (a RecursionError here would skip every QoS cycle)."""
    from koordlet.states.pools import cpu_pools
    from tests.unit.test_nrt import two_socket_topology
    topo = two_socket_topology()
    pods = [pod_meta("aaaaaaaa-0000-0000-0000-000000000001", "bad", annotations={STATUS: hostile}),
            pod_meta("aaaaaaaa-0000-0000-0000-000000000002", "pinned", qos_class="LSR",
                     annotations={STATUS: '{"cpuset": "0-1"}'})]
    node = NodeInfo("n", annotations={wire.ANNOTATION_NODE_RESERVATION: hostile,
                                      wire.ANNOTATION_SYSTEM_QOS_RESOURCE: hostile})
    pools = cpu_pools(topo, pods, node, None)
    assert pools.ls == {0: (4, 5), 1: (2, 3, 6, 7)}
    assert pools.reserved_cpus == () and pools.system_cpus == ()


def test_each_annotation_has_one_decoder():
    """Every decoder of the agent registered (each module imported), one per annotation key; a second one for a
    key already taken is refused."""
    import koordlet.qos  # noqa: F401  (every strategy's decoders)
    import nri_plugin.features  # noqa: F401
    from koordlet.states import decode as states_decode
    assert states_decode.DECODERS["agent", STATUS] == "koordlet.states.pod.resource_status"
    assert sum(program == "agent" for program, _ in states_decode.DECODERS) >= 14
    with pytest.raises(ValueError, match="decoded by koordlet.states.pod.resource_status already"):
        @states_decode.decoder(STATUS)
        def resource_status_again(raw: str) -> None:
            return None
    assert states_decode.DECODERS["agent", STATUS] == "koordlet.states.pod.resource_status"


def test_a_repeated_quantity_is_parsed_once_and_a_refused_one_is_never_kept():
    quantity._parse_string.cache_clear()
    assert parse_quantity("250m") == Fraction(1, 4) and parse_quantity("250m") == Fraction(1, 4)
    assert quantity._parse_string.cache_info().hits == 1
    for _ in range(2):
        with pytest.raises(ValueError):
            parse_quantity("1e10000000")
    assert quantity._parse_string.cache_info().currsize == 1
    assert parse_quantity(1.5) == Fraction(3, 2) and quantity._parse_string.cache_info().currsize == 1
