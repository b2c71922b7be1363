"""CPU QoS strategy: group identity (``cpu.bvt_warp_ns``) and ``cpu.idle`` on QoS dirs, pods, containers and host
applications (upstream ``pkg/koordlet/runtimehooks/hooks/groupidentity/interceptor.go``: ``SetPodBvtValue``,
``SetKubeQOSBvtValue``, ``SetHostAppBvtValue``; ``hooks/coresched/core_sched.go: Plugin.SetKubeQOSCPUIdle``).

Kernel support is probed once (bvt: the file in kubepods or the sysctl; idle: ``cpu.idle`` in kubepods). Files the
kernel lacks are never attempted, so an unsupported feature costs nothing per cycle; ``doctor`` says why.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from koordlet.base.logutil import LogOnce
from koordlet.base.wire import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR
from koordlet.component import Plugin, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.host.sysctl import read_sysctl, sysctl_path
from koordlet.rules.cpu_qos import CPUQOSRule, cpu_qos_rule, decided_pod_bvt, host_app_bvt, idle_values
from koordlet.states.hostapps import HostApp, SetApps
from koordlet.states.informer import pod_owner
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Executor, Update

if TYPE_CHECKING:
    from koordlet.states.nodeslo.schema import NodeSLOSpec

log = logging.getLogger(__name__)

SYSCTL_GI = "kernel/sched_group_identity_enabled"
SYSCTL_CORE = "kernel/sched_core"
BVT, IDLE = "cpu.bvt_warp_ns", "cpu.idle"
REASON = "cpu-qos"
_APP_KUBE_QOS = {QOS_LSE: KubeQOS.GUARANTEED, QOS_LSR: KubeQOS.GUARANTEED, QOS_LS: KubeQOS.BURSTABLE,
                 QOS_BE: KubeQOS.BESTEFFORT}


class CPUQOS:
    name = "cpu-qos"

    def __init__(self, cgroups: Cgroups, paths: HostPaths) -> None:
        kubepods = cgroups.layout.qos_dir(KubeQOS.GUARANTEED)
        if not cgroups.has_dir("cpu", kubepods):
            kubepods = ""              # no kubelet here (host mode): probe the hierarchy root
        self.sysctl = read_sysctl(paths, SYSCTL_GI) is not None
        self.bvt = cgroups.has_file("cpu", kubepods, BVT) or self.sysctl
        self.idle = cgroups.has_file("cpu", kubepods, IDLE)
        self._paths = paths
        self._idle_apps, self._bvt_apps = SetApps(), SetApps()
        self._rule: tuple[NodeSLOSpec, CPUQOSRule] | None = None
        self._bad = LogOnce(log)
        self._note = LogOnce(log, logging.INFO)
        log.info("cpu qos kernel support group_identity=%s cpu_idle=%s", self.bvt, self.idle)

    def rule(self, slo: NodeSLOSpec) -> CPUQOSRule:
        if self._rule is None or self._rule[0] is not slo:
            self._rule = (slo, cpu_qos_rule(slo))
        return self._rule[1]

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        rule = self.rule(view.slo)
        idle = idle_values(rule, self.bvt) if self.idle else None
        if idle is not None and rule.group_identity and not self.bvt and idle[KubeQOS.BESTEFFORT]:
            self._note("fallback", "group identity unsupported by this kernel (no cpu.bvt_warp_ns); BE isolation "
                      "uses cpu.idle on the BestEffort dir instead be_idle=%d", idle[KubeQOS.BESTEFFORT])
        bvt_apps: list[HostApp] = []
        if self.bvt and self._bvt_wanted(rule, executor):
            self._write_bvt(rule, view, executor)
            bvt_apps = list(view.host_apps)
        idle_apps = [app for app in view.host_apps if app.qos in _APP_KUBE_QOS] if idle is not None else []
        if idle is not None:
            layout = executor.cgroups.layout
            executor.update(executor.cgroup(layout.qos_dir(q), IDLE, idle[q], f"qos {q.value}", REASON)
                            for q in KubeQOS)
            executor.update(executor.cgroup(app.cgroup_dir, IDLE, idle[_APP_KUBE_QOS[app.qos]],
                                            f"hostapp {app.name}", REASON) for app in idle_apps)
        # host applications the agent no longer manages get the kernel's defaults back
        executor.update([executor.cgroup(app.cgroup_dir, IDLE, 0, f"hostapp {app.name}", REASON)
                         for app in self._idle_apps.left(idle_apps, executor.cgroups)]
                        + [executor.cgroup(app.cgroup_dir, BVT, 0, f"hostapp {app.name}", REASON)
                           for app in self._bvt_apps.left(bvt_apps, executor.cgroups)])

    def _bvt_wanted(self, rule: CPUQOSRule, executor: Executor) -> bool:
        """Upstream's sysctl dance: enabling GI turns core scheduling off first; with GI off in both the rule and
        the kernel there is nothing to reset."""
        if not self.sysctl:
            return True                      # older Anolis: always on, files are the only switch
        if rule.enabled:
            core = sysctl_path(self._paths, SYSCTL_CORE)
            executor.update([Update(core, "0", "node", REASON) if read_sysctl(self._paths, SYSCTL_CORE) else None,
                             Update(sysctl_path(self._paths, SYSCTL_GI), "1", "node", REASON)])
            return True
        return read_sysctl(self._paths, SYSCTL_GI) not in (None, "0")

    def _write_bvt(self, rule: CPUQOSRule, view: NodeView, executor: Executor) -> None:
        cgroups = executor.cgroups
        updates = [executor.cgroup(cgroups.layout.qos_dir(q), BVT, rule.kube_dir_bvt(q), f"qos {q.value}", REASON)
                   for q in KubeQOS]
        known: set[str] = set()
        for meta in view.pods:
            value, refused = decided_pod_bvt(rule, meta.pod)
            if refused is None:
                self._bad.forget(meta.pod.uid)
            else:
                self._bad(meta.pod.uid, "pod %s: annotation %s; using the class value %d", meta.pod.key, refused,
                          value)
            owner = pod_owner(meta)
            known.add(meta.cgroup_dir)
            updates.append(executor.cgroup(meta.cgroup_dir, BVT, value, owner, REASON))
            updates.extend(executor.cgroup(rel, BVT, value, owner, REASON) for _, rel in meta.containers)
        for qos, _, rel in cgroups.list_pods():          # dangling pod dirs follow their QoS dir
            if rel not in known:
                updates.append(executor.cgroup(rel, BVT, rule.kube_dir_bvt(qos), f"cgroup {rel}", REASON))
        for app in view.host_apps:
            updates.append(executor.cgroup(app.cgroup_dir, BVT, host_app_bvt(rule, app.qos), f"hostapp {app.name}",
                                           REASON))
        executor.update(updates)


PLUGIN = Plugin("cpu-qos", lambda ctx: CPUQOS(ctx.cgroups, ctx.paths), gates=("GroupIdentity", "CoreSched"),
                probe=host_probe(probes.group_identity))
