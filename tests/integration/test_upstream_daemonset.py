"""An unchanged upstream koordlet DaemonSet, image swapped: `koordlet <upstream args>` (no subcommand, as the
upstream image's `/koordlet <args>`) starts the real daemon, which serves /metrics and logs one line for each
upstream flag it accepts without implementing, and none for the flags it implements.

The args are upstream's exactly (helm chart v1.5.0–v1.8.0, config/manager/koordlet.yaml), except two deployment
facts of this test: the fake host tree stands in for what the chart mounts at /host-cgroup/, and the port is a
free one. What the DaemonSet would get from its pod (the API server, mounts) comes from the environment here:
standalone (no API server), the fake host's sysfs, no enforcement on this machine's real cgroups and sysctls
(AllAlpha turns on strategies that would change them), and the agent's files under the test's directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from koordlet.host.cgroup import CgroupVersion, Driver, KubeQOS
from koordlet.ops.compat import UPSTREAM_BY_NAME
from tests.fakehost import CgroupValues, FakeHost
from tests.integration.test_daemon import free_port, get
from tests.unit.test_upstream_compat import CHART_ARGS, MANAGER_ARGS
from tests.waits import wait_for

SOURCES = {"chart-v1.5.0-v1.8.0": CHART_ARGS, "config-manager-koordlet.yaml": MANAGER_ARGS}


def flag_name(arg: str) -> str:
    return arg.lstrip("-").partition("=")[0]


def local(args: list[str], cgroup_root: str, port: int) -> list[str]:
    """The upstream args with this test's host tree and port in place of /host-cgroup/ and :9316."""
    out = []
    for arg in args:
        name = flag_name(arg)
        if name == "cgroup-root-dir":
            arg = arg.replace("/host-cgroup/", cgroup_root)
        elif name == "addr":
            arg = arg.replace(":9316", f":{port}")
        out.append(arg)
    return out


def koordlet_command() -> list[str]:
    """The console script (what an image's /koordlet is), else the module."""
    script = os.path.join(os.path.dirname(sys.executable), "koordlet")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "koordlet"]


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_upstream_args_start_the_agent(source, tmp_path):
    upstream = SOURCES[source]
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    host.add_pod(KubeQOS.BURSTABLE, "uid-web", CgroupValues(cpu_ns=1, anon=64 << 20),
                 {"a" * 64: CgroupValues(cpu_ns=1, anon=60 << 20)})
    port = free_port()
    args = local(upstream, host.paths.cgroup_root.rstrip("/") + "/", port)
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOORDLET_")}
    env.update({
        "NODE_NAME": "node-a",                                   # the DaemonSet's downward API
        "KOORDLET_STANDALONE": "true",                           # no API server in this test
        "KOORDLET_ADDR": f"127.0.0.1:{port}",                    # only where the args have no -addr
        "KOORDLET_SYS_ROOT_DIR": host.paths.sys_root, "KOORDLET_SYS_FS_ROOT_DIR": host.paths.sys_fs_root,
        "KOORDLET_PROC_ROOT_DIR": "/proc/",
        "KOORDLET_RECONCILE_INTERVAL_SECONDS": "0",
        "KOORDLET_VAR_RUN_ROOT_DIR": str(run), "KOORDLET_VAR_LIB_KUBELET_DIR": str(tmp_path / "kubelet"),
        "KOORDLET_POD_RESOURCES_PROXY_PATH": str(tmp_path / "pod-resources"),
        "KOORDLET_TSDB_PATH": str(tmp_path / "cache"),
        "KOORDLET_PREDICTION_CHECKPOINT_FILEPATH": str(tmp_path / "checkpoints"),
        "KOORDLET_REPORT_DIR": str(tmp_path / "reports"),
    })
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log:          # --v=4: debug lines, more than a pipe holds
        proc = subprocess.Popen([*koordlet_command(), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        def serving() -> bool:
            try:
                return "koordlet_node_used_cpu_cores{" in get(base + "/metrics")[1]
            except OSError:
                return proc.poll() is not None     # exited: stop waiting, the assertion below says why
        assert wait_for(serving, 60, step=0.2) and proc.poll() is None, log_path.read_text()[-4000:]
        assert get(base + "/healthz") == (200, "ok\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log_path.read_text().splitlines()
    assert "configuration error" not in "\n".join(lines)
    for arg in upstream:
        name = flag_name(arg)
        said = [line for line in lines if f"upstream flag -{name}=" in line]
        kind = UPSTREAM_BY_NAME[name].kind
        if kind == "implemented":
            assert said == [], (name, said)
        elif kind == "inert":
            assert len(said) == 1 and " WARNING koordlet.ops.compat " in said[0] and "no effect here: " in said[0], \
                (name, said)
        else:
            assert len(said) == 1 and " INFO koordlet.ops.compat " in said[0] and "mapped" in said[0], (name, said)
    assert any(" DEBUG " in line for line in lines), "--v=4 should have turned on debug logging"
