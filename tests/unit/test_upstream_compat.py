"""Upstream koordlet's command line and feature gates, as an unchanged upstream DaemonSet passes them.

The facts below are upstream's, read from its sources (koordinator-sh/koordinator v1.5.0 to v1.8.0 and main; the
charts in koordinator-sh/charts): every flag the Go koordlet registers with its default as Go prints it, the
gate table with stage and default, and the DaemonSet args of the helm chart and of config/manager/koordlet.yaml.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path

import pytest

from koordlet.agent import Agent
from koordlet.cli import _argv, _config, _parser, main
from koordlet.host.cgroup import CgroupVersion, Driver
from koordlet.ops import compat
from koordlet.ops.config import Config, ConfigError, build, go_join
from koordlet.ops.gates import ALPHA_GATES, BETA_GATES, DEFAULT_GATES, parse_gates, resolve_gates
from tests.fakehost import FakeHost

REPO = Path(__file__).resolve().parents[2]

# Every flag of upstream koordlet (98), with its default as `koordlet -help` prints it: cmd/koordlet/options,
# controller-runtime's kubeconfig, pkg/koordlet/config/config.go and the InitFlags it calls.
UPSTREAM_KOORDLET_FLAGS = {
    # cmd/koordlet/options/options.go
    "addr": ":9316", "enable-pprof": "false", "pprof-addr": ":9317", "kube-api-qps": "20", "kube-api-burst": "30",
    # sigs.k8s.io/controller-runtime/pkg/client/config
    "kubeconfig": "",
    # pkg/koordlet/config/config.go
    "configmap-name": "koordlet-config", "configmap-namespace": "koordinator-system", "feature-gates": "",
    # pkg/koordlet/util/system/config.go (DaemonSet mode)
    "cgroup-root-dir": "/host-cgroup/", "sys-root-dir": "/host-sys/", "sys-fs-root-dir": "/host-sys-fs/",
    "proc-root-dir": "/proc/", "var-run-root-dir": "/host-var-run/", "var-lib-kubelet-dir": "/var/lib/kubelet/",
    "run-root-dir": "/host-run/", "containerd-endpoint": "", "docker-endpoint": "", "pouch-endpoint": "",
    "default-runtime-type": "containerd", "hami-core-library-directory-path": "/usr/local/vgpu/libvgpu.so",
    "pod-resources-proxy-path": "/var/run/koordlet/pod-resources",
    "xpu-device-infos-dir": "/var/run/koordlet/xpu-device-infos/",
    # pkg/koordlet/statesinformer/impl/config.go
    "kubelet-preferred-address-type": "InternalIP", "kubelet-sync-interval": "10s", "kubelet-sync-timeout": "3s",
    "kubelet-insecure-tls": "false", "kubelet-read-only-port": "10255", "node-topology-sync-interval": "3s",
    "disable-query-kubelet-config": "false", "report-interval": "0s", "enable-node-metric-report": "true",
    "enable-pod-taskids": "false", "xpu-enforce-collect-from-device-infos": "false",
    # pkg/koordlet/metricsadvisor/framework/config.go
    "collect-res-used-interval": "1s", "collect-sys-metric-outdated-interval": "10s",
    "collect-node-cpu-info-interval": "1m0s", "collect-node-storage-info-interval": "1s",
    "cpi-collector-interval": "1m0s", "psi-collector-interval": "10s", "collect-cpi-timewindow": "10s",
    "coldpage-collector-interval": "5s", "enable-pagecache-collector": "false", "enable-resctrl-collector": "false",
    "resctrl-collector-interval": "10s",
    # pkg/koordlet/metriccache/config.go
    "metric-gc-interval-seconds": "300", "metric-expire-seconds": "1800", "tsdb-path": "/metric-data/",
    "tsdb-retention-duration": "12h0m0s", "tsdb-enable-prometheus-metric": "true", "tsdb-stripe-size": "16384",
    "tsdb-max-bytes": "104857600", "tsdb-wal-segment-size": "1048576",
    "tsdb-max-block-chunk-segment-size": "5242880", "tsdb-min-block-duration": "10m0s",
    "tsdb-max-block-duration": "10m0s", "tsdb-head-chunks-write-buffer-size": "1048576",
    # pkg/koordlet/qosmanager/framework/config.go, extension.go
    "reconcile-interval-seconds": "1", "cpu-suppress-interval-seconds": "1", "cpu-evict-interval-seconds": "1",
    "memory-evict-interval-seconds": "1", "memory-evict-cool-time-seconds": "4", "cpu-evict-cool-time-seconds": "20",
    "only-evict-by-api": "false", "qos-extension-plugins": "",
    # pkg/koordlet/resourceexecutor/config.go
    "resource-force-update-seconds": "60",
    # pkg/koordlet/runtimehooks/config.go
    "runtime-hooks-network": "unix", "runtime-hooks-addr": "/host-var-run-koordlet/koordlet.sock",
    "runtime-hooks-failure-policy": "Ignore", "runtime-hooks-plugin-failure-policy": "Ignore",
    "runtime-hooks-config-path": "/host-etc-hookserver/",
    "runtime-hooks-host-endpoint": "/var/run/koordlet/koordlet.sock", "runtime-hooks-nri-connect-timeout": "6s",
    "runtime-hooks-nri-backoff-duration": "1s", "runtime-hooks-nri-backoff-cap": "2562047h47m16.854775807s",
    "runtime-hooks-nri-backoff-steps": "2147483647", "runtime-hooks-nri-backoff-factor": "2",
    "runtime-hooks-nri-socket-path": "nri/nri.sock", "runtime-hooks-nri-plugin-name": "koordlet_nri",
    "runtime-hooks-nri-plugin-index": "00", "runtime-hooks-disable-stages": "", "enable-nri-runtime-hook": "true",
    "runtime-hooks-reconcile-interval": "10s", "disable-unset-cpu-quota": "false",
    # pkg/koordlet/audit/config.go
    "audit-log-dir": "/var/log/koordlet", "audit-verbose": "3", "audit-max-disk-space-mb": "16",
    "audit-max-concurrent-readers": "4", "audit-max-events-limit": "2048",
    # pkg/koordlet/prediction/config.go
    "prediction-checkpoint-filepath": "/prediction-checkpoints", "prediction-cold-start-duration": "24h0m0s",
    "prediction-safety-margin-percent": "10", "prediction-memory-histogram-decay-halflife": "24h0m0s",
    "prediction-cpu-histogram-decay-halflife": "12h0m0s", "prediction-training-interval": "1m0s",
    "prediction-model-expiration-duration": "30m0s", "prediction-model-checkpoint-interval": "10m0s",
    "prediction-model-checkpoint-max-per-step": "12",
}
# klog v2.130.1 InitFlags (cmd/koordlet/main.go sets stderrthreshold=INFO)
KLOG_FLAGS = {
    "v": "0", "logtostderr": "true", "alsologtostderr": "false", "log_dir": "", "log_file": "",
    "log_file_max_size": "1800", "one_output": "false", "skip_log_headers": "false", "stderrthreshold": "INFO",
    "vmodule": "", "skip_headers": "false", "add_dir_header": "false", "log_backtrace_at": "",
}

# koordinator-sh/charts versions/v1.5.0 … v1.8.0 templates/koordlet.yaml with the default values.yaml (identical
# in the four versions): command /koordlet, these args, NODE_NAME from the downward API.
CHART_ARGS = ["-addr=:9316", "-cgroup-root-dir=/host-cgroup/",
              "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true",
              "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock", "--logtostderr=true", "--v=4"]
CHARTS = dict.fromkeys(("v1.5.0", "v1.6.0", "v1.7.0", "v1.8.0"), CHART_ARGS)
# koordinator config/manager/koordlet.yaml (the same in v1.5.0 … v1.8.0 and main)
MANAGER_ARGS = ["-cgroup-root-dir=/host-cgroup/", "-feature-gates=AllAlpha=true,AllBeta=true",
                "-runtime-hooks-network=unix", "-runtime-hooks-addr=/host-var-run-koordlet/koordlet.sock",
                "-runtime-hooks-host-endpoint=/var/run/koordlet//koordlet.sock", "--logtostderr=true", "--v=4"]


def parse(argv: list[str]) -> tuple[Config, tuple[compat.Note, ...]]:
    """What `koordlet <argv>` makes of its command line: the config and the start-up notes."""
    return _config(_parser().parse_args(_argv(argv)))


@pytest.fixture(autouse=True)
def _node_env(monkeypatch):
    """NODE_NAME from the downward API, as the upstream DaemonSet sets it; no KOORDLET_* from the test's shell."""
    for name in [n for n in os.environ if n.startswith("KOORDLET_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NODE_NAME", "node-1")


# --------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------

def test_the_table_lists_every_upstream_flag_once():
    assert len(UPSTREAM_KOORDLET_FLAGS) == 98 and len(KLOG_FLAGS) == 13
    names = [f.name for f in compat.UPSTREAM_FLAGS]
    assert len(names) == len(set(names))
    assert set(names) == set(UPSTREAM_KOORDLET_FLAGS) | set(KLOG_FLAGS)
    assert compat.check_table() == []


def test_the_table_check_can_fail(monkeypatch):
    bad = (*compat.UPSTREAM_FLAGS, compat.UpstreamFlag("tsdb-path", "x", "inert"),
           compat.UpstreamFlag("cgroup-kube-dir", "x", "implemented"))
    monkeypatch.setattr(compat, "UPSTREAM_FLAGS", bad)
    problems = compat.check_table()
    assert "tsdb-path: listed twice" in problems
    assert any(p.startswith("tsdb-path: kind inert but an option") for p in problems)
    assert "tsdb-path: inert without a reason" in problems
    assert any(p.startswith("cgroup-kube-dir: kind implemented but not an option") for p in problems)


@pytest.mark.parametrize("name", sorted({**UPSTREAM_KOORDLET_FLAGS, **KLOG_FLAGS}))
def test_every_upstream_flag_is_accepted_with_its_default(name):
    """`-name=<upstream default>` starts (config builds); a mapped or inert flag says so in one note."""
    value = {**UPSTREAM_KOORDLET_FLAGS, **KLOG_FLAGS}[name]
    config, notes = parse([f"-{name}={value}"])
    flag = compat.UPSTREAM_BY_NAME[name]
    assert [n.flag for n in notes] == ([] if flag.kind == "implemented" else [name])
    if flag.kind == "implemented":
        assert config.sources[name] == "command line"
    for note in notes:
        assert f"-{name}={value}" in note.text
        if flag.kind == "inert":
            assert note.level == logging.WARNING and flag.why in note.text


def test_go_flag_syntax():
    """-name=value, --name=value, -name value, --name value, and a boolean alone (Go's flag package)."""
    for argv in (["-tsdb-stripe-size=7"], ["--tsdb-stripe-size=7"], ["-tsdb-stripe-size", "7"],
                 ["--tsdb-stripe-size", "7"]):
        _, notes = parse(argv)
        assert [n.text.split(" accepted")[0] for n in notes] == ["upstream flag -tsdb-stripe-size=7"], argv
    for argv in (["-enable-pprof"], ["--enable-pprof"], ["-enable-pprof=true"]):
        assert "-enable-pprof=true" in parse(argv)[1][0].text
    for argv in (["-v=4"], ["--v=4"], ["-v", "4"], ["--v", "4"]):
        assert parse(argv)[0].log_level == "debug", argv
    config, _ = parse(["-kubelet-insecure-tls", "-disable-query-kubelet-config=true", "-addr", ":9999"])
    assert config.kubelet_insecure_tls and config.disable_query_kubelet_config and config.addr == ("", 9999)


def test_klog_verbosity_maps_onto_log_level():
    assert parse(["--v=4"])[0].log_level == "debug"
    assert parse(["--v=6"])[0].log_level == "debug"
    assert parse(["--v=3"])[0].log_level == "info"
    assert parse(["--v=2"])[0].log_level == "info"
    assert parse(["--v=0"])[0].log_level == "info"
    config, notes = parse(["--v=4", "--log-level=warning"])     # our own option, by its name, wins
    assert config.log_level == "warning"
    assert notes[0].level == logging.WARNING and "not applied" in notes[0].text
    config, notes = parse(["--logtostderr=false"])
    assert notes[0].level == logging.WARNING and "not honoured" in notes[0].text


@pytest.mark.parametrize(("argv", "message"), [
    (["-tsdb-stripe-size=many"], "tsdb-stripe-size: invalid integer"),
    (["-runtime-hooks-nri-backoff-factor=x"], "runtime-hooks-nri-backoff-factor: invalid number"),
    (["-enable-pprof=maybe"], "enable-pprof"),
    (["-log_file_max_size=-1"], "log_file_max_size: invalid unsigned"),
    (["-vmodule=gc"], "vmodule: syntax error"),
    (["-log_backtrace_at=main.go"], "log_backtrace_at: syntax error"),
    (["-stderrthreshold=LOUD"], "stderrthreshold"),
    (["--v=high"], "-v: invalid integer"),
    (["-report-interval=soon"], "report-interval"),
    (["-qos-extension-plugins=Foo=true"], "unrecognized QoS extension plugin"),
    (["-no-such-flag=1"], "unrecognized arguments"),
    (["-feature-gates=Acelerators=true"], "unknown feature gate 'Acelerators'"),
])
def test_values_upstream_refuses_are_refused(argv, message, capsys):
    with pytest.raises(ConfigError, match=message):
        parse(argv)
    assert main(argv) == 2
    assert message.split("'")[0] in capsys.readouterr().err


def test_good_klog_values_are_accepted():
    _, notes = parse(["-vmodule=gc=4,server*=2", "-log_backtrace_at=main.go:12", "-stderrthreshold=error",
                      "-stderrthreshold=2", "-qos-extension-plugins="])
    assert [n.flag for n in notes] == ["qos-extension-plugins", "stderrthreshold", "vmodule", "log_backtrace_at"]


def test_repeated_list_flags_add_up_as_in_go():
    _, notes = parse(["-runtime-hooks-disable-stages=PreRunPodSandbox", "-runtime-hooks-disable-stages=PostStop"])
    assert "-runtime-hooks-disable-stages=PreRunPodSandbox,PostStop" in notes[0].text
    config, _ = parse(["-feature-gates=AllAlpha=true", "-feature-gates=Accelerators=false,CPUBurst=false"])
    assert not config.gate("Accelerators") and config.gate("CoreSched") and not config.gate("CPUBurst")


# --------------------------------------------------------------------------------------------------
# invocation: no subcommand, help
# --------------------------------------------------------------------------------------------------

def test_no_subcommand_is_run():
    assert _argv(["-addr=:9316"]) == ["run", "-addr=:9316"]
    assert _argv([]) == ["run"]
    assert _argv(["doctor", "-v=4"]) == ["doctor", "--v=4"]
    assert _argv(["--version"]) == ["--version"]
    assert _argv(["-h"]) == ["-h"]
    assert _argv(["run", "--", "-v"]) == ["run", "--", "-v"]
    with_run = _config(_parser().parse_args(["run", *_argv(CHART_ARGS)[1:]]))
    without = parse(CHART_ARGS)
    assert with_run == without


def test_no_command_at_all_runs_the_agent(capsys, monkeypatch):
    """`/koordlet` alone is the agent with every default, as upstream; outside a pod it says what it tried."""
    monkeypatch.delenv("NODE_NAME")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "node-name: required" in err and "no command given, so `koordlet run`" in err
    assert main(["run"]) == 2
    assert "no command given" not in capsys.readouterr().err


def test_console_script_is_the_cli_entry_point():
    with open(REPO / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["koordlet"] == "koordlet.cli:main"


def test_run_help_lists_the_upstream_compatibility_group(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    agent_part, _, compat_part = out.partition("upstream compatibility:")
    assert compat_part, "no upstream compatibility group"
    for flag in compat.UPSTREAM_FLAGS:
        spelled = f"--{flag.name} "
        if flag.kind == "implemented":
            assert spelled in agent_part and spelled not in compat_part, flag.name
        else:
            assert spelled in compat_part and f"[{flag.kind}]" in compat_part, flag.name


# --------------------------------------------------------------------------------------------------
# the upstream DaemonSets' args
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", sorted(CHARTS))
def test_chart_args_parse(version):
    config, notes = parse(CHARTS[version])
    assert config.addr == ("", 9316) and config.cgroup_root_dir == "/host-cgroup/"
    assert config.log_level == "debug" and config.node_name == "node-1"
    for gate in ("BECPUEvict", "BEMemoryEvict", "CgroupReconcile", "Accelerators", "BECPUSuppress", "CPUBurst"):
        assert config.gate(gate), gate
    assert not config.gate("CPUEvict")
    assert {n.flag: n.level for n in notes} == {"runtime-hooks-host-endpoint": logging.WARNING,
                                                "v": logging.INFO, "logtostderr": logging.INFO}


def test_manager_args_parse():
    config, notes = parse(MANAGER_ARGS)
    assert all(config.gate(g) for g in DEFAULT_GATES)
    assert config.log_level == "debug"
    inert = sorted(n.flag for n in notes if n.level == logging.WARNING)
    # AllAlpha turns on Libpfm4 (no separate effect here) and ResctrlCollector (needs -enable-resctrl-collector,
    # which the manifest does not pass): one warning line each, koordlet/ops/compat.py gate_notes
    assert inert == ["Libpfm4", "ResctrlCollector", "runtime-hooks-addr", "runtime-hooks-host-endpoint",
                     "runtime-hooks-network"]


# --------------------------------------------------------------------------------------------------
# feature gates
# --------------------------------------------------------------------------------------------------

# pkg/features/koordlet_features.go and pkg/koordlet/runtimehooks/config.go: gate -> (stage, default)
UPSTREAM_GATES = {
    "AuditEvents": ("alpha", False), "AuditEventsHTTPHandler": ("alpha", False), "BECPUSuppress": ("beta", True),
    "BECPUManager": ("alpha", False), "BECPUEvict": ("alpha", False), "CPUEvict": ("alpha", False),
    "CPUAllocatableEvict": ("alpha", False), "BEMemoryEvict": ("alpha", False), "MemoryEvict": ("alpha", False),
    "MemoryAllocatableEvict": ("alpha", False), "CPUBurst": ("beta", True), "SystemConfig": ("alpha", False),
    "RdtResctrl": ("beta", True), "ResctrlCollector": ("alpha", False), "CgroupReconcile": ("alpha", False),
    "NodeTopologyReport": ("beta", True), "Accelerators": ("alpha", False), "RDMADevices": ("alpha", False),
    "CPICollector": ("alpha", False), "Libpfm4": ("alpha", False), "PSICollector": ("alpha", False),
    "BlkIOReconcile": ("alpha", False), "ColdPageCollector": ("alpha", False), "HugePageReport": ("alpha", False),
    "PodResourcesProxy": ("alpha", False), "HamiCoreVGPUMonitor": ("alpha", False),
    "PerCPUMetric": ("alpha", False), "NodeMetricPromMetrics": ("alpha", False),
    # runtime hooks
    "GroupIdentity": ("beta", True), "CPUSetAllocator": ("beta", True), "GPUEnvInject": ("alpha", False),
    "RDMADeviceInject": ("alpha", False), "BatchResource": ("beta", True), "CPUNormalization": ("alpha", False),
    "CoreSched": ("alpha", False), "TerwayQoS": ("alpha", False), "TCNetworkQoS": ("alpha", False),
    "Resctrl": ("alpha", False), "OOMScoreAdj": ("alpha", False),
}


def test_gate_table_is_upstreams():
    assert {g: ("beta" if g in BETA_GATES else "alpha", on) for g, on in DEFAULT_GATES.items()} == UPSTREAM_GATES
    assert set(ALPHA_GATES).isdisjoint(BETA_GATES)


# (feature-gates value, gate, effective) — component-base SetFromMap: a gate named explicitly keeps its value
# wherever it stands; AllAlpha / AllBeta set only the gates of their stage that are not named.
PRECEDENCE = [
    ("Accelerators=false,AllAlpha=true", "Accelerators", False),
    ("Accelerators=false,AllAlpha=true", "CPICollector", True),
    ("AllAlpha=true,Accelerators=false", "Accelerators", False),
    ("AllAlpha=true", "CPUBurst", True),                  # beta default untouched
    ("AllAlpha=false", "Accelerators", False),
    ("AllAlpha=false,Accelerators=true", "Accelerators", True),
    ("AllBeta=false", "CPUBurst", False),
    ("AllBeta=false", "GroupIdentity", False),
    ("AllBeta=false", "CPICollector", False),             # alpha default untouched
    ("AllBeta=false,CPUBurst=true", "CPUBurst", True),
    ("CPUBurst=true,AllBeta=false", "BECPUSuppress", False),
    ("AllAlpha=true,AllBeta=true", "OOMScoreAdj", True),
    ("AllAlpha=true,AllBeta=false,Accelerators=false,CPUBurst=true", "Accelerators", False),
    ("AllAlpha=true,AllBeta=false,Accelerators=false,CPUBurst=true", "CPUBurst", True),
    ("AllAlpha=true,AllBeta=false,Accelerators=false,CPUBurst=true", "RdtResctrl", False),
    ("AllAlpha=true,AllAlpha=false", "CoreSched", False),  # a repeated name: the last value
    ("Accelerators=true,Accelerators=false", "Accelerators", False),
    (" Accelerators = true ", "Accelerators", True),      # names and values trimmed
    ("", "Accelerators", False),
]


@pytest.mark.parametrize(("value", "gate", "on"), PRECEDENCE)
def test_gate_precedence(value, gate, on):
    assert parse([f"-feature-gates={value}"])[0].gate(gate) is on
    assert resolve_gates(parse_gates(value)).get(gate, DEFAULT_GATES[gate]) is on


def test_gate_precedence_across_sources(tmp_path):
    """A gate named in any source wins over AllAlpha/AllBeta from any source; for the same kind of setting the
    higher source (file < environment < flags) wins."""
    f = tmp_path / "c.yaml"
    f.write_text("feature-gates: {AllAlpha: true, CPUBurst: false}\n")
    config = build(file=str(f), environ={"NODE_NAME": "n"}, flags={"feature-gates": parse_gates("Accelerators=false")})
    assert not config.gate("Accelerators") and config.gate("CoreSched") and not config.gate("CPUBurst")
    config = build(file=str(f), environ={"NODE_NAME": "n", "KOORDLET_FEATURE_GATES": "AllAlpha=false"},
                   flags={"feature-gates": parse_gates("CPUBurst=true")})
    assert not config.gate("CoreSched") and config.gate("CPUBurst")
    # the standalone profile names Accelerators and RDMADevices: AllAlpha=false does not undo a named gate
    config = build(environ={}, flags={"standalone": True, "feature-gates": parse_gates("AllAlpha=false")},
                   hostname=lambda: "h")
    assert config.gate("Accelerators") and not config.gate("CoreSched")


@pytest.mark.parametrize("value", ["NoSuchGate=true", "AllGA=true", "accelerators=true", "Accelerators",
                                   "Accelerators=maybe"])
def test_bad_gates_are_refused(value):
    with pytest.raises(ConfigError, match="feature-gates"):
        parse([f"-feature-gates={value}"])


# --------------------------------------------------------------------------------------------------
# runtime-hooks-nri-socket-path: joined under var-run-root-dir, as upstream's filepath.Join
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("root", "path", "joined"), [
    ("/host-var-run/", "nri/nri.sock", "/host-var-run/nri/nri.sock"),
    ("/host-var-run/", "/run/containerd/nri.sock", "/host-var-run/run/containerd/nri.sock"),
    ("/var/run/", "/var/run/nri/nri.sock", "/var/run/var/run/nri/nri.sock"),
    ("/host-var-run", "nri//nri.sock", "/host-var-run/nri/nri.sock"),
    ("/", "/nri.sock", "/nri.sock"),
])
def test_nri_socket_path_is_joined_as_upstream(root, path, joined):
    assert go_join(root, path) == joined
    config, _ = parse([f"-var-run-root-dir={root}", f"-runtime-hooks-nri-socket-path={path}"])
    assert config.runtime_hooks_nri_socket_path == joined


def test_nri_socket_path_defaults_per_mode():
    assert parse(["-agent-mode=daemonset"])[0].runtime_hooks_nri_socket_path == "/host-var-run/nri/nri.sock"
    assert parse(["-agent-mode=host"])[0].runtime_hooks_nri_socket_path == "/var/run/nri/nri.sock"
    with pytest.raises(ConfigError, match="runtime-hooks-nri-socket-path: path must not contain"):
        parse(["-runtime-hooks-nri-socket-path=../../etc/x.sock"])


# --------------------------------------------------------------------------------------------------
# flags that became options here
# --------------------------------------------------------------------------------------------------

def test_prediction_and_node_info_flags_are_options():
    config, notes = parse(["-prediction-cold-start-duration=1h", "-prediction-safety-margin-percent=5",
                           "-prediction-memory-histogram-decay-halflife=2h", "-prediction-training-interval=30s",
                           "-prediction-cpu-histogram-decay-halflife=3h", "-prediction-model-expiration-duration=5m",
                           "-prediction-model-checkpoint-interval=1m", "-prediction-model-checkpoint-max-per-step=3",
                           "-collect-node-cpu-info-interval=2m"])
    assert notes == ()
    assert (config.prediction_cold_start_duration, config.prediction_safety_margin_percent,
            config.prediction_memory_histogram_decay_halflife, config.prediction_cpu_histogram_decay_halflife,
            config.prediction_training_interval, config.prediction_model_expiration_duration,
            config.prediction_model_checkpoint_interval, config.prediction_model_checkpoint_max_per_step,
            config.collect_node_cpu_info_interval) == (3600, 5, 7200, 10800, 30, 300, 60, 3, 120)
    with pytest.raises(ConfigError, match="prediction-cpu-histogram-decay-halflife"):
        parse(["-prediction-cpu-histogram-decay-halflife=0s"])


def test_agent_uses_the_prediction_options(tmp_path):
    host = FakeHost(str(tmp_path / "h"), CgroupVersion.V2, Driver.SYSTEMD)
    config = build(environ={}, hostname=lambda: "h", flags={
        "standalone": True, "cgroup-root-dir": host.paths.cgroup_root, "sys-root-dir": host.paths.sys_root,
        "tsdb-path": str(tmp_path / "cache"), "prediction-safety-margin-percent": 7,
        "prediction-training-interval": 90.0, "prediction-cpu-histogram-decay-halflife": 60.0,
        "reconcile-interval-seconds": 0.0, "enable-nri-runtime-hook": False})
    prediction = Agent.build(config, persist=False, connect=False).ctx.prediction.config
    assert (prediction.safety_margin_percent, prediction.training_interval, prediction.cpu_half_life) == \
        (7, 90.0, 60.0)
