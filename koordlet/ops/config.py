"""One frozen configuration object built from defaults < profile < YAML file < environment < flags.

Every option has exactly one name, spelled like the upstream koordlet flag where one exists
(``cgroup-root-dir``, ``collect-res-used-interval``, ...). The same spelling is used as a YAML key,
as a command-line flag (``--name`` or the Go-style ``-name``) and, upper-cased with ``_`` and a
``KOORDLET_`` prefix, as an environment variable. Two upstream environment variables are honoured too:
``NODE_NAME`` and ``agent_mode=hostMode``. Upstream's flags that are not options here (klog's ``-v``, the
runtime-proxy and Prometheus-TSDB flags, ...) are accepted on the command line too: :mod:`koordlet.ops.compat`
has the table of every upstream flag and what each does here, so an upstream DaemonSet's args work unchanged.

Bad input is refused at start-up with a :class:`ConfigError` that names the key and the problem; the CLI
turns it into exit code 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import posixpath
import pwd
import re
import socket
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.base.yamlfile import load_yaml

ENV_PREFIX = "KOORDLET_"


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the key and where it came from."""


# --------------------------------------------------------------------------------------------------
# value parsers: each takes the raw value (str from flags/env, any YAML scalar) and returns the typed value
# --------------------------------------------------------------------------------------------------

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(raw: Any) -> float:
    """Go-style durations ("1s", "1m30s", "12h") or plain numbers of seconds; returns seconds."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a duration, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        text = str(raw).strip()
        try:
            value = float(text)
        except ValueError:
            pos, value = 0, 0.0
            for m in _DURATION_RE.finditer(text):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise ValueError(f"expected a duration like 1s, 10m or 12h, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"duration must not be negative, got {raw!r}")
    return value


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3,
               "ki": 1024, "mi": 1024**2, "gi": 1024**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(raw: Any) -> int:
    """Byte sizes: plain integers or quantities like 100Mi / 1Gi / 512MiB."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a size, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(raw))
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"expected a size like 104857600 or 100Mi, got {raw!r}")
        value = int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"size must be positive, got {raw!r}")
    return value


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "t", "true", "yes", "on"):
        return True
    if text in ("0", "f", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected an integer, got {raw!r}")
    try:
        return int(str(raw).strip(), 10)
    except ValueError:
        raise ValueError(f"expected an integer, got {raw!r}") from None


def parse_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"expected a number, got {raw!r}")
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {raw!r}")
    return value


def parse_non_negative_int(raw: Any) -> int:
    value = parse_int(raw)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {raw!r}")
    return value


def parse_positive_int(raw: Any) -> int:
    value = parse_int(raw)
    if value <= 0:
        raise ValueError(f"expected an integer > 0, got {raw!r}")
    return value


def parse_positive_duration(raw: Any) -> float:
    value = parse_duration(raw)
    if value <= 0:
        raise ValueError(f"expected a duration above 0, got {raw!r}")
    return value


def parse_port(raw: Any) -> int:
    port = parse_int(raw)
    if not 0 < port < 65536:
        raise ValueError(f"expected a TCP port 1-65535, got {raw!r}")
    return port


def parse_str(raw: Any) -> str:
    if isinstance(raw, (dict, list)):
        raise ValueError(f"expected a string, got {type(raw).__name__}")
    return "" if raw is None else str(raw)


def parse_path(raw: Any) -> str:
    """Paths must be absolute or explicitly relative and must not climb with '..' (rule: no escape)."""
    text = parse_str(raw)
    if text and ".." in text.split("/"):
        raise ValueError(f"path must not contain '..', got {text!r}")
    return text


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = parse_str(raw)
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return text
    parse.__name__ = "choice"
    return parse


def parse_addr(raw: Any) -> tuple[str, int]:
    """``host:port``, ``[ipv6]:port`` or ``:port``, read as Go's ``net.SplitHostPort`` reads upstream's ``-addr``:
    an IPv6 literal needs its brackets (``[::1]:9316``; ``::1:9316`` is ambiguous and refused, as Go refuses it).
    ``:port`` and ``[::]:port`` listen on every interface, IPv4 and IPv6 (koordlet.ops.server)."""
    text = parse_str(raw).strip()
    if text.startswith("["):
        host, close, port = text[1:].partition("]")
        if not close or not port.startswith(":"):
            raise ValueError(f"expected [ipv6]:port, got {raw!r}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in {raw!r} is not an IPv6 address") from None
        return host, parse_port(port[1:])
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected host:port, [ipv6]:port or :port, got {raw!r}")
    if ":" in host:
        raise ValueError(f"an IPv6 address needs brackets, [{host}]:{port}; got {raw!r}")
    return host, parse_port(port)


# Upstream's koordlet feature gates with their stage and default: pkg/features/koordlet_features.go plus the
# runtime-hook gates pkg/koordlet/runtimehooks/config.go adds to the same gate set (GroupIdentity ... OOMScoreAdj).
# Every beta gate defaults on, every alpha gate off; upstream has no GA or deprecated koordlet gate. An unknown
# gate is refused, as upstream's SetFromMap refuses it ("unrecognized feature gate").
BETA_GATES = ("BECPUSuppress", "CPUBurst", "RdtResctrl", "NodeTopologyReport", "GroupIdentity",
              "CPUSetAllocator", "BatchResource")
ALPHA_GATES = ("AuditEvents", "AuditEventsHTTPHandler", "BECPUManager", "BECPUEvict", "BEMemoryEvict",
               "CPUEvict", "MemoryEvict", "CPUAllocatableEvict", "MemoryAllocatableEvict", "SystemConfig",
               "ResctrlCollector", "CgroupReconcile", "Accelerators", "RDMADevices", "CPICollector", "Libpfm4",
               "PSICollector", "BlkIOReconcile", "ColdPageCollector", "HugePageReport", "PodResourcesProxy",
               "HamiCoreVGPUMonitor", "PerCPUMetric", "NodeMetricPromMetrics", "GPUEnvInject",
               "RDMADeviceInject", "CPUNormalization", "CoreSched", "TerwayQoS", "TCNetworkQoS", "Resctrl",
               "OOMScoreAdj")
DEFAULT_GATES: dict[str, bool] = {**dict.fromkeys(BETA_GATES, True), **dict.fromkeys(ALPHA_GATES, False)}
# component-base's special gates: each sets every gate of its stage that is not set explicitly
BULK_GATES: dict[str, tuple[str, ...]] = {"AllAlpha": ALPHA_GATES, "AllBeta": BETA_GATES}


def parse_gates(raw: Any) -> dict[str, bool]:
    """``A=true,B=false`` (flag/env form, as component-base's MapStringBool: pairs split on ``,``, names and
    values trimmed, a repeated name keeps its last value) or a YAML mapping. ``AllAlpha``/``AllBeta`` stay in the
    result as they are: :func:`resolve_gates` applies them, after every layer is merged."""
    if isinstance(raw, Mapping):
        items = [(str(k).strip(), v) for k, v in raw.items()]
    else:
        items = []
        for part in parse_str(raw).split(","):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"feature gate {part.strip()!r} needs =true or =false")
            items.append((name.strip(), value))
    gates: dict[str, bool] = {}
    for name, value in items:
        try:
            enabled = parse_bool(value)
        except ValueError as e:
            raise ValueError(f"feature gate {name}: {e}") from None
        if name not in DEFAULT_GATES and name not in BULK_GATES:
            raise ValueError(f"unknown feature gate {name!r} (unrecognized upstream too; known: "
                             f"{', '.join(sorted(DEFAULT_GATES))}, AllAlpha, AllBeta)")
        gates[name] = enabled
    return gates


def resolve_gates(settings: Mapping[str, bool]) -> dict[str, bool]:
    """The gates an operator set, with ``AllAlpha``/``AllBeta`` expanded as upstream (component-base
    featuregate ``SetFromMap``): a gate set by name keeps its value whatever the bulk setting and wherever it
    stands in the list; ``AllAlpha=X`` sets every alpha gate not named to X, ``AllBeta=X`` every beta gate not
    named. Gates left unset are absent (their default applies, :meth:`Config.gate`)."""
    gates = {name: on for name, on in settings.items() if name not in BULK_GATES}
    for bulk, members in BULK_GATES.items():
        if bulk in settings:
            for name in members:
                gates.setdefault(name, settings[bulk])
    return gates


def go_join(*parts: str) -> str:
    """Go's ``filepath.Join``: the non-empty parts joined with ``/`` and cleaned, so an absolute part does not
    restart the path (``go_join("/host-var-run/", "/run/x.sock") == "/host-var-run/run/x.sock"``)."""
    joined = "/".join(p for p in parts if p)
    if not joined:
        return ""
    clean = posixpath.normpath(joined)
    return "/" + clean.lstrip("/") if clean.startswith("//") else clean


# --------------------------------------------------------------------------------------------------
# the options
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    name: str                      # wire spelling: flag / YAML key
    parse: Callable[[Any], Any]
    default: Any
    help: str

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.replace("-", "_").upper()


# Root directories default to None here: they are resolved from agent-mode (DaemonSet: /host-*, host: real paths).
OPTIONS: tuple[Option, ...] = (
    Option("node-name", parse_str, "", "node name (env NODE_NAME); defaults to the hostname in standalone mode"),
    Option("agent-mode", choice("auto", "daemonset", "host"), "auto",
           "daemonset: host dirs mounted under /host-*; host: real paths; auto: daemonset if /host-sys exists"),
    Option("standalone", parse_bool, False, "run without a cluster: pods from the cgroup tree and pods-file"),
    Option("cgroup-root-dir", parse_path, None, "cgroup root"),
    Option("sys-root-dir", parse_path, None, "sysfs root"),
    Option("sys-fs-root-dir", parse_path, None, "sys/fs root, resctrl lives here"),
    Option("proc-root-dir", parse_path, "/proc/", "procfs root (hostPID is assumed)"),
    Option("var-run-root-dir", parse_path, None, "host /var/run"),
    Option("run-root-dir", parse_path, None, "host /run"),
    Option("terway-qos-dir", parse_path, None, "where terway-qos reads its config (netQOSPolicy terway-qos)"),
    Option("var-lib-kubelet-dir", parse_path, "/var/lib/kubelet/", "kubelet state dir"),
    Option("cgroup-driver", choice("auto", "cgroupfs", "systemd"), "auto", "naming of the kubepods cgroup tree"),
    Option("pod-source", choice("auto", "kubelet", "apiserver", "standalone"), "auto",
           "where pods come from; auto: standalone when --standalone, else kubelet"),
    Option("pods-file", parse_path, "", "standalone: optional YAML list of Pod objects (metadata for cgroup pods)"),
    Option("kubeconfig", parse_path, "", "kubeconfig for the API server; none: the in-cluster config"),
    Option("kube-api-qps", parse_float, 20.0, "client-side rate limit of API server requests (per second)"),
    Option("kube-api-burst", parse_int, 30, "burst of the API server request rate limit"),
    Option("kubelet-address", parse_str, "127.0.0.1", "kubelet address (the DaemonSet runs with hostNetwork)"),
    Option("kubelet-port", parse_port, 10250, "kubelet HTTPS port"),
    Option("kubelet-read-only-port", parse_port, 10255, "kubelet read-only HTTP port (with kubelet-insecure-tls)"),
    Option("kubelet-insecure-tls", parse_bool, False, "use plain HTTP on the read-only port"),
    Option("kubelet-token-file", parse_path, "/var/run/secrets/kubernetes.io/serviceaccount/token",
           "bearer token for the kubelet HTTPS port"),
    Option("kubelet-sync-interval", parse_duration, 10.0, "period of the full pod re-sync"),
    Option("kubelet-sync-timeout", parse_duration, 3.0, "timeout of one pod list request"),
    Option("collect-res-used-interval", parse_duration, 1.0, "usage collection period (<1s disables collection)"),
    Option("collect-sys-metric-outdated-interval", parse_duration, 10.0,
           "system usage is computed only from inputs newer than this"),
    Option("collect-node-cpu-info-interval", parse_positive_duration, 60.0,
           "period of the host topology re-read (CPUs, NUMA nodes, RDMA NICs), upstream's node info collector"),
    Option("cpi-collector-interval", parse_duration, 60.0, "CPI collection period (gate CPICollector)"),
    Option("collect-cpi-timewindow", parse_duration, 10.0, "how long the CPI counters count in each period"),
    Option("psi-collector-interval", parse_duration, 10.0, "PSI collection period (gate PSICollector)"),
    Option("coldpage-collector-interval", parse_duration, 5.0, "cold memory (kidled) collection period "
           "(gate ColdPageCollector)"),
    Option("enable-pagecache-collector", parse_bool, False, "collect memory usage with page cache (needed by "
           "nodeMemoryCollectPolicy usageWithPageCache)"),
    Option("enable-resctrl-collector", parse_bool, False, "collect the resctrl class groups' LLC occupancy and memory "
           "bandwidth (mon_data); needs gate ResctrlCollector too, as upstream"),
    Option("resctrl-collector-interval", parse_positive_duration, 10.0, "resctrl monitoring collection period"),
    Option("tsdb-path", parse_path, "/metric-data/", "metric cache directory (sqlite file inside)"),
    Option("tsdb-retention-duration", parse_duration, 12 * 3600.0, "metric cache retention on disk"),
    Option("tsdb-max-bytes", parse_size, 100 * 2**20, "metric cache size cap on disk"),
    Option("metric-cache-memory-window", parse_duration, 1800.0,
           "points kept in memory (the largest window reporters query); older points are read from disk"),
    Option("metric-cache-flush-interval", parse_duration, 10.0, "how often new points are written to disk"),
    Option("node-topology-sync-interval", parse_duration, 3.0,
           "period of the NodeResourceTopology report (0 disables it)"),
    Option("disable-query-kubelet-config", parse_bool, False,
           "do not read the kubelet /configz (CPU manager policy, topology policy)"),
    Option("enable-node-metric-report", parse_bool, True, "report NodeMetric status"),
    Option("nodeslo-file", parse_path, "", "standalone/host: NodeSLO (object, spec or slo-controller-config "
           "ConfigMap) from this YAML file, reloaded on change"),
    Option("prediction-checkpoint-filepath", parse_path, "/prediction-checkpoints",
           "directory of the peak predictor's checkpoint (a restart keeps the model)"),
    Option("prediction-cold-start-duration", parse_duration, 24 * 3600.0,
           "a pod younger than this is predicted from its request, not its history"),
    Option("prediction-safety-margin-percent", parse_non_negative_int, 10,
           "margin added above the predicted peak (percent)"),
    Option("prediction-memory-histogram-decay-halflife", parse_positive_duration, 24 * 3600.0,
           "half-life of the memory usage histograms' sample weights"),
    Option("prediction-cpu-histogram-decay-halflife", parse_positive_duration, 12 * 3600.0,
           "half-life of the CPU usage histograms' sample weights"),
    Option("prediction-training-interval", parse_positive_duration, 60.0, "period of the prediction model update"),
    Option("prediction-model-expiration-duration", parse_duration, 30 * 60.0,
           "a model not updated for this long (its pod is gone) is dropped"),
    Option("prediction-model-checkpoint-interval", parse_duration, 10 * 60.0,
           "a model is checkpointed at most this often"),
    Option("prediction-model-checkpoint-max-per-step", parse_non_negative_int, 12,
           "most models checkpointed per training step"),
    Option("gpu-partition-policy", choice("Prefer", "Honor", "none"), "Prefer",
           "Device label node.koordinator.sh/gpu-partition-policy with the GPU partition table derived from the "
           "NVLink/PCIe topology; none: publish neither (upstream's behaviour for NVIDIA GPUs)"),
    Option("reconcile-interval-seconds", parse_duration, 1.0,
           "QoS enforcement period (cpu qos, cpuset, suppress, burst, memory qos, evictions); 0 disables enforcement"),
    Option("resource-force-update-seconds", parse_duration, 60.0,
           "a cached cgroup/sysctl value is re-read from the kernel (and repaired) after this long"),
    Option("evict-standalone-kill", parse_bool, False,
           "standalone (no API server): kill the processes of a pod chosen for eviction; default: only log it"),
    Option("enable-nri-runtime-hook", parse_bool, True,
           "serve the NRI plugin to containerd/CRI-O (settings in place at container creation; needs root)"),
    Option("runtime-hooks-nri-socket-path", parse_path, "nri/nri.sock",
           "the runtime's NRI socket, joined under var-run-root-dir as upstream does, even when absolute "
           "(/run/x.sock with var-run-root-dir /host-var-run/ is /host-var-run/run/x.sock)"),
    Option("runtime-hooks-nri-plugin-name", parse_str, "koordlet_nri", "NRI plugin name ([A-Za-z0-9_.+-])"),
    Option("runtime-hooks-nri-plugin-index", parse_str, "00", "NRI plugin index, two digits (runtimes order "
           "plugins by it)"),
    Option("runtime-hooks-nri-hook-budget", parse_duration, 0.1,
           "an NRI hook not done within this answers empty (fail-open) and the reconciler applies the settings"),
    Option("runtime-hooks-nri-backoff-cap", parse_duration, 30.0,
           "longest wait between NRI reconnect attempts (a new runtime socket is noticed at once)"),
    Option("hami-core-library-directory-path", parse_path, "/usr/local/vgpu/libvgpu.so",
           "host path of HAMi-core's libvgpu.so (gate GPUEnvInject; despite the name, the file)"),
    Option("xpu-device-infos-dir", parse_path, "/var/run/koordlet/xpu-device-infos/",
           "device-info files of non-NVIDIA accelerators (koord-device-daemon), reported in the Device (gate "
           "Accelerators)"),
    Option("pod-resources-proxy-path", parse_path, "/var/run/koordlet/pod-resources",
           "directory of the PodResources proxy socket kubelet.sock (gate PodResourcesProxy; Multus mounts it at "
           "/var/lib/kubelet/pod-resources); the kubelet's own socket is read under var-lib-kubelet-dir"),
    Option("report-dir", parse_path, "", "standalone: write the NodeMetric, NRT and Device objects here "
           "as YAML each report interval"),
    Option("addr", parse_addr, ("", 9316), "HTTP listen address of /metrics, /healthz, /readyz and /events (that one "
           "for loopback clients only, unless gate AuditEventsHTTPHandler): host:port, [ipv6]:port, or :port and "
           "[::]:port for every IPv4 and IPv6 interface"),
    Option("audit-log-dir", parse_path, "/var/log/koordlet", "directory of the audit log audit.log and its rotated "
           "files (gate AuditEvents)"),
    Option("audit-verbose", parse_non_negative_int, 3, "audit events of a higher verbosity are not logged (0: all; "
           "kernel writes are 3, evictions 0)"),
    Option("audit-max-disk-space-mb", parse_positive_int, 16, "disk space of the audit log: files of 2 MiB, the "
           "oldest removed"),
    Option("audit-max-concurrent-readers", parse_positive_int, 4, "paging readers of /events kept at once (gate "
           "AuditEventsHTTPHandler)"),
    Option("audit-max-events-limit", parse_positive_int, 2048, "largest size of one /events page (gate "
           "AuditEventsHTTPHandler)"),
    Option("feature-gates", parse_gates, {}, "A=true,B=false (AllAlpha / AllBeta accepted)"),
    Option("log-level", choice("debug", "info", "warning", "error"), "info", "log verbosity"),
    Option("log-format", choice("text", "json"), "text", "text: <time> <LEVEL> <logger> <message key=value ...>; "
           "json: one object per line, with ts, level, logger, msg and the message's key=value fields as keys"),
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}

DS_ROOTS = {"cgroup-root-dir": "/host-cgroup/", "sys-root-dir": "/host-sys/", "sys-fs-root-dir": "/host-sys-fs/",
            "terway-qos-dir": "/host-var-lib/terway/qos/",
            "var-run-root-dir": "/host-var-run/", "run-root-dir": "/host-run/"}
HOST_ROOTS = {"cgroup-root-dir": "/sys/fs/cgroup/", "sys-root-dir": "/sys/", "sys-fs-root-dir": "/sys/fs/",
              "terway-qos-dir": "/var/lib/terway/qos/",
              "var-run-root-dir": "/var/run/", "run-root-dir": "/run/"}

# The embedded defaults of `koordlet run --standalone` (what `make run` uses): nothing outside this host is
# needed, metrics stay on loopback, the state lives in the state directory (below), devices are reported.
# agent-mode stays as detected: standalone says where pods come from, not where the host is; in a container with the
# DaemonSet's mounts (`kubectl exec ... koordlet report --once --standalone`) the host is under /host-*, and host mode
# there would read the container's own cgroups.
STANDALONE_PROFILE: dict[str, Any] = {"addr": "127.0.0.1:9316",
                                      # no cluster to stay compatible with: report the devices this host has
                                      "feature-gates": {"Accelerators": True, "RDMADevices": True}}

# Host mode keeps its state in one directory, never in the working directory (a unit's is "/"): these options,
# when no layer sets them, become subdirectories of state_directory(). The DaemonSet keeps upstream's defaults
# (/metric-data/, /prediction-checkpoints: paths inside the container that its volumes provide).
STATE_PATHS = {"tsdb-path": "metric-data", "prediction-checkpoint-filepath": "prediction-checkpoints"}
STANDALONE_STATE_PATHS = {"report-dir": "reports", "audit-log-dir": "audit"}   # the standalone sinks as well
SYSTEM_STATE_DIR = "/var/lib/koordlet"     # the unit's StateDirectory=koordlet


def state_directory(environ: Mapping[str, str], euid: int | None = None) -> str:
    """Where host mode keeps its state: ``$STATE_DIRECTORY`` (systemd sets it from the unit's ``StateDirectory=``;
    the first of a colon-separated list; ``make run`` sets ./var), else /var/lib/koordlet for root, else the
    user's XDG state directory (``$XDG_STATE_HOME/koordlet``, ``~/.local/state/koordlet``). Always absolute."""
    listed = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if listed:
        return os.path.abspath(listed)
    if (os.geteuid() if euid is None else euid) == 0:
        return SYSTEM_STATE_DIR
    xdg = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(xdg):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            home = pwd.getpwuid(os.getuid()).pw_dir
        xdg = os.path.join(home, ".local", "state")
    return os.path.join(xdg, "koordlet")


@dataclass(frozen=True)
class Config:
    node_name: str
    agent_mode: str
    standalone: bool
    cgroup_root_dir: str
    sys_root_dir: str
    sys_fs_root_dir: str
    proc_root_dir: str
    var_run_root_dir: str
    run_root_dir: str
    terway_qos_dir: str
    var_lib_kubelet_dir: str
    cgroup_driver: str
    pod_source: str
    pods_file: str
    kubeconfig: str
    kubelet_address: str
    kubelet_port: int
    kubelet_read_only_port: int
    kubelet_insecure_tls: bool
    kubelet_token_file: str
    kubelet_sync_interval: float
    kubelet_sync_timeout: float
    collect_res_used_interval: float
    collect_sys_metric_outdated_interval: float
    collect_node_cpu_info_interval: float
    cpi_collector_interval: float
    collect_cpi_timewindow: float
    psi_collector_interval: float
    coldpage_collector_interval: float
    enable_pagecache_collector: bool
    enable_resctrl_collector: bool
    resctrl_collector_interval: float
    tsdb_path: str
    tsdb_retention_duration: float
    tsdb_max_bytes: int
    metric_cache_memory_window: float
    metric_cache_flush_interval: float
    kube_api_qps: float
    kube_api_burst: int
    node_topology_sync_interval: float
    disable_query_kubelet_config: bool
    enable_node_metric_report: bool
    nodeslo_file: str
    prediction_checkpoint_filepath: str
    prediction_cold_start_duration: float
    prediction_safety_margin_percent: int
    prediction_memory_histogram_decay_halflife: float
    prediction_cpu_histogram_decay_halflife: float
    prediction_training_interval: float
    prediction_model_expiration_duration: float
    prediction_model_checkpoint_interval: float
    prediction_model_checkpoint_max_per_step: int
    gpu_partition_policy: str
    reconcile_interval_seconds: float
    resource_force_update_seconds: float
    evict_standalone_kill: bool
    enable_nri_runtime_hook: bool
    runtime_hooks_nri_socket_path: str
    runtime_hooks_nri_plugin_name: str
    runtime_hooks_nri_plugin_index: str
    runtime_hooks_nri_hook_budget: float
    runtime_hooks_nri_backoff_cap: float
    hami_core_library_directory_path: str
    xpu_device_infos_dir: str
    pod_resources_proxy_path: str
    report_dir: str
    addr: tuple[str, int]
    audit_log_dir: str
    audit_verbose: int
    audit_max_disk_space_mb: int
    audit_max_concurrent_readers: int
    audit_max_events_limit: int
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    log_level: str = "info"
    log_format: str = "text"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)  # option -> where its value came from

    def gate(self, name: str) -> bool:
        """Effective state of a feature gate (explicit setting, else upstream default)."""
        if name not in DEFAULT_GATES:
            raise KeyError(f"unknown feature gate {name!r}")
        return self.feature_gates.get(name, DEFAULT_GATES[name])


def _parse(option: Option, raw: Any, origin: str) -> Any:
    try:
        return option.parse(raw)
    except ValueError as e:
        raise ConfigError(f"{origin}: {option.name}: {e}") from None


def load_file(path: str) -> dict[str, Any]:
    """Read a YAML config file into {option-name: parsed value}; unknown keys are errors."""
    data = load_yaml(path, "config file", ConfigError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of option: value")
    values: dict[str, Any] = {}
    for key, raw in data.items():
        option = OPTIONS_BY_NAME.get(str(key).replace("_", "-"))
        if option is None:
            raise ConfigError(f"config file {path}: unknown key {key!r}")
        values[option.name] = _parse(option, raw, f"config file {path}")
    return values


def load_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Known KOORDLET_* variables plus upstream's NODE_NAME and agent_mode.

    Unknown KOORDLET_* variables are ignored on purpose: Kubernetes injects KOORDLET_SERVICE_HOST-style
    variables for any Service named koordlet, and refusing to start over them would be hostile.
    """
    values: dict[str, Any] = {}
    if environ.get("NODE_NAME"):
        values["node-name"] = environ["NODE_NAME"]
    if environ.get("agent_mode") == "hostMode":
        values["agent-mode"] = "host"
    for option in OPTIONS:
        if option.env in environ:
            values[option.name] = _parse(option, environ[option.env], f"environment {option.env}")
    return values


class ArgParser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing and exiting, so the CLI owns exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)     # "-node" must not silently mean "-node-name"
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"command line: {message}")


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a ``time.Duration`` (``12h0m0s`` shortened to ``12h``, ``1m30s``, ``100ms``), the
    spelling upstream's ``-help`` uses and ``parse_duration`` reads back."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{value:g}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value)


def _shown(option: Option, value: Any) -> str:
    if option.parse in (parse_duration, parse_positive_duration):
        return go_duration(float(value))
    if option.parse is parse_size and value % 2**20 == 0:
        return f"{value // 2**20}Mi"
    if option.parse is parse_addr:
        host, port = value
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={str(v).lower()}" for k, v in value.items())
    return "" if value is None else str(value)


def default_text(option: Option) -> str:
    """An option's default as ``--help`` shows it: the value in upstream's spelling, the DaemonSet / host root
    where agent-mode decides it, and what ``--standalone`` or host mode's state directory put there instead."""
    name = option.name
    if name in DS_ROOTS:
        parts = [f"{DS_ROOTS[name]} with agent-mode daemonset, {HOST_ROOTS[name]} in host mode"]
    else:
        parts = [_shown(option, option.default) or "none"]
    if name in STATE_PATHS:
        parts.append(f"host mode: <state dir>/{STATE_PATHS[name]}")
    if name in STANDALONE_STATE_PATHS:
        parts.append(f"--standalone: <state dir>/{STANDALONE_STATE_PATHS[name]}")
    if name in STANDALONE_PROFILE:
        parts.append(f"--standalone: {_shown(option, option.parse(STANDALONE_PROFILE[name]))}")
    return "; ".join(parts)


def add_flags(parser: argparse.ArgumentParser, names: Collection[str] | None = None) -> None:
    """Register the options (``names``, or all) as ``--name`` and Go-style ``-name`` (Go's flag syntax:
    ``-name=value``, ``-name value``, a boolean alone), each help line ending with its default; values stay raw
    strings until build(). A command registers only the options it reads (``koordlet doctor --help`` does not
    list the metric cache's); the config file and the environment may still set any option. ``feature-gates``
    may be given more than once: the lists merge, a later value of a gate winning, as upstream's MapStringBool
    flag does."""
    group = parser.add_argument_group(
        "agent options (also YAML keys and KOORDLET_* env vars)",
        "<state dir>: $STATE_DIRECTORY (the unit's StateDirectory=; `make run`: ./var), else /var/lib/koordlet as "
        "root, else ~/.local/state/koordlet.")
    for option in OPTIONS:
        if names is not None and option.name not in names:
            continue
        extra: dict[str, Any] = {"nargs": "?", "const": "true"} if option.parse is parse_bool else {}
        if option.parse is parse_gates:
            extra = {"action": "append"}
        text = f"{option.help} (default: {default_text(option)})".replace("%", "%%")
        group.add_argument(f"--{option.name}", f"-{option.name}", dest=f"opt_{option.attr}",
                           default=None, metavar="V", help=text, **extra)
    group.add_argument("--config", "-config", dest="config_file", default=None, help="YAML config file")


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw = getattr(args, f"opt_{option.attr}", None)
        if isinstance(raw, list):                 # an appended flag (feature-gates): one list, in order
            raw = ",".join(raw)
        if raw is not None:
            values[option.name] = _parse(option, raw, "command line")
    return values


def build(*, file: str | None = None, flags: Mapping[str, Any] | None = None,
          environ: Mapping[str, str] | None = None, require_node: bool = True,
          hostname: Callable[[], str] = socket.gethostname) -> Config:
    """Merge defaults < profile < file < env < flags into one frozen Config (flags already parsed).

    ``require_node=False`` (doctor, topology) falls back to the hostname instead of refusing to start.
    """
    environ = os.environ if environ is None else environ
    layers: list[tuple[str, dict[str, Any]]] = [("default", {o.name: o.default for o in OPTIONS})]
    file_values = load_file(file) if file else {}
    env_values = load_env(environ)
    flag_vals = dict(flags or {})
    standalone = any(layer.get("standalone") for layer in (file_values, env_values, flag_vals))
    if standalone:
        layers.append(("standalone profile", {k: _parse(OPTIONS_BY_NAME[k], v, "profile")
                                               for k, v in STANDALONE_PROFILE.items()} | {"standalone": True}))
    layers += [(f"file {file}", file_values), ("environment", env_values), ("command line", flag_vals)]

    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    gate_settings: dict[str, bool] = {}
    for origin, values in layers:
        for name, value in values.items():
            if name == "feature-gates":
                gate_settings.update(value)   # gates merge key by key across layers; AllAlpha/AllBeta too
            merged[name] = value
            sources[name] = origin
    # as upstream, a gate set by name (in any layer) wins over AllAlpha/AllBeta (from any layer)
    gates = resolve_gates(gate_settings)

    mode = merged["agent-mode"]
    if mode == "auto":
        mode = "daemonset" if os.path.isdir("/host-sys") else "host"
    if mode == "host":
        # the process's own environment, not ``environ`` (the configuration's): where the service manager put
        # our state is a fact about this process, like its uid
        state = state_directory(os.environ)
        for name, sub in (STATE_PATHS | (STANDALONE_STATE_PATHS if standalone else {})).items():
            if name in merged and sources.get(name) == "default":
                merged[name], sources[name] = os.path.join(state, sub), "state directory"
    roots = DS_ROOTS if mode == "daemonset" else HOST_ROOTS
    for name, default in roots.items():
        if merged[name] is None:
            merged[name] = default
    if not merged["node-name"]:
        if not standalone and require_node:
            raise ConfigError("node-name: required outside standalone mode (set NODE_NAME or --node-name; "
                              "without a cluster, use --standalone)")
        merged["node-name"] = hostname()
        sources["node-name"] = "hostname"
    if merged["pod-source"] == "auto":
        merged["pod-source"] = "standalone" if standalone else "kubelet"
    if merged["pods-file"] and merged["pod-source"] != "standalone":
        raise ConfigError("pods-file: only used with pod-source=standalone")
    interval = merged["collect-res-used-interval"]
    if 0 < interval < 0.1:
        raise ConfigError(f"collect-res-used-interval: {interval}s is below the 100ms floor")
    # upstream: filepath.Join(var-run-root-dir, runtime-hooks-nri-socket-path), absolute or not (an absolute
    # result, so that a relative var-run-root-dir means the same whoever joins it later)
    merged["runtime-hooks-nri-socket-path"] = os.path.abspath(
        go_join(merged["var-run-root-dir"], merged["runtime-hooks-nri-socket-path"]))

    kwargs = {OPTIONS_BY_NAME[name].attr: value for name, value in merged.items()}
    kwargs.update(agent_mode=mode, standalone=standalone, feature_gates=gates, sources=sources)
    return Config(**kwargs)

