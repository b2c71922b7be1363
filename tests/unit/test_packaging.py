"""What the wheel installs, and the dependency floors it declares.

- The floors in pyproject.toml are the versions .ci/constraints-min.txt pins (`make test-min` runs the tests on
  exactly those, so each ``>=`` is a release known to work).
- The wheel installs only ``koordlet`` (the generated protobuf modules inside it, in ``koordlet._proto``),
  ``nri_plugin`` and ``hami_bridge``: no top-level ``proto`` (proto-plus's, which many Google client libraries
  install: a second ``proto/__init__.py`` overwrote it and ``proto.Message`` was gone, with ``pip check`` silent),
  nor the repository's ``doubles``, ``tests`` or ``bench``.
- The license metadata is Apache-2.0, and the LICENSE file shipped with it is that license's text.

The wheel is built here from a copy of the sources with the installed setuptools (no network, no build isolation).
"""

from __future__ import annotations

import email.parser
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEEL_TOP_LEVEL = {"koordlet", "nri_plugin", "hami_bridge", "scheduler"}


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints-min.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints-min.txt pins exact versions: {line}"
            pins[_canonical(req.name)] = spec.version
    return pins


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_every_runtime_floor_is_the_version_the_min_job_installs():
    floors = {}
    for dep in _project()["dependencies"]:
        req = Requirement(dep)
        lower = [s.version for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"{dep}: every runtime dependency has one floor (>=)"
        floors[_canonical(req.name)] = lower[0]
    assert floors == _constraints()


def test_psutil_is_no_runtime_dependency():
    names = {_canonical(Requirement(d).name) for d in _project()["dependencies"]}
    assert "psutil" not in names


def test_license_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert _project()["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    assert len(text.split()) > 1500          # the whole license, not a notice pointing at it


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    pytest.importorskip("setuptools", reason="the wheel is built with the installed setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    # the packages, and the directories the wheel must leave out
    for name in ("koordlet", "nri_plugin", "hami_bridge", "scheduler", "proto", "doubles", "bench", "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(src)], check=True, env=env, cwd=src, timeout=300,
                   stdout=subprocess.DEVNULL)
    (built,) = out.glob("koordlet_py-*.whl")
    return built


def test_wheel_installs_only_our_top_level_packages(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == WHEEL_TOP_LEVEL
    # the generated modules and their type stubs, inside koordlet
    for module in ("koordlet/_proto/nri/api_pb2.py", "koordlet/_proto/ttrpc/ttrpc_pb2.py",
                   "koordlet/_proto/podresources/api_pb2_grpc.py", "koordlet/_proto/cri/api_pb2.pyi"):
        assert module in names


def test_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        dist_info = next(n.split("/", 1)[0] for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(f"{dist_info}/METADATA").decode())
        assert "Apache License" in z.read(f"{dist_info}/licenses/LICENSE").decode()
    assert meta["License-Expression"] == "Apache-2.0"
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    runtime = {_canonical(r.name): r for r in requires if r.marker is None}
    assert set(runtime) == set(_constraints())
    for name, version in _constraints().items():
        assert version in runtime[name].specifier, f"{name} {version} is below the wheel's floor"


def test_installed_beside_a_top_level_proto_package_both_import(wheel, tmp_path):
    """proto-plus's situation, offline: a ``proto`` package with ``Message`` already in site-packages, our wheel
    installed into the same directory; both still import (an empty proto/__init__.py of ours would replace theirs)."""
    site = tmp_path / "site"
    (site / "proto").mkdir(parents=True)
    (site / "proto" / "__init__.py").write_text("class Message:\n    pass\n")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, env=env, timeout=300, stdout=subprocess.DEVNULL)
    code = ("import proto; proto.Message\n"
            "from koordlet._proto.nri import api_pb2\n"
            "from koordlet._proto.podresources import api_pb2_grpc\n"
            "import nri_plugin.plugin, hami_bridge\n"
            f"assert api_pb2.__file__.startswith({str(site)!r}), api_pb2.__file__\n")
    # -I: no checkout on the path, no user site; only the target directory and the interpreter's own packages
    subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + code],
                   check=True, timeout=60, cwd=tmp_path)
