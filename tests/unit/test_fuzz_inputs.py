"""Property tests (Hypothesis) for the parsers of outside input that are not annotations.

Each parser gets arbitrary input and may fail only in its documented way, in bounded time (``deadline``) and
without allocating what the input merely announces:

- NodeSLO: ``merge_node_slo_spec`` / ``node_slo_from_object`` return (spec, errors) for any JSON-like value
  (wrong types at any depth, huge numbers and exponents, NaN, nesting thousands of levels deep); ``NodeSLOFile``
  keeps the last good spec and records one error for any file content, and applies the next good file;
  ``load_yaml`` raises only the error type it is given.
- Pods file: ``load_pods_file`` raises only ``PodsFileError`` and is exactly ``pod_from_k8s`` per entry (one bad
  entry never loses the others); ``pod_from_k8s`` raises only ``ValueError``.
- YARN Copilot answers: ``parse_containers`` and ``parse_released`` raise only ``CopilotError`` for any JSON text
  (a mutated published ``ContainerInfo`` list, anything else, nesting thousands of levels deep).
- NRI transport: the ttRPC ``Decoder`` and the ``Mux`` fed any byte stream cut at any points give what a
  reference parse of the whole stream gives, fail only with their protocol error, and buffer no more than they
  were sent; a header announcing gigabytes allocates nothing up front.

Default runs use a few dozen examples per property; the ``_long`` variants (``pytest -m slow``) run 10,000 each.
Hypothesis's database and home directory are set once for the suite in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import json
import os
import struct
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koordlet._proto.ttrpc import ttrpc_pb2
from koordlet.base import yamlfile
from koordlet.base.yamlfile import load_yaml
from koordlet.states.copilot import CopilotError, parse_containers, parse_released
from koordlet.states.nodeslo.file import NodeSLOFile, NodeSLOFileError
from koordlet.states.nodeslo.merge import merge_node_slo_spec, node_slo_from_object
from koordlet.states.pod import pod_from_k8s
from koordlet.states.standalone import PodsFileError, load_pods_file
from nri_plugin.transport import mux, ttrpc
from nri_plugin.transport.mux import Mux, ProtocolError
from nri_plugin.transport.ttrpc import Channel, Decoder
from tests.budget import file_budget, within_budget
from tests.builders import pod_object

_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
# 1 s per example of wall clock: a hang detector. The speed each parse must keep is checked in CPU time of the
# test's thread around the parser call itself (tests/budget.py: 50 ms), which a loaded machine does not
# stretch. Every input here is handled in 1-40 ms on an idle 2-CPU VM (the bounds refuse what would take longer:
# 5,000 nested brackets, alias bombs, 4 GiB length headers), so a loaded CI worker keeps a 25x margin, while an
# unbounded parse (seconds to minutes before the bounds) still fails. Hypothesis leaves data generation and
# garbage collection out of the time it measures.
_FAST = settings(max_examples=60, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)
_LONG = settings(max_examples=10_000, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)


# ------------------------------------------------------------------------------------------------ JSON-like values

_RICH_SPEC: dict[str, Any] = {          # every kind of field the NodeSLO schema has, so mutations reach them all
    "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 60, "cpuSuppressPolicy": "cfsQuota",
                                    "memoryEvictThresholdPercent": 80, "memoryEvictLowerPercent": 70},
    "resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched", "netQOSPolicy": "tc"},
        "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1},
                    "memoryQOS": {"enable": True, "wmarkRatio": 90, "minLimitPercent": 10},
                    "resctrlQOS": {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 30},
                    "networkQOS": {"enable": True, "ingressLimit": "100M", "egressRequest": 50}},
        "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [
            {"name": "/dev/sdb", "type": "device", "ioCfg": {"readLatency": 3000, "ioWeightPercent": 60}}]}},
    },
    "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 500, "sharePoolThresholdPercent": 50},
    "systemStrategy": {"totalNetworkBandwidth": "10G", "minFreeKbytesFactor": 100},
    "hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod",
                          "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive",
                                         "relativePath": "nginx"}}],
    "extensions": {"Object": {"myPlugin": {"level": 3}}},
}


def _wire_keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _wire_keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _wire_keys(v)


_KEYS = sorted(set(_wire_keys(_RICH_SPEC)) | set(_wire_keys(merge_node_slo_spec(None)[0].to_wire()))
               | {"spec", "metadata", "name", "kind", "Object", "clusterStrategy", "nodeStrategies", "nodeSelector"})
_NUMBER_TEXT = ["1e10000000", "-1e10000000", "1e-10000000", "1E999999999", "9" * 400, "0." + "0" * 400 + "1",
                "1Ei", "250m", "16Gi", "-5M", "NaN", "nan", "Inf", "-Infinity", "-0", "+1", "0x10", "1_000", " 1",
                "", "auto", "none", "1.5", "0-3", "0-20000000"]
_HUGE_INTS = [2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**100, 10**4000, -(10**4000)]   # ≤ 4300 digits:
# what a JSON or YAML decoder can give at all (json.loads and PyYAML refuse longer integers)
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(_HUGE_INTS), st.floats(),
                  st.text(max_size=20), st.sampled_from(_NUMBER_TEXT))
_TEXT_KEY = st.sampled_from(_KEYS) | st.text(max_size=8)
_JSON = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT_KEY, inner, max_size=5),
                     max_leaves=30)


def _nest(depth: int, in_object: bool, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"enable": leaf} if in_object else [leaf]
    return leaf


# values nested far deeper than any decoder here would produce (json.loads stops near 1,000 levels)
_DEEP = st.builds(_nest, st.integers(0, 3000), st.booleans(), _LEAF)
_VALUE = st.one_of(_JSON, _DEEP)


def _positions(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths to every value in ``value`` down to 12 levels (not into the deep values a mutation put there)."""
    yield path
    if len(path) >= 12:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _positions(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _positions(v, (*path, i))


@st.composite
def _mutated(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any] = _VALUE) -> Any:
    """``base`` with 1-4 of its values (at any depth) replaced by, or joined by, an arbitrary value, or removed."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(list(_positions(value))))
        new = draw(values)
        if not path:
            value = new
            continue
        parent = value
        for step in path[:-1]:
            parent = parent[step]
        op = draw(st.sampled_from(("replace", "delete", "add")))
        if op == "replace":
            parent[path[-1]] = new
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(_TEXT_KEY)] = new
        else:
            parent.insert(path[-1], new)
    return value


_SPEC = st.one_of(_VALUE, _mutated(_RICH_SPEC), _mutated(merge_node_slo_spec(None)[0].to_wire()))


# ------------------------------------------------------------------------------------------------ NodeSLO parsers

def _check_merge(spec: Any, name: Any) -> None:
    merged, errors = within_budget("merge_node_slo_spec", merge_node_slo_spec, spec, "fuzz")
    assert isinstance(errors, list) and all(isinstance(e, str) for e in errors)
    merged.to_wire()                                          # a usable spec: it converts back
    merged2, errors2 = node_slo_from_object({"kind": "NodeSLO", "metadata": {"name": name}, "spec": spec})
    assert merged2 == merged and len(errors2) == len(errors)


@_FAST
@given(spec=_SPEC, name=_LEAF | _DEEP)
def test_property_nodeslo_merge_returns_spec_and_errors(spec: Any, name: Any) -> None:
    _check_merge(spec, name)


@pytest.mark.slow
@_LONG
@given(spec=_SPEC, name=_LEAF | _DEEP)
def test_property_nodeslo_merge_returns_spec_and_errors_long(spec: Any, name: Any) -> None:
    _check_merge(spec, name)


def test_nodeslo_deep_values_are_errors_not_recursion_errors() -> None:
    """Found by the property: a wrong-typed value nested ~1,000 levels (what json.loads still accepts) made the
    error message's json.dumps raise RecursionError, and a deep ``extensions.Object`` made its deepcopy do so."""
    deep = _nest(2000, False, 1)
    for spec in ({"resourceQOSStrategy": deep}, {"hostApplications": [deep]}, deep,
                 {"extensions": {"Object": {"k": deep}}}):
        merged, errors = merge_node_slo_spec(spec)
        assert len(errors) == 1 and merged.resource_qos == merge_node_slo_spec(None)[0].resource_qos
    _, errors = merge_node_slo_spec({"extensions": {"Object": {"k": deep}}})
    assert "spec.extensions.Object: nested deeper than 64 levels" in errors[0]


# ------------------------------------------------------------------------------------------------ file content

def _alias_bomb(levels: int, width: int, recursive: bool) -> str:
    """Anchors of anchors: ``levels`` lines that stand for width**levels values (or an alias to itself)."""
    if recursive:
        return "a: &a [*a, *a]\n"
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    top = f"a{levels - 1}"
    return "\n".join(lines) + f"\nhostApplications: [*{top}]\nextensions: {{Object: {{k: *{top}}}}}\n"


_YAML_TOKENS = ["- ", ": ", "\n", "  ", "    ", "a", "kind", "spec", "metadata", "items", "data", "&x ", "*x", "<<: ",
                "!!int ", "!!float ", "!!bool ", "!!timestamp ", "!!binary ", "!!set ", "!!omap ", "!!python/name:x ",
                "? ", "[", "]", "{", "}", ",", "'", '"', "|", ">", "#", "%YAML 1.1\n", "---\n", "...\n", "2020-13-45",
                "0000-01-01", "2020-02-30T25:61:61Z", "1e10000000", "9" * 5000, ".nan", ".inf", "0x1G", "0o9",
                "~", "null", "yes", "\t", "\ufeff", "\x85", "\u2028", "NodeSLO", "ConfigMap", "List", "Pod"]


def _dump(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode()


_DOC = st.one_of(
    _JSON,
    st.builds(lambda spec: {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                            "metadata": {"name": "n"}, "spec": spec}, _mutated(_RICH_SPEC, _JSON)),
    st.builds(lambda data: {"kind": "ConfigMap", "data": data},
              st.dictionaries(st.sampled_from(["resource-qos-config", "resource-threshold-config", "cpu-burst-config",
                                               "system-config", "host-application-config"]),
                              st.one_of(_JSON.map(json.dumps), _JSON, st.text(max_size=30)), max_size=5)),
    _mutated([pod_object(str(uuid.UUID(int=1)), "p")], _JSON),
)
_FILE = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.lists(st.sampled_from(_YAML_TOKENS), max_size=60).map(lambda t: "".join(t).encode()),
    _DOC.map(_dump),
    st.builds(_alias_bomb, st.integers(2, 12), st.integers(2, 12), st.booleans()).map(str.encode),
    st.integers(0, 5000).map(lambda n: ("[" * n + "]" * n).encode()),
    st.integers(0, 300).map(lambda n: ("a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, n))).encode()),
)


class _Writer:
    """Writes a file and gives it a fresh mtime each time, so NodeSLOFile sees every change."""

    def __init__(self, path: str) -> None:
        self.path, self.tick = path, 1_700_000_000 * 10**9

    def __call__(self, content: bytes) -> None:
        with open(self.path, "wb") as f:
            f.write(content)
        self.tick += 10**9
        os.utime(self.path, ns=(self.tick, self.tick))


_GOOD = _dump({"kind": "NodeSLO", "metadata": {"name": "n"},
               "spec": {"resourceQOSStrategy": {"beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 77}}}}})


def _pods_shape(doc: Any) -> bool:
    """Whether a document is usable as a pods file (empty, a list, or a List with items)."""
    return doc is None or isinstance(doc, list) or (isinstance(doc, dict) and isinstance(doc.get("items"), list))


def _check_file(path: str, content: bytes) -> None:
    """Any content: the loader raises only the error type it is given; the NodeSLO file source refuses what the
    loader refuses, keeping the last good spec with one error, and applies the next good file; the pods file
    loader raises only PodsFileError."""
    write = _Writer(path)
    write(_GOOD)
    src = NodeSLOFile(path, node_name="n", node_labels={"pool": "gpu"})
    good = src.spec
    assert src.errors == [] and good.resource_qos.be.memory_qos.wmark_ratio == 77
    write(content)
    try:
        doc, refused = within_budget("load_yaml", load_yaml, path, "fuzz", NodeSLOFileError,
                                     budget=file_budget(len(content))), False
    except NodeSLOFileError:
        doc, refused = None, True
    src.refresh()                                             # load_yaml (timed above) + the merge (timed alone)
    kept = bool(src.errors) and src.errors[-1].endswith("keeping the last good spec")
    assert kept or not refused                                # the loader refused it: so did the file source
    if kept:
        assert src.spec == good and len(src.errors) == 1      # last good spec, one error
    try:
        pods, errors = load_pods_file(path)
    except PodsFileError:
        assert refused or not _pods_shape(doc)
    else:
        assert not refused and _pods_shape(doc)
        assert len(pods) + len(errors) == len(doc if isinstance(doc, list) else (doc or {}).get("items") or [])
    write(_GOOD)
    src.refresh()
    assert src.spec == good and src.errors == []              # the next good file applies


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One file path reused by every example (module scope: Hypothesis refuses function-scoped fixtures)."""
    return str(tmp_path_factory.mktemp("fuzz") / "input.yaml")


@_FAST
@given(content=_FILE)
def test_property_any_file_content_is_refused_or_loaded(fuzz_file: str, content: bytes) -> None:
    _check_file(fuzz_file, content)


@pytest.mark.slow
@_LONG
@given(content=_FILE)
def test_property_any_file_content_is_refused_or_loaded_long(fuzz_file: str, content: bytes) -> None:
    _check_file(fuzz_file, content)


@pytest.mark.parametrize("content,problem", [
    (b"a: 2020-13-45\n", "month must be in 1..12"),               # ValueError out of PyYAML's constructors
    (b"a: !!int abc\n", "invalid literal for int()"),
    (b"a: " + b"1" * 5000 + b"\n", "Exceeds the limit (4300 digits)"),
    (b"a: 0000-01-01\n", "year 0 is out of range"),
    (b"a: !!timestamp x\n", "AttributeError"),
    (b"a: !!bool x\n", "KeyError"),
    (_alias_bomb(9, 10, False).encode(), "its aliases expand to"),     # 10**9 values in 12 lines
    (b"a: &a [*a, *a]\n", "once its aliases are expanded"),            # an alias to itself
    ("".join(f"a{i}: &a{i} [*a{i - 1}]\n" if i else "a0: &a0 [x]\n" for i in range(100)).encode(),
     "once its aliases are expanded"),                                  # 100 levels deep through aliases
])
def test_yaml_values_pyyaml_cannot_build_or_aliases_that_explode_are_refused(tmp_path, content, problem) -> None:
    """Found with these properties: such scalars escaped load_yaml as ValueError/AttributeError/KeyError (so
    past the pods file's and the NodeSLO file's handlers, which catch only their own error, killing the thread
    that reloads them); alias bombs made the NodeSLO file source expand 10**8 values (8 s; 10**9: minutes, then
    memory) to print one in an error message."""
    path = tmp_path / "f.yaml"
    path.write_bytes(content)
    with pytest.raises(PodsFileError, match="not valid YAML") as e:
        load_yaml(str(path), "pods file", PodsFileError)
    assert problem in str(e.value)


def test_yaml_aliases_within_the_bound_still_load(tmp_path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("base: &b {cpu: 1}\nitems: [*b, *b, *b]\nmerged: {<<: *b, mem: 2}\n")
    doc = load_yaml(str(path), "x")
    assert doc["items"] == [{"cpu": 1}] * 3 and doc["merged"] == {"cpu": 1, "mem": 2}
    path.write_text(_alias_bomb(5, 10, False))                          # 10**5 values: below the bound
    assert len(load_yaml(str(path), "x")["a4"]) == 10
    with mock.patch.object(yamlfile, "MAX_ALIAS_NODES", 1000), pytest.raises(ValueError, match="aliases expand"):
        load_yaml(str(path), "x")


# ------------------------------------------------------------------------------------------------ pods

_UIDS = st.uuids().map(str)
_QTY = st.sampled_from(["100m", "1", "2", "1Gi", "512Mi", "0"])
_RESOURCES = st.fixed_dictionaries({}, optional={"requests": st.fixed_dictionaries({}, optional={"cpu": _QTY,
                                                                                                 "memory": _QTY}),
                                                 "limits": st.fixed_dictionaries({}, optional={"cpu": _QTY,
                                                                                               "memory": _QTY})})
_NAME = st.builds(str.__add__, st.sampled_from("abcdefghijklmnopqrstuvwxyz"),      # [a-z][a-z0-9-]{0,20}, cheaply
                  st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=20))


@st.composite
def _valid_pod(draw: st.DrawFn, uid: str) -> dict[str, Any]:
    names = draw(st.lists(_NAME, max_size=3, unique=True))
    return pod_object(uid, draw(_NAME), namespace=draw(_NAME),
                      qos=draw(st.sampled_from(["Guaranteed", "Burstable", "BestEffort", None])),
                      containers={n: f"{i:064x}" for i, n in enumerate(names)},
                      resources={n: draw(_RESOURCES) for n in names},
                      labels=draw(st.dictionaries(_NAME, st.text(max_size=10), max_size=3)),
                      annotations=draw(st.dictionaries(_NAME, st.text(max_size=10), max_size=3)),
                      priority=draw(st.none() | st.integers(0, 10**9)))


_POD_LIKE = st.one_of(_JSON, _mutated(pod_object(str(uuid.UUID(int=7)), "p", containers={"c": "ab" * 32},
                                                 resources={"c": {"requests": {"cpu": "1"}}},
                                                 annotations={"a": "b"}, priority=5)))


def _check_pod(obj: Any) -> None:
    try:
        pod = within_budget("pod_from_k8s", pod_from_k8s, obj)
    except ValueError:
        return
    assert pod.uid and pod.name


@_FAST
@given(obj=_POD_LIKE)
def test_property_pod_from_k8s_raises_only_value_error(obj: Any) -> None:
    _check_pod(obj)


@pytest.mark.slow
@_LONG
@given(obj=_POD_LIKE)
def test_property_pod_from_k8s_raises_only_value_error_long(obj: Any) -> None:
    _check_pod(obj)


@pytest.mark.parametrize("path", [("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid"),
                                  ("metadata", "creationTimestamp"), ("status", "qosClass"), ("status", "phase"),
                                  ("spec", "priority"), ("spec", "containers", 0, "resources", "requests", "cpu")])
def test_pod_field_nested_too_deep_is_a_value_error(path: tuple[Any, ...]) -> None:
    """Found by the property: str()/repr() of a value nested ~1,000 levels deep (in the error message, or the
    message prefix naming the pod) raised RecursionError out of pod_from_k8s."""
    obj = pod_object(str(uuid.UUID(int=7)), "p", spec_containers=[{"name": "c", "resources": {"requests": {}}}])
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _nest(2000, False, "x")
    with pytest.raises(ValueError, match=r"^pod (default|\?)/(p|\?): "):
        pod_from_k8s(obj)


@st.composite
def _pods_file(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    """(document, the valid pods in it): valid pods with distinct UIDs, arbitrary entries between them (mutated
    pods get their own UIDs, so they can never make a valid pod a duplicate), as a list or a kind: List."""
    uids = draw(st.lists(_UIDS, max_size=5, unique=True))
    valid = [draw(_valid_pod(uid)) for uid in uids]
    others = draw(st.lists(st.one_of(_JSON, st.builds(_nest, st.integers(0, 100), st.booleans(), _LEAF).map(
                                         lambda v: {"metadata": v}),                # deeper than 64: file refused
                                     _mutated(pod_object("mutated", "m"), _JSON)), max_size=5))
    entries = [*valid, *others]
    order = draw(st.permutations(range(len(entries))))
    items = [entries[i] for i in order]
    return (draw(st.sampled_from([items, {"kind": "List", "items": items}])), valid)


def _depth(value: Any) -> int:
    """Nesting as the YAML loader counts it: nodes on the longest path, the scalar at its end included."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 1


def _check_pods_file(path: str, doc: Any, valid: list[dict[str, Any]], as_json: bool) -> None:
    """The file (as YAML, or as JSON, which the loader reads with the json module) gives every valid pod, and
    exactly what pod_from_k8s gives entry by entry (first UID wins); only a file nested too deep is refused."""
    _Writer(path)(json.dumps(doc).encode() if as_json else _dump(doc))
    if _depth(doc) > yamlfile.MAX_DEPTH:    # an arbitrary entry nested too deep for the file: all refused alike
        with pytest.raises(PodsFileError, match="nested deeper"):
            load_pods_file(path)
        return
    pods, errors = within_budget("load_pods_file", load_pods_file, path, budget=file_budget(os.path.getsize(path)))
    for obj in valid:                       # one bad entry never loses the others
        uid = obj["metadata"]["uid"]
        assert uid in pods and pods[uid].name == obj["metadata"]["name"]
    expected: dict[str, Any] = {}
    items = doc if isinstance(doc, list) else doc["items"]
    for entry in items:                     # the same data: YAML and JSON round-trip these values exactly
        try:
            pod = pod_from_k8s(entry)
        except ValueError:
            continue
        expected.setdefault(pod.uid, pod)
    assert {u: p.name for u, p in pods.items()} == {u: p.name for u, p in expected.items()}
    assert len(errors) == len(items) - len(expected)


@_FAST
@given(case=_pods_file(), as_json=st.booleans())
def test_property_pods_file_keeps_every_good_entry(fuzz_file: str, case: tuple[Any, list[dict[str, Any]]],
                                                   as_json: bool) -> None:
    _check_pods_file(fuzz_file, *case, as_json)


@pytest.mark.slow
@_LONG
@given(case=_pods_file(), as_json=st.booleans())
def test_property_pods_file_keeps_every_good_entry_long(fuzz_file: str, case: tuple[Any, list[dict[str, Any]]],
                                                        as_json: bool) -> None:
    _check_pods_file(fuzz_file, *case, as_json)


# ------------------------------------------------------------------------------------------------ YARN Copilot


def _container_info(n: int) -> dict[str, Any]:
    name = f"container_1700000000000_0001_01_{n:06d}"
    quantities = {"cpu": "1", "memory": "1073741824"}
    return {"name": name, "namespace": "yarn", "uid": name, "labels": None, "annotations": None, "priority": 1,
            "createTimestamp": "0001-01-01T00:00:00Z", "cgroupDir": f"kubepods/besteffort/hadoop-yarn/{name}",
            "hostNetwork": True, "resources": {"limits": dict(quantities), "requests": dict(quantities)}}


_LISTING = st.one_of(_VALUE, _mutated([_container_info(1), _container_info(2), _container_info(3)]))
_RELEASED = st.one_of(_VALUE, _mutated({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}))


def _json_bytes(value: Any) -> bytes:
    """``value`` as JSON text; one nested past what json.dumps can write is written by hand (as a peer could)."""
    try:
        return json.dumps(value).encode()
    except RecursionError:
        return b"[" * 3000 + b"]" * 3000


def _check_listing(value: Any) -> None:
    try:
        containers, problems = within_budget("parse_containers", parse_containers, _json_bytes(value))
    except CopilotError:
        return
    assert all(c.name and c.uid and c.cgroup_dir for c in containers)
    assert len({c.uid for c in containers}) == len(containers)
    if isinstance(value, list):                  # one container or one problem per entry at most
        assert len(containers) + len(problems) <= len(value)
    else:                                        # JSON null: Go's nil list
        assert value is None and not containers and not problems


def _check_released(value: Any) -> None:
    try:
        released = within_budget("parse_released", parse_released, _json_bytes(value))
    except CopilotError:
        return
    assert set(released) <= {"kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"}
    assert all(isinstance(v, int) and v >= 0 for v in released.values())


@_FAST
@given(value=_LISTING)
def test_property_copilot_listing_fails_only_with_copilot_error(value: Any) -> None:
    _check_listing(value)


@pytest.mark.slow
@_LONG
@given(value=_LISTING)
def test_property_copilot_listing_fails_only_with_copilot_error_long(value: Any) -> None:
    _check_listing(value)


@_FAST
@given(value=_RELEASED)
def test_property_copilot_released_fails_only_with_copilot_error(value: Any) -> None:
    _check_released(value)


@pytest.mark.slow
@_LONG
@given(value=_RELEASED)
def test_property_copilot_released_fails_only_with_copilot_error_long(value: Any) -> None:
    _check_released(value)


# ------------------------------------------------------------------------------------------------ NRI transport

_TT = struct.Struct(">IIBB")
_MX = struct.Struct(">II")
_SERVICE = "nri.pkg.api.v1alpha1.Plugin"


def _lengths(limits: list[int]) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 64),
                     st.sampled_from([n + d for n in limits for d in (-1, 0, 1)] + [2**32 - 1]))


_REQUEST = st.builds(lambda service, method, payload, timeout: ttrpc_pb2.Request(
    service=service, method=method, payload=payload, timeout_nano=timeout).SerializeToString(),
    st.sampled_from([_SERVICE, "other"]) | st.text(max_size=8), st.sampled_from(["Configure", "Nope"]),
    st.binary(max_size=40), st.integers(-(2**63), 2**63 - 1))
_DATA = st.one_of(st.binary(max_size=60), _REQUEST)
_TTRPC_MESSAGE = st.builds(lambda sid, typ, flags, data: _TT.pack(len(data), sid, typ, flags) + data,
                           st.integers(0, 2**32 - 1) | st.sampled_from([1, 2, 3, 5, 7]),
                           st.integers(0, 255) | st.sampled_from([1, 2, 3]), st.integers(0, 255), _DATA)
_TTRPC_HEADER = st.builds(_TT.pack, _lengths([64, 256, ttrpc.MAX_DATA, ttrpc.MAX_DISCARD]), st.integers(0, 2**32 - 1),
                          st.integers(0, 255), st.integers(0, 255))
_TTRPC_STREAM = st.lists(st.one_of(_TTRPC_MESSAGE, _TTRPC_HEADER, st.binary(max_size=30)), max_size=12).map(b"".join)


def _mux_frame(conn: int, payload: bytes) -> bytes:
    return _MX.pack(conn, len(payload)) + payload


_MUX_STREAM = st.lists(st.one_of(
    st.builds(_mux_frame, st.sampled_from([0, 1, 2, 3, 9]) | st.integers(0, 2**32 - 1),
              _TTRPC_STREAM | st.binary(max_size=60)),
    st.builds(_MX.pack, st.sampled_from([0, 1, 2, 3]), _lengths([64, 256, mux.MAX_RECV_FRAME])),
    st.binary(max_size=20)), max_size=10).map(b"".join)
_CUTS = st.lists(st.integers(0, 4096), max_size=12)


def _chunks(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def _reference_ttrpc(stream: bytes) -> tuple[list[ttrpc.Message], bool]:
    """(the messages in ``stream``, whether it breaks the framing): one pass over the whole stream."""
    out, off = [], 0
    while len(stream) - off >= _TT.size:
        length, sid, typ, flags = _TT.unpack_from(stream, off)
        if length > ttrpc.MAX_DISCARD:
            return out, True
        if len(stream) - off - _TT.size < length:
            break
        data = stream[off + _TT.size:off + _TT.size + length] if length <= ttrpc.MAX_DATA else None
        out.append(ttrpc.Message(sid, typ, flags, data))
        off += _TT.size + length
    return out, False


def _limits(small: bool) -> contextlib.AbstractContextManager[Any]:
    """The real size limits, or small ones (64 B data, 256 B discarded) so whole oversized messages fit in an
    example and the discard-and-resync path runs to its end."""
    return mock.patch.multiple(ttrpc, MAX_DATA=64, MAX_DISCARD=256) if small else contextlib.nullcontext()


def _check_ttrpc(stream: bytes, cuts: list[int], small: bool) -> None:
    with _limits(small):
        expected, broken = _reference_ttrpc(stream)

        def feed_all() -> tuple[list[ttrpc.Message], bool]:
            decoder, got, fed = Decoder(), [], 0
            for chunk in _chunks(stream, cuts):
                fed += len(chunk)
                try:
                    got += decoder.feed(chunk)
                except ProtocolError:
                    return got, True
                # bounded memory: nothing beyond what was sent, and never more than one message
                assert len(decoder._buf) <= min(fed, _TT.size + ttrpc.MAX_DATA)
            return got, False

        got, raised = within_budget("ttrpc Decoder", feed_all)
        assert raised == broken
        assert got == expected if not broken else got == expected[:len(got)]


@_FAST
@given(stream=_TTRPC_STREAM, cuts=_CUTS, small=st.booleans())
def test_property_ttrpc_decoder_any_stream_any_split(stream: bytes, cuts: list[int], small: bool) -> None:
    _check_ttrpc(stream, cuts, small)


@pytest.mark.slow
@_LONG
@given(stream=_TTRPC_STREAM, cuts=_CUTS, small=st.booleans())
def test_property_ttrpc_decoder_any_stream_any_split_long(stream: bytes, cuts: list[int], small: bool) -> None:
    _check_ttrpc(stream, cuts, small)


class _Transport(asyncio.Transport):
    """Collects what the mux writes; abort() marks it closing."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def _reference_mux(stream: bytes, conns: set[int]) -> tuple[list[tuple[int, bytes]], bool]:
    """(the frames of ``conns`` in ``stream``, whether it breaks the framing): one pass over the whole stream."""
    out, off = [], 0
    while len(stream) - off >= _MX.size:
        conn, length = _MX.unpack_from(stream, off)
        if length > mux.MAX_RECV_FRAME:
            return out, True
        if len(stream) - off - _MX.size < length:
            break
        if conn == 0:
            return out, True
        if conn in conns:
            out.append((conn, stream[off + _MX.size:off + _MX.size + length]))
        off += _MX.size + length
    return out, False


Sinks = Callable[[Mux], list[tuple[int, Callable[[bytes], None], mux.Partial | None]]]


async def _run_mux(chunks: list[bytes], sinks: Sinks) -> tuple[Mux, _Transport]:
    """A trunk fed ``chunks`` one ``data_received`` at a time (until it closes); its conns opened by ``sinks``."""
    trunk = Mux(peer="fuzz")
    transport = _Transport()
    trunk.connection_made(transport)
    for conn, sink, partial in sinks(trunk):
        trunk.open(conn, sink, partial)
    for chunk in chunks:
        trunk.data_received(chunk)
        await asyncio.sleep(0)                   # handlers answer in tasks
        if trunk.closed.done():
            break
        assert len(trunk._buf) <= mux.MAX_RECV_FRAME + _MX.size      # at most one incomplete frame is kept
    await asyncio.sleep(0)
    trunk._finish("done")                        # cancel the partial-frame timer
    return trunk, transport


def _check_mux(stream: bytes, cuts: list[int], small: bool) -> None:
    """Frames of conns 1 and 2 reach their sinks exactly as a one-pass parse finds them, others are dropped, and
    the trunk closes for a protocol error exactly when the stream breaks the framing."""
    with mock.patch.multiple(mux, MAX_RECV_FRAME=256 if small else mux.MAX_RECV_FRAME):
        got: list[tuple[int, bytes]] = []
        expected, broken = _reference_mux(stream, {1, 2})

        def run() -> Mux:
            got.clear()
            return asyncio.run(_run_mux(_chunks(stream, cuts), lambda _: [
                (1, lambda b: got.append((1, b)), None), (2, lambda b: got.append((2, b)), None)]))[0]

        trunk = within_budget("Mux", run)
        reason = trunk.closed.result()
        assert reason.startswith("protocol error") == broken, reason
        assert got == expected


@_FAST
@given(stream=_MUX_STREAM, cuts=_CUTS, small=st.booleans())
def test_property_mux_any_stream_any_split(stream: bytes, cuts: list[int], small: bool) -> None:
    _check_mux(stream, cuts, small)


@pytest.mark.slow
@_LONG
@given(stream=_MUX_STREAM, cuts=_CUTS, small=st.booleans())
def test_property_mux_any_stream_any_split_long(stream: bytes, cuts: list[int], small: bool) -> None:
    _check_mux(stream, cuts, small)


async def _echo(payload: bytes, deadline: float | None) -> bytes:
    return payload


def _check_stack(stream: bytes, cuts: list[int]) -> None:
    """The whole inbound path (mux -> ttRPC channel -> request envelope -> handler -> response): whatever arrives,
    the trunk stays open or closes for a protocol error, never for an exception inside it, and what it sends
    back is well-formed frames of at most 4096 bytes."""
    def sinks(trunk: Mux) -> list[tuple[int, Callable[[bytes], None], mux.Partial | None]]:
        out: list[tuple[int, Callable[[bytes], None], mux.Partial | None]] = []
        for conn in (1, 2):
            ch = Channel(functools.partial(trunk.send, conn), {_SERVICE: {"Configure": _echo}}, name=str(conn))
            out.append((conn, ch.feed, ch.partial))
        return out

    trunk, transport = asyncio.run(_run_mux(_chunks(stream, cuts), sinks))
    reason = trunk.closed.result()
    assert reason == "done" or reason.startswith("protocol error"), reason
    out = b"".join(transport.written)
    while out:
        conn, length = _MX.unpack_from(out)
        assert conn in (1, 2) and length <= mux.MAX_SEND_FRAME
        out = out[_MX.size + length:]


_STACK_STREAM = st.lists(st.builds(_mux_frame, st.sampled_from([1, 2]), _TTRPC_STREAM) | st.binary(max_size=12),
                         max_size=6).map(b"".join)


@_FAST
@given(stream=_STACK_STREAM, cuts=_CUTS)
def test_property_nri_inbound_stack_fails_only_with_protocol_errors(stream: bytes, cuts: list[int]) -> None:
    _check_stack(stream, cuts)


@pytest.mark.slow
@_LONG
@given(stream=_STACK_STREAM, cuts=_CUTS)
def test_property_nri_inbound_stack_fails_only_with_protocol_errors_long(stream: bytes, cuts: list[int]) -> None:
    _check_stack(stream, cuts)


@pytest.mark.parametrize("length", [ttrpc.MAX_DATA, ttrpc.MAX_DATA + 1, ttrpc.MAX_DISCARD, 2**32 - 1])
def test_ttrpc_header_announcing_a_huge_message_allocates_nothing_up_front(length: int) -> None:
    decoder = Decoder()
    tracemalloc.start()
    try:
        try:
            decoder.feed(_TT.pack(length, 1, ttrpc.TYPE_REQUEST, 0) + b"x" * 100)
        except ProtocolError:
            assert length > ttrpc.MAX_DISCARD
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


@pytest.mark.parametrize("length", [mux.MAX_RECV_FRAME, mux.MAX_RECV_FRAME + 1, 2**32 - 1])
def test_mux_header_announcing_a_huge_frame_allocates_nothing_up_front(length: int) -> None:
    async def feed() -> int:
        trunk = Mux(peer="fuzz")
        trunk.connection_made(_Transport())
        trunk.open(1, lambda b: None)
        tracemalloc.start()
        try:
            trunk.data_received(_MX.pack(1, length) + b"x" * 100)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert trunk.closed.done() == (length > mux.MAX_RECV_FRAME)
        trunk._finish("done")
        return peak

    assert asyncio.run(feed()) < 64 * 1024
