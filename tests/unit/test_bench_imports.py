"""bench/ and doubles/ import nothing from tests/: a bench runs without pytest and without the test suite, and the
fakes they share with the tests live in doubles/ (tests import from there, never the other way)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("bench/*.py"), *ROOT.glob("doubles/*.py")])


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_imports_nothing_from_tests_or_pytest(path):
    bad = sorted(m for m in imported_modules(path) if m.split(".")[0] in ("tests", "pytest", "_pytest"))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"
