"""image/aptmirror.py: the Debian archive this machine's apt uses, found in apt's sources in both formats (one-line
``*.list`` and deb822 ``*.sources``) and in apt's order, so that ``make image`` and ``.ci/install-runtime`` take
the machine's mirror and the repository names none of its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from image.aptmirror import NoMirror, deb822_entries, debian_mirror, one_line_entries

REPO = Path(__file__).resolve().parents[2]

SECURITY = """\
Types: deb
URIs: http://security-mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def etc_apt(tmp_path: Path, listed: str | None = None, **parts: str) -> str:
    """An /etc/apt with ``sources.list`` (when given) and ``sources.list.d/<name>`` for each keyword argument
    (``debian_sources`` is ``debian.sources``)."""
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    if listed is not None:
        (root / "sources.list").write_text(listed)
    for name, text in parts.items():
        (root / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return str(root)


def test_deb822_sources_as_debian_12_installs_them(tmp_path):
    debian = """\
Types: deb
# http://snapshot-mirror.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

""" + SECURITY
    assert debian_mirror(etc_apt(tmp_path, debian_sources=debian)) == "http://mirror.example/debian"


def test_one_line_sources_list_with_options_comments_and_deb_src(tmp_path):
    listed = ("# deb http://old.example/debian bookworm main\n"
              "deb-src http://src.example/debian bookworm main\n"
              "deb http://security-mirror.example/debian-security bookworm-security main\n"
              "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
              "https://mirror.example/debian bookworm main contrib  # ours\n")
    assert debian_mirror(etc_apt(tmp_path, listed)) == "https://mirror.example/debian"


def test_apt_order_sources_list_first_then_the_directory_by_name(tmp_path):
    one = "deb http://b.example/debian trixie main\n"
    other = "Types: deb\nURIs: http://a.example/debian\nSuites: trixie\nComponents: main\n"
    assert debian_mirror(etc_apt(tmp_path, "deb http://first.example/debian bookworm main\n",
                                 b_list=one, a_sources=other)) == "http://first.example/debian"
    shutil.rmtree(tmp_path / "apt")
    assert debian_mirror(etc_apt(tmp_path, b_list=one, a_sources=other)) == "http://a.example/debian"


def test_third_party_disabled_and_ignored_entries_are_skipped(tmp_path):
    apt = etc_apt(
        tmp_path,
        # a third party's repository, another archive's suite, and no main component
        a_list=("deb https://packages.example/apt cloud-sdk-bookworm main\n"
                "deb https://nodes.example/node_20.x nodistro main\n"
                "deb http://contrib-only.example/debian bookworm contrib\n"),
        b_sources=("Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nComponents: main\n"
                   "Enabled: no\n\n" + SECURITY),
        c_list_disabled="deb http://renamed.example/debian bookworm main\n",     # not *.list: apt ignores it
        d_sources=("Types: deb-src deb\nURIs: http://mirror.example/debian http://second.example/debian\n"
                   "Suites: stable-backports\nComponents: non-free main\nSigned-By:\n -----BEGIN PGP PUBLIC KEY"
                   " BLOCK-----\n .\n -----END PGP PUBLIC KEY BLOCK-----\n"))
    assert debian_mirror(apt) == "http://mirror.example/debian"


def test_the_parsers_keep_what_apt_reads():
    (entry,) = one_line_entries("deb [ arch=amd64 ] http://m.example/debian sid main non-free-firmware\n")
    assert (entry.types, entry.uri, entry.suites, entry.components) == (
        ("deb",), "http://m.example/debian", ("sid",), ("main", "non-free-firmware"))
    first, second = deb822_entries("types: deb\nuris: http://x.example/d http://y.example/d\nsuites: bookworm\n"
                                   "components: main\n")
    assert (first.uri, second.uri, first.suites, first.enabled) == (
        "http://x.example/d", "http://y.example/d", ("bookworm",), True)


def test_no_debian_archive_is_a_clear_error(tmp_path):
    apt = etc_apt(tmp_path, "deb https://packages.example/apt cloud-sdk-bookworm main\n", s_sources=SECURITY)
    with pytest.raises(NoMirror, match=r"no Debian archive .* in apt's sources \(.*sources\.list, .*s\.sources\)"):
        debian_mirror(apt)
    with pytest.raises(NoMirror, match="no .*/nowhere/sources.list nor"):
        debian_mirror(str(tmp_path / "nowhere"))


def test_the_command_prints_the_mirror_or_the_reason(tmp_path):
    apt = etc_apt(tmp_path, "deb http://mirror.example/debian bookworm main\n")
    found = subprocess.run([sys.executable, "-m", "image.aptmirror", apt], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert (found.returncode, found.stdout, found.stderr) == (0, "http://mirror.example/debian\n", "")
    none = subprocess.run([sys.executable, "-m", "image.aptmirror", str(tmp_path / "nowhere")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert none.returncode == 1 and none.stdout == "" and "aptmirror: no Debian archive" in none.stderr


def test_install_runtime_takes_the_mirror_from_apt(tmp_path):
    """.ci/install-runtime's debian_mirror, defined as the script defines it, answers from the machine's sources."""
    script = (REPO / ".ci" / "install-runtime").read_text()
    (definition,) = [line for line in script.splitlines() if line.startswith("debian_mirror()")]
    apt = etc_apt(tmp_path, a_sources="Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie\n"
                                      "Components: main\n")
    shell = f'{definition.replace("python3 -m image.aptmirror", f"{sys.executable} -m image.aptmirror {apt}")}\n' \
            "debian_mirror\n"
    done = subprocess.run(["bash", "-c", shell, str(REPO / ".ci" / "install-runtime")], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "http://mirror.example/debian\n"), done.stderr


# the hosts of Debian's and Ubuntu's archives and their mirror networks
MIRROR_HOST = re.compile(r"[\w.-]+\.debian\.(?:org|net)\b|\b(?:archive|security|ports)\.ubuntu\.com\b")


def test_the_repository_names_no_package_mirror():
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(REPO), "ls-files", "-z"],
                           capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    named = []
    for name in filter(None, files):
        path = REPO / name
        if path.is_file() and not os.path.islink(path):
            named += [f"{name}: {m.group()}" for m in MIRROR_HOST.finditer(path.read_text(errors="replace"))]
    assert named == []


def test_make_image_without_a_debian_archive_says_so_before_anything_is_made(tmp_path, monkeypatch):
    from image import build as image_build

    def none() -> str:
        raise NoMirror("no Debian archive in apt's sources (...)")
    monkeypatch.setattr(image_build, "missing", lambda: "")        # as if root with debootstrap
    monkeypatch.setattr(image_build, "debian_mirror", none)
    with pytest.raises(image_build.BuildError, match=r"in apt's sources \(\.\.\.\), or pass --mirror"):
        image_build.build(str(tmp_path / "out" / "image.tar"))
    assert list(tmp_path.iterdir()) == []
