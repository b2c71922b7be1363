"""koord-scheduler's NodeNUMAResource plugin as pure decisions (``plugins/nodenumaresource/plugin.go``): what
PreFilter reads of the pod, then Filter, Reserve (the cpuset and NUMA shares), Score, and PreBind's annotations.

The package's entry point: the extender calls :class:`NodeNUMAResource` with the node's parsed topology and usage,
and every other module serves one of its verbs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from koordlet.base import wire
from koordlet.host.cgroup import format_cpu_list
from koordlet.states import decode
from koordlet.states.topology import go_json
from scheduler.numa.allocation import Allocation, NodeAllocator, ResourceOptions
from scheduler.numa.annotations import numa_topology_spec, resource_spec
from scheduler.numa.args import NumaArgs
from scheduler.numa.cpu_accumulator import Unfit
from scheduler.numa.hints import NO_HINTS, Hint, TopologyHint, merge_hints
from scheduler.numa.names import (
    ANNOTATION_RESOURCE_SPEC,
    CPU,
    DEFAULT_POLICY,
    ERR_CPU_BIND_POLICY_CONFLICT,
    ERR_INVALID_CPU_TOPOLOGY,
    ERR_INVALID_REQUESTED_CPUS,
    ERR_MISSING_NUMA_RESOURCES,
    ERR_NOT_MATCH_NUMA_TOPOLOGY,
    ERR_SMT_ALIGNMENT,
    EXCLUSIVE_REQUIRED,
    FULL_PCPUS,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    NODE_BIND_NONE,
    NODE_FULL_PCPUS_ONLY,
    NODE_SPREAD_BY_PCPUS,
    NUMA_NONE,
    RESTRICTED,
    SINGLE_NUMA_NODE,
    SPREAD_BY_PCPUS,
)
from scheduler.numa.quantity import (
    DECIMAL_SI,
    ZERO,
    Quantity,
    canonical,
    ceil_milli,
    format_of,
    framework_unit,
    framework_units,
)
from scheduler.numa.scoring import node_allocatable, resource_score
from scheduler.numa.topology import NodeTopology
from scheduler.numa.usage import NumaUsage
from scheduler.requests import pod_requests

# --- the pod (PreFilter) ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _PodSpec:
    """What PreFilter derives from the pod once."""

    requests: Mapping[str, Quantity]
    cpu_milli: int
    bind: bool                 # the pod itself asks for a cpuset (LSE/LSR prod with FullPCPUs/SpreadByPCPUs)
    required: str              # required bind policy ("" when none)
    preferred: str             # the bind policy it would use without a node policy
    exclusive: str             # preferredCPUExclusivePolicy
    numa_policy: str
    numa_exclusive: str
    units: Mapping[str, int]   # ``requests`` in framework units (what Score compares)


def _request_formats(spec: Mapping[str, Any]) -> dict[str, str]:
    """Per resource, the format of the first container request naming it (app, then init containers, then
    overhead): the format Go's summed ResourceList keeps for it in the common cases."""
    formats: dict[str, str] = {}
    sources: list[Any] = []
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        sources += [resources.get("requests") or {}, resources.get("limits") or {}]
    sources.append(spec.get("overhead") or {})
    for requests in sources:
        if isinstance(requests, Mapping):
            for k, v in requests.items():
                formats.setdefault(str(k), format_of(v))
    return formats


def _priority_class(pod: Mapping[str, Any]) -> str:
    """``GetPodPriorityClassRaw``: the label (an unknown value reads as none), else the priority's range."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if wire.LABEL_PRIORITY_CLASS in labels:
        value = labels[wire.LABEL_PRIORITY_CLASS]
        return value if value in (p for p, _, _ in wire.PRIORITY_RANGES) else wire.PRIORITY_NONE
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for name, lo, hi in wire.PRIORITY_RANGES:
            if lo <= priority <= hi:
                return name
    return wire.PRIORITY_NONE


def allow_cpuset(pod: Mapping[str, Any]) -> bool:
    """``AllowUseCPUSet``: LSE or LSR by the raw qosClass label, and prod priority (LSE/LSR default to prod)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(wire.LABEL_QOS_CLASS) not in (wire.QOS_LSE, wire.QOS_LSR):
        return False
    return _priority_class(pod) in (wire.PRIORITY_NONE, wire.PRIORITY_PROD)


# --- the plugin -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NumaResult:
    """What NodeNUMAResource allocated to a pod on a node. ``numa_resources`` is in milli-cores for cpu and base
    units otherwise; ``quantities`` holds the same values as upstream prints them in ``resource-status``;
    ``affinity`` is the chosen NUMA mask (None: no NUMA alignment), for DeviceShare to allocate within."""

    cpuset: frozenset[int]
    numa_resources: Mapping[int, Mapping[str, int]]
    bind_policy: str                      # the CPU bind policy used; "" when the pod gets no cpuset
    required: bool = False                # bind_policy was required (by the pod or by the node)
    affinity: frozenset[int] | None = None
    quantities: Mapping[int, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The pod does not fit the node, with upstream's reason; ``unresolvable`` as kube's
    UnschedulableAndUnresolvable (no preemption can help)."""

    reason: str
    unresolvable: bool


class NodeNUMAResource:
    """koord-scheduler's NodeNUMAResource plugin as pure decisions: filter, allocate (Reserve), score, annotations
    (PreBind)."""

    def __init__(self, args: NumaArgs) -> None:
        self.args = args
        # one extender call asks about one pod on hundreds of nodes: its spec is read once per pod object, and each
        # Node's allocatable once per Node object (compared by identity while the memo holds the reference)
        self._last_spec: tuple[Mapping[str, Any], _PodSpec | Verdict | None] | None = None
        self._allocatable: dict[str, tuple[Mapping[str, Any], dict[str, int]]] = {}

    # -- PreFilter --

    def _spec(self, pod: Mapping[str, Any]) -> _PodSpec | Verdict | None:
        """The pod's requests and policies; None when it requests nothing (upstream skips it)."""
        last = self._last_spec
        if last is not None and last[0] is pod:
            return last[1]
        spec = self._read_spec(pod)
        self._last_spec = (pod, spec)
        return spec

    def _node_allocatable(self, node: Mapping[str, Any] | None) -> dict[str, int]:
        if node is None:
            return {}
        name = str((node.get("metadata") or {}).get("name", ""))
        known = self._allocatable.get(name)
        if known is not None and known[0] is node:
            return known[1]
        value = node_allocatable(node)
        self._allocatable[name] = (node, value)
        return value

    def _read_spec(self, pod: Mapping[str, Any]) -> _PodSpec | Verdict | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            required, preferred, exclusive = resource_spec(annotations)
            numa_policy, numa_exclusive = numa_topology_spec(annotations)
        except decode.DecodeError as e:
            return Verdict(str(e), True)
        spec = pod.get("spec") or {}
        try:
            summed = pod_requests(spec)
        except ValueError as e:
            return Verdict(f"pod requests: {e}", True)
        if not summed:
            return None
        formats = _request_formats(spec)
        requests = {k: Quantity(ceil_milli(v), formats.get(k, DECIMAL_SI)) for k, v in summed.items()}
        cpu = requests.get(CPU, ZERO).milli
        bind, state_required, state_preferred, state_exclusive = False, "", "", ""
        if allow_cpuset(pod):
            policy = preferred if preferred not in ("", DEFAULT_POLICY) else self.args.default_cpu_bind_policy
            if required == DEFAULT_POLICY:
                required = self.args.default_cpu_bind_policy
            if required:
                policy = required
            if policy in (FULL_PCPUS, SPREAD_BY_PCPUS):
                if cpu % 1000:
                    return Verdict(ERR_INVALID_REQUESTED_CPUS, True)
                if cpu > 0:
                    bind, state_required, state_preferred, state_exclusive = True, required, policy, exclusive
        return _PodSpec(MappingProxyType(requests), cpu, bind, state_required, state_preferred, state_exclusive,
                        numa_policy, numa_exclusive, MappingProxyType(framework_units(requests)))

    # -- per node --

    @staticmethod
    def _policy(spec: _PodSpec, topo: NodeTopology | None) -> str | Verdict:
        node = topo.numa_policy if topo is not None else NUMA_NONE
        if node and spec.numa_policy and node != spec.numa_policy:
            return Verdict(ERR_NOT_MATCH_NUMA_TOPOLOGY, True)
        return spec.numa_policy or node

    @staticmethod
    def _bind(spec: _PodSpec, topo: NodeTopology | None) -> bool | Verdict:
        """``requestCPUBind``: the pod asks, or the node binds every pod with a CPU request (whole cores only)."""
        if spec.bind:
            return True
        if spec.cpu_milli == 0:
            return False
        node = topo.cpu_bind_policy if topo is not None else NODE_BIND_NONE
        if node != NODE_BIND_NONE:
            if spec.cpu_milli % 1000:
                return Verdict(ERR_INVALID_REQUESTED_CPUS, True)
            return True
        return False

    def _options(self, spec: _PodSpec, topo: NodeTopology, bind: bool) -> ResourceOptions:
        """``getResourceOptions``: the pod's required policy, else the node's (required), else its preferred one."""
        policy, required = spec.required, bool(spec.required)
        if not required:
            policy = spec.preferred
            node = topo.cpu_bind_policy
            if node == NODE_SPREAD_BY_PCPUS:
                policy, required = SPREAD_BY_PCPUS, True
            elif node == NODE_FULL_PCPUS_ONLY:
                policy, required = FULL_PCPUS, True
        strategy = topo.numa_allocate_strategy or (
            MOST_ALLOCATED if self.args.numa_scoring_strategy.type == MOST_ALLOCATED else LEAST_ALLOCATED)
        return ResourceOptions(spec.requests, spec.cpu_milli // 1000, bind, policy, required, spec.exclusive, strategy)

    def _admit(self, spec: _PodSpec, topo: NodeTopology | None, usage: NumaUsage, policy: str,
               extra: Mapping[str, Sequence[Hint]]) -> tuple[frozenset[int] | None, Allocation] | Verdict:
        """The topology manager's Admit: merge the hints, then allocate within the best one."""
        if topo is None or not topo.numa_resources:
            return Verdict(ERR_MISSING_NUMA_RESOURCES, True)
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict):
            return bind
        node = NodeAllocator(topo, usage, self._options(spec, topo, bind))
        exclusive = spec.numa_exclusive or (EXCLUSIVE_REQUIRED if spec.numa_policy else "")
        status = usage.numa_status(topo, len(topo.numa_resources))
        others = [{k: [TopologyHint(h.mask or None, h.preferred, False, h.score) for h in v] for k, v in extra.items()}
                  ] if extra else []

        def merged(max_size: int | None) -> tuple[dict[str, list[TopologyHint]], tuple[TopologyHint, bool, list[str]]]:
            hints = node.hints(policy, self.args.numa_scoring_strategy.type, self.args.scoring_strategy.resources,
                               max_size)
            return hints, merge_hints(policy, topo.numa_nodes, [hints, *others], exclusive, status)
        # SingleNUMANode admits single-node hints only: when every resource has one and the pod is admitted, the
        # larger subsets (2^n of them) cannot change the outcome; otherwise they are needed (upstream's reason
        # lists them all)
        hints, (best, admit, reasons) = merged(1 if policy == SINGLE_NUMA_NODE else None)
        if policy == SINGLE_NUMA_NODE and not (admit and all(hints.values())):
            _, (best, admit, reasons) = merged(None)
        if not admit and reasons:
            return Verdict(", ".join(reasons), False)
        try:
            return best.mask, node.allocate(best.mask)
        except Unfit as e:
            return Verdict(str(e), False)

    def _resolve(self, pod: Mapping[str, Any], topo: NodeTopology | None
                 ) -> tuple[_PodSpec, str, bool] | Verdict | None:
        """The pod's spec, the NUMA policy that applies on this node and whether it binds CPUs; a Verdict when they
        conflict, None when the pod requests nothing."""
        spec = self._spec(pod)
        if not isinstance(spec, _PodSpec):
            return spec
        policy = self._policy(spec, topo)
        if isinstance(policy, Verdict):
            return policy
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict):
            return bind
        return spec, policy, bind

    def filter(self, pod: Mapping[str, Any], topo: NodeTopology | None, usage: NumaUsage,
               extra_hints: Mapping[str, Sequence[Hint]] = NO_HINTS) -> Verdict | None:
        """Upstream's Filter: None when the pod fits the node. ``extra_hints``: other providers' NUMA hints
        (DeviceShare's, by device type) merged with ours; their own allocation within the chosen mask is theirs."""
        resolved = self._resolve(pod, topo)
        if not isinstance(resolved, tuple):
            return resolved
        spec, policy, bind = resolved
        if bind:
            if topo is None or not topo.valid:
                return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
            required = spec.required
            if topo.cpu_bind_policy == NODE_FULL_PCPUS_ONLY:
                required = FULL_PCPUS
            elif topo.cpu_bind_policy == NODE_SPREAD_BY_PCPUS:
                required = SPREAD_BY_PCPUS
            if spec.required and spec.required != required:
                return Verdict(ERR_CPU_BIND_POLICY_CONFLICT, True)
            if required == FULL_PCPUS and (spec.cpu_milli // 1000) % topo.cpus_per_core:
                return Verdict(ERR_SMT_ALIGNMENT, True)
            if required and policy == NUMA_NONE:
                try:
                    NodeAllocator(topo, usage, self._options(spec, topo, True)).allocate(None)
                except Unfit as e:
                    return Verdict(str(e), False)
                return None
        if policy in (RESTRICTED, SINGLE_NUMA_NODE):
            admitted = self._admit(spec, topo, usage, policy, extra_hints)
            return admitted if isinstance(admitted, Verdict) else None
        return None

    def allocate(self, pod: Mapping[str, Any], topo: NodeTopology | None, usage: NumaUsage,
                 extra_hints: Mapping[str, Sequence[Hint]] = NO_HINTS) -> NumaResult | Verdict | None:
        """Upstream's Reserve: the cpuset and NUMA shares for the pod on this node; None when it needs neither."""
        resolved = self._resolve(pod, topo)
        if not isinstance(resolved, tuple):
            return resolved
        spec, policy, bind = resolved
        if policy == NUMA_NONE:
            if not bind:
                return None
            if topo is None or not topo.valid:
                return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
            opts = self._options(spec, topo, bind)
            try:
                return self._result(opts, None, NodeAllocator(topo, usage, opts).allocate(None))
            except Unfit as e:
                return Verdict(str(e), False)
        if bind and topo is not None and not topo.valid:
            return Verdict(ERR_INVALID_CPU_TOPOLOGY, True)
        admitted = self._admit(spec, topo, usage, policy, extra_hints)
        if isinstance(admitted, Verdict):
            return admitted
        assert topo is not None
        return self._result(self._options(spec, topo, bind), *admitted)

    @staticmethod
    def _result(opts: ResourceOptions, mask: frozenset[int] | None, alloc: Allocation) -> NumaResult:
        return NumaResult(
            cpuset=alloc.cpus,
            numa_resources=MappingProxyType({n: MappingProxyType({k: framework_unit(k, q.milli) for k, q in r.items()})
                                             for n, r in alloc.numa.items()}),
            bind_policy=opts.policy if opts.bind else "",
            required=opts.required if opts.bind else False,
            affinity=mask,
            quantities=MappingProxyType({n: MappingProxyType({k: canonical(q) for k, q in r.items()})
                                         for n, r in alloc.numa.items()}))

    def score(self, pod: Mapping[str, Any], node: Mapping[str, Any] | None, topo: NodeTopology | None,
              usage: NumaUsage, extra_hints: Mapping[str, Sequence[Hint]] = NO_HINTS) -> int:
        """Upstream's Score (0..100, not normalized): the node's allocation with no NUMA policy, else the chosen NUMA
        nodes' allocatable and allocated (pinned CPUs counting as whole cores)."""
        spec = self._spec(pod)
        if not isinstance(spec, _PodSpec):
            return 0
        policy = self._policy(spec, topo)
        bind = self._bind(spec, topo)
        if isinstance(bind, Verdict) or (bind and (topo is None or not topo.valid)):
            return 0
        strategy = self.args.scoring_strategy
        pod_units = spec.units
        if isinstance(policy, Verdict) or policy == NUMA_NONE or topo is None:
            return resource_score(strategy.type, strategy.resources, usage.requested(),
                                  self._node_allocatable(node), pod_units)
        if policy in (RESTRICTED, SINGLE_NUMA_NODE):
            admitted = self._admit(spec, topo, usage, policy, extra_hints)
            if isinstance(admitted, Verdict):
                return 0
            alloc = admitted[1]
        else:                   # BestEffort: no affinity is chosen before Reserve upstream
            try:
                alloc = NodeAllocator(topo, usage, self._options(spec, topo, bind)).allocate(None)
            except Unfit:
                return 0
        if alloc.numa:
            held = usage.numa_allocated()
            requested: dict[str, int] = {}
            allocatable: dict[str, int] = {}
            for n in alloc.numa:
                for k, v in held.get(n, {}).items():
                    requested[k] = requested.get(k, 0) + v
                for k, q in topo.numa_resources.get(n, {}).items():
                    allocatable[k] = allocatable.get(k, 0) + q.milli
            requested_units, allocatable_units = framework_units(requested), framework_units(allocatable)
        else:
            requested_units, allocatable_units = dict(usage.requested()), dict(self._node_allocatable(node))
        if alloc.cpus:
            requested_units[CPU] = 1000 * len(usage.allocated_cpus())
        return resource_score(strategy.type, strategy.resources, requested_units, allocatable_units, pod_units)

    def annotations(self, pod: Mapping[str, Any], result: NumaResult) -> dict[str, str]:
        """PreBind's annotations: ``resource-status`` (cpuset, numaNodeResources) exactly as upstream marshals it,
        and ``resource-spec`` filled with the bind policy used when the pod gave none or ``Default``."""
        status: dict[str, Any] = {}
        if result.cpuset:
            status["cpuset"] = format_cpu_list(sorted(result.cpuset))
        if result.quantities:
            status["numaNodeResources"] = [
                {"node": n, "resources": {k: result.quantities[n][k] for k in sorted(result.quantities[n])}}
                for n in sorted(result.quantities)]
        out = {wire.ANNOTATION_RESOURCE_STATUS: go_json(status)}
        if result.bind_policy:
            spec = self._written_spec(pod, result)
            if spec is not None:
                out[ANNOTATION_RESOURCE_SPEC] = spec
        return out

    @staticmethod
    def _written_spec(pod: Mapping[str, Any], result: NumaResult) -> str | None:
        """``appendResourceSpecIfMissed``: the pod's resource-spec with the policy used filled in, or None when it
        already says it."""
        try:
            required, preferred, exclusive = resource_spec((pod.get("metadata") or {}).get("annotations") or {})
        except decode.DecodeError:
            required, preferred, exclusive = "", "", ""
        write = False
        if result.required and required in ("", DEFAULT_POLICY):
            required, write = result.bind_policy, True
        if preferred == DEFAULT_POLICY:
            preferred, write = result.bind_policy, True
        if not required and not preferred:
            preferred, write = result.bind_policy, True
        if not write:
            return None
        spec = {"requiredCPUBindPolicy": required, "preferredCPUBindPolicy": preferred,
                "preferredCPUExclusivePolicy": exclusive}
        return go_json({k: v for k, v in spec.items() if v})
