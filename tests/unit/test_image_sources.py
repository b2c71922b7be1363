"""image/build.py's copy of the checkout that pip builds from: git's view of it in a clone and in a worktree (whose
.git is a file), every file but the ignored kinds where there is no git, into the directory the build made."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from image import build as image_build


def tree(root: Path) -> None:
    for name, text in {"pyproject.toml": "[project]\n", "pkg/mod.py": "X = 1\n", ".venv/bin/python": "",
                       "pkg/__pycache__/mod.pyc": "", "var/state": ""}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def copied(dest: Path) -> list[str]:
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())


def test_without_git_every_file_but_the_ignored_kinds(tmp_path, monkeypatch):
    tree(tmp_path / "checkout")
    monkeypatch.setattr(image_build, "ROOT", str(tmp_path / "checkout"))
    dest = tmp_path / "src"
    dest.mkdir()                                     # build_wheels makes it first
    image_build.copy_sources(str(dest))
    assert copied(dest) == ["pkg/mod.py", "pyproject.toml"]


def test_a_worktree_copies_what_git_sees(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    main, worktree = tmp_path / "main", tmp_path / "wt"
    main.mkdir()
    tree(main)
    (main / ".gitignore").write_text(".venv/\n__pycache__/\nvar/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"], ["worktree", "add", "-q", str(worktree)]):
        subprocess.run([*git, "-C", str(main), *args], check=True, capture_output=True, timeout=60)
    (worktree / "untracked.py").write_text("")
    assert (worktree / ".git").is_file()
    monkeypatch.setattr(image_build, "ROOT", str(worktree))
    dest = tmp_path / "src"
    dest.mkdir()
    image_build.copy_sources(str(dest))
    assert copied(dest) == [".gitignore", "pkg/mod.py", "pyproject.toml", "untracked.py"]
