"""NodeNUMAResource's vocabulary: annotation and label names, policy values, NUMA status values and the rejection
reasons worded as upstream (``apis/extension/numa_aware.go``, ``node_reservation.go``, ``system_qos.go``,
``plugins/nodenumaresource``), the resource names it treats apart and the bound on entries read from annotations.

Separate because every module of the package, the extender and the tests use these names, and it imports nothing.
"""

from __future__ import annotations

ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_NUMA_ALLOCATE_STRATEGY = "node.koordinator.sh/numa-allocate-strategy"

FULL_PCPUS, SPREAD_BY_PCPUS, DEFAULT_POLICY = "FullPCPUs", "SpreadByPCPUs", "Default"
CONSTRAINED_BURST = "ConstrainedBurst"
BIND_POLICIES = ("", DEFAULT_POLICY, FULL_PCPUS, SPREAD_BY_PCPUS, CONSTRAINED_BURST)
EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL = "None", "PCPULevel", "NUMANodeLevel"
EXCLUSIVE_POLICIES = ("", EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL)
NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS, NODE_BIND_NONE = "FullPCPUsOnly", "SpreadByPCPUs", "None"
NUMA_NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE = "", "BestEffort", "Restricted", "SingleNUMANode"
NUMA_POLICIES = (NUMA_NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)
EXCLUSIVE_REQUIRED, EXCLUSIVE_PREFERRED = "Required", "Preferred"
NUMA_EXCLUSIVES = ("", EXCLUSIVE_REQUIRED, EXCLUSIVE_PREFERRED)
MOST_ALLOCATED, LEAST_ALLOCATED = "MostAllocated", "LeastAllocated"
STATUS_IDLE, STATUS_SHARED, STATUS_SINGLE = "idle", "shared", "single"

# --- reasons, worded as upstream -----------------------------------------------------------------------------------

ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"
ERR_FAILED_TO_ALLOCATE_CPUS = "failed to allocate cpus"
ERR_MISSING_NUMA_RESOURCES = "node(s) missing NUMA resources"
ERR_UNSATISFIED_NUMA = "Unsatisfied NUMA {}"
ERR_UNALIGNED_HINT = "Unaligned NUMA Hint cause {}"
ERR_INSUFFICIENT_NUMA = "Insufficient NUMA {}"
ERR_REQUIRED_POLICY = "insufficient CPUs to satisfy required cpu bind policy {}"

MAX_LIST_ENTRIES = 4096           # pod-cpu-allocs entries, resource-status NUMA entries
CPU, MEMORY, EPHEMERAL_STORAGE = "cpu", "memory", "ephemeral-storage"
