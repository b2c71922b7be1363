"""NodeSLO: the spec model, the koordlet's defaults and merge, and a local file source for standalone/host mode.

Upstream: koordinator-sh/koordinator a7a1b76, ``apis/slo/v1alpha1/nodeslo_types.go``,
``pkg/util/sloconfig/nodeslo_config.go``, ``pkg/koordlet/statesinformer/impl/states_nodeslo.go`` and
``pkg/slo-controller/nodeslo/*``. The modules, each importing only those listed before it:

- ``schema``: the spec types, each field with its wire name, kind and upstream's checks; ``to_wire()``.
- ``decoder``: a JSON/YAML value overlaid on a typed base with Go's encoding/json semantics and upstream's
  validation; a malformed section falls back to its base with one error, the rest still applies.
- ``merge``: the koordlet's defaults, ``merge_node_slo_spec`` (the effective spec of a received one, with the
  None values of disabled features) and ``node_slo_from_object``.
- ``selector``: Kubernetes label selectors, as a node strategy's ``nodeSelector`` is matched.
- ``controller_config``: the ``slo-controller-config`` ConfigMap turned into one node's spec, as koord-manager
  does.
- ``file``: ``NodeSLOFile``, the spec read from a local file (a NodeSLO, its spec or the ConfigMap).
"""
