"""The Makefile's venv target as a first-time user meets it: a first `make run` / `make test` cut short leaves a
half-made venv, and the next one must finish the job instead of failing on it; a first install shows its steps and
pip's progress.

Real make, real ``python -m venv`` and real pip, on a stand-in project in a temporary directory (the repository's
Makefile run with ``-C``): a one-module project whose in-tree PEP 660 backend needs nothing from an index, so pip
runs with ``PIP_NO_INDEX=1`` and the test needs no network and writes nothing into the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PYPROJECT = """\
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "stand-in"
version = "0"

[project.optional-dependencies]
test = []
lint = []
"""

# The least a PEP 660 backend does: an editable wheel whose .pth puts the project directory on sys.path.
BACKEND = '''\
import os, zipfile

NAME, VERSION = "stand_in", "0"
INFO = f"{NAME}-{VERSION}.dist-info"
FILES = {
    f"{INFO}/METADATA": ("Metadata-Version: 2.1\\nName: stand-in\\nVersion: 0\\n"
                         "Provides-Extra: test\\nProvides-Extra: lint\\n"),
    f"{INFO}/WHEEL": "Wheel-Version: 1.0\\nGenerator: stand-in\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    f"{NAME}.pth": os.path.abspath(".") + "\\n",
}

def get_requires_for_build_editable(config_settings=None):
    return []

def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for path, text in FILES.items():
            whl.writestr(path, text)
        whl.writestr(f"{INFO}/RECORD", "".join(f"{p},," + "\\n" for p in [*FILES, f"{INFO}/RECORD"]))
    return name
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    (proj / "backend.py").write_text(BACKEND)
    (proj / "stand_in_module.py").write_text("VALUE = 42\n")
    return proj


def make_venv(project: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(["make", "-f", str(REPO / "Makefile"), "-C", str(project), f"VENV={venv}",
                           f"PYTHON={sys.executable}", "venv"], capture_output=True, text=True, env=env, timeout=300)


def installed(venv: Path) -> bool:
    """The venv's python imports the project (through the editable install's .pth)."""
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import stand_in_module"], capture_output=True)
    return probe.returncode == 0


def test_a_half_made_venv_is_made_again_and_a_finished_one_left_alone(project, tmp_path):
    venv = tmp_path / "venv"
    # a first run cut short in ensurepip: the interpreter is there, pip is not
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    first = make_venv(project, venv)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "half made" in first.stdout
    assert (venv / ".koordlet-installed").exists() and installed(venv)
    # a first install shows its steps and pip's own output as it goes, not a minute or two of silence
    steps = [line.split(" (")[0] for line in first.stdout.splitlines()
             if line.startswith("make: ") and not line.startswith(("make: Entering", "make: Leaving"))]
    assert steps[1:] == [
        "make: installing koordlet-py and its test tools into " + str(venv), "make: 1/2 upgrading pip",
        "make: 2/2 installing koordlet-py with its dependencies and test tools", f"make: {venv} is ready"], steps
    assert "Successfully installed stand-in-0" in first.stdout

    again = make_venv(project, venv)             # done: nothing to do, nothing reinstalled
    assert again.returncode == 0 and "installing" not in again.stdout, again.stdout + again.stderr

    # cut short in pip's install: pip works but the stamp was never written, so the install runs again
    (venv / ".koordlet-installed").unlink()
    for pth in (venv / "lib").glob("python*/site-packages/stand_in.pth"):
        pth.unlink()
    assert not installed(venv)
    resumed = make_venv(project, venv)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "half made" not in resumed.stdout and installed(venv)


def test_a_directory_that_is_not_a_venv_is_never_removed(project, tmp_path):
    not_a_venv = tmp_path / "data"
    not_a_venv.mkdir()
    (not_a_venv / "keep.txt").write_text("mine")
    result = make_venv(project, not_a_venv)
    assert result.returncode != 0
    assert "is not a venv" in result.stderr
    assert (not_a_venv / "keep.txt").read_text() == "mine"
