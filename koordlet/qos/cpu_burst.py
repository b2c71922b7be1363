"""CPU burst: ``cpu.cfs_burst_us`` from the container limit, and cfs-quota scaling for throttled containers.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go: cpuBurst`` (``applyCPUBurst``,
``applyCFSQuotaBurst``). Every cycle, for each pod whose *raw* QoS class is not LSR, LSE or BE (those have dedicated
CPUs or are batch):

- The pod annotation ``koordinator.sh/cpuBurst`` (a CPUBurstConfig JSON) is overlaid on the node's
  ``cpuBurstStrategy``. A malformed annotation is logged once naming the pod; the node config is used.
- ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) per container = limit cores · cpuBurstPercent/100 · 100000, 0 when
  the policy is neither ``cpuBurstOnly`` nor ``auto`` or the container has no limit; the pod gets the sum. It is
  written every cycle, so the default policy ``none`` writes 0, as upstream does.
- cfs-quota burst (policies ``cfsQuotaBurstOnly`` / ``auto``): a container throttled during the last cycle gets
  its quota ×1.2, up to limit · cfsQuotaBurstPercent/100; the per-container token bucket (when
  ``cfsQuotaBurstPeriodSeconds`` ≥ 0) turns that into ×0.8 once the container has burst for too long; any other
  policy resets the quota to the base (limit · 100000). The node's share pool (CPUs not reserved by LSE/LSR pods)
  vetoes growth: at or above ``sharePoolThresholdPercent`` every container scales down, within 10 % below it (or
  when usage is unknown) nobody grows.
- Order: v1 requires a child's quota to stay within its parent's, so growing writes the pod first, shrinking the
  container first.

Differences from upstream (the right thing, documented):

- The throttling signal is read here from ``cpu.stat`` (Δnr_throttled since the previous cycle > 0) rather than
  from a collector series; the first cycle of a container has no delta and leaves its quota alone, as upstream
  does for an empty series.
- The token bucket counts elapsed time in fractional seconds; upstream truncates each cycle's elapsed seconds to an
  integer, so a 0.99 s cycle earns or spends nothing.
- The kernel refuses ``cfs_burst_us`` above the cgroup's quota (EINVAL; the rule came with the feature in 5.14 and
  Anolis has the same), which the default 1000 % always exceeds: upstream's write then fails every cycle. We cap the
  burst at the container's base quota (a full period of burst at the limit), so the write succeeds.
- An unknown ``policy`` in the annotation is rejected (node config used); upstream accepts any string and treats
  it as ``none``. A pod with an empty ``status.phase`` counts as active (upstream: inactive).
- With gate CPUNormalization and a node cpu-normalization-ratio above 1, the base quota of a cpu-share pod's
  container is the normalized one (``rules.resources.normalized_quota``, what the pod-resources strategy writes);
  upstream resets it to limit · 100000 every cycle while its CPUNormalization reconciler divides it again.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.component import Context, Plugin, collecting, host_probe
from koordlet.host import probes
from koordlet.host.cgroup import Cgroups
from koordlet.metriccache import EmptyError, MetricCache
from koordlet.ops.metrics.exposition import GaugeCycle
from koordlet.rules.resources import cpu_share_pod, normalization_rule, normalized_quota
from koordlet.states import decode
from koordlet.states.decode import DecodeError, decoder
from koordlet.states.informer import pod_owner
from koordlet.states.nodeslo.decoder import overlay
from koordlet.states.nodeslo.schema import CPUBurstStrategy
from koordlet.states.nodestate import NodeView
from koordlet.states.pod import NOT_PINNED, resource_status
from koordlet.states.readings import CgroupReadings, CpuStat

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics
    from koordlet.states.informer import PodMeta
    from koordlet.states.pod import Container, Pod
    from koordlet.writer.executor import Executor, Update

log = logging.getLogger(__name__)

REASON_CPU_BURST = "CPUBurst"                            # upstream audit reasons
REASON_CFS_QUOTA_BURST = "CFSQuotaBurst"

CFS_PERIOD_US = 100000          # system.CFSBasePeriodValue
CFS_QUOTA_MIN_US = 1000         # system.CFSQuotaMinValue
SCALE_UP = 1.2                  # cfsIncreaseStep
SCALE_DOWN = 0.8                # cfsDecreaseStep
COOLING_RATIO = 0.9             # sharePoolCoolingThresholdRatio
LIMITER_CONSUME_PERCENT = 100   # usage ≥ this % of the limit spends tokens
LIMITER_SAVE_PERCENT = 60       # usage < this % of the limit earns tokens
SHARE_POOL_WINDOW_MAX = 10.0    # seconds: the share pool usage is averaged over min(5·interval, 10 s)

_ACTIVE_PHASES = ("", "Pending", "Running")


class NodeState(enum.Enum):
    """Share pool usage against sharePoolThresholdPercent."""
    OVERLOAD = "overload"       # ≥ threshold
    COOLING = "cooling"         # [0.9·threshold, threshold)
    IDLE = "idle"               # < 0.9·threshold
    UNKNOWN = "unknown"         # no node usage or CPU count


class Operation(enum.Enum):
    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    REMAIN = "remain"
    RESET = "reset"


# --------------------------------------------------------------------------------------------------
# pure decisions
# --------------------------------------------------------------------------------------------------

def burst_enabled(policy: str | None) -> bool:
    return policy in (wire.CPU_BURST_AUTO, wire.CPU_BURST_ONLY)


def quota_burst_enabled(policy: str | None) -> bool:
    return policy in (wire.CPU_BURST_AUTO, wire.CFS_QUOTA_BURST_ONLY)


def static_burst_us(cpu_limit_milli: int, cfg: CPUBurstStrategy) -> int:
    """Container ``cpu.cfs_burst_us``: limit cores · cpuBurstPercent/100 · period; 0 when off or unlimited."""
    if not burst_enabled(cfg.policy) or cpu_limit_milli <= 0 or cfg.cpu_burst_percent is None:
        return 0
    return int(cpu_limit_milli / 1000 * (cfg.cpu_burst_percent / 100) * CFS_PERIOD_US)


def base_quota_us(cpu_limit_milli: int) -> int:
    """The quota the kubelet gives a container limit (MilliCPUToQuota): -1 unlimited, at least 1000."""
    quota = cpu_limit_milli * CFS_PERIOD_US // 1000
    if quota <= 0:
        return -1
    return max(quota, CFS_QUOTA_MIN_US)


def ceiling_quota_us(base: int, cfg: CPUBurstStrategy) -> int:
    pct = cfg.cfs_quota_burst_percent
    if pct is not None and pct > 100:
        return int(base * pct / 100)
    return base


def node_state(usage_ratio: float | None, threshold_percent: int) -> NodeState:
    """Classify share pool usage (a ratio of its CPUs; None = unknown)."""
    if usage_ratio is None:
        return NodeState.UNKNOWN
    threshold = threshold_percent / 100
    if usage_ratio >= threshold:
        return NodeState.OVERLOAD
    if usage_ratio >= threshold * COOLING_RATIO:
        return NodeState.COOLING
    return NodeState.IDLE


def adjust_for_node(state: NodeState, op: Operation) -> Operation:
    """The node vetoes growth: overload turns up/remain into down; cooling or unknown turns up into remain."""
    if state is NodeState.OVERLOAD and op in (Operation.SCALE_UP, Operation.REMAIN):
        return Operation.SCALE_DOWN
    if state in (NodeState.COOLING, NodeState.UNKNOWN) and op is Operation.SCALE_UP:
        return Operation.REMAIN
    return op


def target_quota(op: Operation, current: int, base: int, ceiling: int) -> int:
    """The next container quota, clamped to [base, ceiling] (an unlimited -1 current lands on base)."""
    target = current
    if op is Operation.SCALE_UP:
        target = int(current * SCALE_UP)
    elif op is Operation.SCALE_DOWN:
        target = int(current * SCALE_DOWN)
    elif op is Operation.RESET:
        target = base
    return max(base, min(target, ceiling))


def container_operation(policy: str | None, allowed_by_limiter: bool, throttled: bool | None) -> Operation:
    """Upstream genOperationByContainer: policy first, then the limiter, then the throttling signal."""
    if not quota_burst_enabled(policy):
        return Operation.RESET
    if not allowed_by_limiter:
        return Operation.SCALE_DOWN
    return Operation.SCALE_UP if throttled else Operation.REMAIN


@decoder(wire.ANNOTATION_POD_CPU_BURST)
def pod_burst_config(pod: Pod, node_cfg: CPUBurstStrategy) -> CPUBurstStrategy:
    """The pod's CPUBurstConfig: the annotation overlaid on the node's; DecodeError when malformed (the caller
    then uses the node's).

    ``sharePoolThresholdPercent`` is a node-level field (not in CPUBurstConfig) and is ignored in the annotation.
    """
    key = wire.ANNOTATION_POD_CPU_BURST
    text = pod.annotations.get(key)
    if text is None:
        return node_cfg
    raw = {k: v for k, v in decode.json_object(key, text).items() if k != "sharePoolThresholdPercent"}
    cfg, problem = overlay(CPUBurstStrategy, raw, node_cfg, key)
    if problem is not None:
        raise DecodeError(key, problem)
    return cfg


def pod_active(pod: Pod) -> bool:
    """Pending or Running (upstream IsPodInactive); an unknown (empty) phase counts as active."""
    return pod.phase in _ACTIVE_PHASES


# --------------------------------------------------------------------------------------------------
# token bucket
# --------------------------------------------------------------------------------------------------

@dataclass
class BurstLimiter:
    """Per-container token bucket: a container may run above its limit for about ``period`` seconds' worth of
    (pct − 100) % before its quota is driven back down; running below 60 % earns the time back."""
    capacity: float
    tokens: float
    last: float
    expire_after: float

    @classmethod
    def new(cls, period_s: int, max_percent: int, now: float, rng: random.Random) -> BurstLimiter:
        capacity = float(period_s * (max_percent - 100))
        return cls(capacity, float(int(capacity * rng.random() / 2)), now, float(2 * period_s))

    def matches(self, period_s: int, max_percent: int) -> bool:
        return self.capacity == period_s * (max_percent - 100)

    def allow(self, now: float, usage_percent: int) -> bool:
        elapsed = max(now - self.last, 0.0)
        if usage_percent >= LIMITER_CONSUME_PERCENT:
            self.tokens -= (usage_percent - 100) * elapsed
        elif usage_percent < LIMITER_SAVE_PERCENT:
            self.tokens += (100 - usage_percent) * elapsed
        self.tokens = max(min(self.tokens, self.capacity), -self.capacity)
        self.last = now
        return self.tokens > 0

    def expired(self, now: float) -> bool:
        return now - self.last > self.expire_after


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _BurstUpdates:
    """One pod's ``cpu.cfs_burst_us`` updates, with what they were made from: each container's update, the labels of
    its ``container_scaled_cfs_burst_us`` series and its value, then the pod's update."""
    meta: PodMeta
    cfg: CPUBurstStrategy
    ratio: float
    containers: tuple[tuple[Update | None, tuple[str, ...], int], ...]
    pod: Update | None

    def made_from(self, meta: PodMeta, cfg: CPUBurstStrategy, ratio: float) -> bool:
        return self.meta is meta and self.ratio == ratio and (self.cfg is cfg or self.cfg == cfg)


class CPUBurst:
    """The CPU burst strategy (gate ``CPUBurst``, default on)."""

    name = "cpu-burst"

    def __init__(self, cache: MetricCache, collect_interval: float, metrics: AgentMetrics | None = None,
                 rng: random.Random | None = None, reconcile_interval: float = 1.0,
                 normalization: bool = False, readings: CgroupReadings | None = None) -> None:
        self._cache = cache
        self._normalization = normalization       # gate CPUNormalization: bases follow the node's ratio
        self._collect_interval = collect_interval
        self._window = min(5 * reconcile_interval, SHARE_POOL_WINDOW_MAX)
        self._metrics = metrics
        # what each cycle sets, published at its end (never cleared and refilled under a scrape)
        self._burst_series = GaugeCycle(metrics.container_scaled_cfs_burst_us) if metrics is not None else None
        self._quota_series = GaugeCycle(metrics.container_scaled_cfs_quota_us) if metrics is not None else None
        self._rng = rng if rng is not None else random.Random()
        self.limiters: dict[str, BurstLimiter] = {}        # container id -> bucket
        self._throttle: dict[str, CpuStat] = {}             # container id -> previous cpu.stat
        # pod dir -> its burst updates, made again only when the PodMeta (the informer makes new ones at each sync),
        # its config or its ratio changes; the executor still checks each against its cache and the kernel
        self._bursts: dict[str, _BurstUpdates] = {}
        self._readings = readings if readings is not None else CgroupReadings()
        self._bad = LogOnce(log, logging.WARNING)
        self._once = LogOnce(log, logging.INFO)

    # --- cycle ----------------------------------------------------------------------------------------

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        try:
            self._reconcile(view, executor)
        finally:
            for series in (self._burst_series, self._quota_series):
                if series is not None:
                    series.publish()

    def _reconcile(self, view: NodeView, executor: Executor) -> None:
        node_cfg = view.slo.cpu_burst
        if node_cfg is None:
            self._once("no-config", "cpu burst skipped: NodeSLO has no cpuBurstStrategy")
            return
        now = view.now or time.time()
        threshold = node_cfg.share_pool_threshold_percent
        state = node_state(self.share_pool_usage(view, now), 50 if threshold is None else threshold)
        bad: list[str] = []
        seen: set[str] = set()
        live: set[str] = set()
        norm = normalization_rule(view.node.annotations)[0] if self._normalization else None
        for meta in view.pods:
            pod = meta.pod
            if pod.raw_qos_class in (wire.QOS_LSR, wire.QOS_LSE, wire.QOS_BE) or not pod_active(pod):
                continue
            ratio = _pod_ratio(pod, norm)
            try:
                cfg = pod_burst_config(pod, node_cfg)
            except DecodeError as e:
                cfg = node_cfg
                bad.append(pod.uid)
                self._bad(pod.uid, "cpu burst annotation ignored pod=%s annotation=%s problem=%s; using the node "
                          "config", pod.key, e.key, e.problem)
            live.add(meta.cgroup_dir)
            self._apply_burst(meta, cfg, executor, ratio)
            self._apply_quota_burst(meta, cfg, state, now, executor, seen, ratio)
        self._bad.keep_only(bad)
        for rel in [r for r in self._bursts if r not in live]:
            del self._bursts[rel]
        for cid in [c for c in self._throttle if c not in seen]:
            del self._throttle[cid]
        for cid in [c for c, lim in self.limiters.items() if lim.expired(now)]:
            del self.limiters[cid]

    def share_pool_usage(self, view: NodeView, now: float) -> float | None:
        """Share pool usage ratio: (node usage − LSE/LSR/BE pod usage) / (#CPUs − LSE/LSR requests); None when
        the node usage or CPU count is unknown. System usage stays in, to be conservative (as upstream)."""
        start = now - self._window
        try:
            used = self._cache.query("node_cpu_usage", None, start, now).value("avg")
        except EmptyError:
            return None
        ncpu = len(view.topology.online) or len(view.topology.cpus)
        if ncpu <= 0:
            return None
        total = float(ncpu)
        for meta in view.pods:
            pod = meta.pod
            qos = pod.raw_qos_class
            if qos in (wire.QOS_LSE, wire.QOS_LSR):
                total -= pod.cpu_request_milli / 1000
            if qos in (wire.QOS_LSE, wire.QOS_LSR, wire.QOS_BE):
                try:
                    used -= self._cache.query("pod_cpu_usage", {"pod_uid": pod.uid}, start, now).value("avg")
                except EmptyError:
                    pass
        return used / total if total > 0 else 1.0

    # --- cfs_burst_us ---------------------------------------------------------------------------------

    def _apply_burst(self, meta: PodMeta, cfg: CPUBurstStrategy, executor: Executor, ratio: float = 1.0) -> None:
        bursts = self._bursts.get(meta.cgroup_dir)
        if bursts is None or not bursts.made_from(meta, cfg, ratio):
            bursts = self._bursts[meta.cgroup_dir] = self._burst_updates(meta, cfg, executor, ratio)
        for update, labels, value in bursts.containers:
            result = executor.update([update])
            if self._burst_series is not None and not result.failed and not result.missing:
                self._burst_series.set(labels, value)
        executor.update([bursts.pod])

    def _burst_updates(self, meta: PodMeta, cfg: CPUBurstStrategy, executor: Executor, ratio: float
                       ) -> _BurstUpdates:
        """Each container's ``cpu.cfs_burst_us`` from its limit, and the pod's, the sum of its containers'."""
        pod = meta.pod
        node = self._metrics.node if self._metrics is not None else ""
        containers = []
        for container, rel in meta.containers:
            value = static_burst_us(container.resources.cpu_limit, cfg)
            base = normalized_quota(container.resources.cpu_limit, ratio)
            if base > 0:
                value = min(value, base)         # the kernel refuses burst > quota (EINVAL)
            containers.append((executor.cgroup(rel, "cpu.cfs_burst_us", value, _owner(meta, container),
                                               REASON_CPU_BURST),
                               (node, pod.namespace, pod.name, container.id, container.name), value))
        pod_update = executor.cgroup(meta.cgroup_dir, "cpu.cfs_burst_us", sum(v for _, _, v in containers),
                                     pod_owner(meta), REASON_CPU_BURST)
        return _BurstUpdates(meta, cfg, ratio, tuple(containers), pod_update)

    # --- cfs quota burst ------------------------------------------------------------------------------

    def _apply_quota_burst(self, meta: PodMeta, cfg: CPUBurstStrategy, state: NodeState, now: float,
                           executor: Executor, seen: set[str], ratio: float = 1.0) -> None:
        cgroups = executor.cgroups
        for container, rel in meta.containers:
            base = normalized_quota(container.resources.cpu_limit, ratio)
            if base <= 0:
                continue
            try:
                current = cgroups.read_quota(rel)
            except (OSError, ValueError):
                continue                      # not started yet or gone: next cycle
            ceiling = ceiling_quota_us(base, cfg)
            allowed = self._allowed_by_limiter(cfg, container, now)
            throttled = None
            if quota_burst_enabled(cfg.policy):
                seen.add(container.id)
                throttled = self._throttled(container.id, cgroups, rel)
            op = adjust_for_node(state, container_operation(cfg.policy, allowed, throttled))
            target = target_quota(op, current, base, ceiling)
            if target == current:
                continue
            if self._scale(meta, container, rel, current, target - current, executor):
                if self._metrics is not None and self._quota_series is not None:
                    self._quota_series.set((self._metrics.node, meta.pod.namespace, meta.pod.name, container.id,
                                            container.name), target)
                log.info("cfs quota scaled pod=%s container=%s operation=%s node=%s old=%d new=%d",
                         meta.pod.key, container.name, op.value, state.value, current, target)

    def _allowed_by_limiter(self, cfg: CPUBurstStrategy, container: Container, now: float) -> bool:
        period, pct = cfg.cfs_quota_burst_period_seconds, cfg.cfs_quota_burst_percent
        if period is None or period < 0:
            return True
        if pct is None or pct < 100:
            return False
        limit = container.resources.cpu_limit / 1000
        usage = limit
        try:
            usage = self._cache.query("container_cpu_usage", {"container_id": container.id},
                                      now - 2 * self._collect_interval, now).value("last")
        except EmptyError:
            pass
        limiter = self.limiters.get(container.id)
        if limiter is None or not limiter.matches(period, pct):
            limiter = self.limiters[container.id] = BurstLimiter.new(period, pct, now, self._rng)
        return limiter.allow(now, int(usage / limit * 100))

    def _throttled(self, cid: str, cgroups: Cgroups, rel: str) -> bool | None:
        """True when nr_throttled grew since the previous cycle; None without a previous reading, or without a new
        one. The throttled collector's fresh reading of ``cpu.stat`` is used instead of reading the file again
        (states/readings.py); when that reading is the one this container's last decision used (the collector has
        not run since: the two loops drift against each other), there is no news, which is None (REMAIN), as a
        cycle without a throttled period is. The file is read only when the collector has no fresh reading (it
        is off or slower than the reconciler, or the cgroup is new)."""
        previous = self._throttle.get(cid)
        reading = self._readings.cpu_stat(rel, max_age=1.5 * self._collect_interval)
        if reading is not None and previous is not None and reading.at <= previous.at:
            return None
        if reading is None:
            try:
                periods, throttled = cgroups.read_throttling(rel)
            except (OSError, ValueError):
                self._throttle.pop(cid, None)
                return None
            reading = CpuStat(periods, throttled, self._readings.clock())
        self._throttle[cid] = reading
        if previous is None or reading.throttled < previous.throttled:     # first reading, or a recreated cgroup
            return None
        return reading.throttled > previous.throttled

    def _scale(self, meta: PodMeta, container: Container, rel: str, current: int, delta: int,
               executor: Executor) -> bool:
        """Move the container quota by delta, and the pod's with it when the pod is limited. Growing writes the
        pod first, shrinking the container first, so the child never exceeds its parent."""
        try:
            pod_quota = executor.cgroups.read_quota(meta.cgroup_dir)
        except (OSError, ValueError):
            return False
        pod_update = None
        if pod_quota > 0:
            pod_update = executor.cgroup(meta.cgroup_dir, "cpu.cfs_quota_us", pod_quota + delta, pod_owner(meta),
                                         REASON_CFS_QUOTA_BURST, cacheable=False)
        container_update = executor.cgroup(rel, "cpu.cfs_quota_us", current + delta, _owner(meta, container),
                                           REASON_CFS_QUOTA_BURST, cacheable=False)
        steps = [pod_update, container_update] if delta > 0 else [container_update, pod_update]
        for step in steps:
            if step is None:
                continue
            result = executor.update([step])
            if result.failed or result.missing:
                return False
        return True


def _pod_ratio(pod: Pod, norm: float | None) -> float:
    """The CPUNormalization ratio that applies to a pod's quotas: the node's for cpu-share pods, else 1."""
    if norm is None or norm <= 1.0:
        return 1.0
    try:
        status = pod.decoded(resource_status)
    except DecodeError:
        status = NOT_PINNED                   # as the pod-resources strategy: treated as not pinned
    return norm if cpu_share_pod(pod, status) else 1.0


def _owner(meta: PodMeta, container: Container) -> str:
    return f"container {meta.pod.key}/{container.name}"


__all__ = ["BurstLimiter", "CPUBurst", "NodeState", "Operation", "adjust_for_node",
           "base_quota_us", "burst_enabled", "ceiling_quota_us", "container_operation", "node_state",
           "pod_burst_config", "quota_burst_enabled", "static_burst_us", "target_quota"]


def _build(ctx: Context) -> CPUBurst:
    return CPUBurst(ctx.cache, ctx.config.collect_res_used_interval, ctx.metrics,
                    reconcile_interval=ctx.config.reconcile_interval_seconds,
                    normalization=ctx.config.gate("CPUNormalization"), readings=ctx.readings)


PLUGIN = Plugin("cpu-burst", _build, gates=("CPUBurst",), when=collecting, probe=host_probe(probes.cpu_burst))
