"""NodeSLO model, koordlet defaults and merge, ConfigMap -> NodeSLO, and the local file source.

Expected values come from upstream pkg/util/sloconfig/nodeslo_config.go and
pkg/koordlet/statesinformer/impl/states_nodeslo.go (defaults, None substitution) and
pkg/slo-controller/nodeslo/resource_strategy.go (ConfigMap merge).
"""

import copy
import json
import logging
import os

import pytest
import yaml

from koordlet.states.nodeslo.controller_config import SLOControllerConfig
from koordlet.states.nodeslo.file import NodeSLOFile
from koordlet.states.nodeslo.merge import default_node_slo_spec, merge_node_slo_spec, node_slo_from_object
from koordlet.states.nodeslo.selector import match_label_selector

LOGGER = "koordlet.states.nodeslo"


def merged(spec, name="node-1"):
    return merge_node_slo_spec(spec, name)


EMPTY, _ = merge_node_slo_spec(None)

# The whole effective spec of an empty NodeSLO, in upstream's JSON shape (pkg/util/sloconfig/nodeslo_config.go): the
# default spec with LSR/LS/BE cpuQOS, resctrlQOS and memoryQOS replaced by the None values because their enable is
# false.
NONE_CPU = {"enable": False, "groupIdentity": 0, "schedIdle": 0, "coreExpeller": False}
NONE_MEM = {"enable": False, "minLimitPercent": 0, "lowLimitPercent": 0, "throttlingPercent": 0, "wmarkRatio": 0,
            "wmarkScalePermill": 50, "wmarkMinAdj": 0, "priorityEnable": 0, "priority": 0, "oomKillGroup": 0}
NONE_RESCTRL = {"enable": False, "catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 100}
NET_OFF = {"enable": False, "ingressRequest": 0, "ingressLimit": 0, "egressRequest": 0, "egressLimit": 0}
CLASS_OFF = {"cpuQOS": NONE_CPU, "memoryQOS": NONE_MEM, "blkioQOS": {"enable": False}, "resctrlQOS": NONE_RESCTRL,
             "networkQOS": NET_OFF}
EMPTY_WIRE = {
    "resourceUsedThresholdWithBE": {"enable": False, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
                                    "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"},
    "resourceQOSStrategy": {
        "policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
        "lsrClass": CLASS_OFF, "lsClass": CLASS_OFF, "beClass": CLASS_OFF,
        # SYSTEM has no None substitution, but its defaults already are the None values.
        "systemClass": CLASS_OFF,
        "cgroupRoot": {"blkioQOS": {"enable": False}}},
    "cpuBurstStrategy": {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                         "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
    "systemStrategy": {"totalNetworkBandwidth": "0"},
}


# ------------------------------------------------------------------------------------------------ defaults

def test_empty_spec_gives_reference_defaults_field_by_field():
    for raw in (None, {}, {"resourceQOSStrategy": {}, "hostApplications": []}):
        spec, errors = merged(raw)
        assert errors == []
        assert spec == EMPTY
    assert EMPTY.to_wire() == EMPTY_WIRE

    t = EMPTY.resource_threshold                      # DefaultResourceThresholdStrategy
    assert (t.enable, t.cpu_suppress_threshold_percent, t.cpu_suppress_policy) == (False, 65, "cpuset")
    assert (t.memory_evict_threshold_percent, t.cpu_evict_policy) == (70, "evictByRealLimit")
    assert t.cpu_suppress_min_percent is None and t.memory_evict_lower_percent is None      # unset upstream
    assert t.cpu_evict_be_usage_threshold_percent is None and t.cpu_evict_time_window_seconds is None
    assert t.memory_allocatable_evict_threshold_percent is None                            # doc says 110, code unset

    q = EMPTY.resource_qos
    assert (q.policies.cpu_policy, q.policies.net_qos_policy) == ("groupIdentity", "tc")
    for cls in (q.lsr, q.ls, q.be):                   # None substitution: every feature disabled by default
        assert (cls.cpu_qos.enable, cls.cpu_qos.group_identity, cls.cpu_qos.sched_idle,
                cls.cpu_qos.core_expeller) == (False, 0, 0, False)
        r = cls.resctrl_qos
        assert (r.enable, r.cat_range_start_percent, r.cat_range_end_percent, r.mba_percent) == (False, 0, 100, 100)
        m = cls.memory_qos
        assert (m.enable, m.min_limit_percent, m.low_limit_percent, m.throttling_percent, m.wmark_ratio,
                m.wmark_scale_permill, m.wmark_min_adj, m.priority_enable, m.priority,
                m.oom_kill_group) == (False, 0, 0, 0, 0, 50, 0, 0, 0, 0)
    s = q.system                                      # SYSTEM row of the table, no substitution
    assert (s.cpu_qos.group_identity, s.cpu_qos.sched_idle, s.cpu_qos.core_expeller) == (0, 0, False)
    assert (s.resctrl_qos.cat_range_start_percent, s.resctrl_qos.cat_range_end_percent,
            s.resctrl_qos.mba_percent) == (0, 100, 100)
    assert (s.memory_qos.wmark_ratio, s.memory_qos.wmark_scale_permill, s.memory_qos.wmark_min_adj) == (0, 50, 0)
    for cls in (q.lsr, q.ls, q.be, q.system, q.cgroup_root):   # blkio everywhere: {enable:false, blocks: []}
        assert (cls.blkio_qos.enable, cls.blkio_qos.blocks) == (False, ())
    for cls in (q.lsr, q.ls, q.be, q.system):
        n = cls.network_qos
        assert (n.enable, n.ingress_request, n.ingress_limit, n.egress_request, n.egress_limit) == (False, 0, 0, 0, 0)
    assert q.cgroup_root.cpu_qos is None and q.cgroup_root.memory_qos is None   # cgroupRoot: blkio only

    b = EMPTY.cpu_burst                               # DefaultCPUBurstStrategy
    assert (b.policy, b.cpu_burst_percent, b.cfs_quota_burst_percent, b.cfs_quota_burst_period_seconds,
            b.share_pool_threshold_percent) == ("none", 1000, 300, -1, 50)
    sy = EMPTY.system                                 # DefaultSystemStrategy: only totalNetworkBandwidth "0"
    assert sy.total_network_bandwidth == "0" and sy.total_network_bandwidth_value == 0
    assert (sy.min_free_kbytes_factor, sy.watermark_scale_factor, sy.memcg_reap_background,
            sy.sched_group_identity_enabled, sy.sched_features) == (None, None, None, None, None)
    assert dict(EMPTY.extensions) == {} and EMPTY.host_applications == ()


def test_default_spec_before_substitution_is_the_reference_table():
    q = default_node_slo_spec().resource_qos
    #            gi, idle, expeller, cat start-end, mba, min/low/throttle/wmarkRatio/scale/minAdj/prioEn/prio/oom
    table = {"lsr": (2, 0, True, 0, 100, 100, (0, 0, 0, 95, 20, -25, 0, 0, 0)),
             "ls": (2, 0, True, 0, 100, 100, (0, 0, 0, 95, 20, -25, 0, 0, 0)),
             "be": (-1, 0, False, 0, 30, 100, (0, 0, 0, 95, 20, 50, 0, 0, 0)),
             "system": (0, 0, False, 0, 100, 100, (0, 0, 0, 0, 50, 0, 0, 0, 0))}
    for attr, (gi, idle, exp, start, end, mba, mem) in table.items():
        c = getattr(q, attr)
        assert (c.cpu_qos.group_identity, c.cpu_qos.sched_idle, c.cpu_qos.core_expeller) == (gi, idle, exp), attr
        assert (c.resctrl_qos.cat_range_start_percent, c.resctrl_qos.cat_range_end_percent,
                c.resctrl_qos.mba_percent) == (start, end, mba), attr
        m = c.memory_qos
        assert (m.min_limit_percent, m.low_limit_percent, m.throttling_percent, m.wmark_ratio, m.wmark_scale_permill,
                m.wmark_min_adj, m.priority_enable, m.priority, m.oom_kill_group) == mem, attr
        assert (c.cpu_qos.enable, c.memory_qos.enable, c.resctrl_qos.enable) == (False, False, False)


def test_enabling_a_feature_reveals_the_recommended_values():
    spec, errors = merged({"resourceQOSStrategy": {
        "lsrClass": {"cpuQOS": {"enable": True}},
        "beClass": {"cpuQOS": {"enable": True}, "resctrlQOS": {"enable": True}, "memoryQOS": {"enable": True}}}})
    assert errors == []
    q = spec.resource_qos
    assert (q.lsr.cpu_qos.enable, q.lsr.cpu_qos.group_identity, q.lsr.cpu_qos.core_expeller) == (True, 2, True)
    assert (q.be.cpu_qos.group_identity, q.be.cpu_qos.core_expeller) == (-1, False)
    assert (q.be.resctrl_qos.cat_range_start_percent, q.be.resctrl_qos.cat_range_end_percent) == (0, 30)
    assert (q.be.memory_qos.wmark_ratio, q.be.memory_qos.wmark_scale_permill, q.be.memory_qos.wmark_min_adj) == (
        95, 20, 50)
    assert q.ls == EMPTY.resource_qos.ls                            # untouched class keeps the None values
    assert q.lsr.memory_qos == EMPTY.resource_qos.lsr.memory_qos    # untouched feature of a touched class too


def test_explicitly_disabled_feature_gets_none_values_even_with_parameters():
    spec, errors = merged({"resourceQOSStrategy": {
        "lsClass": {"cpuQOS": {"enable": False, "groupIdentity": 2},
                    "memoryQOS": {"enable": False, "wmarkRatio": 90, "pageCacheEnable": True}},
        "systemClass": {"cpuQOS": {"enable": False, "groupIdentity": 1}}}})
    assert errors == []
    assert spec.resource_qos.ls.cpu_qos.group_identity == 0
    assert spec.resource_qos.ls.memory_qos.wmark_ratio == 0
    assert spec.resource_qos.ls.memory_qos.page_cache_enable is None   # the whole MemoryQOS is replaced
    assert spec.resource_qos.system.cpu_qos.group_identity == 1        # SYSTEM is not substituted


# ------------------------------------------------------------------------------------------------ partial merge

def test_partial_spec_merges_over_defaults():
    spec, errors = merged({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 50,
                                        "memoryEvictLowerPercent": 60},
        "resourceQOSStrategy": {"policies": {"cpuPolicy": "coreSched"},
                                "beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 80, "priority": 3}}},
        "cpuBurstStrategy": {"policy": "auto"},
        "systemStrategy": {"minFreeKbytesFactor": 100, "schedFeatures": {"ID_ABSOLUTE_EXPEL": True}},
    })
    assert errors == []
    t = spec.resource_threshold
    assert (t.enable, t.cpu_suppress_threshold_percent, t.memory_evict_lower_percent) == (True, 50, 60)
    assert (t.memory_evict_threshold_percent, t.cpu_suppress_policy) == (70, "cpuset")       # kept defaults
    p = spec.resource_qos.policies
    assert (p.cpu_policy, p.net_qos_policy) == ("coreSched", "tc")
    m = spec.resource_qos.be.memory_qos
    assert (m.enable, m.wmark_ratio, m.priority, m.wmark_min_adj, m.wmark_scale_permill) == (True, 80, 3, 50, 20)
    b = spec.cpu_burst
    assert (b.policy, b.cpu_burst_percent, b.cfs_quota_burst_percent) == ("auto", 1000, 300)
    s = spec.system
    assert (s.min_free_kbytes_factor, dict(s.sched_features), s.total_network_bandwidth) == (
        100, {"ID_ABSOLUTE_EXPEL": True}, "0")
    wire_out = spec.to_wire()
    assert wire_out["resourceQOSStrategy"]["beClass"]["memoryQOS"]["wmarkRatio"] == 80
    assert wire_out["systemStrategy"] == {"minFreeKbytesFactor": 100, "schedFeatures": {"ID_ABSOLUTE_EXPEL": True},
                                          "totalNetworkBandwidth": "0"}
    assert merged(wire_out)[0] == spec                                      # to_wire round-trips


def test_null_empty_string_and_empty_list_mean_absent_like_go_omitempty():
    spec, errors = merged({
        "resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": None, "cpuSuppressPolicy": ""},
        "cpuBurstStrategy": None,
        "resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": True, "blocks": []}}},
    })
    assert errors == []
    assert spec.resource_threshold == EMPTY.resource_threshold
    assert spec.cpu_burst == EMPTY.cpu_burst
    assert (spec.resource_qos.be.blkio_qos.enable, spec.resource_qos.be.blkio_qos.blocks) == (True, ())


def test_arrays_replace_and_host_applications_and_extensions_pass_through():
    spec, errors = merged({
        "resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [
            {"name": "/dev/sdb", "type": "device", "ioCfg": {"readLatency": 3000, "ioWeightPercent": 60}}]}}},
        "hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod",
                              "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive",
                                             "relativePath": "nginx"}}],
        "extensions": {"Object": {"myPlugin": {"level": 3}}},
    })
    assert errors == []
    (block,) = spec.resource_qos.cgroup_root.blkio_qos.blocks
    assert (block.name, block.block_type, block.io_cfg.read_latency, block.io_cfg.io_weight_percent) == (
        "/dev/sdb", "device", 3000, 60)
    (app,) = spec.host_applications
    assert (app.name, app.qos, app.priority, app.cgroup_path.base, app.cgroup_path.relative_path) == (
        "nginx", "LS", "koord-prod", "CgroupRoot", "nginx")
    assert spec.extensions["myPlugin"] == {"level": 3}
    assert spec.to_wire()["extensions"] == {"Object": {"myPlugin": {"level": 3}}}


def test_typed_lookup_by_qos_class():
    q = merged({"resourceQOSStrategy": {"lsrClass": {"cpuQOS": {"enable": True}}}})[0].resource_qos
    assert q.for_qos_class("LSE") is q.lsr and q.for_qos_class("LSR") is q.lsr
    assert q.for_qos_class("LS") is q.ls and q.for_qos_class("BE") is q.be and q.for_qos_class("SYSTEM") is q.system
    assert q.for_qos_class("") is None
    assert q.for_kube_qos("Guaranteed") is q.lsr and q.for_kube_qos("BestEffort") is q.be


def test_node_slo_object_is_named_in_errors():
    spec, errors = node_slo_from_object({"kind": "NodeSLO", "metadata": {"name": "worker-7"},
                                         "spec": {"cpuBurstStrategy": {"policy": "turbo"}}})
    assert spec.cpu_burst == EMPTY.cpu_burst
    assert len(errors) == 1 and "NodeSLO worker-7" in errors[0]


# ------------------------------------------------------------------------------------------------ bad input

SIBLING_SYSTEM = {"systemStrategy": {"minFreeKbytesFactor": 123}}
SIBLING_BURST = {"cpuBurstStrategy": {"cpuBurstPercent": 2000}}


def qos(cls, feature, body):
    return {"resourceQOSStrategy": {cls: {feature: body}}}


# (spec, bad field path, section that falls back, words of the problem)
BAD = [
    (qos("beClass", "memoryQOS", {"enable": True, "wmarkRatio": "high"}),
     "spec.resourceQOSStrategy.beClass.memoryQOS.wmarkRatio", "spec.resourceQOSStrategy.beClass.memoryQOS",
     "expected an integer"),
    (qos("beClass", "memoryQOS", {"enable": True, "wmarkRatio": 150}),
     "spec.resourceQOSStrategy.beClass.memoryQOS.wmarkRatio", "spec.resourceQOSStrategy.beClass.memoryQOS",
     "between 0 and 100, got 150"),
    (qos("lsClass", "memoryQOS", {"enable": True, "wmarkScalePermill": 0}),
     "spec.resourceQOSStrategy.lsClass.memoryQOS.wmarkScalePermill", "spec.resourceQOSStrategy.lsClass.memoryQOS",
     "between 1 and 1000"),
    (qos("lsClass", "cpuQOS", {"enable": True, "groupIdentity": 3}),
     "spec.resourceQOSStrategy.lsClass.cpuQOS.groupIdentity", "spec.resourceQOSStrategy.lsClass.cpuQOS",
     "between -1 and 2"),
    (qos("lsrClass", "cpuQOS", {"enable": "yes"}),
     "spec.resourceQOSStrategy.lsrClass.cpuQOS.enable", "spec.resourceQOSStrategy.lsrClass.cpuQOS",
     "expected true or false"),
    (qos("beClass", "resctrlQOS", {"enable": True, "catRangeStartPercent": 40}),      # default end is 30 for BE
     "spec.resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent", "spec.resourceQOSStrategy.beClass.resctrlQOS",
     "less than catRangeEndPercent (30)"),
    (qos("beClass", "networkQOS", {"enable": True, "ingressLimit": 150}),
     "spec.resourceQOSStrategy.beClass.networkQOS.ingressLimit", "spec.resourceQOSStrategy.beClass.networkQOS",
     "between 0 and 100"),
    (qos("beClass", "networkQOS", {"enable": True, "egressLimit": "fast"}),
     "spec.resourceQOSStrategy.beClass.networkQOS.egressLimit", "spec.resourceQOSStrategy.beClass.networkQOS",
     "quantity"),
    (qos("beClass", "blkioQOS", {"enable": True, "blocks": [{"name": "vg", "type": "disk"}]}),
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks[0].type", "spec.resourceQOSStrategy.beClass.blkioQOS",
     "unknown value 'disk'"),
    (qos("beClass", "blkioQOS", {"enable": True, "blocks": [{"name": "vg", "ioCfg": {"ioWeightPercent": 0}}]}),
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks[0].ioCfg.ioWeightPercent",
     "spec.resourceQOSStrategy.beClass.blkioQOS", "between 1 and 100"),
    ({"resourceQOSStrategy": {"policies": {"cpuPolicy": "bvt"}}},
     "spec.resourceQOSStrategy.policies.cpuPolicy", "spec.resourceQOSStrategy.policies", "unknown value 'bvt'"),
    ({"resourceQOSStrategy": {"lsClass": [1]}},
     "spec.resourceQOSStrategy.lsClass", "spec.resourceQOSStrategy.lsClass", "expected an object, got list"),
    ({"resourceQOSStrategy": "off"},
     "spec.resourceQOSStrategy", "spec.resourceQOSStrategy", "expected an object"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65.5}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent", "spec.resourceUsedThresholdWithBE",
     "expected an integer, got number 65.5"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictLowerPercent": 80}},     # threshold default 70
     "spec.resourceUsedThresholdWithBE.memoryEvictLowerPercent", "spec.resourceUsedThresholdWithBE",
     "less than memoryEvictThresholdPercent (70)"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cgroup"}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressPolicy", "spec.resourceUsedThresholdWithBE", "unknown value"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "allocatableEvictPriorityThreshold": 8000}},
     "spec.resourceUsedThresholdWithBE.allocatableEvictPriorityThreshold", "spec.resourceUsedThresholdWithBE",
     "between 0 and 7999"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "evictEnabledPriorityThreshold": 2 ** 31}},
     "spec.resourceUsedThresholdWithBE.evictEnabledPriorityThreshold", "spec.resourceUsedThresholdWithBE", "int32"),
    ({"resourceUsedThresholdWithBE": {"enable": True, "cpuEvictTimeWindowSeconds": 0}},
     "spec.resourceUsedThresholdWithBE.cpuEvictTimeWindowSeconds", "spec.resourceUsedThresholdWithBE",
     "greater than 0"),
    ({"cpuBurstStrategy": {"policy": "turbo"}},
     "spec.cpuBurstStrategy.policy", "spec.cpuBurstStrategy", "unknown value 'turbo'"),
    ({"cpuBurstStrategy": {"policy": "auto", "cfsQuotaBurstPercent": 99}},
     "spec.cpuBurstStrategy.cfsQuotaBurstPercent", "spec.cpuBurstStrategy", "at least 100"),
    ({"systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 500}},
     "spec.systemStrategy.watermarkScaleFactor", "spec.systemStrategy", "at most 400"),
    ({"systemStrategy": {"minFreeKbytesFactor": 0}},
     "spec.systemStrategy.minFreeKbytesFactor", "spec.systemStrategy", "greater than 0"),
    ({"systemStrategy": {"totalNetworkBandwidth": "lots"}},
     "spec.systemStrategy.totalNetworkBandwidth", "spec.systemStrategy", "quantity"),
    ({"systemStrategy": {"schedFeatures": {"ID_EXPEL": "on"}}},
     "spec.systemStrategy.schedFeatures.ID_EXPEL", "spec.systemStrategy", "expected true or false"),
    ({"extensions": {"Object": ["x"]}},
     "spec.extensions.Object", "spec.extensions.Object", "expected an object"),
]


@pytest.mark.parametrize("spec,path,section,problem", BAD, ids=[c[1].removeprefix("spec.") for c in BAD])
def test_malformed_section_falls_back_alone(spec, path, section, problem, caplog):
    sibling = SIBLING_BURST if "systemStrategy" in spec else SIBLING_SYSTEM
    raw = {**copy.deepcopy(spec), **sibling}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        result, errors = merged(raw, "node-9")

    assert len(errors) == 1, errors
    assert errors[0].startswith(f"NodeSLO node-9: {path}: ") and problem in errors[0], errors[0]
    assert f"{section} falls back to its defaults" in errors[0]
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1
    line = logged[0].getMessage()
    assert "node-9" in line and f"section={section}" in line and path in line and problem in line

    # The rejected section is what an absent one gives; the rest of the spec still applies.
    assert _section(result, section) == _section(EMPTY, section)
    if sibling is SIBLING_SYSTEM:
        assert result.system.min_free_kbytes_factor == 123
    else:
        assert result.cpu_burst.cpu_burst_percent == 2000


def _section(spec, path):
    value = spec.to_wire()
    for part in path.split(".")[1:]:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def test_bad_feature_leaves_its_sibling_features_and_classes_applied():
    spec, errors = merged({"resourceQOSStrategy": {
        "beClass": {"memoryQOS": {"enable": True, "wmarkMinAdj": 99}, "cpuQOS": {"enable": True, "groupIdentity": 1}},
        "lsClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90}}}})
    assert len(errors) == 1 and "beClass.memoryQOS.wmarkMinAdj" in errors[0]
    assert spec.resource_qos.be.memory_qos == EMPTY.resource_qos.be.memory_qos
    assert (spec.resource_qos.be.cpu_qos.enable, spec.resource_qos.be.cpu_qos.group_identity) == (True, 1)
    assert spec.resource_qos.ls.memory_qos.wmark_ratio == 90


def test_spec_that_is_not_a_mapping_gives_all_defaults_with_one_error():
    spec, errors = merged(["not", "a", "spec"])
    assert spec == EMPTY
    assert len(errors) == 1 and "NodeSLO node-1: spec: expected an object" in errors[0]


def test_bad_host_application_entry_is_dropped_others_kept(caplog):
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        spec, errors = merged({"hostApplications": [
            {"name": "nginx", "qos": "LS"}, {"name": "gold", "qos": "GOLD"}, "junk",
            {"name": "agent", "cgroupPath": {"base": "Kubepods"}}]})
    assert [a.name for a in spec.host_applications] == ["nginx", "agent"]
    assert len(errors) == 2
    assert "spec.hostApplications[1].qos: unknown value 'GOLD'" in errors[0] and "entry dropped" in errors[0]
    assert "spec.hostApplications[2]: expected an object" in errors[1]
    assert len(caplog.records) == 2


def test_unknown_fields_are_ignored_with_a_warning_not_an_error(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        spec, errors = merged({"cpuBurstStrategy": {"policy": "auto", "cpuBurstPrecent": 5}})
    assert errors == [] and spec.cpu_burst.policy == "auto"
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "spec.cpuBurstStrategy.cpuBurstPrecent" in record.getMessage()


# ------------------------------------------------------------------------------------------------ label selectors

@pytest.mark.parametrize("selector,labels,expected", [
    (None, {"a": "1"}, False),                                      # nil selector matches nothing
    ({}, {}, True),                                                 # empty selector matches everything
    ({"matchLabels": {"pool": "gpu"}}, {"pool": "gpu", "x": "y"}, True),
    ({"matchLabels": {"pool": "gpu"}}, {"pool": "cpu"}, False),
    ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, {"zone": "b"}, True),
    ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, {}, False),
    ({"matchExpressions": [{"key": "os", "operator": "NotIn", "values": ["anolis"]}]}, {}, True),
    ({"matchExpressions": [{"key": "os", "operator": "NotIn", "values": ["anolis"]}]}, {"os": "anolis"}, False),
    ({"matchExpressions": [{"key": "koordinator.sh/burst", "operator": "Exists"}]}, {"koordinator.sh/burst": ""}, True),
    ({"matchExpressions": [{"key": "burst", "operator": "Exists"}]}, {"other": "1"}, False),
    ({"matchExpressions": [{"key": "burst", "operator": "DoesNotExist"}]}, {"other": "1"}, True),
    ({"matchLabels": {"pool": "gpu"}, "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
     {"pool": "gpu", "zone": "b"}, False),                           # all requirements must hold
])
def test_label_selector_matching(selector, labels, expected):
    assert match_label_selector(selector, labels) is expected


@pytest.mark.parametrize("selector", [
    {"matchExpressions": [{"key": "zone", "operator": "Like", "values": ["a"]}]},
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]},
    {"matchLabels": {"bad key!": "x"}},
    {"matchLabels": {"pool": "not valid value"}},
])
def test_invalid_label_selector_raises(selector):
    with pytest.raises(ValueError):
        match_label_selector(selector, {"zone": "a"})


# ------------------------------------------------------------------------------------------------ ConfigMap

def configmap_data():
    return {
        "colocation-config": json.dumps({"enable": True}),                 # does not feed NodeSLO
        "resource-threshold-config": json.dumps({
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "cpuSuppressThresholdPercent": 40},
                {"name": "zones", "nodeSelector": {"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]}]}, "memoryEvictThresholdPercent": 80},
            ]}),
        "resource-qos-config": json.dumps({
            "clusterStrategy": {"beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}}},
            "nodeStrategies": [
                {"name": "not-anolis", "nodeSelector": {"matchExpressions": [
                    {"key": "os", "operator": "NotIn", "values": ["anolis"]}]},
                 "beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90}}}]}),
        "cpu-burst-config": json.dumps({
            "clusterStrategy": {"policy": "none"},
            "nodeStrategies": [{"name": "burst", "nodeSelector": {"matchExpressions": [
                {"key": "burst", "operator": "Exists"}]}, "policy": "auto", "cpuBurstPercent": 500}]}),
        "system-config": json.dumps({
            "clusterStrategy": {"totalNetworkBandwidth": "10G", "minFreeKbytesFactor": 100},
            "nodeStrategies": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                                "minFreeKbytesFactor": 200}]}),
        "host-application-config": json.dumps({
            "applications": [{"name": "nginx", "qos": "LS"}],
            "nodeConfigs": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                             "applications": [{"name": "dcgm", "qos": "LSR"}]}]}),
    }


def node_spec(data, labels, annotations=None, previous=None):
    config, errors = SLOControllerConfig.parse(data, previous)
    raw, more = config.node_slo_spec(labels, annotations)
    spec, more2 = merge_node_slo_spec(raw, "n")
    return spec, errors + more + more2


def test_configmap_cluster_strategy_for_a_node_no_strategy_selects():
    spec, errors = node_spec(configmap_data(), {"os": "anolis"})
    assert errors == []
    t = spec.resource_threshold
    assert (t.enable, t.cpu_suppress_threshold_percent, t.memory_evict_threshold_percent) == (True, 60, 70)
    be = spec.resource_qos.be
    assert (be.cpu_qos.enable, be.cpu_qos.group_identity) == (True, -1)
    assert be.memory_qos == EMPTY.resource_qos.be.memory_qos                 # NotIn anolis did not match
    assert (spec.cpu_burst.policy, spec.cpu_burst.cpu_burst_percent) == ("none", 1000)
    assert (spec.system.total_network_bandwidth, spec.system.min_free_kbytes_factor) == ("10G", 100)
    assert [a.name for a in spec.host_applications] == ["nginx"]


def test_configmap_first_matching_node_strategy_wins_merged_over_cluster():
    # pool=gpu matches strategy 0 (matchLabels) and zone=a strategy 1 (In): the first wins, as a whole.
    spec, errors = node_spec(configmap_data(), {"pool": "gpu", "zone": "a", "os": "anolis"})
    assert errors == []
    t = spec.resource_threshold
    assert (t.enable, t.cpu_suppress_threshold_percent, t.memory_evict_threshold_percent) == (True, 40, 70)
    assert (spec.system.min_free_kbytes_factor, spec.system.total_network_bandwidth) == (200, "10G")
    assert [(a.name, a.qos) for a in spec.host_applications] == [("dcgm", "LSR")]   # replaces, not merged

    spec, _ = node_spec(configmap_data(), {"zone": "b", "os": "anolis"})           # In
    t = spec.resource_threshold
    assert (t.enable, t.cpu_suppress_threshold_percent, t.memory_evict_threshold_percent) == (True, 60, 80)


def test_configmap_notin_and_exists_selectors():
    spec, _ = node_spec(configmap_data(), {"burst": ""})                           # no os label: NotIn matches
    be = spec.resource_qos.be
    assert (be.memory_qos.enable, be.memory_qos.wmark_ratio) == (True, 90)
    assert (be.cpu_qos.enable, be.cpu_qos.group_identity) == (True, -1)           # cluster part kept
    assert (spec.cpu_burst.policy, spec.cpu_burst.cpu_burst_percent) == ("auto", 500)   # Exists


def test_configmap_missing_keys_give_defaults_and_annotation_sets_bandwidth():
    spec, errors = node_spec({}, {"pool": "gpu"},
                             {"node.koordinator.sh/network-bandwidth": "25G"})
    assert errors == []
    assert spec.resource_threshold == EMPTY.resource_threshold
    assert spec.resource_qos == EMPTY.resource_qos
    assert spec.system.total_network_bandwidth == "25G" and spec.system.total_network_bandwidth_value == 25 * 10**9
    assert spec.host_applications == ()


def test_configmap_bad_key_keeps_that_keys_previous_value_others_update():
    first, errors = SLOControllerConfig.parse(configmap_data())
    assert errors == []
    data = configmap_data()
    data["cpu-burst-config"] = "{not json"
    data["resource-threshold-config"] = json.dumps({"clusterStrategy": {"cpuSuppressThresholdPercent": "x"}})
    data["system-config"] = json.dumps({"clusterStrategy": {"minFreeKbytesFactor": 300}})
    spec, errors = node_spec(data, {"burst": "1", "os": "anolis"}, previous=first)
    assert len(errors) == 2
    assert any("key cpu-burst-config: not valid JSON" in e for e in errors)
    assert any("key resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent: expected an integer"
               in e for e in errors)
    assert (spec.cpu_burst.policy, spec.cpu_burst.cpu_burst_percent) == ("auto", 500)       # previous
    assert spec.resource_threshold.cpu_suppress_threshold_percent == 60                     # previous
    assert spec.system.min_free_kbytes_factor == 300                                        # updated

    spec, errors = node_spec(data, {"burst": "1"})                       # no previous: defaults for bad keys
    assert spec.cpu_burst == EMPTY.cpu_burst and len(errors) == 2


def test_configmap_out_of_range_value_is_rejected_per_section_for_the_node():
    data = configmap_data()
    data["resource-qos-config"] = json.dumps({"clusterStrategy": {
        "beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 150}},
        "lsClass": {"cpuQOS": {"enable": True}}}})
    spec, errors = node_spec(data, {})
    assert len(errors) == 1 and "spec.resourceQOSStrategy.beClass.memoryQOS.wmarkRatio" in errors[0]
    assert spec.resource_qos.be.memory_qos == EMPTY.resource_qos.be.memory_qos
    assert spec.resource_qos.ls.cpu_qos.group_identity == 2


def test_configmap_invalid_node_selector_skips_that_strategy():
    data = configmap_data()
    data["cpu-burst-config"] = json.dumps({"nodeStrategies": [
        {"name": "broken", "nodeSelector": {"matchExpressions": [{"key": "burst", "operator": "Like"}]},
         "policy": "cpuBurstOnly"},
        {"name": "ok", "nodeSelector": {"matchLabels": {"burst": "yes"}}, "policy": "auto"}]})
    spec, errors = node_spec(data, {"burst": "yes"})
    assert spec.cpu_burst.policy == "auto"
    assert len(errors) == 1 and "node strategy broken: invalid nodeSelector" in errors[0]


# ------------------------------------------------------------------------------------------------ file source

class Writer:
    """Writes the file and gives it a fresh mtime, so a change is visible even within one clock tick."""

    def __init__(self, path):
        self.path, self.tick = str(path), 1_700_000_000 * 10**9

    def __call__(self, content):
        with open(self.path, "w") as f:
            f.write(content if isinstance(content, str) else yaml.safe_dump(content))
        self.tick += 10**9
        os.utime(self.path, ns=(self.tick, self.tick))


def nodeslo_doc(wmark_ratio):
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node-1"},
            "spec": {"resourceQOSStrategy": {"beClass": {"memoryQOS": {"enable": True, "wmarkRatio": wmark_ratio}}}}}


def test_file_reloads_on_change_and_keeps_last_good_on_garbage(tmp_path, caplog):
    write = Writer(tmp_path / "nodeslo.yaml")
    write(nodeslo_doc(80))
    src = NodeSLOFile(write.path, node_name="node-1")
    assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 80 and src.errors == []
    assert src.refresh() is False                                     # unchanged file: not re-read

    write(nodeslo_doc(70))
    assert src.refresh() is True
    assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 70

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        write("spec: [unclosed\n  - : :\n")
        assert src.refresh() is False
        assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 70  # last good kept
        assert len(src.errors) == 1 and "not valid YAML" in src.errors[0]
        write("- just\n- a list\n")
        assert src.refresh() is False
        assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 70
    assert len(caplog.records) == 2 and all(write.path in r.getMessage() for r in caplog.records)

    write(nodeslo_doc(60))
    assert src.refresh() is True and src.errors == []
    assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 60


def test_a_hostile_file_written_while_running_is_refused_and_a_later_good_one_applies(tmp_path, caplog):
    """3,000 nested brackets would raise RecursionError out of the parser and kill the thread that reloads the
    file: it is refused like any invalid file (last good spec kept) and the next good file is applied."""
    write = Writer(tmp_path / "nodeslo.yaml")
    write(nodeslo_doc(80))
    src = NodeSLOFile(write.path, node_name="node-1")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        write("[" * 3000 + "]" * 3000)
        assert src.refresh() is False
        assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 80
        assert "nested deeper than 64 levels" in src.errors[0]
        write("a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 200)))     # deep block style too
        assert src.refresh() is False and "nested deeper" in src.errors[0]
    write(nodeslo_doc(60))
    assert src.refresh() is True and src.spec.resource_qos.be.memory_qos.wmark_ratio == 60


def test_file_with_bare_spec_and_section_errors(tmp_path):
    write = Writer(tmp_path / "spec.yaml")
    write({"cpuBurstStrategy": {"policy": "auto"}, "systemStrategy": {"watermarkScaleFactor": 1000}})
    src = NodeSLOFile(write.path, node_name="host-a")
    assert src.spec.cpu_burst.policy == "auto"
    assert src.spec.system == EMPTY.system
    assert len(src.errors) == 1 and "host-a" in src.errors[0] and "spec.systemStrategy.watermarkScaleFactor" in \
        src.errors[0]


def test_missing_file_gives_defaults_until_it_appears(tmp_path, caplog):
    path = tmp_path / "later.yaml"
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        src = NodeSLOFile(str(path))
        assert src.refresh() is False and src.refresh() is False
    assert src.spec == EMPTY and "cannot read" in src.errors[0]
    assert len(caplog.records) == 1                                   # logged once, not every refresh
    Writer(path)(nodeslo_doc(75))
    assert src.refresh() is True and src.spec.resource_qos.be.memory_qos.wmark_ratio == 75


def test_file_with_wrong_kind_keeps_last_good(tmp_path):
    write = Writer(tmp_path / "x.yaml")
    write(nodeslo_doc(80))
    src = NodeSLOFile(write.path)
    write({"kind": "Pod", "spec": {}})
    assert src.refresh() is False
    assert src.spec.resource_qos.be.memory_qos.wmark_ratio == 80 and "kind 'Pod'" in src.errors[0]


def test_configmap_file_per_node_labels_and_key_keep_last_good(tmp_path):
    write = Writer(tmp_path / "slo-controller-config.yaml")
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
          "data": configmap_data()}
    write(cm)
    src = NodeSLOFile(write.path, node_name="n1", node_labels={"os": "anolis"})
    assert src.errors == []
    assert src.spec.resource_threshold.cpu_suppress_threshold_percent == 60
    assert src.set_node({"pool": "gpu", "os": "anolis"}) is True      # labels pick the node strategy
    assert src.spec.resource_threshold.cpu_suppress_threshold_percent == 40
    assert [a.name for a in src.spec.host_applications] == ["dcgm"]

    cm["data"]["resource-threshold-config"] = "{broken"
    cm["data"]["cpu-burst-config"] = json.dumps({"clusterStrategy": {"policy": "cfsQuotaBurstOnly"}})
    write(cm)
    assert src.refresh() is True
    assert src.spec.cpu_burst.policy == "cfsQuotaBurstOnly"            # good key applied
    assert src.spec.resource_threshold.cpu_suppress_threshold_percent == 40   # bad key: previous kept
    assert len(src.errors) == 1 and "resource-threshold-config" in src.errors[0]
