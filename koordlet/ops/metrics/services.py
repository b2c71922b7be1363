"""Families the services set (``koordlet/services.py``): the NRI plugin and its hooks (upstream's runtime hooks) and
the PodResources proxy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from koordlet.ops.metrics.families import Families
from koordlet.ops.metrics.upstream import FAILED, SUCCEEDED

# NRI event -> upstream's runtime hook stage (pkg/runtimeproxy/config RuntimeHookType)
HOOK_STAGES: Mapping[str, str] = {
    "RunPodSandbox": "PreRunPodSandbox",
    "CreateContainer": "PreCreateContainer",
    "UpdateContainer": "PreUpdateContainerResources",
    "PostStartContainer": "PostStartContainer",
    "StopContainer": "PostStopContainer",
    "RemovePodSandbox": "PreRemoveRunPodSandbox",
}
HOOK_NAME = "koordlet-py"      # our hooks run as one handler per event, not one plugin at a time as upstream's


class PodLabels(Protocol):
    """A pod as the per-pod series see it (a ``koordlet.states.pod.Pod``)."""

    @property
    def uid(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


class ServiceMetrics(Families):
    def _declare_services(self) -> None:
        # NRI plugin (nri_plugin/plugin.py) and its hooks (nri_plugin/hooks.py)
        self.runtime_hook_invoked_duration_milliseconds = self._upstream(
            "koordlet_runtime_hook_invoked_duration_milliseconds", Histogram)
        self.container_oom_score_adj = self._upstream("koordlet_container_oom_score_adj", Gauge)
        self.nri_hook_seconds = self._own(
            Histogram, "koordlet_nri_hook_seconds", "(koordlet-py) time to answer an NRI call, by method (decode, "
            "hooks, encode; fail-open answers included)", ["node", "hook"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
        self.nri_hook_errors = self._own(
            Counter, "koordlet_nri_hook_errors", "(koordlet-py) NRI calls answered fail-open (empty adjustment), by "
            "method and reason (timeout: over the hook budget; error: a hook raised; bad_request: undecodable message)",
            ["node", "hook", "reason"])
        self.nri_reconnects = self._own(
            Counter, "koordlet_nri_reconnects", "(koordlet-py) NRI connection attempts that ended or failed, by "
            "reason (socket_absent, refused, connect_error, register_failed, eof, protocol_error, partial_timeout, "
            "closed)", ["node", "reason"])
        self.nri_connected = self._own(
            Gauge, "koordlet_nri_connected", "(koordlet-py) 1 while registered with the runtime's NRI socket", ["node"])
        # PodResources proxy (koordlet/podresources/)
        self.pod_resources_requests = self._own(
            Counter, "koordlet_pod_resources_proxy_requests", "(koordlet-py) PodResources calls answered by the "
            "proxy, by method and gRPC status code", ["node", "method", "code"])
        self.pod_resources_upstream_calls = self._own(
            Counter, "koordlet_pod_resources_proxy_upstream_calls", "(koordlet-py) calls the proxy made to the "
            "kubelet's PodResources socket (at most one per second per method), by method and result (ok, error)",
            ["node", "method", "result"])
        self.pod_resources_staleness = self._own(
            Gauge, "koordlet_pod_resources_proxy_staleness_seconds", "(koordlet-py) age of the kubelet PodResources "
            "answer the proxy serves from (grows while the kubelet is away; -1: it never answered)", ["node"])

    def runtime_hook(self, event: str, ok: bool, seconds: float) -> None:
        """One NRI event's hooks (upstream: one hook plugin at one stage); events without an upstream stage
        (Synchronize) are not recorded."""
        stage = HOOK_STAGES.get(event)
        if stage is not None:
            self.runtime_hook_invoked_duration_milliseconds.labels(
                self.node, HOOK_NAME, stage, SUCCEEDED if ok else FAILED).observe(seconds * 1000)

    def oom_score_adj(self, pod: PodLabels, container: str, value: int) -> None:
        self.container_oom_score_adj.labels(self.node, pod.name, pod.namespace, pod.uid, container).set(value)
