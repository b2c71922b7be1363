"""OOMScoreAdj: the container's ``oom_score_adj`` from its pod's annotations (upstream
``runtimehooks/hooks/oomscoreadj``), as an adjustment at creation where the runtime applies one (NRI v0.7,
containerd 2.0), else written to ``/proc/<pid>/oom_score_adj`` of its first process once it has started (its
children inherit it; only when it differs), as upstream koordlet does."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from koordlet.rules.oom import container_oom_score_adj
from koordlet.states.decode import DecodeError
from koordlet.writer.executor import Update
from nri_plugin.features.base import Event, Feature, HookEnv, Unit

if TYPE_CHECKING:
    from koordlet._proto.nri import api_pb2 as api

log = logging.getLogger(__name__)


def oom_adjust_supported(runtime: str, version: str) -> bool | None:
    """Whether the runtime applies an adjustment's oom_score_adj: NRI added it in v0.7 (containerd 2.0);
    containerd 1.7 drops it without a word. None for runtimes whose NRI this table does not know."""
    found = re.search(r"(\d+)\.(\d+)", version)
    if runtime != "containerd" or found is None:
        return None
    return int(found.group(1)) >= 2


class OOMScoreAdj(Unit):
    def create_container(self, env: HookEnv, event: Event, adjust: api.ContainerAdjustment) -> None:
        ctr = event.container
        value = self._value(env, event)
        if ctr is None or value is None or env.oom_adjust is False:
            return
        if not ctr.linux.HasField("oom_score_adj") or ctr.linux.oom_score_adj.value != value:
            adjust.linux.oom_score_adj.value = value
            adjust.linux.oom_score_adj.SetInParent()
        if env.metrics is not None:
            env.metrics.oom_score_adj(event.info.pod, ctr.name, value)

    def started(self, env: HookEnv, event: Event) -> bool:
        ctr = event.container
        if env.oom_adjust is True or env.executor is None or ctr is None or ctr.pid <= 0:
            return False
        value = self._value(env, event)
        if value is not None:
            pod = event.info.pod
            path = env.host.proc(str(ctr.pid), "oom_score_adj")
            done = env.executor.update([Update(path, str(value), f"pod {pod.key}", "oom-score-adj",
                                               cacheable=False)])
            if env.metrics is not None and (done.written or done.unchanged):
                env.metrics.oom_score_adj(pod, ctr.name, value)
        return False

    def configure(self, env: HookEnv, runtime: str, version: str) -> None:
        if env.oom_adjust is not True:
            log.info("nri runtime=%s version=%s %s oom_score_adj adjustments; writing /proc/<pid>/oom_score_adj "
                     "after start instead", runtime, version,
                     "ignores" if env.oom_adjust is False else "may ignore")

    @staticmethod
    def _value(env: HookEnv, event: Event) -> int | None:
        pod = event.info.pod
        assert event.container is not None
        try:
            return container_oom_score_adj(pod.annotations, event.container.name)
        except DecodeError as e:
            env.problem(f"oom/{pod.uid}", "nri pod=%s: annotation %s; oom_score_adj left as it is", pod.key, e)
            return None


FEATURE = Feature("oom_score_adj", "OOMScoreAdj", OOMScoreAdj())
