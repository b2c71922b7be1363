"""This node's Node object, as the agent's decisions and reports need it (empty in standalone mode)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeInfo:
    """What the report reads from the Node object (empty in standalone mode)."""

    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)

    def owner_references(self) -> list[dict[str, Any]]:
        """What upstream puts on the objects it creates for a node (NRT, Device): owned by the Node, so they go
        with it; none before the Node's uid is known."""
        if not self.uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid, "controller": True,
                 "blockOwnerDeletion": True}]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return cls(name=str(meta.get("name", "")), uid=str(meta.get("uid", "")),
                   labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
                   capacity=dict(status.get("capacity") or {}), allocatable=dict(status.get("allocatable") or {}))
