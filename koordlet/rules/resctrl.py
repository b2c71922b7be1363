"""Which resctrl group a pod's tasks belong to: the class groups named after upstream's, or a pod's own group.

Shared by the resctrl strategy (which creates the groups and moves tasks) and the NRI hook (which names the group
at container creation, so the first task starts in it).
"""

from __future__ import annotations

from koordlet.base.wire import QOS_BE, QOS_LS, QOS_LSE, QOS_LSR

GROUP_LSR, GROUP_LS, GROUP_BE = "LSR", "LS", "BE"
CLASS_GROUPS = ((GROUP_LSR, "lsr"), (GROUP_LS, "ls"), (GROUP_BE, "be"))     # (group dir, NodeSLO class attr)
CLASS_GROUP_OF = {QOS_LSE: GROUP_LSR, QOS_LSR: GROUP_LSR, QOS_LS: GROUP_LS, QOS_BE: GROUP_BE}
POD_GROUP_PREFIX = "koordlet-"        # + pod uid: a pod-level group (gate Resctrl)
