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
by the extender's weight × 10. Answers that depend only on a node's devices (the filter's trial allocation, the
DeviceShare score) are remembered per node generation: between two pods only the node the first landed on changes.

**Bind** is where the pod's annotations are written, atomically with the binding: under the node's lock the
allocation is re-run against the cache (which includes pods assumed by earlier binds), the pod is assumed, the lock
is released, and one Binding carrying ``device-allocated`` and ``resource-status`` in its metadata is POSTed (the
API server merges them into the pod in the same update that sets ``nodeName``). If the allocation no longer fits,
or the POST fails, bind answers an error and kube retries the pod: a race costs a retry, never a card shared twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import combinations
from typing import Any

from koordlet.base import wire
from scheduler import fgd
from scheduler.allocator import AllocationFailure, Allocator, node_cards
from scheduler.annotations import format_device_allocated
from scheduler.cache import ClusterCache, NodeState, pod_uid
from scheduler.fgd import shape_of
from scheduler.numa.hints import Hint
from scheduler.numa.names import ANNOTATION_NUMA_TOPOLOGY_SPEC, NUMA_NONE
from scheduler.numa.plugin import NodeNUMAResource, NumaResult, Verdict
from scheduler.requests import PodDeviceRequest, RequestError, pod_device_request

log = logging.getLogger(__name__)

NOT_SYNCED = "koord-scheduler-extender: caches not synced yet"
UNKNOWN_NODE = "node(s) not in the extender's cache (no Node seen)"

# (namespace, name, uid, node, annotations) -> None; raises on failure (koordlet.states.kubeapi.ApiError)
Binder = Callable[[str, str, str, str, Mapping[str, str]], None]


@dataclass
class Verdicts:
    """One filter pass: the nodes that fit and why the others do not."""

    fits: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def _names(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    """The candidate node names, and the full Node objects when kube sent them (not nodeCacheCapable)."""
    names = args.get("NodeNames")
    if names is not None:
        return [str(n) for n in names], None
    items = [n for n in ((args.get("Nodes") or {}).get("items") or []) if isinstance(n, dict)]
    return [str((n.get("metadata") or {}).get("name", "")) for n in items], items


class Extender:
    """The verbs over one cache; thread-safe (kube-scheduler calls prioritize in parallel with other verbs)."""

    def __init__(self, cache: ClusterCache, binder: Binder | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.config = cache.config
        self.allocator = Allocator(self.config.strategy, self.config.device_weights)
        self.load_aware = cache.load_aware
        self.numa = NodeNUMAResource(self.config.numa)
        self._binder = binder
        self._clock = clock

    # --- decisions (shared with the simulator) ---------------------------------------------------------------------

    def check(self, pod: Mapping[str, Any], names: list[str]) -> Verdicts:
        """Filter: which of ``names`` can take the pod."""
        out = Verdicts()
        try:
            request = pod_device_request(pod)
        except RequestError as e:
            out.unresolvable = dict.fromkeys(names, str(e))
            return out
        if self.allocator.mix is not None:
            self.allocator.mix.observe(shape_of(pod, request))
        now = self._clock()
        for name in names:
            state = self.cache.get(name)
            if state is None or state.node is None:
                out.failed[name] = UNKNOWN_NODE
                continue
            with state.lock:
                reason, unresolvable = self._check_node(pod, request, state, now)
            if reason is None:
                out.fits.append(name)
            elif unresolvable:
                out.unresolvable[name] = reason
            else:
                out.failed[name] = reason
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
        return None, False

    def _trial(self, state: NodeState, request: PodDeviceRequest) -> tuple[str | None, bool]:
        """Filter's unscored allocation on one node: (None, False) when it fits, else (reason, unresolvable)."""
        try:
            self.allocator.allocate(state.devices, request)
        except AllocationFailure as e:
            return e.reason, e.unresolvable
        return None, False

    def scores(self, pod: Mapping[str, Any], names: list[str]) -> dict[str, float]:
        """Prioritize: each node's weighted plugin score, 0..100."""
        try:
            request = pod_device_request(pod)
        except RequestError:
            request = PodDeviceRequest({})
        w = self.config.weights
        now = self._clock()
        raw_device: dict[str, float] = {}
        packed: dict[str, float] = {}
        # FragmentationAware scores every pod, CPU-only ones too: their cpu and memory can leave a node's GPUs
        # unusable for the tasks the mix expects (and a node without GPUs then costs nothing)
        shape = shape_of(pod, request) if self.allocator.mix is not None else None
        others: dict[str, tuple[float, int]] = {}
        for name in names:
            state = self.cache.get(name)
            if state is None or state.node is None:
                others[name] = (0.0, 0)
                continue
            with state.lock:
                if shape is not None:
                    growth = self.allocator.growth(state.devices, shape, *state.free(), _gpu_model(state.node))
                    if growth is not None:
                        raw_device[name] = growth
                        packed[name] = _packed(state, shape)
                elif request and state.devices.inventory.devices:
                    key = request.key()
                    devices = state.devices
                    raw_device[name] = (self.allocator.score(devices, request) if key is None else
                                        devices.memo(("score", key), partial(self.allocator.score, devices, request)))
                load = self.load_aware.score(pod, state.node, state.metric, state.load, now) if w.load_aware else 0
                numa = self.numa.score(pod, state.node, state.topology, state.numa) if w.node_numa_resource else 0
            others[name] = (float(w.load_aware * load + w.node_numa_resource * numa),
                             w.load_aware + w.node_numa_resource)
        if shape is not None:       # FragmentationAware: the smallest growth of fragmentation scores 100
            device = fgd.normalize(raw_device, packed)
        else:                       # kube's DefaultNormalizeScore: score × 100 / the highest
            top = max(raw_device.values(), default=0)
            device = {n: (v * 100 / top if top else 0.0) for n, v in raw_device.items()}
        out: dict[str, float] = {}
        for name, (total, weight) in others.items():
            if request or shape is not None:
                total += w.device_share * device.get(name, 0.0)
                weight += w.device_share
            out[name] = total / weight if weight else 0.0
        return out

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
        names, _ = _names(args)
        scores = self.scores(args.get("Pod") or {}, names)
        top = self.config.max_score
        return [{"Host": n, "Score": round(scores.get(n, 0.0) * top / 100)} for n in names]

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
        if self._binder is None:
            return None
        try:
            self._binder(namespace, name, uid, node, annotations)
        except Exception as e:     # ApiError, or anything else: the assumption must not outlive a failed bind
            self.cache.forget(uid)
            log.warning("bind failed pod=%s/%s node=%s error=%s", namespace, name, node, e)
            return f"binding pod {namespace}/{name} to {node}: {e}"
        log.info("bound pod=%s/%s node=%s annotations=%s", namespace, name, node, ",".join(sorted(annotations)))
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


def _gpu_model(node: Mapping[str, Any]) -> str:
    """The node's GPU model label (what a pod's model pin is matched against)."""
    return str(((node.get("metadata") or {}).get("labels") or {}).get(wire.LABEL_GPU_MODEL, ""))


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
