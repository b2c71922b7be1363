"""LoadAware: koord-scheduler's LoadAwareScheduling plugin as pure modules, fed by the agent's NodeMetric.

Facts: upstream ``pkg/scheduler/plugins/loadaware`` (load_aware.go, helper.go, pod_assign_cache.go,
estimator/default_estimator.go) and ``pkg/scheduler/apis/config/v1/defaults.go`` and
``validation/validation_pluginargs.go``. Verdicts and scores equal upstream's for the same inputs, including its float64
rounding (Go's ``math.Round``: halves away from zero) and int64 truncating division in the score.

Why the shape: the extender asks filter and prioritize about one pod over up to 500 nodes, so everything that does
not change per call is computed once and remembered by identity (the caller hands us the same objects until they
change): the incoming pod's estimate (last pod only), each node's allocatable vector and threshold profile (per
node object, or per ``resourceVersion``), a NodeMetric's resource vectors and the sums over a node's assigned pods
(per NodeMetricView and per :class:`~scheduler.loadaware.plugin.NodeLoad` generation). A call is then O(resources)
integer arithmetic; a NodeMetric update or a pod added to a node costs O(pods on that node) once.

Resources are vectors in the order of :attr:`~scheduler.loadaware.plugin.LoadAware.resources`: cpu, memory and
every resource any argument names, sorted (upstream's ResourceVectorizer). cpu is in milli-cores, everything else in
base units, both rounded up as Kubernetes' MilliValue/Value do. A resource that only a node annotation names is
ignored, as upstream.

Tenant and operator input (the Node annotations ``scheduling.koordinator.sh/usage-thresholds`` and
``node.koordinator.sh/raw-allocatable``, the pod's estimation annotations) is decoded with the bounds of
:mod:`koordlet.states.decode`; a bad value is logged once per node (or pod) and ignored, as upstream ignores it, and
never raises out of :meth:`~scheduler.loadaware.plugin.LoadAware.filter` or
:meth:`~scheduler.loadaware.plugin.LoadAware.score`.

Not thread-safe beyond the GIL's atomic assignments: the caches are replaced whole, so concurrent readers see an
old or a new entry; one :class:`~scheduler.loadaware.plugin.NodeLoad` must not be mutated by two threads at once.

The modules follow what the plugin reads; each imports only modules listed after it (an import-linter contract in
pyproject.toml checks this):

* ``plugin``: LoadAware's filter, score and estimate, and NodeLoad, the pods assigned to one node;
* ``node`` | ``pod``: what it reads of a Node (allocatable, threshold annotations) | of a Pod (estimate, priority,
  conditions, estimation annotations);
* ``metric``: the NodeMetric as the plugin reads it;
* ``args``: LoadAwareSchedulingArgs with upstream's defaults and validation;
* ``names``: annotation names, reasons, resource names and the vector types.
"""
