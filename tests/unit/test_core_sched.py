"""Core scheduling: the group rule, the kernel interface (against a fake of the kernel and the real one), and
the strategy on a fake cgroup tree (upstream pkg/koordlet/runtimehooks/hooks/coresched, util/system/core_sched*.go)."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from doubles.fakecoresched import FakeCoreSchedKernel
from koordlet.base import wire
from koordlet.host import coresched as hc
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, Layout
from koordlet.ops.metrics import AgentMetrics
from koordlet.qos.core_sched import CACHE_EXPIRY, CoreSched
from koordlet.rules.core_sched import core_sched_rule, group_id
from koordlet.states.informer import PodMeta
from koordlet.states.node import NodeInfo
from koordlet.states.nodeslo.merge import merge_node_slo_spec
from koordlet.states.nodeslo.schema import NodeSLOSpec
from koordlet.writer.executor import Executor
from tests.builders import agent_pod, host_paths, node_view, pod_meta
from tests.fakehost import FakeHost

QOS_LABEL = "koordinator.sh/qosClass"


def slo(policy: str = "coreSched", enable: tuple[str, ...] = ("lsrClass", "lsClass", "beClass"),
        **cpu: dict[str, Any]) -> NodeSLOSpec:
    """A merged NodeSLO with the given classes' cpuQOS enabled (plus per-class overrides)."""
    rq: dict[str, Any] = {"policies": {"cpuPolicy": policy}}
    for cls in ("lsrClass", "lsClass", "beClass"):
        rq[cls] = {"cpuQOS": {"enable": cls in enable, **cpu.get(cls, {})}}
    spec, errors = merge_node_slo_spec({"resourceQOSStrategy": rq})
    assert errors == []
    return spec


# ---------------------------------------------------------------------------------------------------------------
# rules: group_id


GROUP = wire.LABEL_CORE_SCHED_GROUP_ID
POLICY = wire.LABEL_CORE_SCHED_POLICY


@pytest.mark.parametrize("qos_class,kube,labels,want", [
    # default labels: LS/LSR/LSE are expellers, BE is not; they never share a group
    ("LS", "Burstable", {}, "-expeller"),
    ("LSR", "Guaranteed", {}, "-expeller"),
    ("LSE", "Guaranteed", {}, "-expeller"),
    ("BE", "BestEffort", {}, ""),
    ("SYSTEM", "Guaranteed", {}, None),
    # raw class None falls back to the Kubernetes class
    (None, "Guaranteed", {}, "-expeller"),
    (None, "Burstable", {}, "-expeller"),
    (None, "BestEffort", {}, ""),
    # the group label
    ("LS", "Burstable", {GROUP: "g1"}, "g1-expeller"),
    ("BE", "BestEffort", {GROUP: "g1"}, "g1"),
    ("LS", "Burstable", {GROUP: ""}, "-expeller"),
    # the policy label
    ("LS", "Burstable", {POLICY: "exclusive", GROUP: "g1"}, "u1-expeller"),
    ("BE", "BestEffort", {POLICY: "exclusive"}, "u1"),
    ("LS", "Burstable", {POLICY: "none", GROUP: "g1"}, None),
    ("BE", "BestEffort", {POLICY: "none"}, None),
    ("SYSTEM", "Guaranteed", {POLICY: "exclusive"}, None),
])
def test_group_id_all_classes_enabled(qos_class: str | None, kube: str, labels: dict[str, str],
                                      want: str | None) -> None:
    p = agent_pod("u1", "p-u1", namespace="ns", phase=None, qos=kube, qos_class=qos_class, labels=labels)
    assert group_id(p, slo()) == (want, None)


@pytest.mark.parametrize("spec,qos_class,kube,want", [
    # group identity (the default policy) never gives cookies
    (slo(policy="groupIdentity"), "LS", "Burstable", None),
    (merge_node_slo_spec(None)[0], "BE", "BestEffort", None),
    # coreSched but every class disabled
    (slo(enable=()), "LS", "Burstable", None),
    # one class disabled: only that class loses its cookie
    (slo(enable=("lsrClass", "beClass")), "LS", "Burstable", None),
    (slo(enable=("lsrClass", "beClass")), "BE", "BestEffort", ""),
    (slo(enable=("lsClass", "beClass")), "LSR", "Guaranteed", None),
    (slo(enable=("lsClass", "beClass")), "LSE", "Guaranteed", None),
    # Guaranteed pod without a koordinator class: LSR parameters if LSR is on, else LS
    (slo(enable=("lsClass",)), None, "Guaranteed", "-expeller"),
    (slo(enable=("lsrClass",)), None, "Guaranteed", "-expeller"),
    (slo(enable=("lsrClass",)), None, "Burstable", None),
    (slo(enable=("lsrClass",), lsrClass={"coreExpeller": False}, lsClass={"coreExpeller": True}),
     None, "Guaranteed", ""),
    (slo(enable=("lsrClass", "lsClass"), lsrClass={"coreExpeller": True}, lsClass={"coreExpeller": False}),
     None, "Burstable", ""),
    # expeller switched off: LS joins the BE default group (upstream semantics: the suffix is the separation)
    (slo(lsClass={"coreExpeller": False}), "LS", "Burstable", ""),
    (slo(beClass={"coreExpeller": True}), "BE", "BestEffort", "-expeller"),
])
def test_group_id_per_class_config(spec: NodeSLOSpec, qos_class: str | None, kube: str, want: str | None) -> None:
    p = agent_pod("u1", "p-u1", namespace="ns", phase=None, qos=kube, qos_class=qos_class)
    assert group_id(p, spec) == (want, None)


@pytest.mark.parametrize("value", ["Exclusive", "NONE", "exclusive ", "bogus"])
def test_group_id_unknown_policy_is_default_with_error(value: str) -> None:
    p = agent_pod("u1", "p-u1", namespace="ns", phase=None, qos_class="LS", labels={POLICY: value, GROUP: "g"})
    group, error = group_id(p, slo())
    assert group == "g-expeller"
    assert error is not None and POLICY in error and repr(value) in error


def test_rule_enabled_flag() -> None:
    assert core_sched_rule(slo()).enabled
    assert not core_sched_rule(slo(enable=())).enabled
    assert not core_sched_rule(slo(policy="groupIdentity")).enabled
    assert not core_sched_rule(merge_node_slo_spec(None)[0]).enabled


# ---------------------------------------------------------------------------------------------------------------
# the kernel interface against the fake kernel


MAIN = threading.main_thread().native_id


def test_fake_kernel_semantics() -> None:
    k = FakeCoreSchedKernel()
    p = k.spawn(threads=3)
    threads = [t for t, task in k.tasks.items() if task.tgid == p]
    for op in ("get", "share_from"):                     # thread scope only
        with pytest.raises(OSError) as e:
            k.prctl(op, p, hc.SCOPE_THREAD_GROUP)
        assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        k.get(p + 1000)
    assert e.value.errno == errno.ESRCH
    k.create(p, hc.SCOPE_THREAD_GROUP)
    cookies = {k.get(t) for t in threads}
    assert len(cookies) == 1 and 0 not in cookies
    q = k.spawn()
    k.create(q, hc.SCOPE_THREAD)
    assert k.get(q) not in cookies | {0}
    assert k.cookie_of(k.add_thread(p)) == cookies.pop()
    assert k.get(0) == 0 == k.thread_cookie(MAIN)
    with pytest.raises(OSError) as e:
        FakeCoreSchedKernel(smt=False).get(0)
    assert e.value.errno == errno.ENODEV


def test_share_from_on_the_calling_thread_taints_it_and_the_fake_sees_it() -> None:
    """The check the strategy tests rely on can fail: a SHARE_FROM made on the main thread taints it."""
    k = FakeCoreSchedKernel()
    p = k.spawn()
    k.create(p)
    k.share_from(p)
    assert k.thread_cookie(MAIN) == k.cookie_of(p) != 0
    # and a clear attempted from a thread created by the tainted thread refuses instead of spreading it
    q = k.spawn(cookie=k.new_cookie())
    with pytest.raises(OSError) as e:
        k.clear([q])
    assert e.value.errno == errno.EBUSY
    assert k.cookie_of(q) != 0


class InlineKernel(FakeCoreSchedKernel):
    """A broken implementation that shares on the caller's thread (what the agent must never do)."""

    def _in_fresh_thread(self, work):  # type: ignore[no-untyped-def]
        return work()


def test_inline_assign_would_taint_the_agent_thread() -> None:
    k = InlineKernel()
    src, dst = k.spawn(), k.spawn()
    k.create(src)
    k.assign(src, [dst])
    assert k.thread_cookie(MAIN) != 0            # detected: the main thread now holds a cookie


def test_assign_and_clear_run_in_a_fresh_thread() -> None:
    k = FakeCoreSchedKernel()
    src, a, b = k.spawn(threads=2), k.spawn(threads=2), k.spawn()
    k.create(src)
    assert k.assign(src, [a, b]) == {}
    assert k.process_cookies(a) == k.process_cookies(b) == {k.cookie_of(src)}
    assert MAIN not in {c.caller for c in k.mutations() if c.op in ("share_from", "share_to")}
    assert k.thread_cookie(MAIN) == 0
    gone = k.spawn()
    k.exit(gone)
    failed = k.clear([a, gone])
    assert set(failed) == {gone} and failed[gone].errno == errno.ESRCH
    assert k.process_cookies(a) == {0} and k.process_cookies(b) == {k.cookie_of(src)}
    assert k.thread_cookie(MAIN) == 0
    k.exit(src)
    with pytest.raises(OSError) as e:
        k.assign(src, [b])
    assert e.value.errno == errno.ESRCH


def test_real_kernel_support_probe_names_the_reason() -> None:
    paths = host_paths()
    ok, why = hc.CoreSchedKernel().supported(paths)
    if ok:
        pytest.skip(f"this host supports core scheduling: {why}")
    assert any(w in why for w in ("EINVAL", "ENODEV", "SMT")), why


def _raiser(code: int):  # type: ignore[no-untyped-def]
    def probe() -> None:
        raise OSError(code, os.strerror(code))
    return probe


def test_probe_support_mainline_and_anolis(tmp_path: Any) -> None:
    host = FakeHost(str(tmp_path))
    paths = host.paths
    ok, why = hc.probe_support(paths, _raiser(errno.ENODEV))
    assert not ok and "ENODEV" in why and "SMT" in why
    assert hc.probe_support(paths, lambda: None) == (True, "prctl(PR_SCHED_CORE) works")
    # Anolis (bvt file at the cpu root): the prctl probe is not consulted
    host._write(os.path.join(paths.cgroup_root, "cpu", "cpu.bvt_warp_ns"), "0\n")
    ok, why = hc.probe_support(paths, _raiser(errno.EINVAL))
    assert not ok and "Anolis" in why
    host._write(paths.sys(hc.SCHED_FEATURES), "GENTLE_FAIR_SLEEPERS NO_CORE_SCHED\n")
    assert hc.probe_support(paths, _raiser(errno.EINVAL))[0]
    os.remove(paths.sys(hc.SCHED_FEATURES))
    host._write(paths.proc(hc.SYSCTL_SCHED_CORE), "0\n")
    assert hc.probe_support(paths, _raiser(errno.EINVAL))[0]


# ---------------------------------------------------------------------------------------------------------------
# the strategy on a fake cgroup tree


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def cid(n: int) -> str:
    return f"{n:064x}"


class Node:
    """Pods on a fake cgroup tree whose cgroup.procs list processes of the fake kernel."""

    def __init__(self, root: str, kernel: FakeCoreSchedKernel) -> None:
        self.host = FakeHost(root)
        self.kernel = kernel
        self.cgroups = Cgroups(self.host.paths.cgroup_root, CgroupVersion.V1, Driver.CGROUPFS)
        self.layout = Layout(Driver.CGROUPFS)
        self.metrics = AgentMetrics("n1")
        self.executor = Executor(self.cgroups)
        self.clock = Clock()
        self.strategy = CoreSched(kernel, self.host.paths, self.metrics, self.clock)
        self.pods: dict[str, PodMeta] = {}
        self.procs: dict[str, list[int]] = {}        # rel dir -> pids
        self._next = 1
        self.spec = slo()

    def add_pod(self, uid: str, qos_class: str | None = "LS", kube: str = "Burstable", containers: int = 1,
                procs: int = 1, created: float = 0.0, **labels: str) -> dict[str, list[int]]:
        """A pod with a sandbox and ``containers`` containers, each with ``procs`` processes; returns
        {"sandbox"|container name: pids}."""
        names = {f"c{i}": cid(self._bump()) for i in range(containers)}
        meta = pod_meta(uid, f"p-{uid}", namespace="ns", qos=kube, qos_class=qos_class, labels=labels,
                        containers=names, created=f"2024-01-01T00:00:{int(created):02d}Z", layout=self.layout)
        self.pods[uid] = meta
        out = {"sandbox": self._cgroup(f"{meta.cgroup_dir}/{cid(self._bump())}", procs)}
        for c, rel in meta.containers:
            out[c.name] = self._cgroup(rel, procs)
        return out

    def _bump(self) -> int:
        self._next += 1
        return self._next

    def _cgroup(self, rel: str, procs: int) -> list[int]:
        pids = [self.kernel.spawn(threads=2) for _ in range(procs)]
        self.set_procs(rel, pids)
        return pids

    def set_procs(self, rel: str, pids: list[int]) -> None:
        self.procs[rel] = list(pids)
        self.host._write(self.cgroups.path("cpu", rel, "cgroup.procs"), "".join(f"{p}\n" for p in pids))

    def rel_of(self, uid: str, name: str) -> str:
        meta = self.pods[uid]
        for c, rel in meta.containers:
            if c.name == name:
                return rel
        return next(r for r in self.procs if r.startswith(meta.cgroup_dir + "/") and
                    r not in {rel for _, rel in meta.containers})

    def relabel(self, uid: str, **labels: str) -> None:
        meta = self.pods[uid]
        merged = {**meta.pod.labels, **labels}
        merged = {k: v for k, v in merged.items() if v is not None}
        self.pods[uid] = PodMeta(dataclasses.replace(meta.pod, labels=merged), meta.cgroup_dir, meta.containers)

    def reconcile(self) -> None:
        view = node_view(pods=self.pods.values(), slo=self.spec, node=NodeInfo("n1"))
        self.strategy.reconcile(view, self.executor)

    def cookies(self, pids: list[int]) -> set[int]:
        return set().union(*(self.kernel.process_cookies(p) for p in pids))

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, {"node": "n1", **labels}) or 0.0


@pytest.fixture
def kernel() -> Any:
    k = FakeCoreSchedKernel()
    yield k
    assert k.thread_cookie(MAIN) == 0, "the agent's own thread must keep cookie 0"


@pytest.fixture
def node(tmp_path: Any, kernel: FakeCoreSchedKernel) -> Node:
    return Node(str(tmp_path), kernel)


def test_pods_get_cookies_by_group(node: Node, kernel: FakeCoreSchedKernel) -> None:
    ls1 = node.add_pod("ls1", "LS", containers=2, procs=2)
    ls2 = node.add_pod("ls2", "LSR", kube="Guaranteed")
    be1 = node.add_pod("be1", "BE", kube="BestEffort")
    be2 = node.add_pod("be2", None, kube="BestEffort")
    node.reconcile()
    ls = node.cookies([p for pids in (*ls1.values(), *ls2.values()) for p in pids])
    be = node.cookies([p for pids in (*be1.values(), *be2.values()) for p in pids])
    assert len(ls) == 1 and len(be) == 1 and 0 not in ls | be
    assert ls != be                                    # LS and BE never share a core
    assert node.strategy.cookies() == {"-expeller": ls.pop(), "": be.pop()}
    assert sum(1 for c in kernel.calls if c.op == "create") == 2
    assert all(c.caller != MAIN for c in kernel.mutations() if c.op != "create")
    assert node.metric("koordlet_core_sched_cookie_manage_status_total", core_sched_group="-expeller",
                       status="succeeded") >= 1
    c0 = node.pods["ls1"].containers[0][0]
    assert node.metric("koordlet_container_core_sched_cookie", pod_name="p-ls1", pod_namespace="ns",
                       pod_uid="ls1", container_name="c0", container_id=c0.id, core_sched_group="-expeller",
                       core_sched_cookie=str(node.strategy.cookies()["-expeller"])) == 1


def test_second_reconcile_makes_no_calls(node: Node, kernel: FakeCoreSchedKernel) -> None:
    node.add_pod("ls1", "LS", containers=2, procs=3)
    node.add_pod("be1", "BE", kube="BestEffort")
    node.reconcile()
    assert kernel.mutations()
    kernel.calls.clear()
    for _ in range(4):                                 # entries are refreshed on every use: nothing expires
        node.clock.t += CACHE_EXPIRY / 3
        node.reconcile()
    assert kernel.calls == []


def test_new_process_is_assigned_at_next_reconcile(node: Node, kernel: FakeCoreSchedKernel) -> None:
    pids = node.add_pod("ls1", "LS", procs=2)
    node.reconcile()
    cookie = node.strategy.cookies()["-expeller"]
    newcomer = kernel.spawn(threads=3)                  # e.g. kubectl exec into the container
    rel = node.rel_of("ls1", "c0")
    node.set_procs(rel, pids["c0"] + [newcomer])
    kernel.calls.clear()
    node.reconcile()
    assert kernel.process_cookies(newcomer) == {cookie}
    changed = kernel.mutations()
    assert [c.op for c in changed] == ["share_from", "share_to"] and changed[1].pid == newcomer
    assert changed[0].pid in {p for v in pids.values() for p in v}


def test_policy_none_and_class_disable_clear_cookies(node: Node, kernel: FakeCoreSchedKernel,
                                                      caplog: Any) -> None:
    a = node.add_pod("a", "LS", containers=2)
    b = node.add_pod("b", "LS")
    c = node.add_pod("c", "BE", kube="BestEffort")
    node.reconcile()
    cookie = node.strategy.cookies()["-expeller"]
    caplog.set_level(logging.INFO, logger="koordlet.qos.core_sched")
    node.relabel("a", **{POLICY: "none"})
    node.reconcile()
    assert node.cookies([p for v in a.values() for p in v]) == {0}
    assert node.cookies([p for v in b.values() for p in v]) == {cookie}
    assert sum("cookie cleared" in r.message for r in caplog.records) == 3        # sandbox + 2 containers
    kernel.calls.clear()
    node.reconcile()                                    # cleared pods are not looked at again
    assert kernel.calls == []
    node.spec = slo(enable=("lsrClass", "lsClass"))    # BE class disabled
    node.reconcile()
    assert node.cookies([p for v in c.values() for p in v]) == {0}
    assert node.cookies([p for v in b.values() for p in v]) == {cookie}
    node.spec = slo(policy="groupIdentity")
    node.reconcile()
    assert node.cookies([p for v in b.values() for p in v]) == {0}
    assert node.strategy.cookies() == {}


def test_system_pods_are_never_touched(node: Node, kernel: FakeCoreSchedKernel) -> None:
    sys_pids = node.add_pod("sys", "SYSTEM", kube="Guaranteed", procs=2)
    node.add_pod("ls", "LS")
    own = kernel.new_cookie()                            # a cookie the system daemon set itself
    kernel.tasks[sys_pids["c0"][0]].cookie = own
    node.reconcile()
    node.reconcile()
    touched = {c.pid for c in kernel.calls}
    assert not touched & {p for v in sys_pids.values() for p in v}
    assert kernel.cookie_of(sys_pids["c0"][0]) == own
    assert node.cookies(sys_pids["sandbox"] + sys_pids["c0"][1:]) == {0}


def test_pod_turning_system_is_cleared(node: Node) -> None:
    a = node.add_pod("a", "LS")
    node.reconcile()
    assert node.cookies(a["c0"]) != {0}
    node.relabel("a", **{QOS_LABEL: "SYSTEM"})
    node.reconcile()
    assert node.cookies([p for v in a.values() for p in v]) == {0}


def test_exited_processes_are_quiet_churn(node: Node, kernel: FakeCoreSchedKernel, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG, logger="koordlet.qos.core_sched")
    pids = node.add_pod("a", "LS", procs=3)
    kernel.exit(pids["sandbox"][0])                      # listed in cgroup.procs, gone from the kernel
    kernel.exit(pids["c0"][1])
    node.reconcile()
    assert node.cookies(pids["c0"][:1] + pids["c0"][2:] + pids["sandbox"][1:]) == \
        {node.strategy.cookies()["-expeller"]}
    # the sibling the group would copy from exits; a new process still gets the group's cookie
    kernel.exit(min(p for v in pids.values() for p in v if p in kernel.tasks))
    newcomer = kernel.spawn()
    node.set_procs(node.rel_of("a", "c0"), pids["c0"] + [newcomer])
    node.reconcile()
    assert kernel.process_cookies(newcomer) == {node.strategy.cookies()["-expeller"]}
    # a process exiting between GET and SHARE_TO
    late = kernel.spawn()
    node.set_procs(node.rel_of("a", "c0"), pids["c0"] + [newcomer, late])
    original = kernel.share_to

    def exit_first(pid: int, scope: int = hc.SCOPE_THREAD_GROUP) -> None:
        if pid == late:
            kernel.exit(late)
        original(pid, scope)
    kernel.share_to = exit_first  # type: ignore[method-assign]
    node.reconcile()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert node.metric("koordlet_core_sched_cookie_manage_status_total", core_sched_group="-expeller",
                       status="failed") == 0


def test_kernel_errors_are_logged_once_counted_and_retried(node: Node, kernel: FakeCoreSchedKernel,
                                                           caplog: Any) -> None:
    pids = node.add_pod("a", "LS")
    node.reconcile()
    denied = kernel.spawn()
    kernel.errors[denied] = errno.EPERM
    kernel.error_ops = {"share_to"}
    node.set_procs(node.rel_of("a", "c0"), pids["c0"] + [denied])
    caplog.set_level(logging.WARNING, logger="koordlet.qos.core_sched")
    node.reconcile()
    node.reconcile()
    warnings = [r for r in caplog.records if "failed" in r.message]
    assert len(warnings) == 1 and "EPERM" in warnings[0].message
    assert node.metric("koordlet_core_sched_cookie_manage_status_total", core_sched_group="-expeller",
                       status="failed") == 2
    del kernel.errors[denied]
    node.reconcile()
    assert kernel.process_cookies(denied) == {node.strategy.cookies()["-expeller"]}
    # a GET refused by the kernel: the process is skipped, logged once by errno
    other = kernel.spawn()
    kernel.errors[other] = errno.EPERM
    kernel.error_ops = None
    node.set_procs(node.rel_of("a", "c0"), pids["c0"] + [denied, other])
    node.reconcile()
    node.reconcile()
    assert sum("GET failed" in r.message and "EPERM" in r.message for r in caplog.records) == 1
    assert kernel.process_cookies(other) == {0}


def test_group_label_change_moves_the_pod(node: Node, kernel: FakeCoreSchedKernel, caplog: Any) -> None:
    a = node.add_pod("a", "LS", created=1)
    b = node.add_pod("b", "LS", created=2)
    node.reconcile()
    shared = node.strategy.cookies()["-expeller"]
    caplog.set_level(logging.INFO, logger="koordlet.qos.core_sched")
    node.relabel("b", **{GROUP: "tenant-x"})
    node.reconcile()
    moved = node.cookies([p for v in b.values() for p in v])
    assert len(moved) == 1 and moved != {shared} and moved != {0}
    assert node.cookies([p for v in a.values() for p in v]) == {shared}
    assert any("from_group='-expeller'" in r.message for r in caplog.records)
    node.relabel("b", **{POLICY: "exclusive"})
    node.reconcile()
    assert node.strategy.cookies().keys() == {"-expeller", "b-expeller"}
    kernel.calls.clear()
    node.reconcile()
    assert kernel.calls == []


def test_restart_adopts_live_cookies_and_merges_split_groups(tmp_path: Any, kernel: FakeCoreSchedKernel) -> None:
    node = Node(str(tmp_path), kernel)
    a = node.add_pod("a", "LS", created=1)
    b = node.add_pod("b", "LS", created=2)
    c1, c2 = kernel.new_cookie(), kernel.new_cookie()
    for p in (*a["sandbox"], *a["c0"]):
        for t in kernel.tasks.values():
            if t.tgid == p:
                t.cookie = c1
    for p in (*b["sandbox"], *b["c0"]):
        for t in kernel.tasks.values():
            if t.tgid == p:
                t.cookie = c2
    node.reconcile()
    assert not [c for c in kernel.calls if c.op == "create"]
    assert node.cookies([p for v in (*a.values(), *b.values()) for p in v]) == {c1}   # oldest pod's cookie
    kernel.calls.clear()
    node.reconcile()
    assert kernel.calls == []


def test_restart_never_shares_a_cookie_across_groups(node: Node, kernel: FakeCoreSchedKernel) -> None:
    a = node.add_pod("a", "LS", created=1)
    b = node.add_pod("b", "LS", created=2, **{GROUP: "other"})   # relabelled while the agent was down
    c = kernel.new_cookie()
    for t in kernel.tasks.values():
        t.cookie = c
    node.reconcile()
    assert node.cookies([p for v in a.values() for p in v]) == {c}
    other = node.cookies([p for v in b.values() for p in v])
    assert len(other) == 1 and other != {c} and other != {0}


def test_restart_with_core_sched_off_clears_what_was_set(node: Node, kernel: FakeCoreSchedKernel) -> None:
    a = node.add_pod("a", "LS")
    c = kernel.new_cookie()
    for t in kernel.tasks.values():
        t.cookie = c
    node.spec = slo(policy="groupIdentity")
    node.reconcile()
    assert node.cookies([p for v in a.values() for p in v]) == {0}
    assert not [x for x in kernel.calls if x.op == "create"]


def test_unsupported_kernel_is_a_no_op(tmp_path: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="koordlet.qos.core_sched")
    why = "prctl(PR_SCHED_CORE, GET) failed with EINVAL: kernel built without CONFIG_SCHED_CORE"
    kernel = FakeCoreSchedKernel(sched_core=False, supported=(False, why))
    node = Node(str(tmp_path), kernel)
    node.host._write(node.host.paths.proc(hc.SYSCTL_SCHED_CORE), "0\n")
    node.add_pod("a", "LS")
    node.reconcile()
    node.reconcile()
    assert kernel.calls == []
    assert node.executor.total.written == 0
    assert sum("unsupported" in r.message for r in caplog.records) == 1


def test_kernel_switch_sysctls_and_sched_features(tmp_path: Any, kernel: FakeCoreSchedKernel) -> None:
    node = Node(str(tmp_path), kernel)
    paths = node.host.paths
    node.host._write(paths.proc(hc.SYSCTL_GROUP_IDENTITY), "1\n")
    node.host._write(paths.proc(hc.SYSCTL_SCHED_CORE), "0\n")
    a = node.add_pod("a", "LS")
    node.spec = slo(policy="groupIdentity")
    node.reconcile()
    assert Path(paths.proc(hc.SYSCTL_SCHED_CORE)).read_text().strip() == "0"    # only switched on when enabled
    node.spec = slo()
    node.reconcile()
    assert Path(paths.proc(hc.SYSCTL_GROUP_IDENTITY)).read_text().strip() == "0"
    assert Path(paths.proc(hc.SYSCTL_SCHED_CORE)).read_text().strip() == "1"
    assert node.cookies(a["c0"]) != {0}

    # older Anolis: no sched_core sysctl, the feature lives in sched_features
    node2 = Node(str(tmp_path / "old"), FakeCoreSchedKernel())
    feats = node2.host.paths.sys(hc.SCHED_FEATURES)
    node2.host._write(feats, "GENTLE_FAIR_SLEEPERS NO_CORE_SCHED WAKEUP_PREEMPTION\n")
    node2.add_pod("a", "LS")
    node2.reconcile()
    assert Path(feats).read_text() == "CORE_SCHED"
    assert node2.strategy.cookies()


def test_kernel_switch_failure_sets_no_cookies(tmp_path: Any, kernel: FakeCoreSchedKernel, caplog: Any) -> None:
    node = Node(str(tmp_path), kernel)
    sysctl = node.host.paths.proc(hc.SYSCTL_SCHED_CORE)
    os.makedirs(sysctl)                                  # a directory: writing it fails
    node.add_pod("a", "LS")
    caplog.set_level(logging.WARNING, logger="koordlet.qos.core_sched")
    node.reconcile()
    node.reconcile()
    assert not kernel.mutations()
    assert sum("cannot be switched on" in r.message for r in caplog.records) == 1


def test_bad_policy_label_logged_once(node: Node, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="koordlet.qos.core_sched")
    pids = node.add_pod("a", "LS", **{POLICY: "Exclusive"})
    node.add_pod("b", "LS")
    node.reconcile()
    node.reconcile()
    bad = [r for r in caplog.records if POLICY in r.message]
    assert len(bad) == 1 and "ns/p-a" in bad[0].message
    assert node.cookies(pids["c0"]) == {node.strategy.cookies()["-expeller"]}   # default policy applies


def test_all_threads_of_a_process_share_the_cookie(node: Node, kernel: FakeCoreSchedKernel) -> None:
    pids = node.add_pod("a", "LS", procs=2)
    extra = kernel.add_thread(pids["c0"][0])
    node.reconcile()
    cookie = node.strategy.cookies()["-expeller"]
    assert kernel.cookie_of(extra) == cookie
    assert all(kernel.process_cookies(p) == {cookie} for v in pids.values() for p in v)
    assert kernel.cookie_of(kernel.add_thread(pids["c0"][1])) == cookie          # inherited on clone


def test_removed_pods_leave_no_cache_behind(node: Node, kernel: FakeCoreSchedKernel) -> None:
    node.add_pod("a", "LS")
    node.add_pod("b", "BE", kube="BestEffort")
    node.reconcile()
    del node.pods["b"]
    node.reconcile()
    assert node.strategy.cookies().keys() == {"-expeller"}
    node.clock.t += CACHE_EXPIRY + 1
    node.reconcile()
    assert set(node.strategy._members) == {"a"}
