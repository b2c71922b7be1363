"""The NRI hook features tests turn on: the resource and group-identity features (on by default in the agent)
plus the ones a test names."""

from __future__ import annotations

BASE = frozenset({"cpuset", "batch", "group_identity"})


def hook_features(*extra: str) -> frozenset[str]:
    return BASE | frozenset(extra)
