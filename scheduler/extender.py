"""The four extender verbs kube-scheduler calls: filter, prioritize, bind, preempt.

Wire facts: kubernetes ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go`` and ``pkg/scheduler/extender.go:
HTTPExtender``. Keys are capitalized Go field names; with ``nodeCacheCapable`` only ``NodeNames`` travel and the answer
names only nodes that were sent (a name that was not sent is an error on kube's side; both lists null means "no node
fits", so the list is always written).

Decisions, per node, from the cache (:mod:`scheduler.cache`) and the plugins:

* **DeviceShare** (:mod:`scheduler.allocator`): filter runs the allocator unscored (device order by minor), bind
  re-runs it scored, as koord-scheduler's Filter and Reserve do; a pod whose request is invalid, or a node with
  none of the device type, is *unresolvable* (preemption cannot help). Per-node summaries (whole cards that fit
  the per-card request, keyed on the node's generation) reject most nodes before the allocator runs.
* **LoadAware** (:mod:`scheduler.loadaware`) and **NodeNUMAResource** (:mod:`scheduler.numa`).

Scores: each plugin gives 0..100 (DeviceShare normalized over the candidates, as kube's DefaultNormalizeScore, or
by fragmentation growth under FragmentationAware: :func:`scheduler.fgd.normalize`); their weighted mean is the
node's score, sent as 0..``prioritizeMaxScore`` (10 by default, kube's ``MaxExtenderPriority``); kube multiplies it
by the extender's weight × 10.

**What is remembered.** Between two pods of one workload only the node the first landed on changes, so each node's
answer (filter's verdict, prioritize's part before normalization) is kept per pod key (the pod less its name, uid,
status conditions, labels and annotations outside Koordinator's domain and owners' names:
:func:`scheduler.requests.pod_key`) in the cache's :class:`~scheduler.cache.Answers` until the node changes, and
a call costs a dict lookup per unchanged node; a pod's requests are parsed once per key. The node a bind changed is
answered again for the bound pod's key in bind itself, so the next replica's scheduling cycle (which kube-scheduler
runs one pod at a time, while binding cycles run beside it) only reads. Below that, answers that depend only on a
node's devices (the trial allocation, the DeviceShare score) are kept per device generation, for pods of other keys
with the same device request.

**Bind** is where the pod's annotations are written, atomically with the binding: under the node's lock the
allocation is re-run against the cache (which includes pods assumed by earlier binds), the pod is assumed, the lock
is released, and one Binding carrying ``device-allocated`` and ``resource-status`` in its metadata is POSTed (the
API server merges them into the pod in the same update that sets ``nodeName``). If the allocation no longer fits,
or the POST fails, bind answers an error and kube retries the pod: a race costs a retry, never a card shared twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import combinations
from typing import Any, NamedTuple, TypeVar

from koordlet.base import wire
from scheduler import fgd
from scheduler.allocator import AllocationFailure, Allocator, node_cards
from scheduler.annotations import format_device_allocated
from scheduler.cache import ClusterCache, NodeState, pod_uid
from scheduler.fgd import shape_of
from scheduler.numa.hints import Hint
from scheduler.numa.names import ANNOTATION_NUMA_TOPOLOGY_SPEC, NUMA_NONE
from scheduler.numa.plugin import NodeNUMAResource, NumaResult, Verdict
from scheduler.requests import PodDeviceRequest, RequestError, pod_device_request, pod_key

log = logging.getLogger(__name__)

NOT_SYNCED = "koord-scheduler-extender: caches not synced yet"
UNKNOWN_NODE = "node(s) not in the extender's cache (no Node seen)"
T = TypeVar("T")
FITS: tuple[str | None, bool] = (None, False)     # filter's verdict for a node that can take the pod
MAX_ASKED = 1024            # pod keys remembered (emptied when full)

# (namespace, name, uid, node, annotations) -> None; raises on failure (koordlet.states.kubeapi.ApiError)
Binder = Callable[[str, str, str, str, Mapping[str, str]], None]


@dataclass
class Verdicts:
    """One filter pass: the nodes that fit and why the others do not."""

    fits: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Asked:
    """What a pod asks, read once per pod key (:func:`scheduler.requests.pod_key`): the decisions read nothing of
    a pod that its key does not hold, so the first pod seen with a key stands for every later one (and the
    plugins' per-pod readings are made once per workload, not once per call)."""

    key: str
    pod: Mapping[str, Any]
    request: PodDeviceRequest | None          # None: it can never be allocated (``error`` says why)
    error: str


class _NodeScore(NamedTuple):
    """One node's part of prioritize before DeviceShare's scores are normalized over the candidates (a tuple of
    numbers: thousands are kept, and the garbage collector stops tracking such tuples)."""

    device: float | None        # DeviceShare's raw score, or FragmentationAware's growth; None: no say here
    packed: float | None        # FragmentationAware's tie-break
    others: float               # LoadAware and NodeNUMAResource, weighted
    weight: int


def _names(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    """The candidate node names, and the full Node objects when kube sent them (not nodeCacheCapable)."""
    names = args.get("NodeNames")
    if names is not None:
        return list(map(str, names)), None
    items = [n for n in ((args.get("Nodes") or {}).get("items") or []) if isinstance(n, dict)]
    return [str((n.get("metadata") or {}).get("name", "")) for n in items], items


class Extender:
    """The verbs over one cache; thread-safe (kube-scheduler calls prioritize in parallel with other verbs)."""

    def __init__(self, cache: ClusterCache, binder: Binder | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.config = cache.config
        self.allocator = Allocator(self.config.strategy, self.config.device_weights)
        if self.allocator.mix is not None:
            self.allocator.mix.capacity = cache.gpus_by_model
        self.load_aware = cache.load_aware
        self.numa = NodeNUMAResource(self.config.numa)
        self._binder = binder
        self._clock = clock
        self._asks: dict[str, _Asked] = {}

    # --- decisions (shared with the simulator) ---------------------------------------------------------------------

    def _asked(self, pod: Mapping[str, Any]) -> _Asked:
        """The pod's :class:`_Asked`, read once per pod key."""
        key = pod_key(pod)
        known = self._asks.get(key)
        if known is None:
            try:
                request, error = pod_device_request(pod), ""
            except RequestError as e:
                request, error = None, str(e)
            if len(self._asks) >= MAX_ASKED:
                self._asks = {}
            known = self._asks[key] = _Asked(key, pod, request, error)
        return known

    def check(self, pod: Mapping[str, Any], names: list[str]) -> Verdicts:
        """Filter: which of ``names`` can take the pod."""
        out = Verdicts()
        asked = self._asked(pod)
        request = asked.request
        if request is None:
            out.unresolvable = dict.fromkeys(names, asked.error)
            return out
        if self.allocator.mix is not None:
            self.allocator.mix.observe(shape_of(asked.pod, request))
        verdicts = self._verdicts(asked, request, names, self._clock())
        for name, verdict in zip(names, verdicts, strict=True):
            if verdict is FITS:
                out.fits.append(name)
                continue
            if verdict is None:
                out.failed[name] = UNKNOWN_NODE
                continue
            reason, unresolvable = verdict
            if reason is None:
                out.fits.append(name)
            elif unresolvable:
                out.unresolvable[name] = reason
            else:
                out.failed[name] = reason
        return out

    def _verdicts(self, asked: _Asked, request: PodDeviceRequest, names: list[str],
                  now: float) -> list[tuple[str | None, bool] | None]:
        """Filter's verdict for each named node (None: not in the cache), remembered per pod key."""
        pod = asked.pod
        return self._per_node(names, ("filter", asked.key), now,
                              lambda state: self._check_node(pod, request, state, now))

    def _parts(self, asked: _Asked, request: PodDeviceRequest, names: list[str],
               now: float) -> tuple[fgd.Shape | None, list[_NodeScore | None]]:
        """Prioritize's part of each named node before normalization, remembered per pod key (and target mix),
        with the pod's shape when FragmentationAware scores it."""
        # FragmentationAware scores every pod, CPU-only ones too: their cpu and memory can leave a node's GPUs
        # unusable for the tasks the mix expects (and a node without GPUs then costs nothing)
        mix = self.allocator.mix
        shape = shape_of(asked.pod, request) if mix is not None else None
        key = ("score", asked.key, mix.version if mix is not None else 0)
        return shape, self._per_node(names, key, now, partial(self._score_node, asked.pod, request, shape, now))

    def _refresh(self, pod: Mapping[str, Any], node: str) -> None:
        """Answer again, for the pod's key, on the node a bind just changed: the next pod of the workload asks
        about it, and this way that question is answered in the binding cycle, which kube-scheduler runs beside
        the next pods' scheduling cycles, not in the scheduling cycle, which it runs one pod at a time."""
        asked = self._asked(pod)
        if asked.request is None:
            return
        now = self._clock()
        try:
            if self._verdicts(asked, asked.request, [node], now)[0] is FITS:
                self._parts(asked, asked.request, [node], now)
        except Exception as e:     # the pod is bound: a failure here must not turn that into an error for kube
            log.warning("answering again after bind failed pod_key=%.80s node=%s error=%r", asked.key, node, e)

    def _per_node(self, names: list[str], question: Hashable, now: float,
                  decide: Callable[[NodeState], T]) -> list[T | None]:
        """``decide(state)`` for each named node under its lock (None for a node not in the cache), kept in the
        cache's :class:`~scheduler.cache.Table` for the question until the node changes: between two pods of one
        workload only the node the first landed on does, so the others cost a dict lookup (bind decides again
        under the lock)."""
        table = self.cache.answers.table(question)
        out: list[T | None] = table.read(names, now)
        if None not in out:
            return out
        for i, name in enumerate(names):
            if out[i] is not None:
                continue
            state = self.cache.get(name)
            if state is None:
                continue
            with state.lock:
                if state.node is None:
                    continue
                out[i] = answer = decide(state)
                table.put(name, answer, state.stale_at, now)
        return out

    def _check_node(self, pod: Mapping[str, Any], request: PodDeviceRequest, state: NodeState,
                    now: float) -> tuple[str | None, bool]:
        assert state.node is not None
        if request:
            if not state.devices.inventory.devices:
                return f"Insufficient {min(request.requests)} devices", True     # no Device CR: never here
            quick = _summary_reject(state, request)
            if quick is not None:
                return quick, False
            key = request.key()
            trial = (self._trial(state, request) if key is None
                     else state.devices.memo(("trial", key), lambda: self._trial(state, request)))
            if trial[0] is not None:
                return trial
        verdict = self.numa.filter(pod, state.topology, state.numa, self._device_hints(pod, request, state))
        if verdict is not None:
            return verdict.reason, verdict.unresolvable
        reason = self.load_aware.filter(pod, state.node, state.metric, state.load, now)
        if reason is not None:
            return reason, False
        return FITS

    def _trial(self, state: NodeState, request: PodDeviceRequest) -> tuple[str | None, bool]:
        """Filter's unscored allocation on one node: (None, False) when it fits, else (reason, unresolvable)."""
        try:
            self.allocator.allocate(state.devices, request)
        except AllocationFailure as e:
            return e.reason, e.unresolvable
        return FITS

    def scores(self, pod: Mapping[str, Any], names: list[str]) -> list[float]:
        """Prioritize: each named node's weighted plugin score, 0..100, in the order of ``names``."""
        asked = self._asked(pod)
        request = asked.request if asked.request is not None else PodDeviceRequest({})
        shape, parts = self._parts(asked, request, names, self._clock())
        if not request and shape is None:          # DeviceShare has no say: the other plugins' mean
            return [p.others / p.weight if p is not None and p.weight else 0.0 for p in parts]
        share = self.config.weights.device_share
        device = _device_scores(names, parts, shape is not None)
        return [(p.others + share * d) / (p.weight + share) if p is not None and p.weight + share else 0.0
                for p, d in zip(parts, device, strict=True)]

    def _score_node(self, pod: Mapping[str, Any], request: PodDeviceRequest, shape: fgd.Shape | None, now: float,
                    state: NodeState) -> _NodeScore:
        """One node's part of prioritize (the caller holds its lock): DeviceShare's raw score (or fragmentation
        growth, with the packing tie-break), and the weighted LoadAware and NodeNUMAResource scores."""
        w = self.config.weights
        device = packed = None
        if shape is not None:
            device = self.allocator.growth(state.devices, shape, *state.free(), state.gpu_model)
            if device is not None:
                packed = _packed(state, shape)
        elif request and state.devices.inventory.devices:
            key = request.key()
            devices = state.devices
            device = (self.allocator.score(devices, request) if key is None else
                      devices.memo(("score", key), partial(self.allocator.score, devices, request)))
        assert state.node is not None
        load = self.load_aware.score(pod, state.node, state.metric, state.load, now) if w.load_aware else 0
        numa = self.numa.score(pod, state.node, state.topology, state.numa) if w.node_numa_resource else 0
        return _NodeScore(device, packed, float(w.load_aware * load + w.node_numa_resource * numa),
                          w.load_aware + w.node_numa_resource)

    # --- the verbs (JSON in, JSON out) -----------------------------------------------------------------------------

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        names, nodes = _names(args)
        if not self.cache.synced:
            return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                    "Error": NOT_SYNCED}
        verdicts = self.check(args.get("Pod") or {}, names)
        result: dict[str, Any] = {"Nodes": None, "NodeNames": verdicts.fits, "FailedNodes": verdicts.failed,
                                  "FailedAndUnresolvableNodes": verdicts.unresolvable, "Error": ""}
        if nodes is not None:
            keep = set(verdicts.fits)
            result["NodeNames"] = None
            result["Nodes"] = {"metadata": {}, "items": [n for n in nodes
                                                          if (n.get("metadata") or {}).get("name") in keep]}
        return result

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"Host": n, "Score": s} for n, s in self.host_scores(args)]

    def host_scores(self, args: Mapping[str, Any]) -> list[tuple[str, int]]:
        """Prioritize's HostPriorityList as (host, score) pairs, scores in 0..``prioritizeMaxScore``."""
        names, _ = _names(args)
        top = self.config.max_score
        return [(n, round(s * top / 100)) for n, s in zip(names, self.scores(args.get("Pod") or {}, names),
                                                          strict=True)]

    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        namespace, name = str(args.get("PodNamespace", "")), str(args.get("PodName", ""))
        uid, node = str(args.get("PodUID", "")), str(args.get("Node", ""))
        error = self.bind_pod(namespace, name, uid, node)
        return {"Error": error or ""}

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> str | None:
        """Allocate under the node's lock, assume, POST the Binding; the error text, or None when bound."""
        pod = self.cache.pod(uid)
        if pod is None:
            return f"pod {namespace}/{name} (uid {uid}) is not in the extender's cache"
        state = self.cache.get(node)
        if state is None or state.node is None:
            return f"node {node}: {UNKNOWN_NODE}"
        with state.lock:
            try:
                annotations = self.reserve(pod, state)
            except AllocationFailure as e:
                log.info("bind refused pod=%s/%s node=%s reason=%s", namespace, name, node, e.reason)
                return f"pod {namespace}/{name} no longer fits node {node}: {e.reason}"
            bound = _bound_copy(pod, node, annotations)
            self.cache.assume(state, bound)
        if self._binder is not None:
            try:
                self._binder(namespace, name, uid, node, annotations)
            except Exception as e:     # ApiError, or anything else: the assumption must not outlive a failed bind
                self.cache.forget(uid)
                log.warning("bind failed pod=%s/%s node=%s error=%s", namespace, name, node, e)
                return f"binding pod {namespace}/{name} to {node}: {e}"
            log.info("bound pod=%s/%s node=%s annotations=%s", namespace, name, node,
                     ",".join(sorted(annotations)))
        self._refresh(pod, node)
        return None

    def reserve(self, pod: Mapping[str, Any], state: NodeState) -> dict[str, str]:
        """The annotations the pod gets on this node (caller holds the node's lock); AllocationFailure if none."""
        annotations: dict[str, str] = {}
        try:
            request = pod_device_request(pod)
        except RequestError as e:
            raise AllocationFailure(str(e), unresolvable=True) from None
        numa = self.numa.allocate(pod, state.topology, state.numa, self._device_hints(pod, request, state))
        if isinstance(numa, Verdict):
            raise AllocationFailure(numa.reason, numa.unresolvable)
        if request:
            # the devices go on the NUMA nodes the merged hint chose (all of them when there was no alignment)
            affinity = numa.affinity if isinstance(numa, NumaResult) else None
            result = self.allocator.allocate(state.devices, request, scored=True, numa_nodes=affinity)
            annotations[wire.ANNOTATION_DEVICE_ALLOCATED] = format_device_allocated(result, state.devices)
        if isinstance(numa, NumaResult):
            annotations.update(self.numa.annotations(pod, numa))
        return annotations

    def _device_hints(self, pod: Mapping[str, Any], request: PodDeviceRequest,
                      state: NodeState) -> dict[str, list[Hint]]:
        """DeviceShare as a NUMA hint provider (``pkg/scheduler/plugins/deviceshare/topology_hint.go``:
        ``Plugin.GetPodTopologyHints``, ``generateTopologyHints``): every NUMA subset the devices fit in, smallest
        first; preferred at the smallest feasible size; score 500 when the subset gives the same cards as the
        unrestricted allocation. Only where a NUMA policy applies (the node's or the pod's)."""
        topo = state.topology
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if (not request or topo is None or not topo.numa_resources
                or (topo.node_numa_policy == NUMA_NONE and topo.kubelet_numa_policy == NUMA_NONE
                    and ANNOTATION_NUMA_TOPOLOGY_SPEC not in annotations)):
            return {}
        try:
            everywhere = self.allocator.allocate(state.devices, request)
        except AllocationFailure:
            return {}
        numas = sorted(topo.numa_resources)
        hints: list[Hint] = []
        smallest = 0
        for size in range(1, len(numas) + 1):
            for subset in combinations(numas, size):
                try:
                    got = self.allocator.allocate(state.devices, request, numa_nodes=frozenset(subset))
                except AllocationFailure:
                    continue
                smallest = smallest or size
                same = all([a.minor for a in got.get(t, [])] == [a.minor for a in everywhere.get(t, [])]
                           for t in everywhere)
                hints.append(Hint(frozenset(subset), size == smallest, 500 if same else 0))
        return dict.fromkeys(request.requests, hints)

    def preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Keep only nodes where evicting the victims (plus lower-priority device holders if needed) frees what
        the pod's devices need; a node where even that is not enough is dropped, so kube never evicts for nothing."""
        pod = args.get("Pod") or {}
        meta_victims = args.get("NodeNameToMetaVictims")
        if meta_victims is None:
            full = args.get("NodeNameToVictims") or {}
            meta_victims = {n: {"Pods": [{"UID": pod_uid(p)} for p in (v or {}).get("Pods") or []],
                                "NumPDBViolations": (v or {}).get("NumPDBViolations", 0)}
                            for n, v in full.items()}
        try:
            request = pod_device_request(pod)
        except RequestError:
            return {"NodeNameToMetaVictims": {}}
        out: dict[str, Any] = {}
        for node, victims in meta_victims.items():
            uids = [str(p.get("UID", "")) for p in (victims or {}).get("Pods") or [] if isinstance(p, dict)]
            chosen = self._victims(pod, request, str(node), uids)
            if chosen is not None:
                out[node] = {"Pods": [{"UID": u} for u in chosen],
                             "NumPDBViolations": (victims or {}).get("NumPDBViolations", 0)}
        return {"NodeNameToMetaVictims": out}

    def _victims(self, pod: Mapping[str, Any], request: PodDeviceRequest, node: str,
                 uids: list[str]) -> list[str] | None:
        state = self.cache.get(node)
        if state is None:
            return None
        if not request:
            return uids
        priority = int((pod.get("spec") or {}).get("priority") or 0)
        with state.lock:
            held = {u: state.pods[u] for u in uids if u in state.pods}
            extra = sorted((p for u, p in state.pods.items() if u not in held and state.devices.holds(u)
                            and int((p.get("spec") or {}).get("priority") or 0) < priority),
                           key=lambda p: int((p.get("spec") or {}).get("priority") or 0))
            removed: list[tuple[str, dict[str, Any]]] = []
            try:
                for u, p in held.items():
                    removed.append((u, p))
                    state.devices.remove(u)
                chosen = list(uids)
                while True:
                    try:
                        self.allocator.allocate(state.devices, request)
                        return chosen
                    except AllocationFailure as e:
                        if e.unresolvable or not extra:
                            return None
                    victim = extra.pop(0)
                    u = pod_uid(victim)
                    removed.append((u, victim))
                    state.devices.remove(u)
                    chosen.append(u)
            finally:
                for _, p in removed:
                    state.devices.add_pod(p)


def _device_scores(names: list[str], parts: list[_NodeScore | None], fragmentation: bool) -> list[float]:
    """DeviceShare's 0..100 for each named node, normalized over them: by the smallest growth of fragmentation
    (FragmentationAware), else kube's DefaultNormalizeScore (score × 100 / the highest); 0 where it has no say."""
    if fragmentation:
        growth = {n: p.device for n, p in zip(names, parts, strict=True) if p is not None and p.device is not None}
        packed = {n: p.packed for n, p in zip(names, parts, strict=True) if p is not None and p.packed is not None}
        normalized = fgd.normalize(growth, packed)
        return [normalized.get(n, 0.0) for n in names]
    top = max((p.device for p in parts if p is not None and p.device is not None), default=0)
    return [p.device * 100 / top if top and p is not None and p.device is not None else 0.0 for p in parts]


def _packed(state: NodeState, shape: fgd.Shape) -> float:
    """How full the node would be with the pod, GPUs and cpu alike (cpu alone where it has no GPU):
    FragmentationAware's tie-break, as best-fit packs (weights chosen in the simulator: bench/NOTES.md)."""
    cpu_total = state.allocatable[0]
    cpu_used = 1.0 - (state.free()[0] - shape.cpu) / cpu_total if cpu_total > 0 else 1.0
    cards = node_cards(state.devices)
    if not cards:
        return cpu_used
    gpu_used = 1.0 - (sum(cards) - shape.gpu_milli * shape.gpus) / (fgd.WHOLE * len(cards))
    return 0.5 * gpu_used + 0.5 * cpu_used


def _bound_copy(pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """The pod as the API server will store it after the Binding: nodeName set, annotations merged."""
    meta = dict(pod.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return {**pod, "metadata": meta, "spec": {**(pod.get("spec") or {}), "nodeName": node}}


def _summary_reject(state: NodeState, request: PodDeviceRequest) -> str | None:
    """Reject without the allocator when too few GPUs could take one card's share (plain requests only: hints,
    joint allocation and partitions may change which cards count, so those go to the allocator)."""
    gpu = request.gpu
    if gpu is None or request.hints or request.joint or request.partition:
        return None
    if state.devices.fitting("gpu", gpu.per_gpu) < gpu.count:
        return "Insufficient gpu devices"
    return None
