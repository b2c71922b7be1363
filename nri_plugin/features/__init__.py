"""The NRI hook features: each is one module with the feature gate that turns it on, registered in
:data:`FEATURES` (upstream: one package per hook under ``pkg/koordlet/runtimehooks/hooks/``, listed in
``runtimehooks/config.go``). To add one: a module here ending with ``FEATURE = Feature(...)`` (its
:class:`~nri_plugin.features.base.Unit` overrides the stages it takes part in) and one line below. Features act in
this order within each stage.
"""

from __future__ import annotations

from collections.abc import Callable

from nri_plugin.features import batch, core_sched, cpuset, gpu_env, group_identity, oom, rdma, rdt, resctrl_pods
from nri_plugin.features.base import Feature

FEATURES: tuple[Feature, ...] = (
    cpuset.FEATURE,
    batch.FEATURE,
    group_identity.FEATURE,
    rdt.FEATURE,
    resctrl_pods.FEATURE,
    core_sched.FEATURE,
    oom.FEATURE,
    gpu_env.FEATURE,
    rdma.FEATURE,
)


def enabled(gate: Callable[[str], bool]) -> frozenset[str]:
    """The names of the features whose gate is on."""
    return frozenset(f.name for f in FEATURES if gate(f.gate))
