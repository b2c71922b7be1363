"""Node-local view of cluster state: node identity, pods and their cgroups, PLEG."""
