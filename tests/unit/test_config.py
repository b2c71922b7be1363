import pytest

from koordlet.cli import main
from koordlet.ops.config import ConfigError, build, state_directory
from koordlet.ops.gates import parse_gates, resolve_gates
from koordlet.ops.options import OPTIONS
from koordlet.ops.values import parse_duration, parse_path


def test_precedence_defaults_file_env_flags(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("node-name: from-file\ncollect-res-used-interval: 5s\nkubelet-sync-interval: 20s\n"
                 "tsdb-retention-duration: 1h\n")
    env = {"KOORDLET_COLLECT_RES_USED_INTERVAL": "3s", "KOORDLET_KUBELET_SYNC_INTERVAL": "30s"}
    cfg = build(file=str(f), flags={"kubelet-sync-interval": 40.0}, environ=env)
    assert cfg.node_name == "from-file"                 # file over default
    assert cfg.tsdb_retention_duration == 3600.0        # file over default
    assert cfg.collect_res_used_interval == 3.0         # env over file
    assert cfg.kubelet_sync_interval == 40.0            # flag over env
    assert cfg.kubelet_port == 10250                    # upstream default
    assert cfg.sources["collect-res-used-interval"] == "environment"


def test_upstream_env_names():
    cfg = build(environ={"NODE_NAME": "n1", "agent_mode": "hostMode"})
    assert cfg.node_name == "n1"
    assert cfg.agent_mode == "host"
    assert cfg.cgroup_root_dir == "/sys/fs/cgroup/"
    assert cfg.sys_root_dir == "/sys/"


def test_daemonset_mode_roots():
    cfg = build(environ={"NODE_NAME": "n1", "KOORDLET_AGENT_MODE": "daemonset"})
    assert cfg.cgroup_root_dir == "/host-cgroup/"
    assert cfg.sys_fs_root_dir == "/host-sys-fs/"


@pytest.mark.parametrize("standalone", [False, True])
def test_auto_mode_follows_the_daemonset_mounts_standalone_or_not(monkeypatch, standalone):
    """auto is daemonset where /host-sys exists (the DaemonSet's mounts), host elsewhere; --standalone (no cluster)
    does not change where the host is: ``report --once --standalone`` exec'd in the agent's pod reads the host."""
    import koordlet.ops.config as config

    real_isdir = config.os.path.isdir
    for mounted, mode, cgroups in ((True, "daemonset", "/host-cgroup/"), (False, "host", "/sys/fs/cgroup/")):
        monkeypatch.setattr(config.os.path, "isdir", lambda p, m=mounted: m if p == "/host-sys" else real_isdir(p))
        cfg = build(environ={"NODE_NAME": "n1"}, flags={"standalone": standalone})
        assert (cfg.agent_mode, cfg.cgroup_root_dir) == (mode, cgroups)


def test_unknown_key_in_file_is_named(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("node-name: x\ncolect-res-used-interval: 1s\n")
    with pytest.raises(ConfigError, match="unknown key 'colect-res-used-interval'"):
        build(file=str(f), environ={})


def test_bad_value_is_named(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("node-name: x\nkubelet-port: 99999\n")
    with pytest.raises(ConfigError, match=r"kubelet-port: expected a TCP port"):
        build(file=str(f), environ={})
    with pytest.raises(ConfigError, match=r"environment KOORDLET_TSDB_MAX_BYTES: tsdb-max-bytes"):
        build(environ={"NODE_NAME": "x", "KOORDLET_TSDB_MAX_BYTES": "lots"})


def test_node_name_required_outside_standalone():
    with pytest.raises(ConfigError, match="node-name"):
        build(environ={})
    assert build(environ={}, flags={"standalone": True}, hostname=lambda: "h1").node_name == "h1"


def test_standalone_profile_defaults_and_override(monkeypatch, tmp_path):
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    cfg = build(environ={}, flags={"standalone": True}, hostname=lambda: "h")
    assert cfg.pod_source == "standalone"
    assert cfg.addr == ("127.0.0.1", 9316)
    assert cfg.tsdb_path == str(tmp_path / "state" / "metric-data")
    cfg = build(environ={"KOORDLET_ADDR": ":9999"}, flags={"standalone": True}, hostname=lambda: "h")
    assert cfg.addr == ("", 9999)


def test_durations_and_gates():
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("12h") == 43200.0
    assert parse_duration(2) == 2.0
    with pytest.raises(ValueError):
        parse_duration("10 minutes")
    gates = resolve_gates(parse_gates("AllAlpha=true,CPUBurst=false"))
    assert gates["Accelerators"] is True and gates["CPUBurst"] is False
    with pytest.raises(ValueError, match="unknown feature gate 'Acelerators'"):
        parse_gates("Acelerators=true")
    cfg = build(environ={"NODE_NAME": "n"}, flags={"feature-gates": {"Accelerators": True}})
    assert cfg.gate("Accelerators") and cfg.gate("CPUBurst") and not cfg.gate("CoreSched")


def test_paths_with_dotdot_are_refused():
    with pytest.raises(ConfigError, match="cgroup-root-dir: path must not contain"):
        build(environ={"NODE_NAME": "n", "KOORDLET_CGROUP_ROOT_DIR": "/sys/../etc"})


def test_cli_exit_code_2_names_the_key(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("bogus: 1\n")
    assert main(["run", "--config", str(f)]) == 2
    assert "unknown key 'bogus'" in capsys.readouterr().err
    # Go-style single-dash flags as in an upstream DaemonSet
    assert main(["run", "-node-name=n", "-collect-res-used-interval=soon"]) == 2
    assert "collect-res-used-interval" in capsys.readouterr().err
    assert main(["run", "--no-such-flag"]) == 2


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert "koordlet-py 0.1.0" in capsys.readouterr().out


# --- where state goes: never the working directory -----------------------------------------------------------------


def test_state_directory_is_the_units_then_var_lib_then_the_users_and_never_relative():
    assert state_directory({"STATE_DIRECTORY": "/var/lib/koordlet:/var/lib/other"}) == "/var/lib/koordlet"
    assert state_directory({}, euid=0) == "/var/lib/koordlet"
    assert state_directory({"XDG_STATE_HOME": "/home/u/.state"}, euid=1000) == "/home/u/.state/koordlet"
    assert state_directory({"HOME": "/home/u"}, euid=1000) == "/home/u/.local/state/koordlet"
    assert state_directory({"HOME": "/home/u", "XDG_STATE_HOME": "rel"}, euid=1000) == \
        "/home/u/.local/state/koordlet"                 # a relative XDG_STATE_HOME is invalid (XDG spec)


@pytest.mark.parametrize("standalone", [False, True])
def test_host_mode_keeps_its_state_under_the_state_directory(monkeypatch, tmp_path, standalone):
    """The unit's StateDirectory (systemd's $STATE_DIRECTORY) holds the cache, the checkpoints and, standalone,
    the reports; a relative path never comes from a default, whatever the working directory."""
    state = tmp_path / "state"
    monkeypatch.setenv("STATE_DIRECTORY", str(state))
    monkeypatch.chdir(tmp_path)
    cfg = build(environ={"NODE_NAME": "n", "agent_mode": "hostMode"}, flags={"standalone": standalone})
    assert cfg.tsdb_path == str(state / "metric-data")
    assert cfg.prediction_checkpoint_filepath == str(state / "prediction-checkpoints")
    assert cfg.report_dir == (str(state / "reports") if standalone else "")
    assert cfg.sources["tsdb-path"] == "state directory"
    defaults = [getattr(cfg, o.attr) for o in OPTIONS if o.parse is parse_path]
    assert all(v == "" or v.startswith("/") for v in defaults), defaults
    # an option set by any layer wins; the DaemonSet keeps upstream's in-container paths
    assert build(environ={"NODE_NAME": "n"}, flags={"agent-mode": "host", "tsdb-path": "/srv/c"}).tsdb_path == "/srv/c"
    ds = build(environ={"NODE_NAME": "n", "KOORDLET_AGENT_MODE": "daemonset"})
    assert (ds.tsdb_path, ds.prediction_checkpoint_filepath) == ("/metric-data/", "/prediction-checkpoints")
