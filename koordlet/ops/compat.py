"""Upstream koordlet's command line, flag by flag: the one table of every flag the Go koordlet accepts.

An operator swaps the image of an upstream koordlet DaemonSet for this one and keeps its command and args, so
every flag upstream registers is accepted here. Each is one of:

- **implemented**: an option of this agent with the same name (:data:`koordlet.ops.options.OPTIONS`), same meaning;
- **mapped**: translated onto this agent's own options or behaviour (``-v=4`` becomes ``log-level=debug``);
- **inert**: accepted, with one warning line at start-up that names it and says why it has no effect here.

No flag is dropped silently: every mapped or inert flag given logs one line (:func:`announce`). A value that
upstream's parser would refuse (a non-number for an int flag, a bad klog ``-vmodule``) is refused here too, as
is anything upstream itself would exit on (``-qos-extension-plugins`` naming a plugin: upstream registers none).

The names come from upstream's sources (for the names, defaults and types only): ``cmd/koordlet/options``,
``pkg/koordlet/config/config.go`` and the ``InitFlags`` of the modules it calls, controller-runtime's
``kubeconfig`` and klog's ``InitFlags`` (klog v2.130.1, which koordinator pins). Go's flag syntax is accepted:
``-name=value``, ``--name=value``, ``-name value`` and a boolean ``-name`` alone.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from koordlet.ops.config import Config, ConfigError
from koordlet.ops.gates import COPILOT_EVICT_GATES
from koordlet.ops.options import OPTIONS_BY_NAME
from koordlet.ops.values import parse_bool, parse_duration

Kind = Literal["implemented", "mapped", "inert"]
# Go value types of the flags that are not options here; each has a parser that refuses what Go's refuses
GoType = Literal["string", "bool", "int", "uint", "float", "duration", "map", "slice", "level", "severity",
                 "vmodule", "trace"]

OPTIONS_GO = "cmd/koordlet/options/options.go"
CONFIG_GO = "pkg/koordlet/config/config.go"
SYSTEM_GO = "pkg/koordlet/util/system/config.go"
INFORMER_GO = "pkg/koordlet/statesinformer/impl/config.go"
ADVISOR_GO = "pkg/koordlet/metricsadvisor/framework/config.go"
CACHE_GO = "pkg/koordlet/metriccache/config.go"
QOS_GO = "pkg/koordlet/qosmanager/framework/config.go"
QOS_EXT_GO = "pkg/koordlet/qosmanager/framework/extension.go"
HOOKS_GO = "pkg/koordlet/runtimehooks/config.go"
AUDIT_GO = "pkg/koordlet/audit/config.go"
PREDICTION_GO = "pkg/koordlet/prediction/config.go"
EXECUTOR_GO = "pkg/koordlet/resourceexecutor/config.go"
CONTROLLER_RUNTIME = "sigs.k8s.io/controller-runtime/pkg/client/config"
KLOG = "k8s.io/klog/v2 klog.go"


@dataclass(frozen=True)
class UpstreamFlag:
    name: str          # exactly as upstream spells it (klog's use underscores)
    origin: str        # where upstream registers it
    kind: Kind
    why: str = ""      # mapped: what it becomes; inert: why it has no effect here
    go_type: GoType = "string"   # mapped and inert flags: how upstream parses the value


def _impl(name: str, origin: str) -> UpstreamFlag:
    return UpstreamFlag(name, origin, "implemented")


def _inert(name: str, origin: str, go_type: GoType, why: str) -> UpstreamFlag:
    return UpstreamFlag(name, origin, "inert", why, go_type)


_PROXY = ("the koord-runtime-proxy hook server is not built: runtime hooks are served to containerd / CRI-O over "
          "NRI (enable-nri-runtime-hook, runtime-hooks-nri-socket-path)")
_RUNTIME_API = ("the runtime's CRI socket is not used: containers are seen through NRI and the cgroup tree, and "
                "evictions go through the Eviction API (standalone: evict-standalone-kill)")
_TSDB = ("a Prometheus TSDB setting: the metric cache here is SQLite (tsdb-path, tsdb-retention-duration, "
         "tsdb-max-bytes, metric-cache-memory-window, metric-cache-flush-interval)")
_QOS_PERIOD = "every QoS strategy runs each reconcile-interval-seconds (upstream's default for this one is 1 s too)"
_KLOG_FILES = ("this agent logs to stderr only (collect logs from the container runtime); upstream ignores it too "
               "while -logtostderr=true, its default and the chart's value")
_NRI_BACKOFF = ("NRI reconnects back off from 0.5 s, doubling up to runtime-hooks-nri-backoff-cap, and retry "
                "forever; a runtime socket that appears is noticed at once")
_XPU = ("NVML's GPUs are reported only when the xpu-device-infos-dir files list no device, as upstream by default; "
        "leaving NVML's GPUs out even then is not implemented")
_UNUSED = "registered but read by nothing in upstream koordlet either"

UPSTREAM_FLAGS: tuple[UpstreamFlag, ...] = (
    # cmd/koordlet/options
    _impl("addr", OPTIONS_GO),
    _inert("enable-pprof", OPTIONS_GO, "bool", "Go's pprof profiler: there is no Go runtime to profile here"),
    _inert("pprof-addr", OPTIONS_GO, "string", "Go's pprof profiler: there is no Go runtime to profile here"),
    _impl("kube-api-qps", OPTIONS_GO),
    _impl("kube-api-burst", OPTIONS_GO),
    _impl("kubeconfig", CONTROLLER_RUNTIME),
    # pkg/koordlet/config
    _inert("configmap-name", CONFIG_GO, "string", _UNUSED),
    _inert("configmap-namespace", CONFIG_GO, "string", _UNUSED),
    _impl("feature-gates", CONFIG_GO),
    # util/system: host roots, runtime endpoints
    _impl("cgroup-root-dir", SYSTEM_GO),
    _impl("sys-root-dir", SYSTEM_GO),
    _impl("sys-fs-root-dir", SYSTEM_GO),
    _impl("proc-root-dir", SYSTEM_GO),
    _impl("var-run-root-dir", SYSTEM_GO),
    _impl("var-lib-kubelet-dir", SYSTEM_GO),
    _impl("run-root-dir", SYSTEM_GO),
    _inert("containerd-endpoint", SYSTEM_GO, "string", _RUNTIME_API),
    _inert("docker-endpoint", SYSTEM_GO, "string", _RUNTIME_API),
    _inert("pouch-endpoint", SYSTEM_GO, "string", _RUNTIME_API),
    _inert("default-runtime-type", SYSTEM_GO, "string",
           "it names the runtime behind koord-runtime-proxy requests; " + _PROXY),
    _impl("hami-core-library-directory-path", SYSTEM_GO),
    _impl("pod-resources-proxy-path", SYSTEM_GO),
    _impl("xpu-device-infos-dir", SYSTEM_GO),
    # statesinformer
    _inert("kubelet-preferred-address-type", INFORMER_GO, "string",
           "the kubelet is reached at kubelet-address (default 127.0.0.1: the DaemonSet runs with hostNetwork), "
           "not at an address picked from the Node's status"),
    _impl("kubelet-sync-interval", INFORMER_GO),
    _impl("kubelet-sync-timeout", INFORMER_GO),
    _impl("kubelet-insecure-tls", INFORMER_GO),
    _impl("kubelet-read-only-port", INFORMER_GO),
    _impl("node-topology-sync-interval", INFORMER_GO),
    _impl("disable-query-kubelet-config", INFORMER_GO),
    _inert("report-interval", INFORMER_GO, "duration",
           "deprecated upstream since v1.1 and " + _UNUSED + "; the NodeMetric report interval comes from the "
           "NodeMetric spec (slo-controller-config metricReportIntervalSeconds)"),
    _impl("enable-node-metric-report", INFORMER_GO),
    _inert("enable-pod-taskids", INFORMER_GO, "bool",
           "task ids are read from the cgroup tree by each strategy that needs them, every cycle"),
    _inert("xpu-enforce-collect-from-device-infos", INFORMER_GO, "bool", _XPU),
    # metricsadvisor
    _impl("collect-res-used-interval", ADVISOR_GO),
    _impl("collect-sys-metric-outdated-interval", ADVISOR_GO),
    _impl("collect-node-cpu-info-interval", ADVISOR_GO),
    _inert("collect-node-storage-info-interval", ADVISOR_GO, "duration",
           "block devices behind volumes are resolved from sysfs and mountinfo by the blkio strategy each time "
           "it runs (gate BlkIOReconcile); there is no separate storage info collector"),
    _impl("cpi-collector-interval", ADVISOR_GO),
    _impl("psi-collector-interval", ADVISOR_GO),
    _impl("collect-cpi-timewindow", ADVISOR_GO),
    _impl("coldpage-collector-interval", ADVISOR_GO),
    _impl("enable-pagecache-collector", ADVISOR_GO),
    _impl("enable-resctrl-collector", ADVISOR_GO),
    _impl("resctrl-collector-interval", ADVISOR_GO),
    # metriccache
    _inert("metric-gc-interval-seconds", CACHE_GO, "int", _UNUSED),
    _inert("metric-expire-seconds", CACHE_GO, "int", _UNUSED),
    _impl("tsdb-path", CACHE_GO),
    _impl("tsdb-retention-duration", CACHE_GO),
    _inert("tsdb-enable-prometheus-metric", CACHE_GO, "bool",
           "the Prometheus TSDB's own prometheus_tsdb_* metrics: " + _TSDB),
    _inert("tsdb-stripe-size", CACHE_GO, "int", _TSDB),
    _impl("tsdb-max-bytes", CACHE_GO),
    _inert("tsdb-wal-segment-size", CACHE_GO, "int", _TSDB),
    _inert("tsdb-max-block-chunk-segment-size", CACHE_GO, "int", _TSDB),
    _inert("tsdb-min-block-duration", CACHE_GO, "duration", _TSDB),
    _inert("tsdb-max-block-duration", CACHE_GO, "duration", _TSDB),
    _inert("tsdb-head-chunks-write-buffer-size", CACHE_GO, "int", _TSDB),
    # qosmanager
    _impl("reconcile-interval-seconds", QOS_GO),
    _inert("cpu-suppress-interval-seconds", QOS_GO, "int", _QOS_PERIOD),
    _inert("cpu-evict-interval-seconds", QOS_GO, "int", _QOS_PERIOD),
    _inert("memory-evict-interval-seconds", QOS_GO, "int", _QOS_PERIOD),
    _inert("memory-evict-cool-time-seconds", QOS_GO, "int",
           "the pause after a memory eviction is fixed at upstream's default, 4 s"),
    _inert("cpu-evict-cool-time-seconds", QOS_GO, "int",
           "the pause after a CPU eviction is fixed at upstream's default, 20 s"),
    _inert("only-evict-by-api", QOS_GO, "bool",
           "in a cluster evictions always go through the Eviction API (upstream's =true); upstream's default "
           "false kills the containers through the runtime's CRI instead. Standalone: evict-standalone-kill"),
    _inert("qos-extension-plugins", QOS_EXT_GO, "map",
           "there are no QoS extension plugins (upstream registers none either, and exits on any name given)"),
    # resourceexecutor
    _impl("resource-force-update-seconds", EXECUTOR_GO),
    # runtimehooks
    _inert("runtime-hooks-network", HOOKS_GO, "string", _PROXY),
    _inert("runtime-hooks-addr", HOOKS_GO, "string", _PROXY),
    _inert("runtime-hooks-failure-policy", HOOKS_GO, "string", _PROXY),
    _inert("runtime-hooks-plugin-failure-policy", HOOKS_GO, "string",
           "NRI hooks fail open one by one: a hook that fails or misses runtime-hooks-nri-hook-budget answers "
           "empty and the QoS reconciler applies its settings"),
    _inert("runtime-hooks-config-path", HOOKS_GO, "string", _PROXY),
    _inert("runtime-hooks-host-endpoint", HOOKS_GO, "string", _PROXY),
    _inert("runtime-hooks-nri-connect-timeout", HOOKS_GO, "duration",
           "the NRI registration timeout is fixed at upstream's default, 6 s (a bit over the runtime's 5 s)"),
    _inert("runtime-hooks-nri-backoff-duration", HOOKS_GO, "duration", _NRI_BACKOFF),
    _impl("runtime-hooks-nri-backoff-cap", HOOKS_GO),
    _inert("runtime-hooks-nri-backoff-steps", HOOKS_GO, "int", _NRI_BACKOFF),
    _inert("runtime-hooks-nri-backoff-factor", HOOKS_GO, "float", _NRI_BACKOFF),
    _impl("runtime-hooks-nri-socket-path", HOOKS_GO),
    _impl("runtime-hooks-nri-plugin-name", HOOKS_GO),
    _impl("runtime-hooks-nri-plugin-index", HOOKS_GO),
    _inert("runtime-hooks-disable-stages", HOOKS_GO, "slice",
           "every NRI stage the hooks implement is subscribed to; features are turned off by their gates"),
    _impl("enable-nri-runtime-hook", HOOKS_GO),
    _inert("runtime-hooks-reconcile-interval", HOOKS_GO, "duration",
           "running containers get the hooks' settings from the QoS reconciler every reconcile-interval-seconds"),
    _inert("disable-unset-cpu-quota", HOOKS_GO, "bool",
           "pods pinned to CPUs always get an unlimited cfs quota (upstream's default, =false): the rule the NRI "
           "hooks and the reconciler share has no switch"),
    # audit
    _impl("audit-log-dir", AUDIT_GO),
    _impl("audit-verbose", AUDIT_GO),
    _impl("audit-max-disk-space-mb", AUDIT_GO),
    _impl("audit-max-concurrent-readers", AUDIT_GO),
    _impl("audit-max-events-limit", AUDIT_GO),
    # prediction
    _impl("prediction-checkpoint-filepath", PREDICTION_GO),
    _impl("prediction-cold-start-duration", PREDICTION_GO),
    _impl("prediction-safety-margin-percent", PREDICTION_GO),
    _impl("prediction-memory-histogram-decay-halflife", PREDICTION_GO),
    _impl("prediction-cpu-histogram-decay-halflife", PREDICTION_GO),
    _impl("prediction-training-interval", PREDICTION_GO),
    _impl("prediction-model-expiration-duration", PREDICTION_GO),
    _impl("prediction-model-checkpoint-interval", PREDICTION_GO),
    _impl("prediction-model-checkpoint-max-per-step", PREDICTION_GO),
    # klog (klog.InitFlags(nil) in cmd/koordlet/main.go)
    UpstreamFlag("v", KLOG, "mapped", "log-level: debug for -v=4 and above, info below (also spelled -v)",
                 "level"),
    UpstreamFlag("logtostderr", KLOG, "mapped",
                 "true: this agent's logging, always to stderr; false (log files) is not honoured", "bool"),
    _inert("alsologtostderr", KLOG, "bool", _KLOG_FILES),
    _inert("log_dir", KLOG, "string", _KLOG_FILES),
    _inert("log_file", KLOG, "string", _KLOG_FILES),
    _inert("log_file_max_size", KLOG, "uint", _KLOG_FILES),
    _inert("one_output", KLOG, "bool", _KLOG_FILES),
    _inert("skip_log_headers", KLOG, "bool", _KLOG_FILES),
    _inert("stderrthreshold", KLOG, "severity",
           "every log line at or above log-level goes to stderr; upstream ignores it too while -logtostderr=true"),
    _inert("vmodule", KLOG, "vmodule", "per-Go-source-file verbosity: there are no Go files here; use log-level"),
    _inert("skip_headers", KLOG, "bool", "log lines always carry their time, level and logger"),
    _inert("add_dir_header", KLOG, "bool", "log lines name the Python logger, not a source file"),
    _inert("log_backtrace_at", KLOG, "trace", "Go source lines: there are none here"),
)
UPSTREAM_BY_NAME = {f.name: f for f in UPSTREAM_FLAGS}
# registered by add_upstream_flags: the rest are options (a row not yet turned into "implemented" after its option
# was added is skipped here rather than registered twice; check_table reports it)
COMPAT_FLAGS = tuple(f for f in UPSTREAM_FLAGS if f.kind != "implemented" and f.name not in OPTIONS_BY_NAME)


# --------------------------------------------------------------------------------------------------
# Go's value parsers (strconv / time / klog), for the flags that are not options here
# --------------------------------------------------------------------------------------------------

def _go_int(raw: str) -> int:
    """strconv.ParseInt(s, 0, 64): decimal, or 0x / 0o / 0b prefixed, underscores between digits."""
    text = raw.strip()
    try:
        return int(text, 0)
    except ValueError:
        try:
            return int(text, 10)          # "010": Go reads octal; the value only has to be a number here
        except ValueError:
            raise ValueError(f"invalid integer {raw!r}") from None


def _go_uint(raw: str) -> int:
    value = _go_int(raw)
    if value < 0:
        raise ValueError(f"invalid unsigned integer {raw!r}")
    return value


def _go_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ValueError(f"invalid number {raw!r}") from None


def _go_map(raw: str) -> dict[str, bool]:
    """component-base MapStringBool: ``k=bool,...``."""
    pairs: dict[str, bool] = {}
    for part in raw.split(","):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError("malformed pair, expect string=bool")
        pairs[key.strip()] = parse_bool(value.strip())
    return pairs


_SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")


def _klog_severity(raw: str) -> str:
    if raw.strip().upper() in _SEVERITIES:
        return raw
    _go_int(raw)
    return raw


_VMODULE_RE = re.compile(r"[^=,]+=-?\d+")


def _klog_vmodule(raw: str) -> str:
    for part in raw.split(","):
        if part and not _VMODULE_RE.fullmatch(part):
            raise ValueError("syntax error: expect comma-separated list of filename=N")
    return raw


def _klog_trace(raw: str) -> str:
    if raw:
        file, sep, line = raw.partition(":")
        if not sep or ":" in line or not file:
            raise ValueError("syntax error: expect file.go:234")
        _go_int(line)
    return raw


def _check_empty_map(raw: str) -> str:
    named = _go_map(raw)
    if named:
        raise ValueError(f"unrecognized QoS extension plugin(s) {', '.join(sorted(named))}: none exists here, "
                         f"and upstream registers none either (it exits on any name)")
    return raw


_VALIDATE: dict[GoType, Callable[[str], object]] = {
    "string": str, "bool": parse_bool, "int": _go_int, "uint": _go_uint, "float": _go_float,
    "duration": parse_duration, "map": _go_map, "slice": str, "level": _go_int, "severity": _klog_severity,
    "vmodule": _klog_vmodule, "trace": _klog_trace,
}
_SPECIAL_CHECKS: dict[str, Callable[[str], object]] = {"qos-extension-plugins": _check_empty_map}


# --------------------------------------------------------------------------------------------------
# argparse
# --------------------------------------------------------------------------------------------------

def _dest(name: str) -> str:
    return "upstream_" + name.replace("-", "_")


def add_upstream_flags(parser: argparse.ArgumentParser) -> None:
    """Register upstream's flags that are not options here, in their own help group, with Go's syntax."""
    group = parser.add_argument_group(
        "upstream compatibility",
        "Upstream koordlet flags that are not options of this agent, accepted so that an upstream DaemonSet's "
        "args work unchanged (upstream flags that are options here are listed above under the same names). "
        "Each one given logs one line at start-up: mapped ones say what they became, inert ones why they have "
        "no effect here. The table: koordlet/ops/compat.py.")
    for flag in COMPAT_FLAGS:
        extra: dict[str, Any] = {}
        if flag.go_type == "bool":
            extra = {"nargs": "?", "const": "true"}
        elif flag.go_type in ("map", "slice"):
            extra = {"action": "append"}              # Go's MapStringBool / StringSlice add up over repeats
        # "-v" would be an argparse short option (and "-vmodule" a "-v" with value "module"): only "--v" is
        # registered, normalize_argv rewrites Go's "-v"
        names = [f"--{flag.name}"] if len(flag.name) == 1 else [f"--{flag.name}", f"-{flag.name}"]
        group.add_argument(*names, dest=_dest(flag.name), default=None, metavar="V",
                           help=f"[{flag.kind}] {flag.why}", **extra)


_ONE_LETTER = frozenset(f.name for f in COMPAT_FLAGS if len(f.name) == 1)


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Go's single-dash spelling of one-letter flags (klog's ``-v``, ``-v=4``) as argparse's ``--v``."""
    out: list[str] = []
    rest = False
    for arg in argv:
        if arg == "--":
            rest = True
        elif not rest and len(arg) >= 2 and arg[0] == "-" and arg[1] in _ONE_LETTER and arg[2:3] in ("", "="):
            arg = "-" + arg
        out.append(arg)
    return out


# --------------------------------------------------------------------------------------------------
# what the given flags mean here
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Note:
    level: int          # logging.INFO: mapped and honoured; logging.WARNING: inert, or mapped but not honoured
    flag: str
    text: str


@dataclass(frozen=True)
class Resolved:
    options: dict[str, Any]     # option name -> raw value, for the command-line layer of config.build
    notes: tuple[Note, ...]     # one per mapped or inert flag given, in table order


def _given(args: argparse.Namespace) -> list[tuple[UpstreamFlag, str]]:
    given: list[tuple[UpstreamFlag, str]] = []
    for flag in COMPAT_FLAGS:
        raw = getattr(args, _dest(flag.name), None)
        if raw is None:
            continue
        value = ",".join(raw) if isinstance(raw, list) else str(raw)
        try:
            _VALIDATE[flag.go_type](value)
            if flag.name in _SPECIAL_CHECKS:
                _SPECIAL_CHECKS[flag.name](value)
        except ValueError as e:
            raise ConfigError(f"command line: -{flag.name}: {e}") from None
        given.append((flag, value))
    return given


def resolve(args: argparse.Namespace, explicit: Mapping[str, Any]) -> Resolved:
    """The option values the mapped flags stand for (an option given by its own name wins) and one note per
    mapped or inert flag given. ``explicit``: the options given on the command line by their own names."""
    options: dict[str, Any] = {}
    notes: list[Note] = []
    for flag, value in _given(args):
        shown = f"-{flag.name}={value}"
        if flag.kind == "inert":
            notes.append(Note(logging.WARNING, flag.name, f"upstream flag {shown} accepted, no effect here: "
                                                          f"{flag.why}"))
        elif flag.name == "v":
            level = "debug" if _go_int(value) >= 4 else "info"
            if "log-level" in explicit:
                notes.append(Note(logging.WARNING, flag.name, f"upstream flag {shown} not applied: "
                                                              f"--log-level={explicit['log-level']} given"))
            else:
                options["log-level"] = level
                notes.append(Note(logging.INFO, flag.name, f"upstream flag {shown} mapped to log-level={level}"))
        elif flag.name == "logtostderr":
            if parse_bool(value):
                notes.append(Note(logging.INFO, flag.name, f"upstream flag {shown} mapped: this agent logs to "
                                                           f"stderr"))
            else:
                notes.append(Note(logging.WARNING, flag.name, f"upstream flag {shown} not honoured: this agent "
                                                              f"logs to stderr only, never to files"))
        else:                                               # a mapped flag without a mapping: a bug in the table
            raise AssertionError(f"mapped upstream flag {flag.name} has no mapping")
    return Resolved(options, tuple(notes))


# --------------------------------------------------------------------------------------------------
# feature gates that are on but change nothing here
# --------------------------------------------------------------------------------------------------

def gate_notes(config: Config) -> tuple[Note, ...]:
    """One start-up line for each gate that is on but has no effect with this configuration, and why, so that no
    gate is silently inert (upstream's DaemonSet turns every alpha gate on with ``AllAlpha=true``: a warning, not a
    refusal). Every one of upstream's gates is implemented; these are the combinations where one does nothing:

    - ``Libpfm4``: the CPI collector always counts as upstream's libpfm4 path does (cycles and instructions as one
      perf group per CPU, the group read scaled for multiplexing; libpfm4's ``cycles`` / ``instructions`` are the
      kernel's generic hardware events), so the gate selects nothing more; without ``CPICollector`` nothing counts
      at all, as upstream.
    - ``ResctrlCollector`` and the option ``enable-resctrl-collector``: upstream runs the collector only with both.
    - ``HamiCoreVGPUMonitor`` without ``GPUEnvInject``: no container gets HAMi-core, so there is no region to read.
    - ``AuditEventsHTTPHandler`` without ``AuditEvents``: upstream's /events then answers with no events; here it
      serves the in-memory trail of the latest kernel writes instead (an INFO line).
    - ``NodeMetricPromMetrics`` without ``enable-node-metric-report``: there is no NodeMetric report to mirror.
    - the option ``evict-by-copilot-agent`` without any of the gates that ask the copilot (BECPUEvict, CPUEvict,
      BEMemoryEvict, MemoryEvict): nothing is evicted through it (the YARN containers are still discovered).
    """
    notes: list[Note] = []

    def warn(gate: str, text: str) -> None:
        notes.append(Note(logging.WARNING, gate, f"feature gate {gate} has no effect here: {text}"))

    if config.gate("Libpfm4"):
        warn("Libpfm4", "the CPI collector always counts cycles and instructions as upstream's libpfm4 path does "
             "(one perf group per CPU, cycles leading, scaled for multiplexing; libpfm4's cycles/instructions are "
             "the kernel's generic hardware events)" + ("" if config.gate("CPICollector") else
                                                        ", and CPICollector is off, so nothing is counted"))
    if config.gate("ResctrlCollector") and not config.enable_resctrl_collector:
        warn("ResctrlCollector", "-enable-resctrl-collector is false; upstream runs the resctrl monitoring "
             "collector only with both")
    if config.enable_resctrl_collector and not config.gate("ResctrlCollector"):
        notes.append(Note(logging.WARNING, "enable-resctrl-collector", "option enable-resctrl-collector has no "
                          "effect: feature gate ResctrlCollector is off (upstream needs both)"))
    if config.gate("HamiCoreVGPUMonitor") and not config.gate("GPUEnvInject"):
        warn("HamiCoreVGPUMonitor", "GPUEnvInject is off, so no container gets HAMi-core and no vGPU region exists "
             "to read")
    if config.gate("AuditEventsHTTPHandler") and not config.gate("AuditEvents"):
        notes.append(Note(logging.INFO, "AuditEventsHTTPHandler", "feature gate AuditEventsHTTPHandler without "
                          "AuditEvents: /events serves the in-memory trail of the latest kernel writes in "
                          "upstream's format (upstream answers with no events without its audit log)"))
    if config.gate("NodeMetricPromMetrics") and not config.enable_node_metric_report:
        warn("NodeMetricPromMetrics", "-enable-node-metric-report is false, so there is no NodeMetric report to "
             "mirror")
    if config.evict_by_copilot_agent and not any(config.gate(g) for g in COPILOT_EVICT_GATES):
        notes.append(Note(logging.WARNING, "evict-by-copilot-agent", "option evict-by-copilot-agent evicts nothing: "
                          f"none of {', '.join(COPILOT_EVICT_GATES)} is on (the YARN containers are still discovered "
                          "and managed)"))
    return tuple(notes)


def announce(notes: Sequence[Note], logger: logging.Logger | None = None) -> None:
    """One log line per mapped or inert upstream flag given."""
    out = logger or logging.getLogger(__name__)
    for note in notes:
        out.log(note.level, "%s", note.text)


def check_table() -> list[str]:
    """Problems in the table: implemented flags that are not options here, options listed as not implemented,
    duplicates. Empty when consistent (a unit test asserts it)."""
    problems = []
    seen: set[str] = set()
    for flag in UPSTREAM_FLAGS:
        if flag.name in seen:
            problems.append(f"{flag.name}: listed twice")
        seen.add(flag.name)
        if (flag.kind == "implemented") != (flag.name in OPTIONS_BY_NAME):
            problems.append(f"{flag.name}: kind {flag.kind} but {'' if flag.name in OPTIONS_BY_NAME else 'not '}"
                            f"an option of this agent")
        if flag.kind != "implemented" and not flag.why:
            problems.append(f"{flag.name}: {flag.kind} without a reason")
    return problems
