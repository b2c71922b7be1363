"""deploy/rbac.yaml against the calls the agent really makes: the RBAC grants exactly what the code calls.

The agent runs in a cluster against the API server double and a TLS kubelet double, with every report on and a
conflict injected into each write, so that every call site sends its request; evictions and the API-server pod
source run through their own code. Each recorded request is turned into the attributes the API server (or the
kubelet's webhook authorizer) would ask RBAC about, and then:

- every request is allowed by rbac.yaml (kubelet calls through the fine-grained ``nodes/pods`` / ``nodes/configz``;
  through ``nodes/proxy`` only with rbac-kubelet-proxy.yaml, for kubelets without fine-grained authorization);
- every verb rbac.yaml grants was used by some request (nothing unused is granted).

A static inventory of the KubeApi call sites in the agent's packages makes a new call site fail here until a
scenario below sends it, so the first check cannot pass by not looking.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from doubles.apiserver_double import ApiServerDouble
from doubles.crdschema import CrdSchemas
from doubles.kubelet_double import KubeletDouble, make_self_signed_cert, openssl_available
from koordlet.agent import Agent
from koordlet.host.cgroup import CgroupVersion, Driver
from koordlet.ops.config import build
from koordlet.states.apiserver import ApiServerPodSource
from koordlet.states.kubeapi import KubeApi
from tests.fakehost import FakeHost
from tests.unit.test_deploy_manifests import Access, api_access, cluster_role, granted, kubelet_access
from tests.waits import wait_for

REPO = Path(__file__).resolve().parents[2]
NODE = "node-a"
NODES = "/api/v1/nodes"
NODE_METRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODE_SLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
NRTS = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"
DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"

# Every call of a KubeApi verb in the agent's packages: (module, verb) -> the scenario below that sends it.
CALL_SITES = {
    ("koordlet/states/watcher.py", "get"): "agent: list of each watched object",
    ("koordlet/states/watcher.py", "watch"): "agent: watch of each watched object",
    ("koordlet/reporters/cluster.py", "replace"): "agent: NodeMetric status, NRT and Device updates",
    ("koordlet/reporters/cluster.py", "get"): "agent: re-read after an injected 409 Conflict",
    ("koordlet/reporters/cluster.py", "create"): "agent: NRT and Device created",
    ("koordlet/states/apiserver.py", "get"): "pod source: list of the node's pods",
    ("koordlet/qos/evict.py", "evict_pod"): "eviction",
    ("koordlet/qos/evict.py", "create_event"): "eviction",
}
VERBS = {"get", "create", "replace", "watch", "request", "evict_pod", "create_event"}


def api_call_sites() -> set[tuple[str, str]]:
    """(module, verb) of every ``<...>.api.<verb>(...)`` / ``<...>._api.<verb>(...)`` call (the agent's one client
    is always held under one of those names)."""
    found = set()
    for package in ("koordlet", "nri_plugin", "hami_bridge"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "kubeapi.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in VERBS):
                    continue
                receiver = node.func.value
                name = receiver.id if isinstance(receiver, ast.Name) else \
                    receiver.attr if isinstance(receiver, ast.Attribute) else ""
                if name in ("api", "_api"):
                    found.add((str(path.relative_to(REPO)), node.func.attr))
    return found


def test_every_api_call_site_has_a_scenario():
    assert api_call_sites() == set(CALL_SITES)


def node_object() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "4", "memory": "16Gi"}}}


@pytest.fixture
def double() -> Iterator[ApiServerDouble]:
    schemas = CrdSchemas.load(REPO / "deploy" / "crds")
    with ApiServerDouble(schemas.validate, bookmark_interval=0.2) as d:
        d.resource("slo.koordinator.sh", "v1alpha1", "nodemetrics", "NodeMetric", namespaced=False,
                   status_subresource=True)
        d.resource("slo.koordinator.sh", "v1alpha1", "nodeslos", "NodeSLO", namespaced=False,
                   status_subresource=True)
        d.resource("topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", "NodeResourceTopology",
                   namespaced=False)
        d.resource("scheduling.koordinator.sh", "v1alpha1", "devices", "Device", namespaced=False)
        d.put(NODES, node_object())
        d.put(NODE_METRICS, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                             "metadata": {"name": NODE}, "spec": {"metricCollectPolicy": {
                                 "aggregateDurationSeconds": 300, "reportIntervalSeconds": 1}}})
        d.put(NODE_SLOS, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                          "metadata": {"name": NODE}, "spec": {}})
        yield d


def run_agent_in_cluster(double: ApiServerDouble, kubelet: KubeletDouble, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent with pods from the kubelet (HTTPS, token), every report on (NodeMetric, NRT, Device with a fake
    8-GPU board), until each report has been created and written again after a conflict."""
    from doubles import fakenvml
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V1, Driver.CGROUPFS)
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.h100_sxm8(host.paths))
    token = tmp_path / "token"
    token.write_text("agent-token")
    cfg = build(environ={"NODE_NAME": NODE}, flags={
        "kubeconfig": double.write_kubeconfig(tmp_path / "kubeconfig"), "pod-source": "kubelet",
        "kubelet-address": "127.0.0.1", "kubelet-port": kubelet.port, "kubelet-token-file": str(token),
        "cgroup-root-dir": host.paths.cgroup_root, "proc-root-dir": host.paths.proc_root,
        "sys-root-dir": host.paths.sys_root, "sys-fs-root-dir": host.paths.sys_fs_root,
        "tsdb-path": str(tmp_path / "tsdb"), "addr": ("127.0.0.1", 0), "node-topology-sync-interval": 0.2,
        "collect-res-used-interval": 0.2, "enable-nri-runtime-hook": False,
        "feature-gates": {"Accelerators": True}})
    # the first write of each kind meets a 409 Conflict: the writer reads the object again (get) and retries
    for path in (f"{NODE_METRICS}/{NODE}/status", f"{NRTS}/{NODE}", f"{DEVICES}/{NODE}"):
        double.fail_next("PUT", path, 409)
    agent = Agent.build(cfg)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()

    def sent(method: str, path: str) -> int:
        return sum(1 for r in double.requests if r.method == method and r.path == path)

    def done() -> bool:
        return (sent("PUT", f"{NODE_METRICS}/{NODE}/status") >= 2 and sent("GET", f"{NODE_METRICS}/{NODE}") >= 1
                and all(sent("POST", c) >= 1 for c in (NRTS, DEVICES))
                and all(sent("GET", f"{c}/{NODE}") >= 1 for c in (NRTS, DEVICES))
                and all(sent("PUT", f"{c}/{NODE}") >= 2 for c in (NRTS, DEVICES))
                and {r.path.split("?")[0].rstrip("/") for r in kubelet.requests} >= {"/pods", "/configz"})

    try:
        # NRT and Device: created at the first report; an update follows when the Node changes (a label the
        # NRT copies), and the GPU health change updates the Device
        assert wait_for(lambda: all(sent("POST", c) for c in (NRTS, DEVICES)), timeout=15)
        double.put(NODES, {**node_object(), "metadata": {"name": NODE, "labels": {
            "node.koordinator.sh/enable-numa-reservation": "true"}}})
        sys.modules["pynvml"].xid("0000:2a:00.0", 79)  # type: ignore[attr-defined]
        # the NodeMetric report's first run is one report interval after start (60 s before the NodeMetric's
        # spec is read): send it now, as its schedule would
        (report,) = [r for _, r in agent.reports if r.kind == "nodemetric"]
        assert wait_for(report.ready, timeout=5)
        assert report.send(threading.Event()) == "updated"
        assert report.send(threading.Event()) == "updated"
        assert wait_for(done, timeout=20), "\n".join(sorted({f"{r.method} {r.path}" for r in double.requests}))
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def evict_through_the_api(double: ApiServerDouble, tmp_path: Path) -> None:
    """The eviction path as its own test drives it: an Eviction and an Event."""
    from tests.builders import pod_object
    from tests.unit.test_evict import BE, MEM_SLO, Env, GiB, cid, slo, uid
    pods = "/api/v1/namespaces/default/pods"
    victim = pod_object(uid(1), "be-a", qos="BestEffort", labels=BE, containers={"c": cid(1)})
    double.put(pods, victim)
    api = KubeApi(double.write_kubeconfig(tmp_path / "evict-kubeconfig"), timeout=2.0)
    try:
        env = Env(tmp_path / "evict-host", {"BEMemoryEvict"}, api=api)
        env.add(victim)
        env.memory(15 * GiB, {uid(1): 4 * GiB})
        env.evictor.reconcile(env.view(slo(**MEM_SLO)), env.executor)
    finally:
        api.close()


@pytest.mark.skipif(not openssl_available(), reason="needs the openssl CLI for the kubelet's certificate")
def test_rbac_allows_every_call_and_grants_nothing_unused(double, tmp_path, monkeypatch):
    tls = make_self_signed_cert(tmp_path)
    with KubeletDouble(tls, required_token="agent-token") as kubelet:
        kubelet.configz = {"kubeletconfig": {"cpuManagerPolicy": "none"}}
        run_agent_in_cluster(double, kubelet, tmp_path, monkeypatch)
        kubelet_calls = [("GET", r.path) for r in kubelet.requests]
    api = KubeApi(double.write_kubeconfig(tmp_path / "kubeconfig"), timeout=2.0)
    try:
        ApiServerPodSource(api, NODE).list_pods()
    finally:
        api.close()
    evict_through_the_api(double, tmp_path)

    used = {api_access(r.method, r.path, r.query) for r in double.requests}
    used_kubelet = {kubelet_access(m, p, fine_grained=True) for m, p in kubelet_calls}
    rules, legacy = granted(cluster_role("rbac.yaml")), granted(cluster_role("rbac-kubelet-proxy.yaml"))
    assert sorted(used - rules) == [], "requests rbac.yaml does not allow"
    assert sorted(used_kubelet - rules) == [], "kubelet requests rbac.yaml does not allow (fine-grained)"
    assert sorted(rules - used - used_kubelet) == [], "granted by rbac.yaml, used by nothing"
    # without fine-grained kubelet authorization every kubelet call needs nodes/proxy, and that is all it needs
    assert {kubelet_access(m, p, fine_grained=False) for m, p in kubelet_calls} == legacy
    # what the issue named as granted but unused stays out
    for unused in (Access("watch", "", "pods"), Access("patch", "", "events"),
                   Access("patch", "slo.koordinator.sh", "nodemetrics/status"),
                   Access("patch", "scheduling.koordinator.sh", "devices"),
                   Access("patch", "topology.node.k8s.io", "noderesourcetopologies")):
        assert unused not in rules
