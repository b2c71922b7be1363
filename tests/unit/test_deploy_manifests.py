"""deploy/*.yaml against the agent's own code: its flag parser and config loader, host roots, options, HTTP routes.

Nothing here restates a path or a port: the agent DaemonSet's args go through ``koordlet run``'s parser and
``config.build``, and every check compares a manifest value with what that config (or HostPaths, hami_bridge,
the HTTP server) says the agent will use. The checkers return a list of problems; a few tests break a manifest
on purpose to show that they notice.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import posixpath
import signal
import stat
import subprocess
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from prometheus_client import CollectorRegistry

from hami_bridge.inject import HostLayout
from koordlet import wire
from koordlet.cli import _parser
from koordlet.config import DEFAULT_GATES, OPTIONS_BY_NAME, Config, ConfigError, build, flag_values
from koordlet.host.paths import HostPaths
from koordlet.server import HttpServer

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OURS = ("koordlet.yaml", "hami-core-distribute.yaml", "multus-podresources.yaml", "rbac.yaml")
MULTUS_SOCKET_DIR_OPTION = "pod-resources-proxy-path"     # the agent option the Multus patch must agree with


# --------------------------------------------------------------------------------------------------
# reading the manifests
# --------------------------------------------------------------------------------------------------

def docs(name: str) -> list[dict[str, Any]]:
    with open(DEPLOY / name, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def daemonset(name: str, file: str) -> dict[str, Any]:
    (ds,) = [d for d in docs(file) if d.get("kind") == "DaemonSet" and d["metadata"]["name"] == name]
    return ds


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def container(obj: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    ctrs = pod_spec(obj)["containers"]
    if name is None:
        (ctr,) = ctrs
        return ctr
    (ctr,) = [c for c in ctrs if c["name"] == name]
    return ctr


class Mount(NamedTuple):
    path: str                # inside the container
    host: str | None         # hostPath source, None for other volume kinds
    read_only: bool
    propagation: str | None


def mounts(obj: dict[str, Any], ctr: dict[str, Any]) -> list[Mount]:
    volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    out = []
    for m in ctr.get("volumeMounts", []):
        host = volumes[m["name"]].get("hostPath", {}).get("path")   # KeyError: a mount of an undeclared volume
        out.append(Mount(posixpath.normpath(m["mountPath"]), posixpath.normpath(host) if host else None,
                         bool(m.get("readOnly")), m.get("mountPropagation")))
    return out


def covering(ms: list[Mount], path: str) -> tuple[Mount, str] | None:
    """The mount a path inside the container lands on (the deepest one, as the runtime stacks them)."""
    path = posixpath.normpath(path)
    best = None
    for m in ms:
        inside = path == m.path or path.startswith(m.path.rstrip("/") + "/")
        if inside and (best is None or len(m.path) > len(best.path)):
            best = m
    return None if best is None else (best, posixpath.relpath(path, best.path))


def host_side(ms: list[Mount], path: str) -> str | None:
    """Where on the host a path inside the container really is (None: not on a hostPath)."""
    found = covering(ms, path)
    if found is None or found[0].host is None:
        return None
    m, rel = found
    return posixpath.normpath(posixpath.join(m.host, rel))


def env(ctr: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in ctr.get("env", []) if "value" in e}


def agent_config(ds: dict[str, Any], *extra: str) -> Config:
    """What `koordlet run` makes of the DaemonSet's command and args: the CLI's parser (unknown flags are refused),
    then config.build (unknown gates, bad values and a missing node name are refused) with the pod's env."""
    ctr = container(ds, "koordlet")
    args = _parser().parse_args([*ctr["command"][1:], *ctr.get("args", []), *extra])
    assert args.command == "run"
    environ = env(ctr)
    for e in ctr.get("env", []):      # the downward API value the kubelet would fill in
        if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            environ[e["name"]] = "node-1"
    return build(file=args.config_file, flags=flag_values(args), environ=environ)


@pytest.fixture(scope="module")
def agent() -> dict[str, Any]:
    return daemonset("koordlet", "koordlet.yaml")


@pytest.fixture(scope="module")
def hami() -> dict[str, Any]:
    return daemonset("hami-core-distribute", "hami-core-distribute.yaml")


@pytest.fixture(scope="module")
def multus_patch() -> dict[str, Any]:
    return docs("multus-podresources.yaml")[0]


# --------------------------------------------------------------------------------------------------
# checkers: each returns the problems it found
# --------------------------------------------------------------------------------------------------

def root_problems(ds: dict[str, Any]) -> list[str]:
    """Every host root HostPaths resolves in DaemonSet mode is a mount of the matching host directory (the same
    root in host mode); /proc alone comes from hostPID. Writable where the agent writes, Bidirectional where it
    mounts (resctrl under sys-fs)."""
    config, on_host = agent_config(ds), agent_config(ds, "--agent-mode=host")
    if config.agent_mode != "daemonset":
        return [f"agent mode resolves to {config.agent_mode}, not daemonset"]
    inside, outside = HostPaths.from_config(config), HostPaths.from_config(on_host)
    roots = [(f.name, getattr(inside, f.name), getattr(outside, f.name)) for f in dataclasses.fields(HostPaths)]
    if config.gate("TerwayQoS"):
        roots.append(("terway_qos_dir", config.terway_qos_dir, on_host.terway_qos_dir))
    ms = mounts(ds, container(ds, "koordlet"))
    problems = []
    for name, path, host_path in roots:
        found = covering(ms, path)
        if found is None:
            if not (posixpath.normpath(path) == posixpath.normpath(host_path) == "/proc"
                    and pod_spec(ds).get("hostPID")):
                problems.append(f"{name}: {path} is not mounted")
        elif host_side(ms, path) != posixpath.normpath(host_path):
            problems.append(f"{name}: {path} is host {host_side(ms, path)}, expected {host_path}")
    for name in ("cgroup_root", "sys_fs_root"):
        found = covering(ms, getattr(inside, name))
        if found and found[0].read_only:
            problems.append(f"{name}: mounted read-only, the agent writes there")
    found = covering(ms, inside.sys_fs("resctrl"))
    if found and found[0].propagation != "Bidirectional":
        problems.append("sys_fs_root: the agent mounts resctrl there; needs mountPropagation Bidirectional")
    for option, path in (("tsdb-path", config.tsdb_path),
                         ("prediction-checkpoint-filepath", config.prediction_checkpoint_filepath)):
        found = covering(ms, path)
        if found is None or found[0].host is None or found[0].read_only:
            problems.append(f"{option}: {path} is not on a writable hostPath (lost on every restart)")
    return problems


def same_path_problems(ds: dict[str, Any], paths: list[str], writable: bool = True) -> list[str]:
    """Paths the agent hands to the runtime or to other pods as host paths must be the same path inside."""
    ms = mounts(ds, container(ds, "koordlet"))
    problems = []
    for path in paths:
        found = covering(ms, path)
        if host_side(ms, path) != posixpath.normpath(path):
            problems.append(f"{path}: inside the agent it is host {host_side(ms, path)}")
        elif writable and found and found[0].read_only:
            problems.append(f"{path}: mounted read-only")
    return problems


def hami_problems(agent_ds: dict[str, Any], hami_ds: dict[str, Any]) -> list[str]:
    """hami-core-distribute writes libvgpu.so and the lock dir where the agent's HostLayout expects them."""
    layout = HostLayout(libvgpu=agent_config(agent_ds).hami_core_library_directory_path)
    ctr = container(hami_ds, "distribute")
    values, ms = env(ctr), mounts(hami_ds, ctr)
    problems = []
    for var, want in (("LIBVGPU_DST", layout.libvgpu), ("VGPU_LOCK_DIR", layout.lock_dir)):
        got = host_side(ms, values.get(var, "/nonexistent"))
        if got != posixpath.normpath(want):
            problems.append(f"{var}={values.get(var)} lands on host {got}, the agent looks at {want}")
    return problems


# --------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted({p.name for p in DEPLOY.glob("*.yaml")} | set(OURS)))
def test_every_manifest_parses(name):
    loaded = docs(name)
    assert loaded, name
    for d in loaded:
        assert isinstance(d, dict)
        if "kind" in d:
            assert d.get("apiVersion") and d["metadata"].get("name"), (name, d.get("kind"))


def test_agent_runs_the_console_script_with_flags_the_agent_knows(agent):
    ctr = container(agent, "koordlet")
    with open(REPO / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts[ctr["command"][0]] == "koordlet.cli:main"
    config = agent_config(agent)                   # ConfigError on an unknown flag, gate or bad value
    assert config.agent_mode == "daemonset" and config.node_name == "node-1"
    explicit = {g for g, on in config.feature_gates.items() if on}
    assert explicit <= set(DEFAULT_GATES)
    # a gate passed on the command line is one the default leaves off; these are what the other manifests need
    assert not [g for g in explicit if DEFAULT_GATES[g]]
    for gate in ("GPUEnvInject", "PodResourcesProxy", "Accelerators", "RDMADevices", "RDMADeviceInject"):
        assert config.gate(gate), gate


def test_the_flag_check_can_fail(agent):
    broken = copy.deepcopy(agent)
    container(broken, "koordlet")["args"].append("--no-such-option=1")
    with pytest.raises(ConfigError):
        agent_config(broken)
    broken = copy.deepcopy(agent)
    container(broken, "koordlet")["args"].append("--feature-gates=GPUEnvInjekt=true")
    with pytest.raises(ConfigError, match="GPUEnvInjekt"):
        agent_config(broken)
    broken = copy.deepcopy(agent)
    container(broken, "koordlet")["env"] = []    # no NODE_NAME from the downward API
    with pytest.raises(ConfigError, match="node-name"):
        agent_config(broken)


def test_agent_mounts_every_host_root(agent):
    assert root_problems(agent) == []
    config = agent_config(agent)
    assert pod_spec(agent)["hostNetwork"] is True, f"kubelet-address {config.kubelet_address} is the node's"
    assert container(agent, "koordlet")["securityContext"]["privileged"] is True


def test_the_root_check_can_fail(agent):
    for volume, expect in (("host-cgroup", "cgroup_root"), ("host-kubelet", "var_lib_kubelet"),
                           ("metric-data", "tsdb-path")):
        broken = copy.deepcopy(agent)
        ctr = container(broken, "koordlet")
        ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["name"] != volume]
        assert any(p.startswith(expect) for p in root_problems(broken)), volume
    broken = copy.deepcopy(agent)
    pod_spec(broken)["hostPID"] = False
    assert any(p.startswith("proc_root") for p in root_problems(broken))
    broken = copy.deepcopy(agent)
    (vol,) = [v for v in pod_spec(broken)["volumes"] if v["name"] == "host-sys"]
    vol["hostPath"]["path"] = "/sys/fs/"
    assert any(p.startswith("sys_root") for p in root_problems(broken))
    broken = copy.deepcopy(agent)
    container(broken, "koordlet")["args"].append("--feature-gates=TerwayQoS=true")
    assert any(p.startswith("terway_qos_dir") for p in root_problems(broken))


def test_hami_core_paths_agree(agent, hami):
    assert hami_problems(agent, hami) == []
    layout = HostLayout(libvgpu=agent_config(agent).hami_core_library_directory_path)
    # the agent checks libvgpu.so and the lock dir, and creates the cache dirs the runtime then bind-mounts
    assert same_path_problems(agent, [layout.libvgpu, layout.lock_dir, layout.cache_root]) == []
    assert pod_spec(hami)["nodeSelector"] == {wire.LABEL_GPU_VENDOR: wire.GPU_VENDOR_NVIDIA}


def test_the_hami_check_can_fail(agent, hami):
    broken = copy.deepcopy(hami)
    (vol,) = [v for v in pod_spec(broken)["volumes"] if v["name"] == "hami-vgpu"]
    vol["hostPath"]["path"] = "/usl/local/vgpu"            # the typo in Koordinator's published example
    assert any("LIBVGPU_DST" in p for p in hami_problems(agent, broken))
    moved = copy.deepcopy(agent)
    container(moved, "koordlet")["args"].append("--hami-core-library-directory-path=/opt/vgpu/libvgpu.so")
    assert any("LIBVGPU_DST" in p for p in hami_problems(moved, hami))
    broken = copy.deepcopy(agent)
    ctr = container(broken, "koordlet")
    ctr["volumeMounts"] = [m for m in ctr["volumeMounts"] if m["name"] != "hami-vgpulock"]
    assert same_path_problems(broken, [HostLayout().lock_dir]) != []


class Script:
    """hami-core-distribute's script run by /bin/sh against a temporary tree (the image's sh is dash, too)."""

    def __init__(self, hami_ds: dict[str, Any], root: Path) -> None:
        ctr = container(hami_ds, "distribute")
        assert ctr["command"][:2] == ["/bin/sh", "-c"]
        self.code = ctr["command"][2]
        self.names = set(env(ctr))
        self.src, self.dst, self.lock = root / "image" / "libvgpu.so", root / "vgpu" / "libvgpu.so", root / "lock"
        for d in (self.src.parent, self.dst.parent, self.lock):
            d.mkdir(exist_ok=True)
        self.lock.chmod(0o755)                     # as the kubelet creates a DirectoryOrCreate hostPath

    def start(self) -> subprocess.Popen[str]:
        values = {"LIBVGPU_SRC": str(self.src), "LIBVGPU_DST": str(self.dst), "VGPU_LOCK_DIR": str(self.lock)}
        assert set(values) <= self.names           # the script reads only variables the manifest sets
        return subprocess.Popen(["/bin/sh", "-c", self.code], env={"PATH": os.environ["PATH"], **values},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def run_once(self) -> str:
        """Start it, read its one status line, stop it with SIGTERM (what the kubelet sends); exit code 0."""
        proc = self.start()
        try:
            line = proc.stdout.readline()          # printed right before it idles, or its error before exit 1
            if proc.poll() is None and "hami-core-distribute:" in line and "not in this image" not in line:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=5) == 0, line
            else:
                proc.wait(timeout=5)
            return line if proc.returncode == 0 else f"exit {proc.returncode}: {line}"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)    # its sleep, should the trap not have taken it along
            except ProcessLookupError:
                pass
            proc.stdout.close()


def test_hami_distribute_script_installs_atomically(hami, tmp_path):
    script = Script(hami, tmp_path)
    assert script.run_once().startswith("exit 1:")           # no library in the image: fail loudly
    assert not script.dst.exists()

    script.src.write_bytes(b"libvgpu v1")
    assert "installed" in script.run_once()
    assert script.dst.read_bytes() == b"libvgpu v1"
    assert stat.S_IMODE(script.lock.stat().st_mode) == 0o1777
    assert sorted(p.name for p in script.dst.parent.iterdir()) == ["libvgpu.so"]   # no temp file left
    first = script.dst.stat().st_ino

    assert "up to date" in script.run_once()
    assert script.dst.stat().st_ino == first                  # identical: left alone

    with open(script.dst, "rb") as in_use:                    # a container that mapped the old library
        script.src.write_bytes(b"libvgpu v2")
        (script.dst.parent / ".libvgpu.so.tmp.999").write_bytes(b"half")   # left by a killed run
        assert "installed" in script.run_once()
        assert in_use.read() == b"libvgpu v1"                 # renamed over, not rewritten in place
    assert script.dst.read_bytes() == b"libvgpu v2" and script.dst.stat().st_ino != first
    assert sorted(p.name for p in script.dst.parent.iterdir()) == ["libvgpu.so"]


def multus_problems(agent_ds: dict[str, Any], patch: dict[str, Any]) -> list[str]:
    """Multus dials the kubelet's default socket dir (where the agent's proxy also finds the real kubelet); the
    patch puts a host dir there that the agent serves in, mounted at the same path in the agent, and that is the
    agent's pod-resources-proxy-path."""
    ctr = container(patch, "kube-multus")
    socket_dir = posixpath.join(OPTIONS_BY_NAME["var-lib-kubelet-dir"].default, "pod-resources")
    found = covering(mounts(patch, ctr), socket_dir)
    if not found or found[1] != "." or not found[0].host:
        return [f"Multus: no hostPath mount at {socket_dir}"]
    proxy_dir = found[0].host
    problems = same_path_problems(agent_ds, [proxy_dir])
    if MULTUS_SOCKET_DIR_OPTION in OPTIONS_BY_NAME:
        configured = getattr(agent_config(agent_ds), OPTIONS_BY_NAME[MULTUS_SOCKET_DIR_OPTION].attr)
        if posixpath.normpath(configured) != proxy_dir:
            problems.append(f"Multus reads host {proxy_dir}, the agent serves in {configured}")
    if "host-var-lib-kubelet" in {v["name"] for v in pod_spec(patch)["volumes"]}:
        problems.append("volume host-var-lib-kubelet would replace Multus's own /var/lib/kubelet volume")
    return problems


def test_pod_resources_dir_is_shared_with_multus(agent, multus_patch):
    assert MULTUS_SOCKET_DIR_OPTION in OPTIONS_BY_NAME
    assert multus_problems(agent, multus_patch) == []


def test_the_multus_check_can_fail(agent, multus_patch):
    moved = copy.deepcopy(agent)
    container(moved, "koordlet")["args"].append(f"--{MULTUS_SOCKET_DIR_OPTION}=/run/elsewhere")
    assert any("agent serves in /run/elsewhere" in p for p in multus_problems(moved, multus_patch))
    broken = copy.deepcopy(multus_patch)
    (vol,) = pod_spec(broken)["volumes"]
    vol["hostPath"]["path"] = "/var/run/koordlet"
    assert multus_problems(agent, broken) != []
    broken = copy.deepcopy(multus_patch)
    container(broken, "kube-multus")["volumeMounts"][0]["mountPath"] = "/var/lib/kubelet"
    assert multus_problems(agent, broken) == ["Multus: no hostPath mount at /var/lib/kubelet/pod-resources"]


def test_network_attachment_uses_the_proxy_resource_name():
    (nad,) = [d for d in docs("multus-podresources.yaml") if d.get("kind") == "NetworkAttachmentDefinition"]
    assert nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"] == wire.RESOURCE_RDMA
    config = yaml.safe_load(nad["spec"]["config"])              # JSON is YAML: the CNI config must parse
    assert (config["name"] and config.get("plugins")) or config.get("type")


def test_service_account_matches_rbac(agent, hami):
    (sa,) = [d for d in docs("rbac.yaml") if d["kind"] == "ServiceAccount"]
    assert pod_spec(agent)["serviceAccountName"] == sa["metadata"]["name"]
    assert agent["metadata"]["namespace"] == sa["metadata"]["namespace"]
    assert hami["metadata"]["namespace"] == sa["metadata"]["namespace"]


def probe_port(ctr: dict[str, Any], probe: dict[str, Any]) -> int:
    port = probe["httpGet"]["port"]
    if isinstance(port, str):
        (port,) = [p["containerPort"] for p in ctr.get("ports", []) if p.get("name") == port]
    return port


def get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_probes_hit_the_agents_routes(agent):
    config = agent_config(agent)
    ctr = container(agent, "koordlet")
    host, port = config.addr
    assert host in ("", "0.0.0.0", "::"), "with hostNetwork the kubelet probes the node IP, not loopback"
    probes = {k: ctr[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in ctr}
    assert {"livenessProbe", "readinessProbe"} <= set(probes)
    for name, probe in probes.items():
        assert probe_port(ctr, probe) == port, name
    assert port in [p["containerPort"] for p in ctr.get("ports", [])]

    state = {"ready": False}
    server = HttpServer(("127.0.0.1", 0), CollectorRegistry(), lambda: (state["ready"], "test"))
    server.start()
    try:
        served = server.address[1]
        paths = {name: probe["httpGet"]["path"] for name, probe in probes.items()}
        # not ready yet: liveness (and start-up) must still pass, or the kubelet kills a syncing agent
        assert get(served, paths["livenessProbe"]) == 200
        if "startupProbe" in paths:
            assert get(served, paths["startupProbe"]) == 200
        assert get(served, paths["readinessProbe"]) == 503
        state["ready"] = True
        assert get(served, paths["readinessProbe"]) == 200
    finally:
        server.stop()
