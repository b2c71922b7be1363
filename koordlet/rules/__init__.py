"""Pure rules: (pod, container, NodeSLO, node) -> desired settings; shared by the reconciler and the NRI hooks."""
