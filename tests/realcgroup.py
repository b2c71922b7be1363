"""The ``real_tree`` fixture: a real cgroup v1 tree (doubles/realcgroup.py) for one test, always cleaned up,
skipped with the reason where there is none (not root, controllers not mounted). The tree and the process
helpers are re-exported for the tests that use them."""

from __future__ import annotations

import pytest

from doubles.realcgroup import (  # noqa: F401
    BUSY,
    CGROUP_FS,
    IDLE,
    MEMORY_64M,
    SUBSYSTEMS,
    TREE_CPU_SHARES,
    RealCgroupTree,
    cpus_allowed,
    proc_cpu_seconds,
    proc_rss_anon,
    v1_available,
)


@pytest.fixture
def real_tree(tmp_path):
    reason = v1_available()
    if reason:
        pytest.skip(reason)
    link_root = tmp_path / "cgroup"
    link_root.mkdir()
    tree = RealCgroupTree(str(link_root))
    try:
        yield tree
    finally:
        tree.cleanup()
