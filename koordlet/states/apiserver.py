"""API-server pod source: the alternative to polling the kubelet.

Lists the node's pods with the field selector ``spec.nodeName=<node>``, as upstream koordlet does when it reads
pods from the API server, through the agent's shared :class:`~koordlet.states.kubeapi.KubeApi` (raw JSON: keys stay
camelCase exactly as the kubelet source returns them, and no model objects are built).
"""

from __future__ import annotations

import json
from typing import Any

from koordlet.states.kubeapi import PODS, ApiError, KubeApi

_SNIPPET = 200


class ApiServerPodSource:
    """Lists this node's pods from the kube-apiserver as raw wire-format dicts."""

    def __init__(self, api: KubeApi, node_name: str) -> None:
        self._api = api
        self._selector = f"spec.nodeName={node_name}"

    def list_pods(self) -> list[dict[str, Any]]:
        """The node's pods; ``ApiError`` says why when the API server cannot answer or answers nonsense."""
        doc = self._api.get(PODS.collection(), fieldSelector=self._selector)
        if doc.get("kind") != "PodList":
            raise ApiError(200, "BadResponse", f"list pods: not a PodList: {json.dumps(doc)[:_SNIPPET]}")
        items = doc.get("items") or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ApiError(200, "BadResponse", f"list pods: items is not a list of objects: "
                                               f"{json.dumps(items)[:_SNIPPET]}")
        return items
