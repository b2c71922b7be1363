"""cgroup v1 memory limits beside runc's memsw limit, on the real kernel.

runc sets ``memory.memsw.limit_in_bytes`` to the container's memory limit (no swap). The kernel keeps
``memory.limit_in_bytes <= memory.memsw.limit_in_bytes``, so raising the limit alone fails with EINVAL: that is
what a real containerd showed when the agent loosened a BE pod's memory limit. Raising goes memsw first; lowering
goes limit first and then memsw, when memsw was equal to the old limit (the container keeps having no swap).
"""

from __future__ import annotations

import os

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver
from koordlet.writer.executor import Executor
from tests.realcgroup import real_tree  # noqa: F401  (fixture)

pytestmark = pytest.mark.root

MIB = 1 << 20
REL = "kubepods/besteffort/pod0123abcd-0000-4000-8000-00000000aaaa"


def read(tree, name: str) -> int:
    with open(tree.real("memory", f"{REL}/{name}")) as f:
        return int(f.read())


def write(tree, name: str, value: int) -> None:
    with open(tree.real("memory", f"{REL}/{name}"), "w") as f:
        f.write(str(value))


@pytest.fixture
def memsw_tree(real_tree):  # noqa: F811
    real_tree.mkdir(REL)
    if not os.path.exists(real_tree.real("memory", f"{REL}/memory.memsw.limit_in_bytes")):
        pytest.skip("this kernel has no swap accounting (memory.memsw.*)")
    write(real_tree, "memory.limit_in_bytes", 256 * MIB)          # as runc leaves a 256 MiB container
    write(real_tree, "memory.memsw.limit_in_bytes", 256 * MIB)
    return real_tree


def limit_update(tree, value: int) -> tuple[Executor, list]:
    executor = Executor(Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS))
    return executor, [executor.cgroup(REL, "memory.limit_in_bytes", value, "pod t/p", "batch-resource")]


def test_raising_a_limit_past_runcs_memsw_raises_memsw_first(memsw_tree):
    with pytest.raises(OSError):                  # the kernel's rule, shown on this tree: a plain write fails
        write(memsw_tree, "memory.limit_in_bytes", 512 * MIB)
    executor, updates = limit_update(memsw_tree, 512 * MIB)
    result = executor.update(updates)
    assert result.failed == 0 and result.written == 2
    assert read(memsw_tree, "memory.limit_in_bytes") == 512 * MIB
    assert read(memsw_tree, "memory.memsw.limit_in_bytes") == 512 * MIB
    audit = [(str(e["file"]).rsplit("/", 1)[-1], e["new"]) for e in executor.events()]
    assert audit == [("memory.memsw.limit_in_bytes", str(512 * MIB)), ("memory.limit_in_bytes", str(512 * MIB))]


def test_unlimited_lifts_memsw_too(memsw_tree):
    executor, updates = limit_update(memsw_tree, -1)
    assert executor.update(updates).failed == 0
    assert read(memsw_tree, "memory.limit_in_bytes") >= 1 << 62
    assert read(memsw_tree, "memory.memsw.limit_in_bytes") >= 1 << 62


def test_lowering_keeps_memsw_equal_when_it_was(memsw_tree):
    executor, updates = limit_update(memsw_tree, 128 * MIB)
    assert executor.update(updates).failed == 0
    assert read(memsw_tree, "memory.limit_in_bytes") == 128 * MIB
    assert read(memsw_tree, "memory.memsw.limit_in_bytes") == 128 * MIB


def test_memsw_above_the_limit_is_left_alone_when_room_is_enough(memsw_tree):
    write(memsw_tree, "memory.memsw.limit_in_bytes", 1024 * MIB)     # swap allowed by someone else
    executor, updates = limit_update(memsw_tree, 512 * MIB)
    result = executor.update(updates)
    assert (result.failed, result.written) == (0, 1)
    assert read(memsw_tree, "memory.memsw.limit_in_bytes") == 1024 * MIB
    executor, updates = limit_update(memsw_tree, 128 * MIB)
    assert executor.update(updates).written == 1
    assert read(memsw_tree, "memory.memsw.limit_in_bytes") == 1024 * MIB
