"""Network QoS: egress shaping with an HTB tree on the node's egress interface (policy ``tc``), or the config files
of Terway's own QoS agent (policy ``terway-qos``). Facts: upstream ``pkg/koordlet/runtimehooks/hooks/tc/``
(``tc_linux.go: tcPlugin``, ``helper.go``) and ``hooks/terwayqos/terwayqos.go``.

Policy ``tc`` (``resourceQOSStrategy.policies.netQOSPolicy`` unset or ``tc``), through netlink
(:mod:`koordlet.host.netlink`), on the link of the IPv4 default route:

- qdisc ``1:0`` htb at the root, default class ``2``; classes ``1:1`` root (rate = ceil = total), ``1:2`` system
  (rate total - LS request - BE request, ceil total, prio 1), ``1:3`` LS (``lsClass.networkQOS`` egress request /
  limit, prio 2), ``1:4`` BE (``beClass.networkQOS``, prio 3). Total = ``systemStrategy.totalNetworkBandwidth``
  (bits/s), overridden by the node annotation ``node.koordinator.sh/network-bandwidth``. An int is a percent of
  the total, a string a quantity in bits/s; everything becomes bytes/s by dividing by 8 exactly once.
- a pod with ``koordinator.sh/networkQOS`` ``{"egressLimit": "20M"}`` (bits/s) gets its own class ``1:<minor>``
  under ``1:1`` with rate = ceil = the limit. The minor is derived from the pod UID (crc32, linear probing on a
  collision), kept for as long as the pod lives and re-adopted from the kernel's filters after a restart.
- ``net_cls.classid`` per pod (cgroup v1 ``net_cls`` only), in decimal: the pod's own class, else 1:2/1:3/1:4
  for SYSTEM / LSE,LSR,LS / BE pods (pods without a koordinator QoS label: not written).

Classification (deviation, documented): upstream puts pod IPs into ipsets (``system_class``, ``ls_class``,
``be_class``) and marks packets with ``iptables -t mangle ... -j CLASSIFY``, and uses ``u32 match ip src`` only for
pods with their own limit. pyroute2 has no iptables and we run no commands, so every pod is classified by a
``u32 match ip src <podIP>/32 flowid 1:<class>`` filter at pref 4 (the same mechanism upstream uses for pod
limits). Like upstream's pod-limit filters, this sees the packet after POSTROUTING NAT: pods whose egress is
masqueraded to the node IP (or encapsulated by an overlay) on that interface are not matched and fall into the
default (system) class. Host-network pods share the node's IP and are never matched by address; with v1 net_cls
and a kernel with the ``cgroup`` classifier, one ``cgroup`` filter at pref 1 classifies their sockets by
``net_cls.classid`` (upstream adds three identical ones, one per class).

Beyond upstream (documented differences):

- Pod-level limits are divided by 8 once: upstream divides the annotation by 8 and then again when building the
  class, so a "20M" pod gets 2.5 Mbit/s there.
- A class whose ``networkQOS.enable`` is false gets no HTB class and its pods no filter: their traffic takes the
  default (system) class. Upstream creates the class with rate 0, which the kernel rejects, with the same effect.
  An unset limit means "up to the total" (upstream: ceil 0, also rejected). Rates below 1 kbit/s are raised to
  1 kbit/s (HTB refuses 0); a class quantity above the total is clamped to the total, with a log line.
- With no total bandwidth, or with neither class enabled and no pod-level limit, there is nothing to shape and
  our qdisc is removed; upstream installs the tree anyway (and fails on rate 0 when the total is unset).
- A pod with a pod-level limit but no koordinator QoS label still gets its class (upstream skips it silently).
- A missing key in the pod annotation means 0 (no limit); upstream's terway path rejects the whole annotation.
  A malformed annotation is logged once naming the pod; the pod keeps its class, every other pod is unaffected.
- Terway ``global_bps_config``: a percent is converted to bytes/s like everything else (upstream leaves it in
  bits/s [quirk]); a quantity above the total is clamped instead of failing the whole file.
- Reconcile reads the kernel state (qdiscs, classes, filters) and makes only the changes needed: a converged host
  costs zero netlink writes. When the desired plan did not change it is not even re-read until ``refresh``
  seconds have passed (like the executor's cache); then drift is repaired.

Writes: tc changes go through :class:`koordlet.host.netlink.TC` (netlink is not a file, so not through the
executor); each is one log line (``tc write op=... dev=...``) and counted in
``koordlet_net_qos_tc_operations``. ``net_cls.classid`` and the Terway files go through the executor
(``Update(..., create=True)`` for the files, ``executor.remove`` when the policy is not terway-qos); tc changes are
also recorded in the executor's audit trail (``executor.record``), so ``/events`` shows them.

The parts: :mod:`.config` (what the NodeSLO, the Node and the pod annotation ask for, in bytes/s), :mod:`.htb`
(the HTB tree, the pods' class minors and the netlink changes that reach it), :mod:`.terway` (Terway's two files)
and :mod:`.strategy` (the strategy that reads the kernel and applies them), all pure but the strategy.
"""

from __future__ import annotations

from koordlet.component import Context, Plugin, host_probe
from koordlet.host import probes
from koordlet.qos.net_qos.strategy import NetQOS


def _build(ctx: Context) -> NetQOS:
    return NetQOS(ctx.paths, ctx.metrics, tc=ctx.config.gate("TCNetworkQoS"), terway=ctx.config.gate("TerwayQoS"),
                  terway_dir=ctx.config.terway_qos_dir)


PLUGIN = Plugin("net-qos", _build, gates=("TCNetworkQoS", "TerwayQoS"), probe=host_probe(probes.net_qos))
