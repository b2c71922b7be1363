"""Net QoS decisions (pure): bandwidth from NodeSLO (percent / quantity / node annotation), units, the HTB class
plan, stable pod class minors, the tc diff, Terway's file formats, malformed annotations; and the terway-qos
half end to end through the executor on real files (the tc half needs the kernel: tests/integration)."""

from __future__ import annotations

import json
import logging
import os
import random
from functools import partial

import pytest

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.host.netlink import TC_H_ROOT, Filter, Link, Qdisc, TCState, htb_class
from koordlet.host.paths import HostPaths
from koordlet.qos.net_qos.config import (
    NET_BE,
    NET_LS,
    NET_NONE,
    NET_SYSTEM,
    Bandwidth,
    bandwidth,
    class_bytes,
    net_qos_policy,
    pod_limits,
)
from koordlet.qos.net_qos.htb import (
    CGROUP_FILTER_PREF,
    MIN_RATE,
    POD_FILTER_PREF,
    POD_MINOR_FIRST,
    POD_MINOR_LAST,
    QDISC,
    PodNet,
    adopt_minors,
    assign_minors,
    class_plan,
    net_cls_classid,
    pod_minor_seed,
    tc_diff,
    tc_plan,
)
from koordlet.qos.net_qos.strategy import NetQOS
from koordlet.qos.net_qos.terway import terway_global_config, terway_pod_entry, terway_pods_json, terway_prio
from koordlet.states.decode import DecodeError
from koordlet.states.informer import meta_for
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, node_view

LINK = Link(7, "eth9")
UID_LS, UID_BE, UID_SYS, UID_NONE = (f"{c * 8}-0000-0000-0000-000000000000" for c in "1234")


def spec(total="100M", ls=None, be=None, policy=None):
    qos: dict = {}
    if policy is not None:
        qos["policies"] = {"netQOSPolicy": policy}
    if ls is not None:
        qos["lsClass"] = {"networkQOS": ls}
    if be is not None:
        qos["beClass"] = {"networkQOS": be}
    raw: dict = {"resourceQOSStrategy": qos}
    if total is not None:
        raw["systemStrategy"] = {"totalNetworkBandwidth": total}
    merged, errors = merge_node_slo_spec(raw)
    assert errors == []
    return merged


# pods as the API server lists them before they run: one container, c, no phase and no container statuses; uid,
# name, QoS classes and annotations vary
pod = partial(agent_pod, namespace="ns", spec_containers=[{"name": "c"}], phase=None, statuses=False)


def net_qos(egress=None, ingress=None):
    doc = {}
    if egress is not None:
        doc["egressLimit"] = egress
    if ingress is not None:
        doc["ingressLimit"] = ingress
    return {wire.ANNOTATION_POD_NETWORK_QOS: json.dumps(doc)}


# --- bandwidth from the NodeSLO ---------------------------------------------------------------------------------

def test_percent_and_quantity_become_bytes_once():
    bw, problems = bandwidth(spec("100M", ls={"enable": True, "egressRequest": 50, "egressLimit": "80M",
                                              "ingressRequest": "8M", "ingressLimit": 100},
                                  be={"enable": True, "egressRequest": "5M", "egressLimit": 20}), {})
    assert problems == []
    assert (bw.hw_tx_bps_max, bw.hw_rx_bps_max) == (12_500_000, 12_500_000)
    assert (bw.offline_l1_tx_bps_min, bw.offline_l1_tx_bps_max) == (6_250_000, 10_000_000)
    assert (bw.offline_l1_rx_bps_min, bw.offline_l1_rx_bps_max) == (1_000_000, 12_500_000)
    # percent in bytes/s (upstream terway keeps a percent in bits/s: 20 % of 100M would read 20000000)
    assert (bw.offline_l2_tx_bps_min, bw.offline_l2_tx_bps_max) == (625_000, 2_500_000)
    assert (bw.offline_l2_rx_bps_min, bw.offline_l2_rx_bps_max) == (0, 0)
    assert bw.l1_enabled and bw.l2_enabled


def test_node_annotation_overrides_total_and_a_bad_one_is_reported():
    slo = spec("100M", be={"enable": True, "egressLimit": 10})
    bw, problems = bandwidth(slo, {"node.koordinator.sh/network-bandwidth": "1G"})
    assert problems == [] and bw.hw_tx_bps_max == 125_000_000 and bw.offline_l2_tx_bps_max == 12_500_000
    bw, problems = bandwidth(slo, {"node.koordinator.sh/network-bandwidth": "fast"})
    assert bw.hw_tx_bps_max == 12_500_000
    assert len(problems) == 1 and "network-bandwidth" in problems[0] and "fast" in problems[0]


def test_disabled_class_and_defaults_give_zero():
    bw, problems = bandwidth(spec(ls={"enable": False, "egressRequest": "10M"}), {})
    assert problems == [] and not bw.l1_enabled and bw.offline_l1_tx_bps_min == 0
    bw, _ = bandwidth(merge_node_slo_spec({})[0], {})
    assert bw == Bandwidth()                                  # upstream default total "0"
    assert net_qos_policy(merge_node_slo_spec({})[0]) == "tc"
    assert net_qos_policy(spec(policy="terway-qos")) == "terway-qos"


def test_class_value_above_total_is_clamped_and_bad_values_are_unset():
    assert class_bytes("200M", 100_000_000, "x")[0] == 12_500_000
    assert "clamped" in (class_bytes("200M", 100_000_000, "x")[1] or "")
    assert class_bytes(101, 100_000_000, "x")[0] == 0
    assert class_bytes("lots", 100_000_000, "x")[0] == 0
    assert class_bytes(None, 100_000_000, "x") == (0, None)
    assert class_bytes("1.5k", 100_000_000, "x") == (187, None)           # 1500 bit/s -> 187 B/s


# --- pod annotation -------------------------------------------------------------------------------------------

def test_pod_limits_are_bits_divided_by_eight_once():
    # upstream's tc path divides the annotation twice (20M -> 312500 B/s = 2.5 Mbit/s); we give 20 Mbit/s
    assert pod_limits(pod(UID_BE, "p-2222", annotations=net_qos("20M", "10M"))) == (1_250_000, 2_500_000)
    assert pod_limits(pod(UID_BE, "p-2222", annotations=net_qos(egress="20M"))) == (0, 2_500_000)   # missing = 0
    assert pod_limits(pod(UID_BE, "p-2222")) == (0, 0)


@pytest.mark.parametrize("raw,needle", [
    ("{not json", "not JSON"), ('["20M"]', "expected an object"), ('{"egressLimit": 20000000}', "expected a string"),
    ('{"egressLimit": "20 megabit"}', "egressLimit"), ('{"ingressLimit": "-5M"}', "negative"),
])
def test_malformed_pod_annotation_is_rejected_with_a_reason(raw, needle):
    with pytest.raises(DecodeError) as e:
        pod_limits(pod(UID_BE, "p-2222", annotations={wire.ANNOTATION_POD_NETWORK_QOS: raw}))
    assert needle in str(e.value) and e.value.key == wire.ANNOTATION_POD_NETWORK_QOS


# --- HTB classes ----------------------------------------------------------------------------------------------

def test_class_plan_follows_the_reference_layout():
    bw, _ = bandwidth(spec("100M", ls={"enable": True, "egressRequest": "40M"},
                           be={"enable": True, "egressRequest": "10M", "egressLimit": "20M"}), {})
    classes = {c.handle: c for c in class_plan(bw)}
    assert sorted(classes) == [0x10001, 0x10002, 0x10003, 0x10004]
    root, system, ls, be = (classes[h] for h in (0x10001, 0x10002, 0x10003, 0x10004))
    assert (root.parent, root.rate, root.ceil) == (TC_H_ROOT, 12_500_000, 12_500_000)
    assert (system.parent, system.rate, system.ceil, system.prio) == (0x10001, 6_250_000, 12_500_000, 1)
    assert (ls.rate, ls.ceil, ls.prio) == (5_000_000, 12_500_000, 2)      # unset limit: up to the total
    assert (be.rate, be.ceil, be.prio) == (1_250_000, 2_500_000, 3)


def test_class_plan_without_requests_or_disabled_classes():
    bw, _ = bandwidth(spec("100M", be={"enable": True, "egressLimit": "20M"}), {})
    classes = {c.handle: c for c in class_plan(bw)}
    assert 0x10003 not in classes                                    # LS disabled: its pods use the default
    assert classes[0x10004].rate == MIN_RATE and classes[0x10004].ceil == 2_500_000
    assert classes[0x10002].rate == 12_500_000


def test_htb_parameters_respect_the_floors():
    fast = htb_class(0x10001, TC_H_ROOT, 5_000_000_000, 5_000_000_000, 0)       # 40 Gbit/s: 64-bit rate
    assert fast.buffer >= 200 and fast.cbuffer >= 200 and fast.quantum == 200_000
    slow = htb_class(0x10004, 0x10001, MIN_RATE, MIN_RATE, 3)
    assert slow.quantum == 1000 and 0 < slow.buffer < 2**32


# --- stable pod class minors ----------------------------------------------------------------------------------

def test_minor_is_stable_and_collisions_are_resolved_stably():
    a, b = "00000000-0000-0000-0000-000000000113", "00000000-0000-0000-0000-000000000400"
    assert pod_minor_seed(a) == pod_minor_seed(b)              # a real crc32 collision
    assert pod_minor_seed(a) == pod_minor_seed(a) and POD_MINOR_FIRST <= pod_minor_seed(a) <= 0xFFFF
    uids = [a, b] + [f"{i:08d}-1111-2222-3333-444444444444" for i in range(50)]
    first = assign_minors(uids, {})
    assert len(set(first.values())) == len(uids)
    assert all(POD_MINOR_FIRST <= m <= POD_MINOR_LAST for m in first.values())
    shuffled = uids[:]
    random.Random(1).shuffle(shuffled)
    assert assign_minors(shuffled, {}) == first                   # order does not matter
    # b arrived first and holds the seed; a, created later, keeps whatever it got (no reshuffle)
    held = assign_minors([b], {})
    later = assign_minors([a, b], held)
    assert later[b] == held[b] == pod_minor_seed(b) and later[a] != later[b]
    # a pod going away moves nobody
    assert assign_minors(uids[1:], first) == {u: first[u] for u in uids[1:]}


def test_net_cls_classid_values():
    assert net_cls_classid(NET_BE, None) == 0x10004            # 65540
    assert net_cls_classid(NET_LS, None) == 0x10003
    assert net_cls_classid(NET_SYSTEM, None) == 0x10002
    assert net_cls_classid(NET_NONE, None) is None
    assert net_cls_classid(NET_NONE, 0x715A) == 0x1715A


# --- the tc plan and diff ---------------------------------------------------------------------------------------

def plan_for(pods, bw=None, minors=None, cgroup_filter=False):
    bw = bw or bandwidth(spec("100M", ls={"enable": True, "egressRequest": "40M"},
                              be={"enable": True, "egressLimit": "20M"}), {})[0]
    return tc_plan(LINK, bw, pods, minors or {}, cgroup_filter)


def pods_sample():
    return [PodNet(UID_LS, "ns/ls", NET_LS, "10.0.0.2", 0),
            PodNet(UID_BE, "ns/be", NET_BE, "10.0.0.3", 0),
            PodNet(UID_SYS, "ns/sys", NET_SYSTEM, "10.0.0.4", 0),
            PodNet(UID_NONE, "ns/none", NET_NONE, "10.0.0.5", 0),
            PodNet("55555555-0000-0000-0000-000000000000", "ns/lim", NET_BE, "10.0.0.6", 1_250_000),
            PodNet("66666666-0000-0000-0000-000000000000", "ns/host", NET_LS, None, 2_500_000)]


def converged_state(plan):
    filters = [Filter(QDISC, POD_FILTER_PREF, 0x80000800 + i, "u32", 0x0800, cid, ip)
               for i, (ip, cid) in enumerate(plan.u32)]
    if plan.cgroup_filter:
        filters.append(Filter(QDISC, CGROUP_FILTER_PREF, 0x10000, "cgroup"))
    return TCState(LINK, Qdisc("htb", QDISC, TC_H_ROOT, 2), plan.classes, tuple(filters))


def test_plan_classifies_pods_by_source_ip():
    pods = pods_sample()
    minors = assign_minors([p.uid for p in pods if p.egress], {})
    plan = plan_for(pods, minors=minors)
    lim = 0x10000 | minors["55555555-0000-0000-0000-000000000000"]
    # LS and BE by class; SYSTEM and unlabeled take the default class; the limited pod its own class; the
    # host-network pod has no address to match and (without net_cls) no class
    assert plan.u32 == (("10.0.0.2", 0x10003), ("10.0.0.3", 0x10004), ("10.0.0.6", lim))
    own = [c for c in plan.classes if c.handle == lim]
    assert len(own) == 1 and (own[0].parent, own[0].rate, own[0].ceil, own[0].prio) == (0x10001, 1_250_000,
                                                                                         1_250_000, 3)
    assert 0x10000 | minors["66666666-0000-0000-0000-000000000000"] not in {c.handle for c in plan.classes}
    with_cgroup = plan_for(pods, minors=minors, cgroup_filter=True)
    assert 0x10000 | minors["66666666-0000-0000-0000-000000000000"] in {c.handle for c in with_cgroup.classes}


def test_disabled_ls_class_sends_ls_pods_to_the_default():
    bw, _ = bandwidth(spec("100M", be={"enable": True, "egressLimit": "20M"}), {})
    assert plan_for(pods_sample()[:2], bw=bw).u32 == (("10.0.0.3", 0x10004),)


def test_converged_state_needs_no_change_and_empty_state_needs_everything():
    plan = plan_for(pods_sample(), minors=assign_minors(["55555555-0000-0000-0000-000000000000"], {}),
                    cgroup_filter=True)
    assert tc_diff(plan, converged_state(plan)) == []
    ops = tc_diff(plan, TCState(LINK, Qdisc("noqueue", 0, TC_H_ROOT), (), ()))
    kinds = [op.op for op in ops]
    assert kinds == ["root"] + ["add-class"] * len(plan.classes) + ["add-u32"] * len(plan.u32) + ["add-cgroup"]
    # parents before children
    assert [op.cls.handle for op in ops if op.cls][:2] == [0x10001, 0x10002]


def test_diff_removes_stale_filters_before_their_classes_and_changes_rates():
    pods = pods_sample()
    minors = assign_minors([p.uid for p in pods if p.egress], {})
    before = plan_for(pods, minors=minors)
    state = converged_state(before)
    gone = pods[:4] + pods[5:]                        # the limited pod went away
    bw, _ = bandwidth(spec("100M", ls={"enable": True, "egressRequest": "40M"},
                           be={"enable": True, "egressLimit": "30M"}), {})
    after = tc_plan(LINK, bw, gone, minors, False)
    ops = tc_diff(after, state)
    kinds = [op.op for op in ops]
    assert kinds == ["del-filter", "del-class", "change-class"], ops
    assert ops[0].filter is not None and ops[0].filter.src_ip == "10.0.0.6"
    assert ops[2].cls is not None and ops[2].cls.handle == 0x10004 and ops[2].cls.ceil == 3_750_000


def test_diff_replaces_a_foreign_or_misconfigured_root_and_dedups_filters():
    plan = plan_for(pods_sample()[:2])
    wrong_default = TCState(LINK, Qdisc("htb", QDISC, TC_H_ROOT, 3), plan.classes, ())
    assert [op.op for op in tc_diff(plan, wrong_default)][:2] == ["del-root", "root"]
    state = converged_state(plan)
    dup = state.filters[0]
    extra = Filter(QDISC, POD_FILTER_PREF, 0x80000900, "u32", 0x0800, dup.classid, dup.src_ip)
    foreign = Filter(QDISC, 9, 0x80100800, "u32", 0x0800, 0x10003, None)
    ops = tc_diff(plan, TCState(LINK, state.root, state.classes, state.filters + (extra, foreign)))
    assert [(op.op, op.filter.handle if op.filter else None) for op in ops] == [("del-filter", 0x80000900),
                                                                               ("del-filter", 0x80100800)]


def test_adopt_minors_from_kernel_filters():
    state = TCState(LINK, Qdisc("htb", QDISC, TC_H_ROOT, 2), (),
                    (Filter(QDISC, 4, 1, "u32", 0x0800, 0x1ABCD, "10.0.0.6"),
                     Filter(QDISC, 4, 2, "u32", 0x0800, 0x10004, "10.0.0.3")))
    assert adopt_minors(state, {"10.0.0.6": "pod-a", "10.0.0.3": "pod-b"}) == {"pod-a": 0xABCD}


# --- Terway files ----------------------------------------------------------------------------------------------

def test_terway_global_config_format():
    bw, _ = bandwidth(spec("100M", ls={"enable": True, "egressRequest": "40M", "ingressLimit": 50},
                           be={"enable": True, "egressLimit": "20M"}), {})
    assert terway_global_config(bw) == (
        "hw_tx_bps_max 12500000\nhw_rx_bps_max 12500000\n"
        "offline_l1_tx_bps_min 5000000\noffline_l1_tx_bps_max 0\n"
        "offline_l1_rx_bps_min 0\noffline_l1_rx_bps_max 6250000\n"
        "offline_l2_tx_bps_min 0\noffline_l2_tx_bps_max 2500000\n"
        "offline_l2_rx_bps_min 0\noffline_l2_rx_bps_max 0\n")
    assert terway_global_config(Bandwidth()).count(" 0\n") == 10


def test_terway_pod_json_matches_go_marshal():
    layout = Cgroups("/x", CgroupVersion.V1, Driver.CGROUPFS).layout
    b = meta_for(pod(UID_BE, "be", qos_class="BE", qos="BestEffort"), layout)
    a = meta_for(pod(UID_LS, "web", qos="Guaranteed"), layout)
    entries = {UID_BE: terway_pod_entry(b, 0, 2_500_000), UID_LS: terway_pod_entry(a, 125, 0)}
    assert terway_pods_json(entries) == (
        '{"11111111-0000-0000-0000-000000000000":{"podName":"web","podNamespace":"ns",'
        '"podUID":"11111111-0000-0000-0000-000000000000","prio":1,'
        '"cgroupDir":"/sys/fs/cgroup/net_cls/kubepods/pod11111111-0000-0000-0000-000000000000",'
        '"qosConfig":{"ingressBandwidth":125,"egressBandwidth":0}},'
        '"22222222-0000-0000-0000-000000000000":{"podName":"be","podNamespace":"ns",'
        '"podUID":"22222222-0000-0000-0000-000000000000","prio":2,'
        '"cgroupDir":"/sys/fs/cgroup/net_cls/kubepods/besteffort/pod22222222-0000-0000-0000-000000000000",'
        '"qosConfig":{"ingressBandwidth":0,"egressBandwidth":2500000}}}')
    assert terway_pods_json({}) == "{}"


@pytest.mark.parametrize("label,kube,prio", [("SYSTEM", "Guaranteed", 0), ("LSE", "Guaranteed", 1),
                                             ("LSR", "Guaranteed", 1), ("LS", "Burstable", 1),
                                             ("BE", "BestEffort", 2), (None, "Guaranteed", 1),
                                             (None, "Burstable", 1), (None, "BestEffort", 2)])
def test_terway_prio(label, kube, prio):
    assert terway_prio(pod(UID_LS, "p-1111", qos_class=label, qos=kube)) == prio


def test_terway_policy_end_to_end_through_the_executor(tmp_path, caplog):
    """terway-qos: files written exactly once, a malformed annotation is one log line naming the pod (which stays
    in pod.json with no limit) while the other pod keeps its limit; switching policy removes the files, switching
    back writes them again."""
    cg = Cgroups(str(tmp_path / "cg"), CgroupVersion.V1, Driver.CGROUPFS)
    ex = Executor(cg)
    terway = str(tmp_path / "var/lib/terway/qos")
    strategy = NetQOS(HostPaths.under(str(tmp_path)), None, tc=False, terway_dir=terway)
    good = pod(UID_LS, "good", qos_class="LS", annotations=net_qos("20M", "8M"))
    bad = pod(UID_BE, "bad", qos_class="BE", qos="BestEffort", annotations={wire.ANNOTATION_POD_NETWORK_QOS: "{oops"})
    metas = tuple(meta_for(p, cg.layout) for p in (good, bad))
    slo = spec("1G", be={"enable": True, "egressLimit": 10}, policy="terway-qos")
    view = node_view(pods=metas, slo=slo)
    with caplog.at_level(logging.WARNING, logger="koordlet.qos.net_qos"):
        strategy.reconcile(view, ex)
        strategy.reconcile(view, ex)
    named = [r.getMessage() for r in caplog.records if "ns/bad" in r.getMessage()]
    assert len(named) == 1 and wire.ANNOTATION_POD_NETWORK_QOS in named[0]
    with open(os.path.join(terway, "global_bps_config")) as f:
        text = f.read()
    assert text.startswith("hw_tx_bps_max 125000000\nhw_rx_bps_max 125000000\n")
    assert "offline_l2_tx_bps_max 12500000\n" in text
    with open(os.path.join(terway, "pod.json")) as f:
        pods = json.load(f)
    assert pods[UID_LS]["qosConfig"] == {"ingressBandwidth": 1_000_000, "egressBandwidth": 2_500_000}
    assert pods[UID_BE]["qosConfig"] == {"ingressBandwidth": 0, "egressBandwidth": 0} and pods[UID_BE]["prio"] == 2
    assert ex.total.written == 2                                    # the second cycle wrote nothing

    strategy.reconcile(node_view(pods=metas, slo=spec("1G")), ex)
    assert sorted(os.listdir(terway)) == []
    strategy.reconcile(view, ex)
    assert sorted(os.listdir(terway)) == ["global_bps_config", "pod.json"]
    assert ex.total.written == 4
