"""NodeNUMAResource: koord-scheduler's NUMA-aware placement and CPU pinning, driven by the agent's NRT.

Facts: ``apis/extension/numa_aware.go`` and koord-scheduler's ``plugins/nodenumaresource`` (plugin.go,
topology_hint.go, resource_manager.go, cpu_accumulator.go, scoring.go, node_allocation.go, topology_options.go) and
``frameworkext/topologymanager``. Pure: the caller owns the state (one :class:`~scheduler.numa.usage.NumaUsage` per
node, fed with every pod assigned there, and the parsed :class:`~scheduler.numa.topology.NodeTopology`), and every
decision is a function of (pod, topology, usage).

What a pod gets, as upstream decides it:

* **CPU binding** (a cpuset) for LSE/LSR prod pods whose bind policy resolves to FullPCPUs or SpreadByPCPUs, and for
  every pod with a CPU request on a node labelled (or a kubelet configured) to bind; whole cores only.
* **NUMA alignment** when the node's or the pod's NUMA topology policy is set: every NUMA subset is tried, the
  feasible ones become hints, and the hints of every provider (cpu, memory, ... here; devices from DeviceShare through
  ``extra_hints``) are merged the way the kubelet's topology manager merges them.
* The result is written as ``scheduling.koordinator.sh/resource-status`` byte for byte as Go's ``json.Marshal``
  prints it, so the agent's cpuset hook and koord-scheduler itself read it back unchanged.

Where upstream's code has quirks that change the result, they are kept on purpose (same input, same placement):

* The even split over a hint's NUMA nodes orders them with a comparator that indexes the availability map by the
  sort's *positions*, not by the NUMA ids (see :func:`scheduler.numa.allocation._go_position_sort`).
* The NUMA-level hint score uses ``numaScoringStrategy.type`` with ``scoringStrategy.resources`` as the weights.
* NRT ``topologyPolicies`` values ``RestrictedPodLevel``/``BestEffortPodLevel`` (what koordlet writes) count as no
  policy; only ``Restricted``, ``BestEffort`` and ``SingleNUMANodePodLevel`` are recognized.

Where upstream would crash or drop a whole object on bad input, one bad value costs only itself: a tenant's bad
``resource-spec``/``numa-topology-spec`` makes its pod Unresolvable (upstream: a PreFilter error), an assigned pod's
bad ``resource-status`` counts as holding nothing (as upstream), an assigned pod's bad ``resource-spec`` loses only
its exclusivity (upstream: its cpuset too), a bad NRT annotation reads as absent (as upstream), and an unknown NUMA
policy label reads as absent (upstream: a nil policy and a panic).

Not implemented: reservations and preemption state, designated allocations (scheduling hints), CPU amplification
(``node.koordinator.sh/resource-amplification-ratio``: the extra "Insufficient amplified cpu" check and the amplified
NUMA capacities), pod-level ``spec.resources``, ``maxRefCount`` > 1 (upstream sets it only for tests).

The modules follow upstream's files; each imports only modules listed after it (an import-linter contract in
pyproject.toml checks this):

* ``plugin``: the plugin's verbs (Filter, Reserve, Score, PreBind) and what PreFilter reads of the pod;
* ``allocation``: one node's NUMA shares, cpuset and NUMA hints for one pod (resource_manager.go);
* ``hints`` | ``cpu_accumulator`` | ``scoring`` | ``usage``: the topology manager's hint merge, upstream's takeCPUs,
  LeastAllocated / MostAllocated, what the node's assigned pods hold;
* ``topology`` | ``annotations`` | ``args``: the node's NRT and labels, the pods' annotations, the plugin's arguments;
* ``quantity``: quantities as Go's resource.Quantity carries and prints them;
* ``names``: annotation and label names, policy values and reasons, as on the wire.
"""
