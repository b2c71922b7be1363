"""QoS strategies: each computes the desired kernel state for one feature from a
:class:`~koordlet.states.nodestate.NodeView` and hands :class:`~koordlet.writer.executor.Update` s to the executor; only
the executor writes (docs/architecture.md).

A strategy (:class:`koordlet.component.Strategy`) is called every reconcile cycle (1 s by default) by
:class:`koordlet.qos.reconciler.Reconciler`, in the order of :data:`STRATEGIES`. Order matters only where
strategies touch the same files: pod resources (cpuset, batch quota) run before CPU suppress, which then narrows
the BestEffort tier; CPU burst runs after both so it scales the quota the batch rule set.

To add one: a module here ending with ``PLUGIN = Plugin(...)`` (koordlet.component) and one line below.
"""

from __future__ import annotations

from koordlet.component import Plugin, Strategy
from koordlet.qos import (
                          blkio,
                          core_sched,
                          cpu_burst,
                          cpu_qos,
                          cpu_suppress,
                          evict,
                          memory_qos,
                          net_qos,
                          pod_resources,
                          resctrl,
                          system_config,
)

STRATEGIES: tuple[Plugin[Strategy], ...] = (
    pod_resources.PLUGIN,
    cpu_qos.PLUGIN,
    resctrl.PLUGIN,
    core_sched.PLUGIN,
    cpu_suppress.PLUGIN,
    cpu_burst.PLUGIN,
    memory_qos.PLUGIN,
    evict.PLUGIN,
    blkio.PLUGIN,
    net_qos.PLUGIN,
    system_config.PLUGIN,
)
