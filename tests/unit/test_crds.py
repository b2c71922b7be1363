"""deploy/crds and deploy/rbac.yaml against upstream facts, and the CRD validator the other tests rely on.

Identities (group, kind, plural, scope, versions, subresources) are asserted against upstream's CRDs and API types
(koordinator config/crd/bases, apis/slo/v1alpha1, apis/scheduling/v1alpha1; the NodeResourceTopology API of
k8stopologyawareschedwg), never read back from the files under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from doubles.crdschema import CrdSchemas
from koordlet.metriccache import MetricCache, Sample
from koordlet.reporters.nodemetric import CollectPolicy, NodeMetricBuilder, node_metric_object

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRDS = DEPLOY / "crds"

# (group, kind) -> plural, scope, {version: (served, storage, status subresource)}
EXPECTED = {
    ("slo.koordinator.sh", "NodeMetric"): ("nodemetrics", "Cluster", {"v1alpha1": (True, True, True)}),
    ("slo.koordinator.sh", "NodeSLO"): ("nodeslos", "Cluster", {"v1alpha1": (True, True, True)}),
    ("scheduling.koordinator.sh", "Device"): ("devices", "Cluster", {"v1alpha1": (True, True, False)}),
    ("topology.node.k8s.io", "NodeResourceTopology"): (
        "noderesourcetopologies", "Cluster", {"v1alpha1": (True, False, False), "v1alpha2": (True, True, False)}),
}
QTY_ERROR = "is not a valid quantity"


@pytest.fixture(scope="module")
def schemas() -> CrdSchemas:
    return CrdSchemas.load(CRDS)


def tree(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without shared sub-objects (deepcopy keeps sharing), so a test edits exactly one place."""
    return json.loads(json.dumps(obj))


def errors_at(errors: list[str], path: str) -> list[str]:
    """The errors whose path is exactly ``path``."""
    return [e for e in errors if e.split(": ", 1)[0] == path]


# --- realistic objects, shaped as upstream's JSON -----------------------------------------------------------

GPU_INFO = {"type": "gpu", "id": "GPU-5c4d1b6e-0b8a-4f41-9c55-2d1f3a3c7e10", "minor": 0, "health": False,
            "resources": {"koordinator.sh/gpu-core": "37", "koordinator.sh/gpu-memory": "8589934592",
                          "koordinator.sh/gpu-memory-ratio": "25"}}


def node_metric() -> dict[str, Any]:
    usage = {"resources": {"cpu": "1250m", "memory": "4194304Ki"}}
    agg = [{"usage": {"avg": usage, "p50": usage, "p90": usage, "p95": usage, "p99": usage}, "duration": "5m0s"},
           {"usage": {"p50": {}, "p90": {}, "p95": {}, "p99": {}}, "duration": "30m0s"}]
    return tree({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": "gpu-node-7", "resourceVersion": "4711"},
        "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
                                         "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
                                         "nodeMemoryCollectPolicy": "usageWithoutPageCache"}},
        "status": {
            "updateTime": "2024-05-01T08:00:00Z",
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": "12", "memory": 17179869184}, "devices": [GPU_INFO]},
                "aggregatedNodeUsages": agg,
                "systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}},
                "aggregatedSystemUsages": agg,
                "numaUsages": [{"numaNodeID": 0, "nodeUsage": usage, "systemUsage": usage},
                               {"numaNodeID": 1, "nodeUsage": usage}],
            },
            "podsMetric": [{"namespace": "shop", "name": "web-0", "priority": "koord-prod", "qos": "LS",
                            "podUsage": {"resources": {"cpu": "250m", "memory": "64Mi"}, "devices": [GPU_INFO]},
                            "extensions": {"anything": {"nested": [1, "two", None]}}}],
            "hostApplicationMetric": [{"name": "nginx", "usage": usage, "priority": "koord-prod", "qos": "LS"}],
            "prodReclaimableMetric": {"resource": {}},
            "prodPeakMetric": {"resource": {"resources": {"cpu": "3", "memory": "2Gi"}}},
        },
    })


def node_slo() -> dict[str, Any]:
    cls = {"cpuQOS": {"enable": True, "groupIdentity": 2, "schedIdle": 0, "coreExpeller": True},
           "memoryQOS": {"enable": False, "minLimitPercent": 0, "wmarkRatio": 95, "wmarkScalePermill": 20,
                         "wmarkMinAdj": -25, "pageCacheLimitSize": 1 << 30},
           "resctrlQOS": {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100},
           "blkioQOS": {"enable": True, "blocks": [{"name": "/dev/vda", "type": "device",
                                                     "ioCfg": {"readIOPS": 1000, "ioWeightPercent": 60}}]},
           "networkQOS": {"enable": True, "ingressRequest": 10, "ingressLimit": "1Gi", "egressRequest": 0,
                          "egressLimit": 100}}
    return tree({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "gpu-node-7"},
        "spec": {
            "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                            "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70,
                                            "cpuEvictPolicy": "evictByRealLimit",
                                            "evictEnabledPriorityThreshold": 5999},
            "resourceQOSStrategy": {"policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
                                    "lsrClass": cls, "lsClass": cls, "beClass": cls, "systemClass": cls,
                                    "cgroupRoot": {"blkioQOS": {"enable": False, "blocks": []}}},
            "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                                 "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
            "systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                               "schedFeatures": {"ID_ABSOLUTE_EXPEL": True}, "totalNetworkBandwidth": "10G"},
            "extensions": {"Object": {"someExtension": {"enable": True}}},
            "hostApplications": [{"name": "nginx", "priority": "koord-prod", "qos": "LS",
                                  "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive",
                                                 "relativePath": "nginx"}, "strategy": {}}],
        },
        "status": {},
    })


def device() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
        "metadata": {"name": "gpu-node-7",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "gpu-node-7",
                                          "uid": "0b0f3c1e-6a5e-4c1b-9e53-3a5f0d7c9a11", "controller": True,
                                          "blockOwnerDeletion": True}],
                     "labels": {"node.koordinator.sh/gpu-vendor": "nvidia",
                                "node.koordinator.sh/gpu-model": "NVIDIA-H200"},
                     "annotations": {"scheduling.koordinator.sh/gpu-partitions":
                                     '{"1":[{"minors":[0],"gpuLinkType":"NVLink","allocationScore":1}]}'}},
        "spec": {"devices": [
            {"type": "gpu", "id": "GPU-5c4d1b6e", "minor": 0, "health": True,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "150754820096",
                           "koordinator.sh/gpu-memory-ratio": "100"},
             "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"},
             "conditions": [{"type": "Healthy", "status": "True", "reason": "DeviceHealthy",
                             "message": "device is healthy", "lastTransitionTime": "2024-05-01T08:00:00Z"}]},
            {"type": "rdma", "id": "0000:5e:00.0", "minor": 1, "health": True,
             "resources": {"koordinator.sh/rdma": "100"},
             "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:5d", "busID": "0000:5e:00.0"},
             # upstream's Go marshals the nil label map of a VF group as null
             "vfGroups": [{"labels": None, "vfs": [{"minor": -1, "busID": "0000:5e:00.2"}]}]},
        ]},
    }


def nrt(version: str = "v1alpha1") -> dict[str, Any]:
    def zone(i: int) -> dict[str, Any]:
        return {"name": f"node-{i}", "type": "Node", "resources": [
            {"name": "cpu", "capacity": 48, "allocatable": 48, "available": 48},
            {"name": "hugepages-1Gi", "capacity": "0", "allocatable": "0", "available": "0"},
            {"name": "memory", "capacity": "270157025280", "allocatable": "264Gi", "available": "264Gi"}]}

    return {
        "apiVersion": f"topology.node.k8s.io/{version}", "kind": "NodeResourceTopology",
        "metadata": {"name": "gpu-node-7", "labels": {"app.kubernetes.io/managed-by": "Koordinator"},
                     "annotations": {"node.koordinator.sh/cpu-topology":
                                     '{"detail":[{"id":0,"core":0,"socket":0,"node":0}]}',
                                     "node.koordinator.sh/pod-cpu-allocs": "null",
                                     "kubelet.koordinator.sh/cpu-manager-policy": "{}"}},
        "topologyPolicies": ["None"],
        "zones": [zone(0), zone(1)],
    }


# --- the CRD files ---------------------------------------------------------------------------------------------

def test_every_file_holds_one_crd_named_after_it():
    files = sorted(CRDS.glob("*.yaml"))
    assert len(files) == len(EXPECTED)
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert len(docs) == 1, path
        doc = docs[0]
        assert (doc["apiVersion"], doc["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        spec = doc["spec"]
        assert path.name == f"{spec['group']}_{spec['names']['plural']}.yaml"
        assert doc["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"


@pytest.mark.parametrize("group,kind", list(EXPECTED))
def test_identity_matches_upstream(schemas, group, kind):
    plural, scope, versions = EXPECTED[(group, kind)]
    crd = schemas.crd(group, kind)
    assert crd["spec"]["names"]["plural"] == plural
    assert crd["spec"]["names"]["listKind"] == f"{kind}List"
    assert crd["spec"]["scope"] == scope
    got = {v["name"]: (v["served"], v["storage"]) for v in crd["spec"]["versions"]}
    assert got == {name: (served, storage) for name, (served, storage, _) in versions.items()}
    for name, (_, _, status) in versions.items():
        assert schemas.has_status_subresource(group, name, kind) is status
        root = next(v for v in crd["spec"]["versions"] if v["name"] == name)["schema"]["openAPIV3Schema"]
        assert root["type"] == "object"


def test_k8s_io_group_carries_api_approval(schemas):
    # the apiserver refuses a v1 CRD in a *.k8s.io group without this annotation
    annotations = schemas.crd("topology.node.k8s.io", "NodeResourceTopology")["metadata"]["annotations"]
    assert annotations["api-approved.kubernetes.io"].startswith("https://")


def test_unknown_kind_or_version_is_a_key_error(schemas):
    with pytest.raises(KeyError):
        schemas.validate({**node_metric(), "apiVersion": "slo.koordinator.sh/v1beta1"})
    with pytest.raises(KeyError):
        schemas.validate({**node_metric(), "kind": "NodeMetrics"})
    with pytest.raises(KeyError):
        schemas.has_status_subresource("scheduling.koordinator.sh", "v1alpha1", "Reservation")


# --- accepting what upstream sends ----------------------------------------------------------------------------

@pytest.mark.parametrize("build", [node_metric, node_slo, device, nrt, lambda: nrt("v1alpha2")],
                         ids=["NodeMetric", "NodeSLO", "Device", "NRT-v1alpha1", "NRT-v1alpha2"])
def test_realistic_objects_are_valid(schemas, build):
    assert schemas.validate(build()) == []


def test_our_nodemetric_report_is_valid(schemas):
    now = 1_800_000_000.0
    cache = MetricCache(None, clock=lambda: now)
    cache.append([Sample(kind, (), now - 600 + i * 10, value) for i in range(60)
                  for kind, value in (("node_cpu_usage", 3.5), ("node_memory_usage", 2**33),
                                      ("sys_cpu_usage", 0.4), ("sys_memory_usage", 2**29))])
    status = NodeMetricBuilder(cache, CollectPolicy()).status([], now)
    obj = node_metric_object("gpu-node-7", node_metric()["spec"], status)
    assert status["nodeMetric"]["nodeUsage"]            # the report is not trivially empty
    assert schemas.validate(obj) == []


def test_quantities_accept_every_canonical_form(schemas):
    for q in ("1250m", "4194304Ki", 3, "1e3", "+1", ".5", "0", "1.5Gi", "100n", "2E"):
        obj = node_metric()
        obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = q
        assert schemas.validate(obj) == [], q


def test_required_field_with_default_is_filled_by_the_server(schemas):
    obj = device()
    del obj["spec"]["devices"][1]["health"]          # required, but defaults to false before validation
    assert schemas.validate(obj) == []


def test_preserve_unknown_fields_keeps_anything(schemas):
    obj = node_slo()
    obj["spec"]["extensions"] = {"Object": {"a": {"b": [1, {"c": None}]}}, "NodeStrategy": 1}
    assert schemas.validate(obj) == []


# --- rejecting what the apiserver would not take -------------------------------------------------------------

def test_wrong_type(schemas):
    obj = node_metric()
    obj["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = 1.25
    obj["status"]["nodeMetric"]["numaUsages"][0]["numaNodeID"] = "0"
    obj["status"]["podsMetric"][0]["podUsage"]["devices"][0]["health"] = 0
    obj["status"]["updateTime"] = 1714550400
    errors = schemas.validate(obj)
    assert errors_at(errors, "status.nodeMetric.nodeUsage.resources.cpu") == [
        "status.nodeMetric.nodeUsage.resources.cpu: expected integer or string, got number 1.25"]
    assert "expected integer" in errors_at(errors, "status.nodeMetric.numaUsages[0].numaNodeID")[0]
    assert "expected boolean" in errors_at(errors, "status.podsMetric[0].podUsage.devices[0].health")[0]
    assert "expected string" in errors_at(errors, "status.updateTime")[0]
    assert len(errors) == 4


def test_bool_is_not_an_integer(schemas):
    obj = device()
    obj["spec"]["devices"][0]["minor"] = True
    assert errors_at(schemas.validate(obj), "spec.devices[0].minor") == [
        "spec.devices[0].minor: expected integer, got boolean True"]


def test_unknown_fields_are_reported_not_pruned(schemas):
    obj = node_metric()
    obj["status"]["nodeMetric"]["nodeUsgae"] = {}
    obj["status"]["podsMetric"][0]["podUsage"]["resource"] = {"cpu": "1"}
    obj["statu"] = {}
    errors = schemas.validate(obj)
    assert sorted(errors) == ["statu: unknown field", "status.nodeMetric.nodeUsgae: unknown field",
                              "status.podsMetric[0].podUsage.resource: unknown field"]


def test_object_without_properties_prunes_everything(schemas):
    obj = node_slo()
    obj["spec"]["hostApplications"][0]["strategy"] = {"cpuQOS": {}}
    assert schemas.validate(obj) == ["spec.hostApplications[0].strategy.cpuQOS: unknown field"]


def test_missing_required_fields(schemas):
    obj = nrt()
    del obj["topologyPolicies"]
    del obj["zones"][0]["type"]
    del obj["zones"][1]["resources"][2]["available"]
    del obj["metadata"]["name"]
    errors = schemas.validate(obj)
    assert sorted(errors) == ["metadata.name: required field missing",
                              "topologyPolicies: required field missing",
                              "zones[0].type: required field missing",
                              "zones[1].resources[2].available: required field missing"]
    v2 = nrt("v1alpha2")
    del v2["topologyPolicies"]                       # deprecated, no longer required in v1alpha2
    assert schemas.validate(v2) == []


def test_required_fields_in_device_topology_and_conditions(schemas):
    obj = device()
    del obj["spec"]["devices"][0]["topology"]["nodeID"]
    del obj["spec"]["devices"][0]["conditions"][0]["reason"]
    errors = schemas.validate(obj)
    assert sorted(errors) == ["spec.devices[0].conditions[0].reason: required field missing",
                              "spec.devices[0].topology.nodeID: required field missing"]


def test_null_is_pruned_unless_required_and_rejected_in_arrays(schemas):
    obj = nrt()
    obj["zones"][0]["name"] = None                 # pruned, then the required check fails
    obj["zones"][1]["attributes"] = None           # pruned, optional: fine
    obj["topologyPolicies"] = [None]
    errors = schemas.validate(obj)
    assert sorted(errors) == ["topologyPolicies[0]: must not be null", "zones[0].name: required field missing"]


def test_bad_enum(schemas):
    obj = node_metric()
    obj["spec"]["metricCollectPolicy"]["nodeMemoryCollectPolicy"] = "usageWithCache"
    dev = device()
    dev["spec"]["devices"][0]["conditions"][0]["status"] = True     # YAML's bare True is not "True"
    errors = schemas.validate(obj) + schemas.validate(dev)
    assert len(errors) == 2
    assert errors[0].startswith("spec.metricCollectPolicy.nodeMemoryCollectPolicy: unsupported value "
                                "'usageWithCache'")
    assert errors[1].startswith("spec.devices[0].conditions[0].status: expected string")


@pytest.mark.parametrize("bad", ["1.5.5", "4 Gi", "1Gb", "1Gi\n", "", "-", "m", "1KI", 1.5])
def test_bad_quantity(schemas, bad):
    obj = device()
    obj["spec"]["devices"][0]["resources"]["koordinator.sh/gpu-memory"] = bad
    errors = schemas.validate(obj)
    assert len(errors) == 1
    path, message = errors[0].split(": ", 1)
    assert path == "spec.devices[0].resources[koordinator.sh/gpu-memory]"
    assert QTY_ERROR in message or "expected integer or string" in message


def test_bad_quantity_in_nodeslo_and_nrt(schemas):
    slo = node_slo()
    slo["spec"]["systemStrategy"]["totalNetworkBandwidth"] = "10 Gbps"
    topo = nrt()
    topo["zones"][0]["resources"][0]["capacity"] = "48 cores"
    assert schemas.validate(slo) == [f"spec.systemStrategy.totalNetworkBandwidth: '10 Gbps' {QTY_ERROR}"]
    assert schemas.validate(topo) == [f"zones[0].resources[0].capacity: '48 cores' {QTY_ERROR}"]


@pytest.mark.parametrize("bad", ["2024-05-01 08:00:00Z", "2024-05-01T08:00:00", "2024-13-01T08:00:00Z",
                                 "2024-02-30T08:00:00Z", "2024-05-01T24:00:00Z", "2024-05-01T08:00:00+0200",
                                 "1714550400", "2024-05-01T08:00:00Z\n"])
def test_bad_date_time(schemas, bad):
    obj = node_metric()
    obj["status"]["updateTime"] = bad
    assert schemas.validate(obj) == [f"status.updateTime: {bad!r} is not an RFC 3339 date-time"]


@pytest.mark.parametrize("good", ["2024-05-01T08:00:00Z", "2024-05-01t08:00:00.123456789+02:00",
                                  "2024-02-29T23:59:59-07:00"])
def test_good_date_time(schemas, good):
    obj = node_metric()
    obj["status"]["updateTime"] = good
    assert schemas.validate(obj) == []


def test_integer_bounds_and_formats(schemas):
    slo = node_slo()
    slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = 101
    slo["spec"]["resourceQOSStrategy"]["beClass"]["memoryQOS"] = {"wmarkMinAdj": -26, "wmarkScalePermill": 0}
    slo["spec"]["resourceUsedThresholdWithBE"]["evictEnabledPriorityThreshold"] = 2**31
    errors = schemas.validate(slo)
    assert sorted(errors) == [
        "spec.resourceQOSStrategy.beClass.memoryQOS.wmarkMinAdj: -26 is less than minimum -25",
        "spec.resourceQOSStrategy.beClass.memoryQOS.wmarkScalePermill: 0 is less than minimum 1",
        "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: 101 is greater than maximum 100",
        "spec.resourceUsedThresholdWithBE.evictEnabledPriorityThreshold: 2147483648 overflows int32"]


def test_string_length_and_pattern(schemas):
    obj = device()
    cond = obj["spec"]["devices"][0]["conditions"][0]
    cond["reason"] = "Xid 79"                  # a space is not CamelCase
    cond["message"] = "x" * 32769
    errors = schemas.validate(obj)
    assert len(errors) == 2
    assert errors_at(errors, "spec.devices[0].conditions[0].reason")[0].endswith(
        "does not match pattern ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    assert errors_at(errors, "spec.devices[0].conditions[0].message") == [
        "spec.devices[0].conditions[0].message: longer than maxLength 32768"]


def test_metadata_is_checked_as_object_meta(schemas):
    obj = device()
    meta = obj["metadata"]
    meta["name"] = "GPU_Node"
    meta["labels"]["node.koordinator.sh/gpu-model"] = "NVIDIA H200"        # space: not a label value
    meta["annotations"]["bad key"] = "{}"
    meta["ownerReferences"].append({**meta["ownerReferences"][0], "uid": ""})
    meta["resourceVersoin"] = "1"
    errors = schemas.validate(obj)
    assert sorted(errors) == [
        "metadata.annotations[bad key]: key is not a qualified name",
        "metadata.labels[node.koordinator.sh/gpu-model]: 'NVIDIA H200' is not a valid label value",
        "metadata.name: 'GPU_Node' is not a DNS-1123 subdomain",
        "metadata.ownerReferences: only one reference can have controller set to true",
        "metadata.ownerReferences[1].uid: required field missing",
        "metadata.resourceVersoin: unknown field"]


# --- the validator's general machinery, on CRDs written for the purpose ----------------------------------------

def write_crd(directory: Path, schema: dict[str, Any]) -> CrdSchemas:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Cluster",
                    "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets",
                              "singular": "widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": schema}}]}}
    (directory / "widgets.yaml").write_text(yaml.safe_dump(crd))
    return CrdSchemas.load(directory)


def widget(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, **fields}


def test_one_of_any_of_nullable_and_open_maps(tmp_path):
    schemas = write_crd(tmp_path, {"type": "object", "properties": {
        "choice": {"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 5}, {"type": "string"}]},
        "either": {"anyOf": [{"type": "integer", "maximum": 3}, {"type": "string", "enum": ["x"]}]},
        "maybe": {"type": "string", "nullable": True},
        "list": {"type": "array", "items": {"type": "integer", "nullable": True}},
        "open": {"type": "object", "additionalProperties": True},
        "ratio": {"type": "number", "format": "double"}}})
    assert schemas.validate(widget(choice=2, either="x", maybe=None, list=[1, None], open={"a": {"b": 1}},
                                   ratio=0.5)) == []
    errors = schemas.validate(widget(choice=7, either=4, ratio=float("nan")))
    assert sorted(errors) == [
        "choice: matches 2 oneOf branches, expected exactly one",
        "either: matches no anyOf branch (4 is greater than maximum 3; expected string, got integer 4)",
        "ratio: nan is not a finite number"]
    assert schemas.validate(widget(choice=1.5)) == [
        ("choice: matches no oneOf branch (expected integer, got number 1.5; expected integer, got number 1.5; "
         "expected string, got number 1.5)")]


@pytest.mark.parametrize("keyword", [{"x-kubernetes-validations": [{"rule": "self.a > 0"}]},
                                     {"x-kubernetes-list-type": "set"}, {"exclusiveMinimum": True},
                                     {"format": "uuid"}, {"type": "null"}])
def test_load_refuses_what_it_cannot_check(tmp_path, keyword):
    with pytest.raises(ValueError, match="unsupported"):
        write_crd(tmp_path, {"type": "object", "properties": {"a": {"type": "string", **keyword}}})


def test_load_refuses_non_crd_documents(tmp_path):
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(ValueError, match="not an apiextensions.k8s.io/v1 CustomResourceDefinition"):
        CrdSchemas.load(tmp_path)


# --- RBAC ------------------------------------------------------------------------------------------------------

def rbac_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d is not None]


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_rbac_binds_the_koordlet_service_account():
    docs = {(d["kind"], d["metadata"]["name"]): d for d in rbac_docs()}
    sa = docs[("ServiceAccount", "koordlet")]
    assert sa["metadata"]["namespace"] == "koordinator-system"
    subject = {"kind": "ServiceAccount", "name": "koordlet", "namespace": "koordinator-system"}
    binding = docs[("ClusterRoleBinding", "koordlet-rolebinding")]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "koordlet-role"}
    assert binding["subjects"] == [subject]
    assert ("ClusterRole", "koordlet-role") in docs


def test_rbac_grants_what_the_agent_does_and_no_more():
    role = next(d for d in rbac_docs() if d["kind"] == "ClusterRole")
    rules = role["rules"]
    needed = [("slo.koordinator.sh", "nodemetrics/status", "update"), ("slo.koordinator.sh", "nodemetrics", "watch"),
              ("slo.koordinator.sh", "nodeslos", "watch"), ("scheduling.koordinator.sh", "devices", "create"),
              ("scheduling.koordinator.sh", "devices", "update"),
              ("topology.node.k8s.io", "noderesourcetopologies", "create"),
              ("topology.node.k8s.io", "noderesourcetopologies", "update"),
              ("", "nodes", "watch"), ("", "nodes/pods", "get"), ("", "nodes/configz", "get"), ("", "pods", "list"),
              ("", "pods/eviction", "create"), ("", "events", "create")]
    assert [n for n in needed if not granted(rules, *n)] == []
    forbidden = [("slo.koordinator.sh", "nodemetrics", "update"), ("slo.koordinator.sh", "nodeslos", "update"),
                 ("", "nodes", "update"), ("", "nodes", "patch"), ("", "pods", "update"), ("", "pods", "delete"),
                 ("", "configmaps", "get"), ("", "secrets", "get"),
                 ("", "nodes/proxy", "get")]        # only in rbac-kubelet-proxy.yaml, for kubelets before 1.33
    assert [f for f in forbidden if granted(rules, *f)] == []
    assert all("*" not in r["apiGroups"] + r["resources"] + r["verbs"] for r in rules)


def test_rbac_crd_resources_exist(schemas):
    """Every resource the role names in a CRD group is a plural (or plural/status) some CRD serves."""
    plurals = {(g, schemas.crd(g, k)["spec"]["names"]["plural"]) for g, k in EXPECTED}
    role = next(d for d in rbac_docs() if d["kind"] == "ClusterRole")
    groups = {g for g, _ in plurals}
    named = {(g, res.split("/")[0]) for r in role["rules"] for g in r["apiGroups"] if g in groups
             for res in r["resources"]}
    assert named == plurals

