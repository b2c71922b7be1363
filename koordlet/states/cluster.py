"""The agent's link to the API server: the client and the watches of this node's objects.

Reports build their writers on these watches (reporters.cluster); the node state reads the Node, NodeSLO and
NodeMetric objects from them. None of this exists in standalone mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordlet.ops.config import Config
from koordlet.states import kubeapi
from koordlet.states.watcher import ObjectWatcher


class ClusterError(RuntimeError):
    """The API server cannot be used with this configuration (the message says what to fix)."""


@dataclass
class Cluster:
    api: kubeapi.KubeApi
    node: ObjectWatcher
    node_slo: ObjectWatcher
    node_metric: ObjectWatcher
    nrt: ObjectWatcher
    device: ObjectWatcher | None = None          # with the Accelerators gate

    @classmethod
    def connect(cls, config: Config) -> Cluster:
        try:
            api = kubeapi.KubeApi(config.kubeconfig or None, timeout=max(config.kubelet_sync_timeout, 5.0),
                                  qps=config.kube_api_qps, burst=config.kube_api_burst)
        except kubeapi.ConfigError as e:
            raise ClusterError(f"API server: {e} (use --standalone to run without a cluster)") from None
        name = config.node_name
        return cls(api, ObjectWatcher(api, kubeapi.NODES, name), ObjectWatcher(api, kubeapi.NODE_SLOS, name),
                   ObjectWatcher(api, kubeapi.NODE_METRICS, name),
                   ObjectWatcher(api, kubeapi.NODE_RESOURCE_TOPOLOGIES, name),
                   ObjectWatcher(api, kubeapi.DEVICES, name) if config.gate("Accelerators") else None)

    @property
    def watchers(self) -> list[ObjectWatcher]:
        return [self.node, self.node_slo, self.node_metric, self.nrt] + ([self.device] if self.device else [])

    def node_known(self) -> bool:
        """The Node watch has synced and found the Node (reports owned by the Node wait for it)."""
        return self.node.synced.is_set() and self.node.object is not None
