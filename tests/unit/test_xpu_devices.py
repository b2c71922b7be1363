"""Non-NVIDIA accelerators in the Device object from koord-device-daemon's device-info files (real files in a
temporary xpu-device-infos-dir), as upstream koordlet reads and reports them (states_device_linux.go)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles import fakenvml
from doubles.crdschema import CrdSchemas
from koordlet.host.nvml import Nvml
from koordlet.host.paths import HostPaths
from koordlet.host.xpu import MAX_FILE_BYTES, read_device_info_files
from koordlet.reporters import device
from koordlet.reporters.xpu import (
    XpuSource,
    decode_device_infos,
    xpu_annotations,
    xpu_devices,
    xpu_labels,
    xpu_partitions,
)
from koordlet.states.decode import DecodeError
from koordlet.states.node import NodeInfo
from tests.budget import within_budget

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = CrdSchemas.load(REPO_ROOT / "deploy" / "crds")
NOW = 1_700_000_000.0
NODE = NodeInfo("npu-node", "node-uid-1")
STAMP = "2023-11-14T22:13:20Z"


def ascend(minor: int, peers: str | None = "", honor: bool = False, **extra) -> dict:
    """An Ascend 910B as koord-device-daemon writes it (upstream's collector_xpu_test.go example)."""
    topology: dict = {"socketID": "0", "nodeID": str(minor // 4), "pcieID": f"0000:0{minor}:08.0",
                      "busID": f"0000:0{minor}:08.0"}
    if peers is not None:
        topology["p2pLinks"] = [{"peerMinor": peers, "type": "HCCS"}] if peers else []
    if honor:
        topology["mustHonorPartition"] = True
    return {"vendor": "huawei", "model": "Ascend-910B", "uuid": f"185011D4-21104518-A0C4ED94-14CC040A-5610200{minor}",
            "minor": str(minor),
            "resources": {"huawei.com/npu-core": "32", "koordinator.sh/gpu-memory": "32Gi", "huawei.com/dvpp": "100"},
            "topology": topology, "status": {"healthy": True}, **extra}


def write(directory: Path, name: str, content: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def desired(xpus, gpus=None, now=NOW) -> dict:
    obj = device.desired(NODE, gpus, lambda bus_id: None, [], "Prefer", now, xpus)
    assert SCHEMAS.validate(obj) == []
    return obj


def test_ascend_node_device_labels_and_partitions(tmp_path):
    infos = tmp_path / "xpu-device-infos"
    # two files, read in name order; the first device read gives the labels
    write(infos, "b-ascend.json", [ascend(2, "0,1,3"), ascend(3, "0,1,2")])
    write(infos, "a-ascend.json", [ascend(1, "0,2,3", honor=True), ascend(0, "1,2,3")])
    obj = desired(XpuSource(str(infos)).read())
    assert obj["metadata"]["labels"] == {"node.koordinator.sh/gpu-model": "Ascend-910B",
                                         "node.koordinator.sh/gpu-vendor": "huawei",
                                         "node.koordinator.sh/gpu-partition-policy": "Honor"}
    # one partition per distinct minor set (peers + own minor), allocationScore 1, no bandwidth
    assert json.loads(obj["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"]) == {
        "4": [{"minors": [0, 1, 2, 3], "gpuLinkType": "HCCS", "allocationScore": 1}]}
    devices = obj["spec"]["devices"]
    assert [d["minor"] for d in devices] == [0, 1, 2, 3]
    assert devices[0] == {
        "type": "gpu", "id": "185011D4-21104518-A0C4ED94-14CC040A-56102000", "minor": 0, "health": True,
        "resources": {"koordinator.sh/gpu-memory-ratio": "100", "huawei.com/npu-core": "32",
                      "koordinator.sh/gpu-memory": "32Gi", "huawei.com/dvpp": "100"},
        "topology": {"socketID": -1, "nodeID": 0, "pcieID": "0000:00:08.0", "busID": "0000:00:08.0"},
        "conditions": [{"type": "Healthy", "status": "True", "lastTransitionTime": STAMP, "reason": "DeviceHealthy",
                        "message": "device is healthy"}]}


def test_field_rules(tmp_path):
    infos = tmp_path / "infos"
    write(infos, "x.json", [
        {"vendor": "cambricon", "model": "MLU370", "uuid": "u-b", "minor": "x7",
         "resources": {"gpu-core": "100", "gpu-memory": "24Gi", "gpu-memory-ratio": "50", "bad": "lots"},
         "topology": {"nodeID": "", "pcieID": "pci0000:3a"},
         "status": {"healthy": False, "errMessage": "ecc errors"}},
        {"vendor": "cambricon", "model": "MLU370", "uuid": "u-a", "minor": "9999999999",
         "topology": {"nodeID": "one"}, "status": {"healthy": False, "errCode": "Xid79"}},
        {"vendor": "cambricon", "model": "MLU370", "uuid": "u-c", "minor": "3"},
    ])
    obj = desired(XpuSource(str(infos)).read())
    by_id = {d["id"]: d for d in obj["spec"]["devices"]}
    b, a, c = by_id["u-b"], by_id["u-a"], by_id["u-c"]
    # gpu-core / gpu-memory get the koordinator.sh/ prefix, other names are kept; a bad quantity is left out
    assert b["resources"] == {"koordinator.sh/gpu-memory-ratio": "100", "koordinator.sh/gpu-core": "100",
                              "koordinator.sh/gpu-memory": "24Gi", "gpu-memory-ratio": "50"}
    assert b["minor"] == 0 and a["minor"] == 2**31 - 1            # ParseInt's results on error
    assert b["topology"] == {"socketID": -1, "nodeID": -1, "pcieID": "pci0000:3a"}   # empty nodeID, no busID
    assert a["topology"] == {"socketID": -1, "nodeID": 0, "pcieID": ""}
    assert (b["health"], a["health"], c["health"]) == (False, False, True)
    assert b["conditions"][0] | {"lastTransitionTime": ""} == {
        "type": "Healthy", "status": "False", "lastTransitionTime": "", "reason": "Unknown", "message": "ecc errors"}
    assert (a["conditions"][0]["reason"], a["conditions"][0]["message"]) == ("Xid79", "device is unhealthy")
    assert "topology" not in c and "conditions" not in c and c["resources"] == {"koordinator.sh/gpu-memory-ratio":
                                                                                "100"}
    # no p2p links on the first device: no partition policy label, no partition table
    assert obj["metadata"]["labels"] == {"node.koordinator.sh/gpu-model": "MLU370",
                                         "node.koordinator.sh/gpu-vendor": "cambricon"}
    assert "annotations" not in obj["metadata"]


def test_empty_p2p_list_still_sets_prefer():
    (first,) = decode_device_infos(json.dumps([ascend(0, peers="")]))
    assert first.topology is not None and first.topology.p2p_links == ()
    obj = desired([first])
    assert obj["metadata"]["labels"]["node.koordinator.sh/gpu-partition-policy"] == "Prefer"
    assert "annotations" not in obj["metadata"]


def test_partition_table_dedupes_skips_bad_links_and_sorts_keys_as_go():
    xpus = decode_device_infos(json.dumps(
        [ascend(m, "") | {"topology": {"p2pLinks": links}} for m, links in (
            (0, [{"peerMinor": "1", "type": "HCCS"}, {"peerMinor": "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15",
                                                        "type": "HCCS"}]),
            (1, [{"peerMinor": "0", "type": "HCCS"}, {"peerMinor": "", "type": "HCCS"}, {"peerMinor": "2"}]),
            (2, [{"peerMinor": "3, 4", "type": "PCIe"}]))]))
    table = xpu_partitions(xpus)
    assert list(table) == ["16", "2"]                   # encoding/json sorts map keys as strings
    assert table["2"] == [{"minors": [0, 1], "gpuLinkType": "HCCS", "allocationScore": 1},
                          {"minors": [2, 3], "gpuLinkType": "PCIe", "allocationScore": 1}]   # " 4" is not a number
    assert table["16"][0]["minors"] == list(range(16))


def test_xpus_replace_nvml_gpus_and_nvml_is_the_fallback(tmp_path, monkeypatch):
    paths = HostPaths.under(str(tmp_path / "host"))
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fakenvml.l40s_pcie4(paths))
    inv = Nvml.open(paths).inventory()
    infos = tmp_path / "infos"
    source = XpuSource(str(infos))
    nvml_only = desired(source.read(), inv)            # no directory: NVML's GPUs, NVML's labels
    assert nvml_only["metadata"]["labels"]["node.koordinator.sh/gpu-vendor"] == "nvidia"
    assert len(nvml_only["spec"]["devices"]) == 4
    write(infos, "empty.json", "[]\n")
    write(infos, "null.json", "null")
    assert desired(source.read(), inv) == nvml_only    # files listing no device: still NVML
    write(infos, "npu.json", [ascend(0)])
    obj = desired(source.read(), inv)
    assert [d["id"] for d in obj["spec"]["devices"]] == [ascend(0)["uuid"]]
    assert obj["metadata"]["labels"]["node.koordinator.sh/gpu-vendor"] == "huawei"
    assert "annotations" not in obj["metadata"]       # NVML's partition table goes with NVML's GPUs


def test_bad_file_keeps_the_last_good_read(tmp_path, caplog):
    infos = tmp_path / "infos"
    write(infos, "npu.json", [ascend(0), ascend(1)])
    source = XpuSource(str(infos))
    assert [x.minor for x in source.read()] == ["0", "1"]
    write(infos, "npu.json", '[{"vendor": "huawei", "minor": 1}]')          # minor must be a string
    with caplog.at_level(logging.WARNING):
        assert [x.minor for x in source.read()] == ["0", "1"]
        assert [x.minor for x in source.read()] == ["0", "1"]
    assert caplog.text.count("npu.json: [0].minor: expected a string") == 1    # logged once
    write(infos, "npu.json", "{not json")
    assert [x.minor for x in source.read()] == ["0", "1"]
    write(infos, "npu.json", [ascend(5)])
    assert [x.minor for x in source.read()] == ["5"]


@pytest.mark.parametrize("content", ['{"vendor": "huawei"}', "[1]", '[{"topology": {"p2pLinks": {}}}]',
                                     '[{"resources": {"a": 1}}]', '[{"status": {"healthy": "yes"}}]',
                                     "[" * 100 + "]" * 100])
def test_decoder_refuses_what_go_would_not_decode(content):
    with pytest.raises(ValueError):
        decode_device_infos(content)


def test_reader_bounds_and_skips(tmp_path):
    infos = tmp_path / "infos"
    write(infos, "a.json", "[]")
    (infos / "subdir").mkdir()
    (infos / "dangling").symlink_to(infos / "missing")
    assert read_device_info_files(str(infos)) == [("a.json", "[]")]
    write(infos, "big.json", " " * (MAX_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="more than the"):
        read_device_info_files(str(infos))
    with pytest.raises(FileNotFoundError):
        read_device_info_files(str(tmp_path / "absent"))


def test_merge_keeps_condition_times_and_is_stable(tmp_path):
    infos = tmp_path / "infos"
    write(infos, "npu.json", [ascend(0), ascend(1) | {"status": {"healthy": False, "errCode": "E1"}}])
    source = XpuSource(str(infos))
    live = desired(source.read(), now=NOW)
    merged, reason = device.merge(live, desired(source.read(), now=NOW + 60))
    assert merged is None and reason == ""                  # an unchanged device set causes no update


# ------------------------------------------------------------------------------------ property: any file content

_SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_KEYS = st.sampled_from(["vendor", "model", "uuid", "minor", "resources", "topology", "status", "p2pLinks",
                         "peerMinor", "type", "mustHonorPartition", "nodeID", "pcieID", "busID", "healthy",
                         "errCode", "x"])
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=6),
                     max_leaves=40)
_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]


def _decode_and_build(doc) -> None:
    text = json.dumps(doc)
    try:
        xpus = within_budget("decode_device_infos", decode_device_infos, text)
    except DecodeError:
        return
    xpu_devices(xpus, NOW), xpu_labels(xpus), xpu_annotations(xpus)


@settings(max_examples=60, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)
@given(doc=_JSON | st.lists(st.dictionaries(_KEYS, _JSON, max_size=7), max_size=3))
def test_property_any_device_info_is_a_decode_error_or_reported(doc) -> None:
    _decode_and_build(doc)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)
@given(doc=_JSON | st.lists(st.dictionaries(_KEYS, _JSON, max_size=7), max_size=3))
def test_property_any_device_info_is_a_decode_error_or_reported_long(doc) -> None:
    _decode_and_build(doc)
