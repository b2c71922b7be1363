"""Blkio QoS: per-disk IO limits and weights for the BestEffort tier and for annotated pods, and the iocost
parameters of the disks at the cgroup root. cgroup v1 (``blkio.*``) and v2 (``io.*``).

Facts: upstream ``pkg/koordlet/qosmanager/plugins/blkio/blkio_reconcile.go: blkIOReconcile`` (gate ``BlkIOReconcile``,
default off). Every cycle:

- ``beClass.blkioQOS``: its blocks (none when ``enable`` is false) are written in the BestEffort QoS directory.
- ``cgroupRoot.blkioQOS``: iocost QoS and model of each disk at the hierarchy root, when the kernel has iocost.
- Pods with a koordinator QoS label, Running, with the annotation ``koordinator.sh/blkioQOS`` =
  ``{"blocks": [...]}`` (``enable`` ignored, as upstream): written in the pod's directory.
- ``lsrClass`` / ``lsClass`` blkio config: a warning, once ("not supported"), as upstream.
- Each block resolves to a whole disk's ``maj:min`` (host.blockdev). Devices present in a directory's files but
  no longer configured get the reset values (stale reset).

Files and values:

- v1 (as upstream): ``blkio.throttle.{read,write}_{iops,bps}_device`` = ``"<maj:min> <n>"`` (0 = no limit),
  ``blkio.cost.weight`` = ``"<maj:min> <ioWeightPercent|100>"`` (Anolis iocost; only where the kernel has it);
  root ``blkio.cost.qos`` = ``"<maj:min> enable=1 ctrl=user rpct=<95> rlat=<3000> wpct=<95> wlat=<3000>"``,
  removed with ``"<maj:min> enable=0"``; root ``blkio.cost.model`` = ``"<maj:min> ctrl=auto"`` or, with
  ``enableUserModel``, ``"<maj:min> ctrl=user rbps= rseqiops= rrandiops= wbps= wseqiops= wrandiops="``.
- v2 (upstream has none): ``io.max`` = ``"<maj:min> rbps=<n|max> wbps=<n|max> riops=<n|max> wiops=<n|max>"``
  (0 -> max; the all-max reset deletes the kernel's line); ``io.weight`` = ``"<maj:min> <ioWeightPercent|100>"``
  where the kernel has iocost; root ``io.cost.qos`` (percentiles written as the kernel prints them, ``95.00``, so
  a converged host compares equal) and ``io.cost.model`` as on v1.

**io.weight mapping.** ``ioWeightPercent`` (1-100) is written unchanged as the device weight. iocost weights run
1-10000 with a default of 100, and Anolis' v1 ``blkio.cost.weight`` is the same iocost weight, so the number is the
one upstream writes: 100 % is a default sibling's share, 50 % half of it. The reset value is 100 (the kernel's
``default 100``).

Beyond upstream, on purpose:

- **v1 throttling is flat.** Without cgroup v2, blk-throttle limits a group's *own* tasks only, never its
  descendants' (kernel blkio-controller docs; measured on this VM: a limit on a parent leaves a child's writer at
  full speed). Upstream's limits on ``kubepods/besteffort`` and on a pod directory therefore throttle nothing,
  since tasks live in container directories. On v1 we also write the throttles (not the weight) into every
  container directory below: BestEffort containers get the class limits, an annotated pod's containers its own,
  the tighter of the two per field when both apply — v2's "min over ancestors", per container instead of
  shared. What we pushed there is remembered and reset when no longer configured (no per-cycle reads).
- A block that cannot be resolved (bad name, volume not mounted, VG with two PVs) is logged once naming the block
  and skipped; the other blocks still apply, and that directory's stale reset waits until every block resolves
  (upstream: the whole directory is skipped on the first bad block).
- A malformed annotation is logged once naming the pod; the pod falls back to the default (no blocks, so what was
  applied is reset). Upstream skips the pod. A pod whose annotation is removed gets its devices reset once
  (upstream leaves them forever); after an agent restart only pods that still carry the annotation are looked at.
- A stale device is reset only in the files that still have a line for it (upstream also creates a default
  ``"<maj:min> 100"`` weight line for a device that never had one).
- A block without ``ioCfg`` uses the defaults (upstream dereferences nil).
- ``podvolume`` names the CSI volume directory under the pod (an inline CSI volume's name, or a PVC's bound PV
  name); upstream also maps a PVC claim through the API server's PVC -> PV binding, which this agent lacks.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Plugin, host_probe
from koordlet.host import probes
from koordlet.host.blockdev import BlockDevError, BlockDevices
from koordlet.host.cgroup import Cgroups, CgroupVersion, KubeQOS
from koordlet.host.fs import read_text
from koordlet.host.paths import HostPaths
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodeslo.decoder import overlay
from koordlet.states.nodeslo.schema import BlkIOQOSCfg, BlockCfg, IOCfg, ResourceQOS
from koordlet.states.nodestate import NodeView

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.pod import Pod
    from koordlet.writer.executor import Executor, Update

log = logging.getLogger(__name__)

REASON = "blkio"

THROTTLE_V1 = ("blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device",
               "blkio.throttle.write_iops_device", "blkio.throttle.write_bps_device")
WEIGHT_V1, COST_QOS_V1, COST_MODEL_V1 = "blkio.cost.weight", "blkio.cost.qos", "blkio.cost.model"
IO_MAX, IO_WEIGHT, IO_COST_QOS, IO_COST_MODEL = "io.max", "io.weight", "io.cost.qos", "io.cost.model"

DEFAULT_IO_WEIGHT_PERCENT = 100
DEFAULT_IO_LATENCY = 3000             # microseconds
DEFAULT_LATENCY_PERCENT = 95

_DEVICE_RE = re.compile(r"\d+:\d+")


# --------------------------------------------------------------------------------------------------
# values (pure)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Limits:
    """One disk's throttles (0 = no limit) and iocost weight percent."""
    read_iops: int = 0
    read_bps: int = 0
    write_iops: int = 0
    write_bps: int = 0
    weight: int = DEFAULT_IO_WEIGHT_PERCENT

    @classmethod
    def from_io(cls, io: IOCfg | None) -> Limits:
        if io is None:
            return cls()
        return cls(io.read_iops or 0, io.read_bps or 0, io.write_iops or 0, io.write_bps or 0,
                   io.io_weight_percent if io.io_weight_percent is not None else DEFAULT_IO_WEIGHT_PERCENT)

    @property
    def throttles(self) -> tuple[int, int, int, int]:
        return self.read_iops, self.read_bps, self.write_iops, self.write_bps

    def tighter(self, other: Limits) -> Limits:
        """Per field the stricter of two limits (0 = none), as nested v2 groups combine."""
        def pick(a: int, b: int) -> int:
            return min(a, b) if a and b else a or b

        (ri, rb, wi, wb), (ori, orb, owi, owb) = self.throttles, other.throttles
        return Limits(pick(ri, ori), pick(rb, orb), pick(wi, owi), pick(wb, owb), weight=min(self.weight, other.weight))


def throttle_values(version: CgroupVersion, number: str, limits: Limits, weight: bool) -> list[tuple[str, str]]:
    """(resource, value) for one disk in a QoS or pod directory; ``weight`` when the kernel has iocost."""
    if version is CgroupVersion.V1:
        out = [(res, f"{number} {n}") for res, n in zip(THROTTLE_V1, limits.throttles, strict=True)]
        if weight:
            out.append((WEIGHT_V1, f"{number} {limits.weight}"))
        return out
    def m(n: int) -> str:
        return str(n) if n else "max"

    out = [(IO_MAX, (f"{number} rbps={m(limits.read_bps)} wbps={m(limits.write_bps)} "
                     f"riops={m(limits.read_iops)} wiops={m(limits.write_iops)}"))]
    if weight:
        out.append((IO_WEIGHT, f"{number} {limits.weight}"))
    return out


def root_values(version: CgroupVersion, number: str, io: IOCfg | None, model: bool) -> list[tuple[str, str]]:
    """iocost QoS (and model, when the kernel has the file) of one disk at the hierarchy root."""
    io = io or IOCfg()
    rlat = io.read_latency if io.read_latency is not None else DEFAULT_IO_LATENCY
    wlat = io.write_latency if io.write_latency is not None else DEFAULT_IO_LATENCY
    rpct = io.read_latency_percent if io.read_latency_percent is not None else DEFAULT_LATENCY_PERCENT
    wpct = io.write_latency_percent if io.write_latency_percent is not None else DEFAULT_LATENCY_PERCENT
    v1 = version is CgroupVersion.V1
    def pct(p: int) -> str:
        return str(p) if v1 else f"{p}.00"

    out = [(COST_QOS_V1 if v1 else IO_COST_QOS,
            f"{number} enable=1 ctrl=user rpct={pct(rpct)} rlat={rlat} wpct={pct(wpct)} wlat={wlat}")]
    if model:
        if io.enable_user_model:
            value = (f"{number} ctrl=user rbps={io.model_read_bps or 0} rseqiops={io.model_read_seq_iops or 0} "
                     f"rrandiops={io.model_read_rand_iops or 0} wbps={io.model_write_bps or 0} "
                     f"wseqiops={io.model_write_seq_iops or 0} wrandiops={io.model_write_rand_iops or 0}")
        else:
            value = f"{number} ctrl=auto"
        out.append((COST_MODEL_V1 if v1 else IO_COST_MODEL, value))
    return out


def root_reset(version: CgroupVersion, number: str) -> list[tuple[str, str]]:
    return [(COST_QOS_V1 if version is CgroupVersion.V1 else IO_COST_QOS, f"{number} enable=0")]


def devices_in(text: str) -> set[str]:
    """``maj:min`` keys of a per-device file (``default 100`` and other non-device lines are skipped)."""
    out = set()
    for line in text.splitlines():
        key = line.split(" ", 1)[0]
        if _DEVICE_RE.fullmatch(key):
            out.add(key)
    return out


@decoder(wire.ANNOTATION_POD_BLKIO_QOS)
def pod_blocks(pod: Pod) -> tuple[BlockCfg, ...] | None:
    """The blocks of a pod's ``koordinator.sh/blkioQOS``: None without the annotation, ``()`` for an empty value
    (upstream: no blocks); DecodeError when it is malformed (the caller then sets no blocks, ``()``)."""
    key = wire.ANNOTATION_POD_BLKIO_QOS
    text = pod.annotations.get(key)
    if text is None:
        return None
    if text == "":
        return ()
    cfg, problem = overlay(BlkIOQOSCfg, decode.json_object(key, text), BlkIOQOSCfg(), key)
    if problem is not None:
        raise DecodeError(key, problem)
    return cfg.blocks


# --------------------------------------------------------------------------------------------------
# kernel support
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Support:
    throttle: bool        # v1 blkio.throttle.* / v2 io.max below the root
    weight: bool          # v1 blkio.cost.weight / v2 io.weight (iocost)
    cost_qos: bool        # root blkio.cost.qos / io.cost.qos
    cost_model: bool      # root blkio.cost.model / io.cost.model

    def describe(self) -> str:
        return (f"throttle={self.throttle} weight={self.weight} cost_qos={self.cost_qos} "
                f"cost_model={self.cost_model}")


def probe(cgroups: Cgroups) -> Support:
    """Upstream checks the files once: throttle/weight in kubepods (here: the hierarchy root when there is no
    kubepods yet), cost qos/model in the root."""
    kubepods = cgroups.layout.qos_dir(KubeQOS.GUARANTEED)
    if cgroups.version is CgroupVersion.V1:
        base = kubepods if cgroups.has_dir("blkio", kubepods) else ""
        return Support(cgroups.has_file("blkio", base, THROTTLE_V1[3]), cgroups.has_file("blkio", base, WEIGHT_V1),
                       cgroups.has_file("blkio", "", COST_QOS_V1), cgroups.has_file("blkio", "", COST_MODEL_V1))
    cost_qos = cgroups.has_file("io", "", IO_COST_QOS)
    if cgroups.has_dir("io", kubepods):
        throttle, weight = cgroups.has_file("io", kubepods, IO_MAX), cgroups.has_file("io", kubepods, IO_WEIGHT)
    else:                 # the root has no io.max: the children do when the root delegates io
        try:
            throttle = "io" in read_text(os.path.join(cgroups.root, "cgroup.subtree_control")).split()
        except OSError:
            throttle = False
        weight = throttle and cost_qos
    return Support(throttle, weight, cost_qos, cgroups.has_file("io", "", IO_COST_MODEL))


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

@dataclass
class _Scope:
    """One directory's outcome in a cycle."""
    limits: dict[str, Limits] = field(default_factory=dict)      # disk maj:min -> limits
    failed: bool = False


class BlkIO:
    name = "blkio"

    def __init__(self, paths: HostPaths, metrics: AgentMetrics | None = None) -> None:
        self._paths = paths
        self._metrics = metrics
        self._support: tuple[Cgroups, Support] | None = None
        self._pods: dict[str, str] = {}              # uid -> pod dir we configured (reset when unannotated)
        self._leaves: dict[str, dict[str, Limits]] = {}   # v1 container dir -> throttles we pushed there
        self._bad = LogOnce(log, logging.WARNING)        # per block / pod, cleared when they go away
        self._warn = LogOnce(log, logging.WARNING)       # config this host or upstream cannot apply
        self._once = LogOnce(log, logging.INFO)
        self._tried: list[str] = []

    def support(self, cgroups: Cgroups) -> Support:
        if self._support is None or self._support[0] is not cgroups:
            s = probe(cgroups)
            self._support = (cgroups, s)
            log.info("blkio qos kernel support cgroup=v%d %s", cgroups.version, s.describe())
        return self._support[1]

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        devices = BlockDevices(self._paths)
        self._storage_read(devices)
        rq = view.slo.resource_qos
        if rq is None:
            return
        cgroups = executor.cgroups
        support = self.support(cgroups)
        if not (support.throttle or support.cost_qos):
            self._once("unsupported", "blkio qos unsupported: no %s files in this cgroup hierarchy; nothing done",
                       "blkio.throttle.*" if cgroups.version is CgroupVersion.V1 else "io.max / io.cost.*")
            return
        for cls, cfg in (("LSR", rq.lsr), ("LS", rq.ls)):
            if _configured(cfg):
                self._warn(f"class-{cls}", "blkio qos: configuring blkio of the %s class is not supported; "
                           "ignored", cls)
            else:
                self._warn.forget(f"class-{cls}")
        self._tried = []
        updates: list[Update | None] = []

        be = _Scope()
        be_cfg = rq.be.blkio_qos if rq.be is not None else None
        if be_cfg is not None:
            blocks = be_cfg.blocks if be_cfg.enable else ()
            if support.throttle:
                be = self._scope(executor, cgroups.layout.qos_dir(KubeQOS.BESTEFFORT), blocks, "", "qos besteffort",
                                 devices, support, updates)
            elif blocks:
                self._warn("be-unsupported", "blkio qos: beClass blocks ignored: the kernel has no %s",
                           "blkio.throttle.*" if cgroups.version is CgroupVersion.V1 else "io.max")

        root_cfg = rq.cgroup_root.blkio_qos if rq.cgroup_root is not None else None
        if root_cfg is not None:
            blocks = root_cfg.blocks if root_cfg.enable else ()
            if support.cost_qos:
                self._root(executor, blocks, devices, support, updates)
            elif blocks:
                self._warn("root-unsupported", "blkio qos: cgroupRoot blocks ignored: the kernel has no iocost "
                           "(%s missing at the root)",
                           COST_QOS_V1 if cgroups.version is CgroupVersion.V1 else IO_COST_QOS)

        pods: dict[str, _Scope] = {}
        if support.throttle:
            pods = self._pods_cycle(view, executor, devices, support, updates)
        if cgroups.version is CgroupVersion.V1 and support.throttle:
            self._push_leaves(view, be, pods, executor, updates)
        self._bad.keep_only(self._tried)
        executor.update(updates)

    def _storage_read(self, devices: BlockDevices) -> None:
        """The cycle's read of the node's local storage (the mount table the blocks resolve through), counted as
        upstream counts its local storage info collection (which runs with this gate, every second)."""
        if self._metrics is None:
            return
        try:
            devices.mounts()
            ok = True
        except BlockDevError:
            ok = False
        self._metrics.collect_status(self._metrics.collect_node_local_storage_info_status, ok)

    # --- directories --------------------------------------------------------------------------------

    def _resolve(self, blocks: Sequence[BlockCfg], pod_uid: str, where: str,
                 devices: BlockDevices) -> tuple[dict[str, IOCfg | None], bool]:
        """maj:min -> the block's ioCfg (a later block for the same disk wins); True when any block failed."""
        out: dict[str, IOCfg | None] = {}
        failed = False
        for i, block in enumerate(blocks):
            key = f"{where}#{i}"
            self._tried.append(key)
            try:
                if block.block_type is None:
                    raise BlockDevError(f"block {block.name or '#' + str(i)!r} has no type")
                disk = devices.resolve(block.block_type, block.name or "", pod_uid)
            except BlockDevError as e:
                failed = True
                self._bad(key, "blkio block skipped scope=%s block=%d type=%s name=%s error=%s", where, i,
                          block.block_type, block.name, e)
                if self._metrics is not None:
                    self._metrics.blkio_block_errors.labels(self._metrics.node, block.block_type or "").inc()
                continue
            if self._bad.forget(key):
                log.info("blkio block resolved scope=%s block=%d name=%s disk=%s number=%s", where, i, block.name,
                         disk.name, disk.number)
            out[disk.number] = block.io_cfg
        return out, failed

    def _present(self, cgroups: Cgroups, rel: str, resources: Iterable[str]) -> dict[str, set[str]]:
        """Per file, the disks with a line in it (the stale-reset candidates)."""
        found: dict[str, set[str]] = {}
        sub = "blkio" if cgroups.version is CgroupVersion.V1 else "io"
        for res in resources:
            try:
                found[res] = devices_in(read_text(cgroups.path(sub, rel, res)))
            except OSError:
                continue
        return found

    def _scope(self, executor: Executor, rel: str, blocks: Sequence[BlockCfg], pod_uid: str, owner: str,
               devices: BlockDevices, support: Support, updates: list[Update | None]) -> _Scope:
        cgroups = executor.cgroups
        resolved, failed = self._resolve(blocks, pod_uid, owner, devices)
        scope = _Scope({n: Limits.from_io(io) for n, io in resolved.items()}, failed)
        files: list[str] = ([*THROTTLE_V1, WEIGHT_V1] if cgroups.version is CgroupVersion.V1
                            else [IO_MAX, IO_WEIGHT])
        if not support.weight:
            files.pop()
        if not failed:            # an unresolved block may own a present line: keep it until it resolves
            present = self._present(cgroups, rel, files)
            for number in sorted(set().union(*present.values()) - scope.limits.keys()):
                for res, value in throttle_values(cgroups.version, number, Limits(), support.weight):
                    if number in present.get(res, ()):      # only lines that exist: no new "default" lines
                        updates.append(executor.cgroup(rel, res, value, owner, REASON))
        for number, limits in scope.limits.items():
            for res, value in throttle_values(cgroups.version, number, limits, support.weight):
                updates.append(executor.cgroup(rel, res, value, owner, REASON))
        return scope

    def _root(self, executor: Executor, blocks: Sequence[BlockCfg], devices: BlockDevices, support: Support,
              updates: list[Update | None]) -> None:
        cgroups = executor.cgroups
        v1 = cgroups.version is CgroupVersion.V1
        resolved, failed = self._resolve(blocks, "", "cgroup root", devices)
        values: list[tuple[str, str]] = []
        if not failed:
            qos_file = COST_QOS_V1 if v1 else IO_COST_QOS
            for number in sorted(self._present(cgroups, "", [qos_file]).get(qos_file, set()) - resolved.keys()):
                values += root_reset(cgroups.version, number)
        for number, io in resolved.items():
            values += root_values(cgroups.version, number, io, support.cost_model)
        updates.extend(executor.cgroup("", res, value, "node", REASON) for res, value in values)

    def _pods_cycle(self, view: NodeView, executor: Executor, devices: BlockDevices, support: Support,
                    updates: list[Update | None]) -> dict[str, _Scope]:
        out: dict[str, _Scope] = {}
        seen: set[str] = set()
        for meta in view.pods:
            pod = meta.pod
            seen.add(pod.uid)
            if pod.raw_qos_class == wire.QOS_NONE or pod.phase != "Running":
                continue
            key = f"pod {pod.key}"
            refused = False
            try:
                blocks = pod.decoded(pod_blocks)             # once per pod version
            except DecodeError as e:
                blocks, refused = (), True
                self._tried.append(key)
                self._bad(key, "blkio qos annotation ignored pod=%s annotation=%s problem=%s; the pod falls back "
                          "to no blkio limits", pod.key, e.key, e.problem)
            if blocks is None:
                if pod.uid not in self._pods:
                    continue                      # never configured by us: left alone, as upstream
                blocks = ()
                log.info("blkio qos annotation removed pod=%s; resetting its devices", pod.key)
            out[pod.uid] = self._scope(executor, meta.cgroup_dir, blocks, pod.uid, pod_owner(meta), devices, support,
                                       updates)
            if blocks or refused:
                self._pods[pod.uid] = meta.cgroup_dir
            else:
                self._pods.pop(pod.uid, None)
        for uid in [u for u in self._pods if u not in seen]:
            del self._pods[uid]
        return out

    def _push_leaves(self, view: NodeView, be: _Scope, pods: dict[str, _Scope], executor: Executor,
                     updates: list[Update | None]) -> None:
        """v1 only: the throttles of the QoS and pod directories also go to the container directories, where the
        tasks are (v1 blk-throttle does not apply a group's limits to its descendants)."""
        wanted: dict[str, dict[str, Limits]] = {}
        hold: set[str] = set()
        owners: dict[str, str] = {}               # every live container dir -> its audit owner
        for meta in view.pods:
            sources = []
            if meta.pod.kube_qos is KubeQOS.BESTEFFORT:
                sources.append(be)
            if meta.pod.uid in pods:
                sources.append(pods[meta.pod.uid])
            merged: dict[str, Limits] = {}
            for scope in sources:
                for number, limits in scope.limits.items():
                    merged[number] = merged[number].tighter(limits) if number in merged else limits
            merged = {n: lim for n, lim in merged.items() if any(lim.throttles)}
            for container, rel in meta.containers:
                owners[rel] = f"container {meta.pod.key}/{container.name}"
                if merged:
                    wanted[rel] = merged
                if any(s.failed for s in sources):
                    hold.add(rel)
        state: dict[str, dict[str, Limits]] = {}
        for rel, before in self._leaves.items():
            if rel not in owners:
                continue                          # the container is gone, and its files with it
            for number, limits in before.items():
                if number in wanted.get(rel, {}):
                    continue
                if rel in hold:                   # its block did not resolve this cycle: keep what is there
                    state.setdefault(rel, {})[number] = limits
                else:
                    wanted.setdefault(rel, {})[number] = Limits()
        for rel, disks in wanted.items():
            owner = owners[rel]
            for number, limits in disks.items():
                for res, value in throttle_values(CgroupVersion.V1, number, limits, False):
                    updates.append(executor.cgroup(rel, res, value, owner, REASON))
                if any(limits.throttles):
                    state.setdefault(rel, {})[number] = limits
        self._leaves = state


def _configured(cfg: ResourceQOS | None) -> bool:
    b = cfg.blkio_qos if cfg is not None else None
    return b is not None and bool(b.enable) and bool(b.blocks)


__all__ = ["BlkIO", "Limits", "Support", "devices_in", "pod_blocks", "probe",
           "root_reset", "root_values", "throttle_values"]


PLUGIN = Plugin("blkio", lambda ctx: BlkIO(ctx.paths, ctx.metrics), gates=("BlkIOReconcile",),
                probe=host_probe(probes.blkio))
