"""System config: node-wide memory and scheduler sysctls from NodeSLO ``systemStrategy``.

Facts: upstream ``pkg/koordlet/qosmanager/plugins/sysreconcile/system_config.go: systemConfig.reconcile`` (gate
``SystemConfig``, default off). Each set field becomes one write-if-different through the executor; unset fields
write nothing (the kernel keeps whatever it has):

==========================  ================================================  =====================
field                       file                                              accepted values
==========================  ================================================  =====================
minFreeKbytesFactor         /proc/sys/vm/min_free_kbytes = memKB·factor/10000  10240 .. 10485760
watermarkScaleFactor        /proc/sys/vm/watermark_scale_factor                10 .. 400
memcgReapBackGround         /sys/kernel/mm/memcg_reaper/reap_background        0 .. 1
schedGroupIdentityEnabled   /proc/sys/kernel/sched_group_identity_enabled      0 .. 1
schedIdleSaverWmark         /proc/sys/kernel/sched_idle_saver_wmark            any
pageCacheLimitEnabled       /sys/kernel/mm/pagecache_limit/enabled             0 .. 1
schedFeatures {NAME: bool}  /sys/kernel/debug/sched_features                   "NAME" / "NO_NAME"
==========================  ================================================  =====================

A value outside its range is refused with one log line naming the field (the NodeSLO decoder already rejects most
of them; min_free_kbytes depends on the node's memory). The memory total is the node's ``capacity.memory`` as
upstream, or ``memory_total_kb`` (MemTotal) when the Node object has none (standalone). Files the kernel lacks
(memcg_reaper, pagecache_limit, group identity: Anolis only) are counted as missing by the executor, quietly.
``sched_features`` holds the whole list, so it is read first and only the features whose state differs are
written, one line each, as the kernel expects.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.component import Plugin
from koordlet.host.fs import read_bytes
from koordlet.host.paths import HostPaths
from koordlet.states.nodeslo.schema import SystemStrategy
from koordlet.states.nodestate import NodeView
from koordlet.writer.executor import Update

if TYPE_CHECKING:
    from koordlet.writer.executor import Executor

log = logging.getLogger(__name__)

REASON = "systemConfig reconcile"
OWNER = "node"
MIN_FREE_KBYTES_RANGE = (10 * 1024, 10 * 1024 * 1024)
WATERMARK_SCALE_FACTOR_RANGE = (10, 400)
SWITCH_RANGE = (0, 1)
_FEATURE_NAME = re.compile(r"[A-Za-z0-9_]+")


def min_free_kbytes(memory_kb: int, factor: int) -> int:
    return memory_kb * factor // 10000


def parse_sched_features(text: str) -> dict[str, bool]:
    """``/sys/kernel/debug/sched_features`` ("GENTLE_FAIR_SLEEPERS NO_HRTICK ...") to {name: enabled}."""
    out: dict[str, bool] = {}
    for word in text.split():
        if word.startswith("NO_"):
            out[word[3:]] = False
        else:
            out[word] = True
    return out


def sched_feature_writes(current: dict[str, bool], wanted: dict[str, bool]) -> list[str]:
    """The lines to write, one per feature whose state differs (sorted for a stable order)."""
    return [name if on else f"NO_{name}" for name, on in sorted(wanted.items()) if current.get(name) != on]


class SystemConfig:
    """Sysctls and sysfs knobs of the whole node."""

    name = "system-config"

    def __init__(self, paths: HostPaths, memory_total_kb: int) -> None:
        self._paths = paths
        self._memory_total_kb = memory_total_kb
        self._bad = LogOnce(log, logging.WARNING)

    def _memory_kb(self, view: NodeView) -> int:
        raw = view.node.capacity.get("memory") if view.node.capacity else None
        if raw is not None:
            try:
                return int(parse_quantity(raw)) // 1024
            except ValueError:
                self._bad("capacity", "node capacity.memory %r is not a quantity; using MemTotal", raw)
        return self._memory_total_kb

    def _ranged(self, field: str, value: int | None, bounds: tuple[int, int] | None, path: str,
                resource: str, problems: list[str]) -> Update | None:
        if value is None:
            return None
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            problems.append(field)
            self._bad(field, "system config field refused field=systemStrategy.%s value=%d problem=must be "
                      "between %d and %d; file %s left alone", field, value, bounds[0], bounds[1], path)
            return None
        return Update(path, str(value), OWNER, REASON, resource)

    def updates(self, view: NodeView) -> list[Update]:
        """The desired writes for this cycle (pure apart from reading sched_features)."""
        s: SystemStrategy | None = view.slo.system
        if s is None:
            return []
        p = self._paths
        problems: list[str] = []
        out: list[Update | None] = []
        if s.min_free_kbytes_factor is not None:
            memory_kb = self._memory_kb(view)
            if memory_kb <= 0:
                problems.append("minFreeKbytesFactor")
                self._bad("minFreeKbytesFactor", "system config field refused field=systemStrategy."
                          "minFreeKbytesFactor problem=node memory total unknown")
            else:
                out.append(self._ranged("minFreeKbytesFactor", min_free_kbytes(memory_kb, s.min_free_kbytes_factor),
                                        MIN_FREE_KBYTES_RANGE, p.proc("sys", "vm", "min_free_kbytes"),
                                        "vm.min_free_kbytes", problems))
        out.append(self._ranged("watermarkScaleFactor", s.watermark_scale_factor, WATERMARK_SCALE_FACTOR_RANGE,
                                p.proc("sys", "vm", "watermark_scale_factor"), "vm.watermark_scale_factor",
                                problems))
        out.append(self._ranged("memcgReapBackGround", s.memcg_reap_background, SWITCH_RANGE,
                                p.sys("kernel", "mm", "memcg_reaper", "reap_background"),
                                "memcg_reaper.reap_background", problems))
        out.append(self._ranged("schedGroupIdentityEnabled", s.sched_group_identity_enabled, SWITCH_RANGE,
                                p.proc("sys", "kernel", "sched_group_identity_enabled"),
                                "kernel.sched_group_identity_enabled", problems))
        out.append(self._ranged("schedIdleSaverWmark", s.sched_idle_saver_wmark, None,
                                p.proc("sys", "kernel", "sched_idle_saver_wmark"), "kernel.sched_idle_saver_wmark",
                                problems))
        out.append(self._ranged("pageCacheLimitEnabled", s.page_cache_limit_enabled, SWITCH_RANGE,
                                p.sys("kernel", "mm", "pagecache_limit", "enabled"), "pagecache_limit.enabled",
                                problems))
        if s.sched_features:
            out += self._sched_features(dict(s.sched_features), problems)
        self._bad.keep_only(problems)
        return [u for u in out if u is not None]

    def _sched_features(self, wanted: dict[str, bool], problems: list[str]) -> list[Update]:
        path = self._paths.sys("kernel", "debug", "sched_features")
        bad_names = sorted(n for n in wanted if not _FEATURE_NAME.fullmatch(n))
        if bad_names:
            problems.append("schedFeatures")
            self._bad("schedFeatures", "system config field refused field=systemStrategy.schedFeatures names=%s "
                      "problem=a feature name is letters, digits and '_'", ",".join(bad_names))
            wanted = {n: v for n, v in wanted.items() if n not in bad_names}
        try:
            current = parse_sched_features(read_bytes(path).decode("utf-8", "replace"))
        except OSError as e:
            problems.append("schedFeatures:read")
            self._bad("schedFeatures:read", "sched_features unavailable path=%s error=%s; schedFeatures not "
                      "applied", path, e.strerror or e)
            return []
        # not cacheable: the file reads back as the whole list, never as the line written
        return [Update(path, line, OWNER, REASON, "sched_features", cacheable=False)
                for line in sched_feature_writes(current, wanted)]

    def reconcile(self, view: NodeView, executor: Executor) -> None:
        updates = self.updates(view)
        if updates:
            executor.update(updates)


__all__ = ["SystemConfig", "min_free_kbytes", "parse_sched_features", "sched_feature_writes"]


PLUGIN = Plugin("system-config", lambda ctx: SystemConfig(ctx.paths, ctx.node.memory_bytes() // 1024),
                gates=("SystemConfig",))
