"""koordlet/base/gcfreeze.py against the real collector: survivors frozen, the walk kept short, cycles freed at a
thaw."""

from __future__ import annotations

import gc
import weakref

import pytest

from koordlet.base.gcfreeze import FreezeAfterFullCollection


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def policy():
    now = [0.0]
    p = FreezeAfterFullCollection(thaw_every=600.0, clock=lambda: now[0])
    p.install()
    try:
        yield p, now
    finally:
        p.uninstall()
        gc.unfreeze()
        gc.collect()


def test_survivors_of_a_full_collection_leave_the_next_walk(policy):
    p, _now = policy
    keep = [Node() for _ in range(5000)]            # long-lived state
    gc.collect()
    assert p.frozen >= 1 and gc.get_freeze_count() >= len(keep)
    assert all(not any(o is n for o in gc.get_objects(2)) for n in keep[:20])   # not walked any more
    assert gc.is_tracked(keep[0])


def test_a_cycle_frozen_while_alive_is_freed_at_the_next_thaw(policy):
    p, now = policy
    a, b = Node(), Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    gc.collect()                                     # frozen while still referenced
    del a, b                                         # now cyclic garbage, but in the permanent generation
    gc.collect()
    assert dead() is not None                        # waits: the frozen are not walked
    now[0] = 601.0
    gc.collect()                                     # thaw: everything goes back to the collector
    assert p.thawed == 1 and gc.get_freeze_count() == 0
    gc.collect()
    assert dead() is None


def test_plain_garbage_of_frozen_objects_goes_at_once(policy):
    """Reference counting still frees frozen objects: only cycles wait for a thaw."""
    x = Node()
    dead = weakref.ref(x)
    gc.collect()
    assert gc.get_freeze_count() > 0
    del x
    assert dead() is None
