"""The agent installed by ``make install``'s own steps into a Debian 12 machine booted with systemd
(doubles/nspawn.py: systemd-nspawn; the machine's cgroups are test roots of this host's hierarchies), and checked
against systemd itself:

1. ``systemctl start koordlet`` returns once the agent has sent READY=1 (Type=notify; the agent logs that it serves
   before systemd logs the unit started) and the unit is active (running), its STATUS= set;
2. the unit's sandboxing is in force: ``systemctl show`` has it, the running process has the capability bounding
   set, no_new_privs and a seccomp filter, its mounts the read-only and hidden paths, its cgroup the memory, CPU
   and device limits; ``systemd-analyze security koordlet``, online against the loaded unit, scores at most 4.0;
3. the journal carries the agent's log lines, under its unit;
4. host-application QoS from a local NodeSLO (host mode) on the cgroups of two real services of the machine:
   cpu.idle for the BE one, the share pool as cpuset for the LS one (its process's CPU affinity follows); kept when
   a service restarts (systemd makes its cgroup again); given back when the entries go;
5. a loop frozen inside the agent (its pods file replaced by a FIFO with no writer, as test_watchdog.py freezes
   loops) stops the watchdog pings: systemd kills the agent after WatchdogSec (SIGABRT), restarts it (NRestarts
   grows), and it comes back healthy;
6. ``systemctl stop`` ends it within TimeoutStopSec with exit status 0.

The install: wheels of the project, its build backend and its dependencies built here by pip (this machine's pip
configuration and index), then inside the machine, as an operator does it, from a copy of the checkout bind-mounted
in: ``make install`` with pip given only those wheels (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), then the operator's
edits to /etc/koordlet/config.yaml (a free port: the machine shares this host's network; pod sync every second; a
pods file and a NodeSLO file).

Root only; skips with the reason where the machine cannot boot (no systemd-nspawn: ``apt-get install
systemd-container``; no debootstrap; no cgroup v1 controllers; no Debian source in this machine's apt sources), and
fails instead under ``KOORDLET_REQUIRE_SYSTEMD=1`` (CI). The first run debootstraps the machine's root (about a
minute; kept in /var/cache/koordlet-ci/nspawn for a week). Every test shares one machine and one install
(xdist_group), in this order; about a minute and a half in all, most of it the watchdog's own 30 s and the install.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from doubles import nspawn
from image.build import copy_sources
from koordlet.host.cgroup import parse_cpu_list
from tests.waits import wait_for

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("systemd")]

CHECKOUT = Path(__file__).resolve().parents[2]
UNIT_FILE = CHECKOUT / "systemd" / "koordlet.service"
REQUIRED = os.environ.get("KOORDLET_REQUIRE_SYSTEMD", "") not in ("", "0")
INSTALL = "/root/koordlet-install"            # where the machine sees the checkout's copy and the wheels
MACHINE_PYTHON = (3, 11)                      # Debian 12's
MAX_EXPOSURE = 4.0
WAIT = 60.0
OFFLINE = re.compile(r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
                     r"No matching distribution found")
# the capabilities the unit names, by number (linux/capability.h)
CAPS = {"CAP_DAC_OVERRIDE": 1, "CAP_KILL": 5, "CAP_NET_ADMIN": 12, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
        "CAP_SYS_RESOURCE": 24}

BE_APP, LS_APP = "hostapp-be.service", "hostapp-ls.service"
# two services standing in for host applications. On cgroup v1 systemd makes a unit's cpu cgroup only when it
# accounts or weighs its CPU (CPUAccounting=yes), and never a cpuset cgroup: the LS service makes its own at the same
# relative path, starting on the first CPU only, as an operator of a v1 host does for a cpuset-managed service.
UNITS = {
    BE_APP: "[Unit]\nDescription=stand-in for a best-effort host service\n\n"
            "[Service]\nCPUAccounting=yes\nExecStart=/bin/sleep infinity\n",
    LS_APP: "[Unit]\nDescription=stand-in for a latency-sensitive host service\n\n"
            "[Service]\nCPUAccounting=yes\nExecStart=/usr/local/sbin/hostapp-ls\n",
}
LS_SCRIPT = f"""#!/bin/sh
set -e
p=/sys/fs/cgroup/cpuset
for d in system.slice {LS_APP}; do
    mkdir -p "$p/$d"
    [ -n "$(cat "$p/$d/cpuset.mems")" ] || cat "$p/cpuset.mems" > "$p/$d/cpuset.mems"
    [ -n "$(cat "$p/$d/cpuset.cpus")" ] || cat "$p/cpuset.cpus" > "$p/$d/cpuset.cpus"
    p="$p/$d"
done
echo 0 > "$p/cpuset.cpus"
echo $$ > "$p/cgroup.procs"
exec sleep infinity
"""


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"KOORDLET_REQUIRE_SYSTEMD is set but the systemd machine cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nodeslo(*apps: dict[str, object]) -> str:
    """A NodeSLO for the machine: CPU QoS on for LS and BE (cpu.idle for BE on kernels without group identity),
    and ``apps`` as hostApplications."""
    return yaml.safe_dump({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                           "metadata": {"name": "host"},
                           "spec": {"resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": True}},
                                                            "beClass": {"cpuQOS": {"enable": True}}},
                                    "hostApplications": list(apps)}})


def app_entry(name: str, qos: str, unit: str) -> dict[str, object]:
    return {"name": name, "qos": qos, "priority": "koord-prod" if qos == "LS" else "koord-batch",
            "cgroupPath": {"base": "CgroupRoot", "parentDir": "system.slice", "relativePath": unit}}


@dataclass
class Service:
    machine: nspawn.Machine
    port: int

    def run(self, *cmd: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self.machine.run(*cmd, check=check, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, "-p", ",".join(props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()
        except OSError as e:
            return 0, str(e)

    def metric(self, name: str) -> float:
        _, text = self.get("/metrics")
        return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                   if line.startswith((name + "{", name + " ")))

    def write(self, inside: str, text: str) -> None:
        """A file of the machine, replaced at once (a reader sees the old or the new content)."""
        path = self.machine.path(inside)
        staged = path + ".new"
        with open(staged, "w") as f:
            f.write(text)
        os.replace(staged, path)

    def cgroup_file(self, hierarchy: str, rel: str, name: str) -> str:
        with open(os.path.join(self.machine.cgroup(hierarchy, rel), name)) as f:
            return f.read().strip()

    def journal(self, *args: str) -> list[dict[str, str]]:
        out = self.run("journalctl", "--no-pager", "-o", "json", *args).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def cursor(self) -> str:
        entries = self.journal("-n", "1")
        return entries[-1]["__CURSOR"] if entries else ""

    def started(self) -> None:
        """The agent running and ready (a test run alone, or after one that stopped it)."""
        if self.show("koordlet", "ActiveState")["ActiveState"] != "active":
            self.run("systemctl", "start", "koordlet")
        assert wait_for(lambda: self.get("/readyz")[0] == 200, WAIT, step=0.2), self.get("/readyz")

    def cycles(self, n: int) -> None:
        """Until the agent has run ``n`` more of its 1 s collection cycles (its QoS reconcile runs on the same
        period)."""
        metric = "koordlet_collect_cycle_duration_seconds_count"
        start = self.metric(metric)
        assert wait_for(lambda: self.metric(metric) >= start + n, WAIT, step=0.2), f"{n} agent cycles"


def build_wheels(dest: Path) -> None:
    """The project's wheel, its build backend's (``make install`` builds the project again inside) and its
    dependencies', in ``dest/wheels``; the sources ``make install`` runs from in ``dest/src``."""
    src, wheels = dest / "src", dest / "wheels"
    src.mkdir(parents=True)
    copy_sources(str(src))
    backend = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["build-system"]["requires"]
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet",
                           "--wheel-dir", str(wheels), str(src), *backend], capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0 and OFFLINE.search(done.stdout + done.stderr):
        unavailable(f"pip could not reach the package index: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[nspawn.Machine]:
    reason = nspawn.missing()
    if reason is None and sys.version_info[:2] != MACHINE_PYTHON:
        reason = (f"the machine's Python is Debian 12's {'.'.join(map(str, MACHINE_PYTHON))}: wheels built by "
                  f"this Python {sys.version_info[0]}.{sys.version_info[1]} would not install there")
    if reason:
        unavailable(reason)
    workdir = tmp_path_factory.mktemp("machine")
    install = workdir / "install"
    build_wheels(install)
    started = time.monotonic()
    root = nspawn.debian_root()
    print(f"debian root: {time.monotonic() - started:.1f} s ({root})")
    m = nspawn.Machine(root, str(workdir), binds=[(str(install), INSTALL)])
    try:
        started = time.monotonic()
        m.start()
        print(f"machine booted: {time.monotonic() - started:.1f} s")
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def service(machine: nspawn.Machine) -> Service:
    started = time.monotonic()
    done = machine.run("make", "-C", f"{INSTALL}/src", "install", timeout=900,
                       env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{INSTALL}/wheels"})
    print(f"make install: {time.monotonic() - started:.1f} s")
    assert "installed: /usr/local/bin/koordlet -> /opt/koordlet/bin/koordlet" in done.stdout, done.stdout
    svc = Service(machine, free_port())
    # the operator's edits of the installed example config
    config = Path(machine.path("/etc/koordlet/config.yaml")).read_text()
    assert "\naddr: 127.0.0.1:9316" in config and "standalone: true" in config
    svc.write("/etc/koordlet/config.yaml", config.replace("\naddr: 127.0.0.1:9316", f"\naddr: 127.0.0.1:{svc.port}")
              + "pods-file: /etc/koordlet/pods.yaml\nkubelet-sync-interval: 1s\n"
              + "nodeslo-file: /etc/koordlet/nodeslo.yaml\n")
    svc.write("/etc/koordlet/pods.yaml", "[]\n")
    svc.write("/etc/koordlet/nodeslo.yaml", nodeslo())
    for name, text in UNITS.items():
        svc.write(f"/etc/systemd/system/{name}", text)
    svc.write("/usr/local/sbin/hostapp-ls", LS_SCRIPT)
    os.chmod(machine.path("/usr/local/sbin/hostapp-ls"), 0o755)
    svc.run("systemctl", "daemon-reload")
    svc.run("systemctl", "start", BE_APP, LS_APP)
    return svc


def test_systemctl_start_returns_after_ready_and_the_unit_is_active_running(service):
    cursor = service.cursor()
    service.run("systemctl", "start", "koordlet")
    props = service.show("koordlet", "Type", "ActiveState", "SubState", "StatusText", "WatchdogUSec", "NRestarts")
    assert (props["Type"], props["ActiveState"], props["SubState"]) == ("notify", "active", "running"), props
    assert props["StatusText"].startswith("running:"), props
    assert props["WatchdogUSec"] == "30s" and props["NRestarts"] == "0", props
    # READY=1 follows the server's start: the agent's "serving" line comes before systemd's "Started"
    entries = service.journal("-u", "koordlet", f"--after-cursor={cursor}")
    messages = [e["MESSAGE"] for e in entries]
    serving = next(i for i, m in enumerate(messages) if f"http serving addr=127.0.0.1:{service.port}" in m)
    started = next(i for i, m in enumerate(messages) if m.startswith("Started koordlet.service"))
    assert serving < started, messages
    assert wait_for(lambda: service.get("/readyz") == (200, "ok\n"), WAIT, step=0.2), service.get("/readyz")
    assert service.get("/healthz") == (200, "ok\n")


def test_the_units_sandboxing_is_in_force(service):
    service.started()
    unit = UNIT_FILE.read_text()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if re.match(r"^[A-Z]\w*=", line))
    booleans = [k for k, v in settings.items() if v == "yes"]
    props = service.show("koordlet", *booleans, "ProtectSystem", "CapabilityBoundingSet", "DevicePolicy",
                         "RestrictAddressFamilies", "SystemCallArchitectures", "MemoryMax", "CPUQuotaPerSecUSec",
                         "UMask", "ProtectControlGroups", "PrivateNetwork", "PrivateUsers", "User", "MainPID")
    assert {k: props[k] for k in booleans} == dict.fromkeys(booleans, "yes"), props
    wanted_caps = set(settings["CapabilityBoundingSet"].split())
    assert {c.upper() for c in props["CapabilityBoundingSet"].split()} == wanted_caps, props
    assert (props["ProtectSystem"], props["DevicePolicy"], props["SystemCallArchitectures"],
            props["UMask"]) == ("strict", "closed", "native", "0077"), props
    assert set(props["RestrictAddressFamilies"].split()) == set(settings["RestrictAddressFamilies"].split())
    assert (props["MemoryMax"], props["CPUQuotaPerSecUSec"]) == (str(256 << 20), "500ms"), props
    # what the agent's job needs stays: cgroup writes, the host's network, real root
    assert (props["ProtectControlGroups"], props["PrivateNetwork"], props["PrivateUsers"]) == ("no", "no", "no")

    # in force on the running process
    pid = props["MainPID"]
    status = dict(line.split(":", 1) for line in service.run("cat", f"/proc/{pid}/status").stdout.splitlines())
    pid1 = dict(line.split(":", 1) for line in service.run("cat", "/proc/1/status").stdout.splitlines())
    unit_mask = sum(1 << CAPS[c] for c in wanted_caps)
    # the unit's set, less what the machine itself is not given (nspawn keeps CAP_NET_ADMIN for a private network)
    assert int(status["CapBnd"], 16) == unit_mask & int(pid1["CapBnd"], 16), (status["CapBnd"], pid1["CapBnd"])
    assert int(status["CapEff"], 16) == int(status["CapBnd"], 16)
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2", status
    mounts = {}
    for line in service.run("cat", f"/proc/{pid}/mountinfo").stdout.splitlines():
        fields = line.split()
        mounts[fields[4]] = fields[5].split(",")
    for path in ("/", "/usr", "/etc", "/tmp", "/proc/sys", "/home", "/root"):
        owner = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len)
        assert "ro" in mounts[owner], (path, owner, mounts[owner])
    for path in ("/var/lib/koordlet", "/run/koordlet", "/var/log/koordlet", "/sys/fs/cgroup/cpu",
                 "/proc/sys/vm/min_free_kbytes"):
        assert "rw" in mounts[path], (path, mounts.get(path))
    # its cgroup: the memory and CPU limits, and the device list of DevicePolicy=closed
    rel = "system.slice/koordlet.service"
    assert service.cgroup_file("memory", rel, "memory.limit_in_bytes") == str(256 << 20)
    assert (service.cgroup_file("cpu", rel, "cpu.cfs_quota_us"),
            service.cgroup_file("cpu", rel, "cpu.cfs_period_us")) == ("50000", "100000")
    devices = service.cgroup_file("devices", rel, "devices.list").splitlines()
    assert "a *:* rwm" not in devices and "c 1:3 rwm" in devices, devices       # /dev/null, nothing wholesale

    analyze = service.run("systemd-analyze", "security", "koordlet", "--no-pager").stdout
    found = re.search(r"Overall exposure level for koordlet\.service: ([0-9.]+)", analyze)
    assert found, analyze[-2000:]
    print(f"systemd-analyze security koordlet (online): {found.group(1)}")
    assert float(found.group(1)) <= MAX_EXPOSURE


def test_the_journal_carries_the_agents_log_lines(service):
    service.started()
    pid = service.show("koordlet", "MainPID")["MainPID"]
    entries = [e for e in service.journal("-u", "koordlet") if e.get("_PID") == pid]
    assert entries and all(e["_SYSTEMD_UNIT"] == "koordlet.service" for e in entries)
    assert {e["SYSLOG_IDENTIFIER"] for e in entries} == {"koordlet"}
    messages = [e["MESSAGE"] for e in entries]
    assert any("agent starting node=" in m and "mode=host" in m for m in messages), messages[:20]
    assert any(f"http serving addr=127.0.0.1:{service.port}" in m for m in messages), messages[:20]


def test_host_application_qos_applies_to_real_services_and_is_given_back(service):
    service.started()
    be_rel, ls_rel = f"system.slice/{BE_APP}", f"system.slice/{LS_APP}"
    pool = service.cgroup_file("cpuset", "", "cpuset.cpus")          # no pods: every CPU is in the share pool
    assert service.cgroup_file("cpuset", ls_rel, "cpuset.cpus") == "0"
    assert service.cgroup_file("cpu", be_rel, "cpu.idle") == "0"
    ls_pid = service.show(LS_APP, "MainPID")["MainPID"]

    def affinity() -> list[int]:
        found = re.search(r"Cpus_allowed_list:\s*(\S+)", service.run("cat", f"/proc/{ls_pid}/status").stdout)
        assert found
        return parse_cpu_list(found.group(1))

    assert affinity() == [0]
    service.write("/etc/koordlet/nodeslo.yaml", nodeslo(app_entry("shipper", "BE", BE_APP),
                                                        app_entry("web", "LS", LS_APP)))

    def applied() -> bool:
        return (service.cgroup_file("cpu", be_rel, "cpu.idle") == "1"
                and parse_cpu_list(service.cgroup_file("cpuset", ls_rel, "cpuset.cpus")) == parse_cpu_list(pool))
    assert wait_for(applied, WAIT, step=0.2), (service.cgroup_file("cpu", be_rel, "cpu.idle"),
                                               service.cgroup_file("cpuset", ls_rel, "cpuset.cpus"), pool)
    assert affinity() == parse_cpu_list(pool)
    assert service.cgroup_file("cpu", ls_rel, "cpu.idle") == "0"
    owners = {e["owner"] for e in json.loads(service.get("/events")[1])}
    assert {"hostapp shipper", "hostapp web"} <= owners, owners

    # systemd makes the service's cgroup again at its restart: the agent writes the new one at its next cycle
    # (not a minute later, when its write cache would expire)
    service.run("systemctl", "restart", BE_APP)
    assert wait_for(lambda: service.cgroup_file("cpu", be_rel, "cpu.idle") == "1", 20, step=0.2), \
        "cpu.idle of the restarted service's new cgroup"

    # the entries go: cpu.idle back to 0, the cpuset to the parent's CPUs, and the agent leaves them alone after
    service.write("/etc/koordlet/nodeslo.yaml", nodeslo())
    parent = service.cgroup_file("cpuset", "system.slice", "cpuset.cpus")
    assert wait_for(lambda: service.cgroup_file("cpu", be_rel, "cpu.idle") == "0", WAIT, step=0.2)
    assert parse_cpu_list(service.cgroup_file("cpuset", ls_rel, "cpuset.cpus")) == parse_cpu_list(parent)
    with open(os.path.join(service.machine.cgroup("cpuset", ls_rel), "cpuset.cpus"), "w") as f:
        f.write("0")                                                  # the operator's own setting now
    service.cycles(3)
    assert service.cgroup_file("cpuset", ls_rel, "cpuset.cpus") == "0"
    assert service.cgroup_file("cpu", be_rel, "cpu.idle") == "0"


class Freeze:
    """``inside`` (a file of the machine) becomes a FIFO nobody writes to: the agent's next open(2) of it blocks in
    the kernel, as on a hung filesystem. :meth:`release` puts a regular file with ``content`` back and hands any
    reader blocked on the FIFO the same content."""

    def __init__(self, service: Service, inside: str, content: str) -> None:
        self.path, self.content = service.machine.path(inside), content
        fifo = self.path + ".fifo"
        os.mkfifo(fifo)
        os.replace(fifo, self.path)

    def release(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)      # a writer for whoever waits; never blocks
        try:
            staged = self.path + ".new"
            with open(staged, "w") as f:
                f.write(self.content)
            os.replace(staged, self.path)
            os.write(fd, self.content.encode())
        finally:
            os.close(fd)


def test_a_frozen_loop_stops_the_watchdog_and_systemd_restarts_the_agent_healthy(service):
    service.started()
    before = service.show("koordlet", "NRestarts", "MainPID")
    cursor = service.cursor()
    frozen = Freeze(service, "/etc/koordlet/pods.yaml", "[]\n")
    released = False
    try:
        assert wait_for(lambda: service.get("/healthz")[1].startswith("stuck loops: pods"), WAIT, step=0.5), \
            service.get("/healthz")
        # WatchdogSec (30 s) after the last ping systemd kills the agent; release the file before the restart
        # (RestartSec, 5 s) so the new agent reads it
        assert wait_for(lambda: service.show("koordlet", "Result")["Result"] == "watchdog", 90, step=0.3), \
            service.show("koordlet", "Result", "ActiveState", "SubState", "NRestarts")
        frozen.release()
        released = True
    finally:
        if not released:
            frozen.release()

    def back() -> bool:
        now = service.show("koordlet", "ActiveState", "SubState", "NRestarts")
        return (now["ActiveState"], now["SubState"], now["NRestarts"]) == (
            "active", "running", str(int(before["NRestarts"]) + 1))
    assert wait_for(back, WAIT, step=0.5), service.show("koordlet", "ActiveState", "SubState", "NRestarts", "Result")
    assert service.show("koordlet", "MainPID")["MainPID"] != before["MainPID"]
    assert wait_for(lambda: service.get("/readyz") == (200, "ok\n"), WAIT, step=0.2), service.get("/readyz")
    assert service.get("/healthz") == (200, "ok\n")
    messages = [e["MESSAGE"] for e in service.journal("-u", "koordlet", f"--after-cursor={cursor}")]
    assert any("Watchdog timeout" in m for m in messages), messages[-30:]
    assert any("SIGABRT" in m for m in messages), messages[-30:]


def test_systemctl_stop_ends_it_cleanly_within_its_timeout(service):
    service.started()
    timeout = service.show("koordlet", "TimeoutStopUSec")["TimeoutStopUSec"]
    assert timeout == "10s"
    cursor = service.cursor()
    started = time.monotonic()
    service.run("systemctl", "stop", "koordlet")
    took = time.monotonic() - started
    print(f"systemctl stop: {took:.1f} s")
    props = service.show("koordlet", "ActiveState", "Result", "ExecMainStatus")
    assert (props["ActiveState"], props["Result"], props["ExecMainStatus"]) == ("inactive", "success", "0"), props
    assert took < 10
    messages = [e["MESSAGE"] for e in service.journal("-u", "koordlet", f"--after-cursor={cursor}")]
    assert any("agent stopped" in m for m in messages), messages
    assert not any("SIGKILL" in m or "timed out" in m for m in messages), messages
