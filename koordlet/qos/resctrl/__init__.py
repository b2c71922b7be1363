"""Resctrl strategy: LLC ways (CAT) and memory bandwidth (MBA) per QoS class and per pod, and the threads that
belong to each group (upstream ``pkg/koordlet/qosmanager/plugins/resctrl/resctrl_reconcile.go: resctrlReconcile`` and
``pkg/koordlet/runtimehooks/hooks/resctrl``).

Each cycle:

1. **Class groups** ``LSR``, ``LS``, ``BE`` are created when missing and get the schemata of ``lsrClass`` /
   ``lsClass`` / ``beClass`` ``.resctrlQOS`` (written even when ``enable=false``: the None values mean full range
   and unthrottled). LSE pods use ``LSR``; SYSTEM pods are never moved.
2. **Pod groups** ``koordlet-<pod uid>`` for pods with the ``node.koordinator.sh/resctrl`` annotation: created
   while a CLOSID is free, their schemata kept equal to the annotation, removed when the pod is gone (10 s after
   creation at the earliest, so a group made for a pod the pod list does not show yet survives), and adopted from
   the ``koordlet-*`` directories after a restart.
3. **Threads**: the thread ids of every container cgroup of a pod (sandbox included; v1 ``tasks``, v2
   ``cgroup.threads``) that are not yet in the pod's group are appended to the group's ``tasks``, one id per
   write, never cached (ids are reused). Pods go to their pod group, else to their class group when that class
   has ``resctrlQOS.enable=true``.

Values (:mod:`.schemata`, pure, table-tested):

- L3 mask: ``ways = bitlen(cbm)``, ``start = ceil(ways*s/100)``, ``end = ceil(ways*e/100)``,
  ``mask = (1<<end) - (1<<start)``; cbm ``7ff``, BE 0-30 gives ``f``. Beyond upstream: a mask with fewer bits than
  ``info/L3/min_cbm_bits`` (at least 1; e.g. 1-5 % of 11 ways is empty) is widened upwards to that many bits
  and logged once, instead of being written and rejected by the kernel.
- MB: Intel, the percent rounded up to ``info/MB/bandwidth_gran`` (upstream: to a multiple of 10, the usual
  granularity) and at least ``min_bandwidth``, so the kernel stores exactly what we write. AMD (and Hygon) count
  in units of 1/8 GB/s: 100 % is ``2048`` (the kernel's unlimited value), otherwise ``floor(160*p/100)``, where
  160 units = 20 GB/s = 80 % of a CCD's 25 GB/s (upstream's constant, measured on EPYC Milan).

Writes follow the kernel's schemata rules (see :mod:`koordlet.host.resctrl`): we read the group's schemata,
compare each resource numerically (the kernel pads the values), and write only the resource lines that differ,
together in one write (the kernel validates and applies all lines of a write atomically); when that write fails
the lines are retried one by one, so a rejected L3 line never holds back the MB line. Upstream always issues
two writes (one per resource). A verified schemata is not read again for ``executor.force_refresh`` seconds, so a
steady cycle reads only task lists.

Beyond upstream (documented differences):

- A changed annotation rewrites the pod group's schemata (upstream writes it once, at creation, also after a
  restart). A resource or cache the annotation leaves out gets the kernel's default for a new group (full mask,
  unthrottled MB), so removing a setting from the annotation resets it.
- The number of groups never exceeds ``num_closids`` (the root and class groups count): pods beyond it run in
  their class group, with one error log when CLOSIDs run out and the gauge
  ``koordlet_resctrl_pods_without_group`` / counter ``koordlet_resctrl_closid_exhausted``. Upstream's mkdir fails
  with ENOSPC every cycle.
- A malformed annotation (bad JSON or types, a range that is not ``[start, end]`` with ``0 <= start < end <= 100``,
  a percent outside 1-100, a cache id this node does not have) is rejected as a whole with one log line naming
  the pod and the problem; the pod stays in its class group. Upstream drops bad parts silently or writes values
  the kernel rejects.
- Thread ids of pods with a pod group are appended every cycle (upstream: only with ``--enable-pod-taskids``,
  relying on the NRI hook otherwise); finished pods (Succeeded/Failed) free their group.
- L3-only hosts (CPU without ``mba``) and CDP mounts (``L3CODE``/``L3DATA``) work; upstream needs both flags and
  writes ``L3`` lines.

The parts: :mod:`.annotation` (the pod annotation, checked), :mod:`.schemata` (the values and lines each group
should hold, pure) and :mod:`.strategy` (the strategy that makes the groups, writes them and moves the threads).
"""

from __future__ import annotations

from koordlet.component import Plugin, host_probe
from koordlet.host import probes
from koordlet.qos.resctrl.strategy import Resctrl

PLUGIN = Plugin("resctrl", lambda ctx: Resctrl(ctx.paths, ctx.metrics, pod_level=ctx.config.gate("Resctrl")),
                gates=("RdtResctrl",), probe=host_probe(probes.resctrl))
