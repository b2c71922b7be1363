"""Pressure stall information of the node, pods and containers (upstream's PerformanceCollector PSI half).

Facts: upstream ``pkg/koordlet/metricsadvisor/collectors/performance/performance_collector_linux.go``
(``collectContainerPSI``, ``collectPodPSI``) and ``pkg/koordlet/metrics/psi.go``. Every cycle (upstream:
``-psi-collector-interval``, 10 s) reads the three pressure files (cpu, memory, io) of each pod and container cgroup
once, and /proc/pressure.

Metric cache (avg10 only, as upstream; psi_resource is cpu | mem | io, psi_degree some | full):

================================  ==========================================================================
container_psi                     {container_id, pod_uid, psi_resource, psi_precision="10", psi_degree}
container_psi_cpu_full_supported  {container_id, pod_uid}: 1 when the cpu file has a full line, else 0
pod_psi                           {pod_uid, psi_resource, psi_precision="10", psi_degree}
pod_psi_cpu_full_supported        {pod_uid}
node_psi                          {psi_resource, psi_precision="10", psi_degree} — ours (upstream has no node
                                  PSI); full only when the kernel prints a full line
================================  ==========================================================================

As upstream, a pod/container ``full`` sample is stored as 0 when the kernel has no full line (consumers check
``*_psi_cpu_full_supported``). Prometheus gets avg10/avg60/avg300 (``koordlet_container_psi``,
``koordlet_pod_psi`` with upstream's labels; ``koordlet_node_psi`` is ours) and full rows only where supported.

Differences from upstream, on purpose:

* upstream decides once at start whether v1 cgroups have PSI files; here the kubepods files are probed every
  cycle (three small reads), so PSI starts when the kubelet creates kubepods after the agent.
* upstream resets its Prometheus vectors before re-filling them, so a scrape can land on an empty vector;
  here only the label sets of pods/containers that went away (or whose labels changed) are removed.
* container_id is the bare id in both outputs, as everywhere in koordlet-py (upstream: ``containerd://<id>``).
"""

from __future__ import annotations

import logging

from prometheus_client import Gauge

from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, Tick, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups, KubeQOS
from koordlet.host.fs import vanished
from koordlet.host.paths import HostPaths
from koordlet.host.psi import PSI, cgroup_psi, cgroup_supported, node_psi, node_supported, unsupported_errno
from koordlet.metriccache import Sample
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.informer import PodMeta

log = logging.getLogger(__name__)

PRECISION_10 = "10"            # metric cache psi_precision (upstream PSIPrecision10)
_GAUGE_PRECISIONS = ("avg10", "avg60", "avg300")


class PSICollector:
    name = "psi"

    def __init__(self, paths: HostPaths, cgroups: Cgroups, metrics: AgentMetrics) -> None:
        self._paths = paths
        self._cgroups = cgroups
        self._metrics = metrics
        self._kubepods = cgroups.layout.qos_dir(KubeQOS.GUARANTEED)
        self._errors = LogOnce(log)
        self._state = LogOnce(log, logging.INFO)          # availability changes, once each
        self._gauges = (metrics.node_psi, metrics.pod_psi, metrics.container_psi)
        # label values set last cycle → the child gauge (reused: Gauge.labels() is most of a cycle's cost)
        self._exported: dict[Gauge, dict[tuple[str, ...], Gauge]] = {g: {} for g in self._gauges}

    # --- support probes (also what doctor prints) ----------------------------------------------------------

    def node_supported(self) -> tuple[bool, str]:
        return node_supported(self._paths)

    def cgroup_supported(self) -> tuple[bool, str]:
        """The kubepods dir's three pressure files can be read (upstream checks the v1 cpuacct files)."""
        return cgroup_supported(self._cgroups, self._kubepods)

    def supported(self) -> tuple[bool, str]:
        """True when either the node or the pod/container part can collect; the reason covers both."""
        node_ok, node_why = self.node_supported()
        cg_ok, cg_why = self.cgroup_supported()
        return node_ok or cg_ok, f"node: {node_why}; pods: {cg_why}"

    # --- collection ----------------------------------------------------------------------------------------

    def collect(self, tick: Tick) -> list[Sample]:
        """One cycle; never raises (a bug here must not stop the other collectors)."""
        now, pods = tick.now, tick.pods
        current: dict[Gauge, dict[tuple[str, ...], Gauge]] = {g: {} for g in self._gauges}
        try:
            samples = self._node(now, current[self._metrics.node_psi])
            samples += self._pods(now, pods, current)
        except Exception as e:
            self._metrics.skipped(self.name, "error")
            self._errors("collect", "psi collection failed error=%r", e)
            return []
        self._errors.forget("collect")
        for gauge, keys in current.items():
            for key in self._exported[gauge].keys() - keys.keys():
                try:
                    gauge.remove(*key)
                except KeyError:
                    pass
        self._exported = current
        return samples

    def _node(self, now: float, seen: dict[tuple[str, ...], Gauge]) -> list[Sample]:
        try:
            psi = node_psi(self._paths)
        except FileNotFoundError:
            return []                          # no PSI in this kernel: supported() says so
        except OSError as e:
            if not unsupported_errno(e):
                self._metrics.skipped(self.name, "error")
                self._errors("node", "node PSI unreadable error=%s", e)
            return []
        except ValueError as e:
            self._metrics.skipped(self.name, "error")
            self._errors("node", "node PSI malformed error=%s", e)
            return []
        self._errors.forget("node")
        samples = []
        for res, p in psi.items():
            samples.append(Sample("node_psi", (("psi_degree", "some"), ("psi_precision", PRECISION_10),
                                               ("psi_resource", res)), now, p.some.avg10))
            if p.full_supported:
                samples.append(Sample("node_psi", (("psi_degree", "full"), ("psi_precision", PRECISION_10),
                                                   ("psi_resource", res)), now, p.full.avg10))
        self._export(self._metrics.node_psi, (self._metrics.node,), None, psi, seen)
        return samples

    def _pods(self, now: float, pods: tuple[PodMeta, ...],
              current: dict[Gauge, dict[tuple[str, ...], Gauge]]) -> list[Sample]:
        ok, why = self.cgroup_supported()
        if not ok:
            self._state("cgroups", "pod and container PSI unavailable: %s", why)
            self._errors.keep_only(("node", "collect"))
            return []
        if self._state.forget("cgroups"):
            log.info("pod and container PSI available: %s", why)
        node = self._metrics.node
        pod_seen, container_seen = current[self._metrics.pod_psi], current[self._metrics.container_psi]
        counts = {"vanished": 0, "error": 0}
        samples: list[Sample] = []
        append = samples.append
        rels: list[str] = []
        for meta in pods:
            pod = meta.pod
            uid = pod.uid
            rels.append(meta.cgroup_dir)
            psi = self._read(meta.cgroup_dir, counts)
            if psi is not None:
                for res, p in psi.items():
                    append(Sample("pod_psi", (("pod_uid", uid), ("psi_degree", "some"),
                                              ("psi_precision", PRECISION_10), ("psi_resource", res)),
                                  now, p.some.avg10))
                    append(Sample("pod_psi", (("pod_uid", uid), ("psi_degree", "full"),
                                              ("psi_precision", PRECISION_10), ("psi_resource", res)),
                                  now, p.full.avg10))
                append(Sample("pod_psi_cpu_full_supported", (("pod_uid", uid),), now,
                              1.0 if psi["cpu"].full_supported else 0.0))
                self._export(self._metrics.pod_psi, (node, uid, pod.name, pod.namespace), True, psi, pod_seen)
            # containers are read even when the pod dir failed: one bad file must not hide the others
            for container, rel in meta.containers:
                rels.append(rel)
                psi = self._read(rel, counts)
                if psi is None:
                    continue
                cid = container.id
                for res, p in psi.items():
                    append(Sample("container_psi", (("container_id", cid), ("pod_uid", uid),
                                                    ("psi_degree", "some"), ("psi_precision", PRECISION_10),
                                                    ("psi_resource", res)), now, p.some.avg10))
                    append(Sample("container_psi", (("container_id", cid), ("pod_uid", uid),
                                                    ("psi_degree", "full"), ("psi_precision", PRECISION_10),
                                                    ("psi_resource", res)), now, p.full.avg10))
                append(Sample("container_psi_cpu_full_supported", (("container_id", cid), ("pod_uid", uid)), now,
                              1.0 if psi["cpu"].full_supported else 0.0))
                self._export(self._metrics.container_psi,
                             (node, cid, container.name, uid, pod.name, pod.namespace), True, psi, container_seen)
        self._errors.keep_only([*rels, "node", "collect"])
        for reason, n in counts.items():
            self._metrics.skipped(self.name, reason, n)
        return samples

    def _read(self, rel: str, counts: dict[str, int]) -> dict[str, PSI] | None:
        """A vanished cgroup (gone, or removed mid-read: ENODEV) is normal churn (counted); anything else is
        counted and logged once per dir."""
        try:
            psi = cgroup_psi(self._cgroups, rel)
        except (OSError, ValueError) as e:
            if vanished(e):
                counts["vanished"] += 1
                return None
            counts["error"] += 1
            self._errors(rel, "cgroup PSI unreadable dir=%s error=%s", rel, e)
            return None
        self._errors.forget(rel)
        return psi

    def _export(self, gauge: Gauge, prefix: tuple[str, ...], full_label: bool | None, psi: dict[str, PSI],
                seen: dict[tuple[str, ...], Gauge]) -> None:
        """avg10/60/300 rows of some (and full where the kernel has it), as upstream's makePSIRecordSlice;
        ``full_label`` adds upstream's cpu_full_supported label ("true"/"false" of the row's resource)."""
        known = self._exported[gauge]
        for res, p in psi.items():
            suffix: tuple[str, ...] = ()
            if full_label:
                suffix = ("true" if p.full_supported else "false",)
            lines = (("some", p.some), ("full", p.full)) if p.full_supported else (("some", p.some),)
            for degree, line in lines:
                for precision, value in zip(_GAUGE_PRECISIONS, (line.avg10, line.avg60, line.avg300), strict=True):
                    key = (*prefix, res, precision, degree, *suffix)
                    child = known.get(key)
                    if child is None:
                        child = gauge.labels(*key)
                    child.set(value)
                    seen[key] = child


def _build(ctx: Context) -> PSICollector | None:
    psi = PSICollector(ctx.paths, ctx.cgroups, ctx.metrics)
    supported, why = psi.supported()
    if not supported:
        log.warning("psi collector off: %s", why)
        return None
    return psi


PLUGIN = Plugin("psi", _build, gates=("PSICollector",), when=lambda c: c.psi_collector_interval > 0,
                period=lambda c: c.psi_collector_interval, probe=host_probe(probes.psi))
