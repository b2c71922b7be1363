"""One frozen configuration object built from defaults < profile < YAML file < environment < flags.

The options are :mod:`koordlet.ops.options`' table (each named once: YAML key, ``--name`` / ``-name`` flag,
``KOORDLET_*`` environment variable), their values read by :mod:`koordlet.ops.values`' parsers, the feature gates
:mod:`koordlet.ops.gates`'. Two upstream environment variables are honoured too: ``NODE_NAME`` and
``agent_mode=hostMode``. Upstream's flags that are not options here (klog's ``-v``, the runtime-proxy and
Prometheus-TSDB flags, ...) are accepted on the command line too: :mod:`koordlet.ops.compat` has the table of
every upstream flag and what each does here, so an upstream DaemonSet's args work unchanged.

Bad input is refused at start-up with a :class:`ConfigError` that names the key and the problem; the CLI
turns it into exit code 2.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import pwd
import socket
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.base.yamlfile import load_yaml
from koordlet.ops.gates import DEFAULT_GATES, parse_gates, resolve_gates
from koordlet.ops.options import OPTIONS, OPTIONS_BY_NAME, Option
from koordlet.ops.values import go_duration, parse_addr, parse_bool, parse_duration, parse_positive_duration, parse_size


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message names the key and where it came from."""


def go_join(*parts: str) -> str:
    """Go's ``filepath.Join``: the non-empty parts joined with ``/`` and cleaned, so an absolute part does not
    restart the path (``go_join("/host-var-run/", "/run/x.sock") == "/host-var-run/run/x.sock"``)."""
    joined = "/".join(p for p in parts if p)
    if not joined:
        return ""
    clean = posixpath.normpath(joined)
    return "/" + clean.lstrip("/") if clean.startswith("//") else clean


# Where the root directories are by agent-mode (their options default to None): the DaemonSet's mounts, the host's.
DS_ROOTS = {"cgroup-root-dir": "/host-cgroup/", "sys-root-dir": "/host-sys/", "sys-fs-root-dir": "/host-sys-fs/",
            "terway-qos-dir": "/host-var-lib/terway/qos/",
            "var-run-root-dir": "/host-var-run/", "run-root-dir": "/host-run/"}
HOST_ROOTS = {"cgroup-root-dir": "/sys/fs/cgroup/", "sys-root-dir": "/sys/", "sys-fs-root-dir": "/sys/fs/",
              "terway-qos-dir": "/var/lib/terway/qos/",
              "var-run-root-dir": "/var/run/", "run-root-dir": "/run/"}

# The YARN Copilot agent's socket below var-run-root-dir when evict-by-copilot-agent names none (upstream's default,
# and the copilot's own default server-endpoint /var/run/yarn-copilot/yarn-copilot.sock)
COPILOT_SOCKET = "yarn-copilot/yarn-copilot.sock"

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
    evict_by_copilot_agent: bool
    evict_by_copilot_endpoint: str
    evict_by_copilot_pod_label_key: str
    evict_by_copilot_pod_label_value: str
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

    if merged["evict-by-copilot-agent"] and not merged["evict-by-copilot-endpoint"]:
        # upstream: Conf.VarRunRootDir + "/yarn-copilot/yarn-copilot.sock", where the copilot serves by default
        merged["evict-by-copilot-endpoint"] = os.path.abspath(go_join(merged["var-run-root-dir"], COPILOT_SOCKET))
        sources["evict-by-copilot-endpoint"] = "var-run-root-dir"

    kwargs = {OPTIONS_BY_NAME[name].attr: value for name, value in merged.items()}
    kwargs.update(agent_mode=mode, standalone=standalone, feature_gates=gates, sources=sources)
    return Config(**kwargs)

