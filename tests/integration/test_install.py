"""The bare-host install: `make install` into temporary PREFIX, BINDIR, CONFDIR and UNITDIR (never the real /opt,
/usr/local or /etc), the installed command run for real, the installed unit checked by systemd's own tools, `make
uninstall` with and without PURGE=1.

`make install` builds the package from a copy of the checkout (pip builds in the source tree, and the suite writes
nothing into the checkout) and installs its dependencies from the package index, like an operator's install.
The unit checks (``systemd-analyze verify`` and ``security --offline``) skip where systemd-analyze is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from koordlet import __version__
from koordlet.host.cgroup import CgroupVersion, Driver
from tests.fakehost import FakeHost

CHECKOUT = Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")
MAX_EXPOSURE = 4.0
# what the index cannot be reached looks like in pip's output: then there is nothing to install from
OFFLINE = re.compile(r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
                     r"No matching distribution found")

pytestmark = [pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
              pytest.mark.xdist_group("install")]   # one install, one worker (make test: --dist loadgroup)


def make(src: Path, target: str, dirs: dict[str, Path], **extra: str) -> subprocess.CompletedProcess[str]:
    variables = [f"{k}={v}" for k, v in dirs.items()] + [f"{k}={v}" for k, v in extra.items()]
    # SYSTEMCTL=false: whatever UNITDIR says, this test never talks to the machine's service manager
    return subprocess.run(["make", "-C", str(src), target, f"PYTHON={sys.executable}", "SYSTEMCTL=false",
                           *variables], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    shutil.copytree(CHECKOUT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "var", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "shared"))
    dirs = {"PREFIX": root / "opt" / "koordlet", "BINDIR": root / "bin", "CONFDIR": root / "etc" / "koordlet",
            "UNITDIR": root / "units", "STATEDIR": root / "state" / "koordlet", "LOGDIR": root / "log" / "koordlet"}
    r = make(src, "install", dirs)
    if r.returncode != 0 and OFFLINE.search(r.stdout + r.stderr):
        pytest.skip(f"make install could not reach the package index: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return src, dirs


def test_install_runs_the_installed_command_from_its_own_venv(installed, tmp_path):
    _, d = installed
    link = d["BINDIR"] / "koordlet"
    assert link.is_symlink() and os.readlink(link) == str(d["PREFIX"] / "bin" / "koordlet")
    assert (d["PREFIX"] / "pyvenv.cfg").is_file()                  # a venv of its own, not the system's Python
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"koordlet-py {__version__}"
    # the installed agent, one real cycle on a fake host, its state under STATE_DIRECTORY (as the unit gives it)
    host = FakeHost(str(tmp_path / "host"), CgroupVersion.V2, Driver.SYSTEMD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    once = subprocess.run([str(link), "run", "--once", "--standalone", "--node-name", "n",
                           "--cgroup-root-dir", host.paths.cgroup_root, "--proc-root-dir", host.paths.proc_root,
                           "--collect-res-used-interval", "0.2"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=dict(env, STATE_DIRECTORY=str(tmp_path / "state")))
    assert once.returncode == 0, once.stderr[-3000:]
    assert "node=n" in once.stdout and "SCOPE" in once.stdout
    # it ran from the install, not from this checkout
    where = subprocess.run([str(d["PREFIX"] / "bin" / "python"), "-c", "import koordlet; print(koordlet.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert where.stdout.strip().startswith(str(d["PREFIX"])), where


def test_install_writes_the_unit_for_its_paths_and_the_example_config(installed):
    src, d = installed
    unit = (d["UNITDIR"] / "koordlet.service").read_text()
    assert f"ExecStart={d['PREFIX']}/bin/koordlet run --config {d['CONFDIR']}/config.yaml" in unit
    assert "/opt/koordlet" not in unit.replace(str(d["PREFIX"]), "PREFIX")
    assert (d["CONFDIR"] / "config.yaml").read_text() == (src / "systemd" / "config.yaml").read_text()


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_the_installed_unit_verifies_clean_and_scores_at_most_4(installed):
    _, d = installed
    unit = str(d["UNITDIR"] / "koordlet.service")
    verify = subprocess.run([str(ANALYZE), "verify", unit], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
    assert exposure(unit) <= MAX_EXPOSURE


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_the_shipped_unit_scores_at_most_4_and_keeps_what_the_agent_needs(tmp_path):
    """The unit in the checkout, ExecStart pointed at this test's interpreter's `koordlet`: verify clean, exposure
    at most 4.0, and the settings that keep the agent able to do its job (cgroups, tunables, tc, notify)."""
    text = (CHECKOUT / "systemd" / "koordlet.service").read_text()
    koordlet = Path(sys.executable).parent / "koordlet"
    if not koordlet.exists():
        pytest.skip(f"{koordlet} missing (the package is not installed in this interpreter's environment)")
    unit = tmp_path / "koordlet.service"
    unit.write_text(text.replace("/opt/koordlet/bin/koordlet", str(koordlet)))
    verify = subprocess.run([str(ANALYZE), "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
    assert exposure(str(unit)) <= MAX_EXPOSURE
    settings = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line and not line.startswith("#")}
    assert {"Type", "WatchdogSec", "NotifyAccess", "StateDirectory"} <= settings
    assert "Type=notify" in text and "ProtectControlGroups=yes" not in text and "PrivateNetwork=yes" not in text
    assert re.search(r"^RestrictAddressFamilies=.*AF_NETLINK", text, re.M)           # tc over rtnetlink
    assert re.search(r"^ReadWritePaths=.*-/proc/sys/vm/min_free_kbytes", text, re.M)  # the SystemConfig sysctls


def exposure(unit: str) -> float:
    r = subprocess.run([str(ANALYZE), "security", "--offline=yes", "--no-pager", unit], capture_output=True,
                       text=True, timeout=120)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    assert found, r.stdout[-2000:] + r.stderr
    return float(found.group(1))


def test_reinstall_keeps_an_edited_config_and_uninstall_keeps_config_and_state_unless_purged(installed):
    src, d = installed
    config = d["CONFDIR"] / "config.yaml"
    config.write_text("standalone: true\nlog-level: debug\n")          # the operator's edit
    r = make(src, "install", d)
    assert r.returncode == 0, r.stderr[-3000:]
    assert config.read_text() == "standalone: true\nlog-level: debug\n" and "kept" in r.stdout
    d["STATEDIR"].mkdir(parents=True)
    (d["STATEDIR"] / "metric-data").mkdir()

    r = make(src, "uninstall", d)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not d["PREFIX"].exists() and not (d["BINDIR"] / "koordlet").is_symlink()
    assert not (d["UNITDIR"] / "koordlet.service").exists()
    assert config.exists() and (d["STATEDIR"] / "metric-data").is_dir()

    r = make(src, "uninstall", d, PURGE="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not config.exists() and not d["CONFDIR"].exists() and not d["STATEDIR"].exists()
