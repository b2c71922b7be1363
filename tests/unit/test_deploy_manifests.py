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
from koordlet.base import wire
from koordlet.cli import _parser
from koordlet.host.paths import HostPaths
from koordlet.ops.config import Config, ConfigError, build, flag_values
from koordlet.ops.gates import DEFAULT_GATES
from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.options import OPTIONS_BY_NAME
from koordlet.ops.server import HttpServer

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OURS = ("koordlet.yaml", "koordlet-gpu.yaml", "hami-core-distribute.yaml", "multus-podresources.yaml", "rbac.yaml",
        "rbac-kubelet-proxy.yaml")
AGENTS = (("koordlet", "koordlet.yaml"), ("koordlet-gpu", "koordlet-gpu.yaml"))   # the two agent DaemonSets
GPU_LABEL = "nvidia.com/gpu.present"       # which of the two a node runs
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
def gpu_agent() -> dict[str, Any]:
    return daemonset("koordlet-gpu", "koordlet-gpu.yaml")


@pytest.fixture(scope="module", params=[name for name, _ in AGENTS])
def any_agent(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each agent DaemonSet in turn: what holds for the agent holds for both."""
    return daemonset(request.param, dict(AGENTS)[request.param])


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


def test_agent_runs_the_console_script_with_flags_the_agent_knows(any_agent):
    ctr = container(any_agent, "koordlet")
    with open(REPO / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts[ctr["command"][0]] == "koordlet.cli:main"
    config = agent_config(any_agent)               # ConfigError on an unknown flag, gate or bad value
    assert config.agent_mode == "daemonset" and config.node_name == "node-1"
    explicit = {g for g, on in config.feature_gates.items() if on}
    assert explicit <= set(DEFAULT_GATES)
    # a gate passed on the command line is one the default leaves off; these are what the other manifests need
    assert not [g for g in explicit if DEFAULT_GATES[g]]
    for gate in ("PodResourcesProxy", "Accelerators", "RDMADevices", "RDMADeviceInject"):
        assert config.gate(gate), gate
    # GPU injection only where there are GPUs (and HAMi-core's paths are mounted)
    assert config.gate("GPUEnvInject") is (any_agent["metadata"]["name"] == "koordlet-gpu")


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


def test_agent_mounts_every_host_root(any_agent):
    assert root_problems(any_agent) == []
    config = agent_config(any_agent)
    assert pod_spec(any_agent)["hostNetwork"] is True, f"kubelet-address {config.kubelet_address} is the node's"
    assert container(any_agent, "koordlet")["securityContext"]["privileged"] is True


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


def test_hami_core_paths_agree(gpu_agent, hami):
    agent = gpu_agent
    assert hami_problems(agent, hami) == []
    layout = HostLayout(libvgpu=agent_config(agent).hami_core_library_directory_path)
    # the agent checks libvgpu.so and the lock dir, and creates the cache dirs the runtime then bind-mounts
    assert same_path_problems(agent, [layout.libvgpu, layout.lock_dir, layout.cache_root]) == []
    assert pod_spec(hami)["nodeSelector"] == {wire.LABEL_GPU_VENDOR: wire.GPU_VENDOR_NVIDIA}


def test_the_hami_check_can_fail(gpu_agent, hami):
    agent = gpu_agent
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


def node_selected(ds: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a DaemonSet's pod lands on a node with these labels: its nodeSelector and the required node affinity
    (the operators the two agent DaemonSets use)."""
    spec = pod_spec(ds)
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    ops = {"In": lambda k, vs: labels.get(k) in vs, "NotIn": lambda k, vs: labels.get(k) not in vs,
           "Exists": lambda k, vs: k in labels, "DoesNotExist": lambda k, vs: k not in labels}
    return any(all(ops[e["operator"]](e["key"], e.get("values", [])) for e in term["matchExpressions"])
               for term in required["nodeSelectorTerms"])


@pytest.mark.parametrize("labels", [{}, {GPU_LABEL: "true"}, {GPU_LABEL: "false"}, {"other": "x"}])
def test_every_node_runs_exactly_one_agent(agent, gpu_agent, labels):
    running = [ds["metadata"]["name"] for ds in (agent, gpu_agent) if node_selected(ds, labels)]
    assert running == ["koordlet-gpu" if labels.get(GPU_LABEL) == "true" else "koordlet"]
    # two DaemonSets with overlapping selectors would fight over each other's pods
    selectors = [ds["spec"]["selector"]["matchLabels"] for ds in (agent, gpu_agent)]
    for ds, other in ((agent, selectors[1]), (gpu_agent, selectors[0])):
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        assert not all(pod_labels.get(k) == v for k, v in other.items())


def _without(obj: dict[str, Any], *paths: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for path in paths:
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = node[key]
        node.pop(last, None)
    return out


def test_gpu_variant_differs_only_in_what_gpus_need(agent, gpu_agent):
    """koordlet-gpu.yaml is koordlet.yaml plus the NVIDIA runtime class, GPU injection, NVML's environment and
    HAMi-core's two paths; anything else that differs is drift."""
    gpu_ctr, ctr = container(gpu_agent, "koordlet"), container(agent, "koordlet")
    assert pod_spec(gpu_agent)["runtimeClassName"] == "nvidia" and "runtimeClassName" not in pod_spec(agent)
    assert env(gpu_ctr) == {**env(ctr), "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    gates = agent_config(gpu_agent).feature_gates
    assert dict(gates) == {**agent_config(agent).feature_gates, "GPUEnvInject": True}
    hami = {"hami-vgpu", "hami-vgpulock"}
    assert {m["name"] for m in gpu_ctr["volumeMounts"]} == {m["name"] for m in ctr["volumeMounts"]} | hami
    assert {v["name"] for v in pod_spec(gpu_agent)["volumes"]} == {v["name"] for v in pod_spec(agent)["volumes"]} | hami
    a, g = copy.deepcopy(agent), copy.deepcopy(gpu_agent)
    for ds in (a, g):
        c = container(ds, "koordlet")
        c["env"] = [e for e in c["env"] if not e["name"].startswith("NVIDIA_")]
        c["args"] = [x for x in c["args"] if not x.startswith("--feature-gates=")]
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] not in hami]
        pod_spec(ds)["volumes"] = [v for v in pod_spec(ds)["volumes"] if v["name"] not in hami]
    names = ("metadata.name", "metadata.labels.koord-app", "spec.selector.matchLabels.koord-app",
             "spec.template.metadata.labels.koord-app", "spec.template.spec.runtimeClassName",
             "spec.template.spec.nodeSelector", "spec.template.spec.affinity")
    assert _without(g, *names) == _without(a, *names)


# hostPath types that make the kubelet create what is missing
CREATING = ("DirectoryOrCreate", "FileOrCreate", "")


def created_on_nodes(ds: dict[str, Any]) -> set[str]:
    return {posixpath.normpath(v["hostPath"]["path"]) for v in pod_spec(ds)["volumes"]
            if "hostPath" in v and v["hostPath"].get("type", "") in CREATING}


def test_no_host_directory_is_created_but_the_agents_own(any_agent):
    """Every hostPath the kubelet would create on a node that lacks it is the agent's own state (metric cache,
    checkpoints, the PodResources proxy's socket dir) or, on GPU nodes only, HAMi-core's two paths."""
    config = agent_config(any_agent)
    ms = mounts(any_agent, container(any_agent, "koordlet"))
    own = {host_side(ms, config.tsdb_path), host_side(ms, config.prediction_checkpoint_filepath),
           posixpath.normpath(config.pod_resources_proxy_path)}
    if any_agent["metadata"]["name"] == "koordlet-gpu":
        layout = HostLayout(libvgpu=config.hami_core_library_directory_path)
        own |= {posixpath.dirname(layout.libvgpu), posixpath.normpath(layout.lock_dir)}
    assert created_on_nodes(any_agent) <= own
    assert not created_on_nodes(any_agent) & {"/etc/kubernetes", "/usr/local/vgpu", "/tmp/vgpulock",
                                             "/etc/localtime"} - own


def test_kubelet_root_dir_is_configurable(agent):
    """A kubelet with --root-dir=/data/kubelet: the arg, the volume's path and its mountPath change together and
    the agent finds everything; the arg alone (or the volume alone) is caught."""
    def moved(arg: bool, volume: bool) -> dict[str, Any]:
        ds = copy.deepcopy(agent)
        ctr = container(ds, "koordlet")
        if arg:
            ctr["args"] = [x if not x.startswith("--var-lib-kubelet-dir=") else "--var-lib-kubelet-dir=/data/kubelet/"
                           for x in ctr["args"]]
        if volume:
            (vol,) = [v for v in pod_spec(ds)["volumes"] if v["name"] == "host-kubelet"]
            vol["hostPath"]["path"] = "/data/kubelet/"
            (mount,) = [m for m in ctr["volumeMounts"] if m["name"] == "host-kubelet"]
            mount["mountPath"] = "/data/kubelet"
        return ds

    assert any(x.startswith("--var-lib-kubelet-dir=") for x in container(agent, "koordlet")["args"])
    both = moved(arg=True, volume=True)
    assert agent_config(both).var_lib_kubelet_dir == "/data/kubelet/"
    assert HostPaths.from_config(agent_config(both)).var_lib_kubelet == "/data/kubelet/"
    assert root_problems(both) == []
    assert any(p.startswith("var_lib_kubelet") for p in root_problems(moved(arg=True, volume=False)))
    assert any(p.startswith("var_lib_kubelet") for p in root_problems(moved(arg=False, volume=True)))


def test_service_selects_both_agents_and_their_metrics_port(agent, gpu_agent):
    (svc,) = [d for d in docs("koordlet.yaml") if d.get("kind") == "Service"]
    assert svc["metadata"]["namespace"] == agent["metadata"]["namespace"]
    assert svc["spec"]["clusterIP"] == "None"              # endpoints are the pods (node IPs, hostNetwork)
    (port,) = svc["spec"]["ports"]
    for ds in (agent, gpu_agent):
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), ds["metadata"]["name"]
        ctr = container(ds, "koordlet")
        (target,) = [p for p in ctr["ports"] if p["name"] == port["targetPort"]]
        assert target["containerPort"] == agent_config(ds).addr[1] == port["port"]


def test_service_monitor_scrapes_the_service():
    (svc,) = [d for d in docs("koordlet.yaml") if d.get("kind") == "Service"]
    (mon,) = [d for d in docs("monitoring/servicemonitor.yaml") if d.get("kind") == "ServiceMonitor"]
    assert mon["apiVersion"] == "monitoring.coreos.com/v1"
    spec = mon["spec"]
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in spec["selector"]["matchLabels"].items())
    assert svc["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in [p["name"] for p in svc["spec"]["ports"]]
    assert endpoint["path"] in AgentMetrics("node-1").pages()            # the pages the agent serves


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


def test_pod_resources_dir_is_shared_with_multus(any_agent, multus_patch):
    assert MULTUS_SOCKET_DIR_OPTION in OPTIONS_BY_NAME
    assert multus_problems(any_agent, multus_patch) == []


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


def test_service_account_matches_rbac(any_agent, hami):
    (sa,) = [d for d in docs("rbac.yaml") if d["kind"] == "ServiceAccount"]
    assert pod_spec(any_agent)["serviceAccountName"] == sa["metadata"]["name"]
    assert any_agent["metadata"]["namespace"] == sa["metadata"]["namespace"]
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


def test_probes_hit_the_agents_routes(any_agent):
    config = agent_config(any_agent)
    ctr = container(any_agent, "koordlet")
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


# --------------------------------------------------------------------------------------------------
# RBAC: exactly the calls the agent makes
# --------------------------------------------------------------------------------------------------

# The kubelet's authorization of its own HTTPS API (pkg/kubelet/server/auth.go): these paths map to a fine-grained
# subresource of nodes (Kubernetes >= 1.33 with KubeletFineGrainedAuthz, GA in 1.36) and fall back to nodes/proxy
# when that is denied (and on older kubelets); any other path is nodes/proxy directly.
KUBELET_FINE_GRAINED = {"/pods": "pods", "/runningpods": "pods", "/healthz": "healthz", "/configz": "configz"}
KUBELET_NO_FALLBACK = {"/stats": "stats", "/metrics": "metrics", "/logs": "log", "/spec": "spec",
                       "/checkpoint": "checkpoint"}
_HTTP_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class Access(NamedTuple):
    """What an RBAC authorizer is asked: ``resource`` carries the subresource as RBAC rules spell it
    (``pods/eviction``)."""

    verb: str
    group: str
    resource: str


def api_access(method: str, path: str, query: dict[str, list[str]]) -> Access:
    """The RBAC attributes of one API server request, as the apiserver's RequestInfoFactory derives them."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        assert parts[0] == "apis", path
        group, rest = parts[1], parts[3:]
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]])
    named = len(rest) > 1
    verb = _HTTP_VERBS[method]
    if method == "GET" and not named:
        verb = "watch" if query.get("watch", ["false"])[0] in ("true", "1") else "list"
    elif method == "DELETE" and not named:
        verb = "deletecollection"
    return Access(verb, group, resource)


def kubelet_access(method: str, path: str, fine_grained: bool) -> Access:
    """The attributes the kubelet asks the API server about for one request to :10250 (SubjectAccessReview)."""
    clean = "/" + path.split("?")[0].strip("/")
    prefix = "/" + clean.split("/")[1]
    sub = KUBELET_NO_FALLBACK.get(prefix) or (KUBELET_FINE_GRAINED.get(prefix) if fine_grained else None) or "proxy"
    return Access(_HTTP_VERBS[method], "", f"nodes/{sub}")


def cluster_role(file: str) -> list[dict[str, Any]]:
    (role,) = [d for d in docs(file) if d["kind"] == "ClusterRole"]
    return list(role["rules"])


def granted(rules: list[dict[str, Any]]) -> set[Access]:
    """Every (verb, group, resource) the rules allow; a wildcard would make this meaningless, so it is refused."""
    out = set()
    for rule in rules:
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {rule}"
        out |= {Access(v, g, r) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_rbac_bindings_name_the_agents_service_account(agent):
    sa = (pod_spec(agent)["serviceAccountName"], agent["metadata"]["namespace"])
    for file in ("rbac.yaml", "rbac-kubelet-proxy.yaml"):
        (role,) = [d for d in docs(file) if d["kind"] == "ClusterRole"]
        (binding,) = [d for d in docs(file) if d["kind"] == "ClusterRoleBinding"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": role["metadata"]["name"]}, file
        assert [(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]] == [("ServiceAccount", *sa)]
    # the wide kubelet verb lives only in the file for old clusters, alone
    assert not [a for a in granted(cluster_role("rbac.yaml")) if a.resource == "nodes/proxy"]
    assert granted(cluster_role("rbac-kubelet-proxy.yaml")) == {Access("get", "", "nodes/proxy")}


def test_request_attributes_are_the_apiservers():
    assert api_access("GET", "/api/v1/nodes", {"fieldSelector": ["metadata.name=n"]}) == Access("list", "", "nodes")
    assert api_access("GET", "/api/v1/nodes", {"watch": ["true"]}) == Access("watch", "", "nodes")
    assert api_access("GET", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/n", {}) == \
        Access("get", "slo.koordinator.sh", "nodemetrics")
    assert api_access("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/n/status", {}) == \
        Access("update", "slo.koordinator.sh", "nodemetrics/status")
    assert api_access("POST", "/api/v1/namespaces/default/pods/web/eviction", {}) == \
        Access("create", "", "pods/eviction")
    assert api_access("POST", "/api/v1/namespaces/default/events", {}) == Access("create", "", "events")
    assert kubelet_access("GET", "/pods/", True) == Access("get", "", "nodes/pods")
    assert kubelet_access("GET", "/pods/", False) == Access("get", "", "nodes/proxy")
    assert kubelet_access("GET", "/configz", True) == Access("get", "", "nodes/configz")
    assert kubelet_access("POST", "/exec/ns/pod/c", True) == Access("create", "", "nodes/proxy")
    assert kubelet_access("GET", "/stats/summary", False) == Access("get", "", "nodes/stats")
