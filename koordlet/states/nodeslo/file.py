"""NodeSLO for standalone and host mode: a local YAML file, re-read when it changes.

There is no NodeSLO object to watch there, so the operator writes one (or its spec, or the slo-controller-config
ConfigMap) to a file; ``NodeSLOFile`` keeps the effective spec as the informer keeps a watched one
(``pkg/koordlet/statesinformer/impl/states_nodeslo.go``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from koordlet.base import wire
from koordlet.base.logutil import LogOnce
from koordlet.base.yamlfile import load_yaml
from koordlet.states.nodeslo.controller_config import SLOControllerConfig
from koordlet.states.nodeslo.decoder import show
from koordlet.states.nodeslo.merge import merge_node_slo_spec, object_name
from koordlet.states.nodeslo.schema import NodeSLOSpec

log = logging.getLogger(__name__)

__all__ = ["NodeSLOFile", "NodeSLOFileError"]


class NodeSLOFileError(ValueError):
    pass


_OBJECT_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


class NodeSLOFile:
    """NodeSLO for standalone / host mode, read from a local YAML file.

    The file holds one of:
    - a NodeSLO object (``kind: NodeSLO`` with ``spec``);
    - a bare spec mapping (``resourceQOSStrategy: ...`` at the top level);
    - the ``slo-controller-config`` ConfigMap (``kind: ConfigMap`` with ``data``), turned into this node's spec
      from ``node_labels`` / ``node_annotations`` as koord-manager would (see ``SLOControllerConfig``).

    The result is merged onto the koordlet defaults (``merge_node_slo_spec``). ``refresh()`` re-reads the file
    when its mtime (or size or inode) changed. A file that cannot be read or parsed keeps the last good spec
    (the defaults before the first good read) and logs one error; so does a deleted file (a NodeSLO
    deletion does not reset the Go koordlet either). A bad ConfigMap key keeps that key's previous value.
    """

    def __init__(self, path: str, node_name: str = "", node_labels: Mapping[str, str] | None = None,
                 node_annotations: Mapping[str, str] | None = None) -> None:
        self._path = path
        self._node = node_name
        self._labels = dict(node_labels or {})
        self._annotations = dict(node_annotations or {})
        self._sig: tuple[int, int, int] | None = None
        self._content: tuple[str, Any] | None = None    # ("spec", (raw spec, name)) | ("configmap", config)
        self._load_errors: list[str] = []                # ConfigMap keys rejected by the latest good read
        self._spec, _ = merge_node_slo_spec(None, self._what())
        self._errors: list[str] = []
        self._bad = LogOnce(log, logging.ERROR)
        self.refresh()

    @property
    def spec(self) -> NodeSLOSpec:
        return self._spec

    @property
    def errors(self) -> list[str]:
        """Problems found by the latest read: file, ConfigMap keys and rejected sections."""
        return list(self._errors)

    def _what(self, name: str = "") -> str:
        return f"{name or self._node or 'local'} (file {self._path})"

    def refresh(self) -> bool:
        """Re-read the file if it changed; True when the effective spec changed."""
        try:
            st = os.stat(self._path)
        except OSError as e:
            problem = f"NodeSLO file {self._path}: cannot read: {e.strerror or e}; keeping the last good spec"
            self._bad(self._path, "NodeSLO file unreadable path=%s error=%s; keeping the last good spec",
                      self._path, e.strerror or e)
            self._sig, self._errors = None, [problem]
            return False
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self._sig:
            return False
        self._sig = sig
        try:
            content, self._load_errors = self._load()
        except NodeSLOFileError as e:
            self._bad(self._path, "%s; keeping the last good spec", e)
            self._errors = [f"{e}; keeping the last good spec"]
            return False
        if self._bad.forget(self._path):
            log.info("NodeSLO file readable again path=%s", self._path)
        self._content = content
        changed = self._apply()
        log.info("NodeSLO file loaded path=%s kind=%s changed=%s errors=%d", self._path, content[0], changed,
                 len(self._errors))
        return changed

    def set_node(self, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> bool:
        """New node labels/annotations (they choose the ConfigMap node strategy); True when the spec changed."""
        self._labels = dict(labels)
        self._annotations = dict(annotations or {})
        return self._apply() if self._content is not None else False

    def _load(self) -> tuple[tuple[str, Any], list[str]]:
        doc = load_yaml(self._path, "NodeSLO file", NodeSLOFileError)
        if doc is None:
            return ("spec", (None, "")), []
        if not isinstance(doc, Mapping):
            raise NodeSLOFileError(f"NodeSLO file {self._path}: expected a mapping (a NodeSLO, its spec or the "
                                   f"slo-controller-config ConfigMap), got {show(doc)}")
        kind = doc.get("kind")
        if kind == "ConfigMap":
            data = doc.get("data")
            if data is not None and not isinstance(data, Mapping):
                raise NodeSLOFileError(f"NodeSLO file {self._path}: ConfigMap data must be a mapping")
            previous = self._content[1] if self._content and self._content[0] == "configmap" else None
            source = f"ConfigMap file {self._path}"
            config, errors = SLOControllerConfig.parse(data, previous, source)
            return ("configmap", config), errors
        if kind == wire.NODESLO_KIND or (kind is None and "spec" in doc and set(doc) <= _OBJECT_KEYS):
            return ("spec", (doc.get("spec"), object_name(doc))), []
        if kind is not None:
            raise NodeSLOFileError(f"NodeSLO file {self._path}: kind {kind!r} is neither NodeSLO nor ConfigMap")
        return ("spec", (doc, "")), []

    def _apply(self) -> bool:
        assert self._content is not None
        form, payload = self._content
        errors = list(self._load_errors)
        if form == "configmap":
            raw, more = payload.node_slo_spec(self._labels, self._annotations, f"ConfigMap file {self._path}")
            errors += more
            spec, more = merge_node_slo_spec(raw, self._what())
        else:
            raw, name = payload
            spec, more = merge_node_slo_spec(raw, self._what(name))
        errors += more
        self._errors = errors
        changed = spec != self._spec
        self._spec = spec
        return changed
