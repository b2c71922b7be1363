"""The agent's options: one table of every option with its parser, default and help text.

Every option has exactly one name, spelled like the upstream koordlet flag where one exists
(``cgroup-root-dir``, ``collect-res-used-interval``, ...). The same spelling is used as a YAML key, as a
command-line flag (``--name`` or the Go-style ``-name``) and, upper-cased with ``_`` and a ``KOORDLET_`` prefix,
as an environment variable. :mod:`koordlet.ops.config` builds the configuration from this table;
:mod:`koordlet.ops.compat` maps upstream's flags onto it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from koordlet.ops.gates import parse_gates
from koordlet.ops.values import (
    choice,
    parse_addr,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_non_negative_int,
    parse_path,
    parse_port,
    parse_positive_duration,
    parse_positive_int,
    parse_size,
    parse_str,
)

ENV_PREFIX = "KOORDLET_"


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
    Option("evict-by-copilot-agent", parse_bool, False,
           "CPU and memory evictions that pick a YARN NodeManager pod ask the YARN Copilot agent to kill YARN "
           "containers instead (the pod goes only if that fails or frees too little); also discovers the YARN "
           "containers through it"),
    Option("evict-by-copilot-endpoint", parse_path, "",
           "the YARN Copilot agent's unix socket; set, the YARN containers are discovered through it and managed "
           "as containers of their NodeManager pod; empty: <var-run-root-dir>/yarn-copilot/yarn-copilot.sock "
           "with evict-by-copilot-agent, else no discovery"),
    Option("evict-by-copilot-pod-label-key", parse_str, "app.kubernetes.io/component",
           "label key of the YARN NodeManager pods"),
    Option("evict-by-copilot-pod-label-value", parse_str, "node-manager", "label value of the YARN NodeManager pods"),
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
