"""Net QoS (policy tc) against the real kernel: HTB over netlink in a network namespace, traffic measured.

Two namespaces joined by a veth pair made here. The client namespace plays the node: a default route over the
veth (so the strategy finds its egress interface as in production) and three pod addresses on it. iperf3
servers run in the other namespace; three clients, each bound to one pod address (``iperf3 -B``), send at once:

- the two BE pods alone: the BE class (request 2, limit 20 Mbit/s) -> within ±35 % of 20 Mbit/s; the BE pod
  with its own ``koordinator.sh/networkQOS`` egressLimit of 8 Mbit/s -> ±35 % of 8 Mbit/s (upstream would give
  it 1 Mbit/s, dividing by 8 twice);
- LS (request 100 Mbit/s, no limit, total 200 Mbit/s) and BE together: LS keeps (at least most of) its share,
  BE keeps its request (HTB lends spare bandwidth to the lower prio number first).

Then: a second reconcile and a restarted strategy make zero netlink writes; disabling removes our qdisc.
Namespaces (and with them the veth, qdiscs and classes) are removed in a finally block.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import uuid

import pytest

from koordlet.base import wire
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.host.netlink import TC, TC_H_ROOT, supported
from koordlet.host.paths import HostPaths
from koordlet.qos.net_qos.htb import BE_CLASS, LS_CLASS, POD_MINOR_FIRST, QDISC, ROOT_CLASS
from koordlet.qos.net_qos.strategy import NetQOS
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.writer.executor import Executor
from tests.builders import host_paths, node_view, pod_meta
from tests.waits import wait_for

pytestmark = pytest.mark.root

SERVER_IP = "10.203.0.1"
PODS = (  # uid, label, ip, annotations, iperf3 port
    ("11111111-aaaa-0000-0000-000000000001", "LS", "10.203.0.2", {}, 5301),
    ("22222222-bbbb-0000-0000-000000000002", "BE", "10.203.0.3", {}, 5302),
    ("33333333-cccc-0000-0000-000000000003", "BE", "10.203.0.4",
     {wire.ANNOTATION_POD_NETWORK_QOS: '{"egressLimit": "8M"}'}, 5303),
)
MBIT = 1_000_000


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    for tool in ("ip", "iperf3"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=10)


@pytest.fixture
def netpair():
    """(client netns, server netns); the client has the veth ``kq0`` with the pod addresses and a default route."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = uuid.uuid4().hex[:6]
    cli, srv = f"kqc-{os.getpid()}-{tag}", f"kqs-{os.getpid()}-{tag}"
    made: list[str] = []
    servers: list[subprocess.Popen] = []
    try:
        for ns in (cli, srv):
            sh("ip", "netns", "add", ns)
            made.append(ns)
        sh("ip", "-n", cli, "link", "add", "kq0", "type", "veth", "peer", "name", "kq1", "netns", srv)
        for _, _, ip, _, _ in PODS:
            sh("ip", "-n", cli, "addr", "add", f"{ip}/24", "dev", "kq0")
        sh("ip", "-n", srv, "addr", "add", f"{SERVER_IP}/24", "dev", "kq1")
        for ns, dev in ((cli, "kq0"), (srv, "kq1")):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", cli, "route", "add", "default", "via", SERVER_IP)
        for *_, port in PODS:
            servers.append(subprocess.Popen(["ip", "netns", "exec", srv, "iperf3", "-s", "-p", str(port)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield cli, srv, servers
    finally:
        for p in servers:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=5)
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def listening(srv: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", srv, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, timeout=5).stdout
    return bool(out.strip())


def send(cli: str, ips: tuple[str, ...], seconds: int = 2) -> dict[str, float]:
    """The given pods send at once; bits/s received by the server per pod IP (first second omitted: slow start)."""
    procs = {ip: subprocess.Popen(["ip", "netns", "exec", cli, "iperf3", "-c", SERVER_IP, "-p", str(port), "-B", ip,
                                   "-t", str(seconds), "-O", "1", "-J"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
             for _, _, ip, _, port in PODS if ip in ips}
    rates = {}
    for ip, p in procs.items():
        out, err = p.communicate(timeout=seconds + 15)
        assert p.returncode == 0, f"iperf3 from {ip} failed: {out[-500:]} {err[-500:]}"
        rates[ip] = float(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    return rates


def net_slo(policy: str | None = None) -> NodeSLOSpec:
    """200M of node bandwidth, LS asking 100M, BE 2M up to 20M; ``policy``: the netQOSPolicy, if any."""
    qos: dict = {"lsClass": {"networkQOS": {"enable": True, "egressRequest": "100M"}},
                 "beClass": {"networkQOS": {"enable": True, "egressRequest": "2M", "egressLimit": "20M"}}}
    if policy is not None:
        qos["policies"] = {"netQOSPolicy": policy}
    slo, errors = merge_node_slo_spec({"systemStrategy": {"totalNetworkBandwidth": "200M"},
                                       "resourceQOSStrategy": qos})
    assert errors == []
    return slo


# the pods of PODS as the API server lists them (one container, no status but the pod IP)
METAS = tuple(pod_meta(uid, f"p-{label.lower()}-{ip[-1]}", namespace="ns", qos_class=label, annotations=ann,
                       spec_containers=[{"name": "c"}], qos="BestEffort" if label == "BE" else "Burstable",
                       pod_ip=ip, phase=None, statuses=False,
                       layout=Cgroups("/nonexistent", CgroupVersion.V1, Driver.CGROUPFS).layout)
              for uid, label, ip, ann, _ in PODS)


def test_htb_shapes_pod_egress_and_reconciles_without_writes(netpair, tmp_path):
    cli, srv, _ = netpair
    cg = Cgroups(str(tmp_path / "cgroup"), CgroupVersion.V1, Driver.CGROUPFS)   # no net_cls here
    ex = Executor(cg)
    paths = HostPaths.under(str(tmp_path))
    strategy = NetQOS(paths, None, cli, terway=False, refresh=0)   # refresh 0: read the kernel every cycle
    try:
        strategy.reconcile(node_view(pods=METAS, slo=net_slo()), ex)
        state = strategy.tc.read(strategy.tc.default_link())          # type: ignore[arg-type]
        assert state.link.name == "kq0"
        assert state.root is not None and (state.root.kind, state.root.handle, state.root.default_class) == (
            "htb", QDISC, 2)
        classes = {c.handle: c for c in state.classes}
        assert classes[ROOT_CLASS].parent == TC_H_ROOT and classes[ROOT_CLASS].rate == 25_000_000
        assert (classes[BE_CLASS].rate, classes[BE_CLASS].ceil) == (250_000, 2_500_000)
        limited = {c.handle: c for c in state.classes if c.handle & 0xFFFF >= POD_MINOR_FIRST}
        assert [(c.rate, c.ceil) for c in limited.values()] == [(1_000_000, 1_000_000)]   # 8 Mbit/s, /8 once
        srcs = {f.src_ip: f.classid for f in state.filters if f.src_ip}
        assert srcs == {"10.203.0.2": LS_CLASS, "10.203.0.3": BE_CLASS, "10.203.0.4": next(iter(limited))}

        writes = strategy.tc.writes
        strategy.reconcile(node_view(pods=METAS, slo=net_slo()), ex)
        assert strategy.tc.writes == writes, "a converged host must cost no netlink writes"
        restarted = NetQOS(paths, None, cli, terway=False, refresh=0)
        try:
            restarted.reconcile(node_view(pods=METAS, slo=net_slo()), ex)
            assert restarted.tc.writes == 0, "a restart over a converged host must change nothing"
        finally:
            restarted.tc.close()

        assert wait_for(lambda: all(listening(srv, port) for *_, port in PODS), 5.0)
        # the BE pods alone (nothing else wants the link): capped by the BE class ceil / their own class
        rates = send(cli, ("10.203.0.3", "10.203.0.4"))
        be, capped = rates["10.203.0.3"], rates["10.203.0.4"]
        print(f"BE alone, Mbit/s: BE class {be / MBIT:.1f}, BE pod limit {capped / MBIT:.1f}")
        assert 20 * MBIT * 0.65 <= be <= 20 * MBIT * 1.35, f"BE class limited to 20 Mbit/s, measured {be:.0f}"
        assert 8 * MBIT * 0.65 <= capped <= 8 * MBIT * 1.35, f"pod limited to 8 Mbit/s, measured {capped:.0f}"
        # LS and BE compete for the 200 Mbit/s: LS (prio 2) borrows first, BE keeps its 2 Mbit/s request
        rates = send(cli, ("10.203.0.2", "10.203.0.3"))
        ls, be = rates["10.203.0.2"], rates["10.203.0.3"]
        print(f"LS and BE together, Mbit/s: LS {ls / MBIT:.1f}, BE {be / MBIT:.1f}")
        assert 100 * MBIT * 0.65 <= ls <= 200 * MBIT * 1.35 and ls > 3 * be, f"LS keeps its share, got {ls:.0f}"
        assert be >= 2 * MBIT * 0.65, f"BE keeps its 2 Mbit/s request, measured {be:.0f}"

        strategy.reconcile(node_view(pods=METAS, slo=net_slo("terway-qos")), ex)   # not tc any more: our qdisc goes
        root = strategy.tc.root_qdisc(state.link)
        assert root is None or root.kind != "htb"
        writes = strategy.tc.writes
        strategy.reconcile(node_view(pods=METAS, slo=net_slo("terway-qos")), ex)
        assert strategy.tc.writes == writes
    finally:
        strategy.tc.close()


def test_supported_reports_the_interface(netpair, tmp_path):
    """doctor's probe: read-only, names the egress interface and its root qdisc; a host without tc says so."""
    cli, _, _ = netpair
    host = host_paths()
    cgroups = Cgroups(str(tmp_path), CgroupVersion.V1, Driver.CGROUPFS)
    tc = TC(cli)
    try:
        tc.replace_htb_root(tc.default_link(), QDISC, 2)          # type: ignore[arg-type]
    finally:
        tc.close()
    ok, why = supported(host, cgroups, netns=cli)
    assert ok and "egress kq0" in why and "root qdisc htb 1:0" in why and "no net_cls" in why, why
    ok, why = supported(HostPaths.under(str(tmp_path)), cgroups, netns=cli)
    assert not ok and "psched" in why, why                            # a fake /proc: no traffic control


def test_net_cls_classids_and_the_cgroup_classifier(netpair, tmp_path, caplog):
    """With v1 net_cls (a fake tree: this VM has none) every labeled pod gets its classid and the plan asks for
    the ``cgroup`` classifier; a kernel without it (CONFIG_NET_CLS_CGROUP unset, as here) is logged once and the
    tree converges without it, a kernel with it gets exactly one cgroup filter at pref 1."""
    cli, _, _ = netpair
    cg = Cgroups(str(tmp_path / "cgroup"), CgroupVersion.V1, Driver.CGROUPFS)
    v = node_view(pods=METAS, slo=net_slo())
    os.makedirs(cg.path("net_cls", ""))
    open(cg.path("net_cls", "", "net_cls.classid"), "w").close()
    for meta in v.pods:
        os.makedirs(cg.path("net_cls", meta.cgroup_dir))
        with open(cg.path("net_cls", meta.cgroup_dir, "net_cls.classid"), "w") as f:
            f.write("0\n")
    ex = Executor(cg)
    strategy = NetQOS(HostPaths.under(str(tmp_path)), None, cli, terway=False, refresh=0)
    try:
        with caplog.at_level(logging.WARNING, logger="koordlet.qos.net_qos"):
            for _ in range(3):
                strategy.reconcile(v, ex)
        writes = strategy.tc.writes
        strategy.reconcile(v, ex)
        assert strategy.tc.writes == writes
        state = strategy.tc.read(strategy.tc.default_link())            # type: ignore[arg-type]
        cgroup_filters = [f for f in state.filters if f.kind == "cgroup"]
        missing = [r for r in caplog.records if "no cgroup classifier" in r.getMessage()]
        assert (len(cgroup_filters), len(missing)) in ((1, 0), (0, 1)), (cgroup_filters, missing)
        classids = {}
        for meta in v.pods:
            with open(cg.path("net_cls", meta.cgroup_dir, "net_cls.classid")) as f:
                classids[meta.pod.raw_qos_class, bool(meta.pod.annotations)] = int(f.read())
        limited = next(c.handle for c in state.classes if c.handle & 0xFFFF >= POD_MINOR_FIRST)
        assert classids == {("LS", False): 0x10003, ("BE", False): 0x10004, ("BE", True): limited}
    finally:
        strategy.tc.close()
