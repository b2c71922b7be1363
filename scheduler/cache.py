"""The extender's view of the cluster, kept from watches: Nodes, Pods, Devices, NodeMetrics, NodeResourceTopologies.

Per node it keeps what the plugins decide from, updated as events arrive, never rebuilt per request:

* :class:`~scheduler.devices.NodeDevices`: the Device CR plus the ``device-allocated`` annotations of the pods
  assigned to the node (koord-scheduler's device cache, so a restart of the extender loses nothing);
* :class:`~scheduler.loadaware.plugin.NodeLoad` and the parsed NodeMetric (LoadAware);
* :class:`~scheduler.numa.usage.NumaUsage` and the parsed NRT (NodeNUMAResource).

**Assumed pods.** kube-scheduler binds asynchronously: the next pod's filter can run before the watch shows the
last bind. :meth:`ClusterCache.assume` counts a pod on its node at once (before the Binding is POSTed) and
remembers it by UID; the pod's own watch event replaces the assumption with what the API server stored (the same
annotations), :meth:`ClusterCache.forget` drops it when the POST fails, and an assumption the watch never confirms
expires after ``assume_ttl`` seconds. Each node has a lock: bind re-runs the allocation and assumes under it, so
two binds can never take the same share of a card.

Thread model: the watch threads write, the HTTP worker threads read; one lock per node guards that node's state
and ``_lock`` guards the maps themselves. Readers take a node's lock for the length of one node's decision.
"""

from __future__ import annotations

import calendar
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.base.quantity import parse_quantity
from koordlet.base.wire import LABEL_GPU_MODEL
from koordlet.states import kubeapi
from koordlet.states.kubeapi import KubeApi
from koordlet.states.watcher import Reflector
from scheduler.config import ExtenderConfig
from scheduler.devices import NodeDevices, parse_device
from scheduler.loadaware.metric import NodeMetricView, parse_node_metric
from scheduler.loadaware.plugin import LoadAware, NodeLoad
from scheduler.numa.topology import NodeTopology, parse_topology
from scheduler.numa.usage import NumaUsage
from scheduler.requests import GPU, pod_requests, value

log = logging.getLogger(__name__)

_TERMINAL = ("Succeeded", "Failed")
MEMO_KEYS = 32              # questions whose answers are kept: a few pod shapes are in play at once


class Table(dict[str, Any]):
    """One question's answers, node name -> answer, read without a lock (a filter asks about hundreds of nodes:
    one C-level lookup each). An answer is written under its node's lock and every write to the node's state
    drops the node's answers under that lock, so an answer read here is the one the node as it is now gives (or,
    read while a change is being written, the one from just before it).

    The one thing that changes with time alone is a NodeMetric's expiry: an answer given while the node's metric
    was fresh no longer holds once it expires. Those expiries are kept beside the answers, and the answers that
    passed theirs are swept out when the earliest one passes (rarely: a metric is renewed, dropping the answers,
    long before it expires)."""

    def __init__(self) -> None:
        super().__init__()
        self._expiring: dict[str, float] = {}       # node -> when its answer stops holding
        self._next = math.inf                       # the earliest of them (or earlier: a dropped answer's)
        self._lock = threading.Lock()               # puts and sweeps

    def read(self, names: list[str], now: float) -> list[Any]:
        """The answers for ``names`` that hold at ``now``, None where there is none."""
        if now >= self._next:
            self._sweep(now)
        return list(map(self.get, names))

    def put(self, name: str, answer: Any, stale_at: float, now: float) -> None:
        """Keep the answer the node gave at ``now``, its metric expiring at ``stale_at`` (the caller holds the
        node's lock)."""
        with self._lock:
            self[name] = answer
            if now < stale_at < math.inf:
                self._expiring[name] = stale_at
                self._next = min(self._next, stale_at)
            else:
                self._expiring.pop(name, None)

    def drop(self, name: str) -> None:
        """The node changed (the caller holds its lock)."""
        self.pop(name, None)
        self._expiring.pop(name, None)

    def _sweep(self, now: float) -> None:
        with self._lock:
            for name, stale_at in list(self._expiring.items()):
                if stale_at <= now:
                    self._expiring.pop(name, None)
                    self.pop(name, None)
            self._next = min(self._expiring.values(), default=math.inf)


class Answers:
    """What the extender answered for each node, by question (a verb and a pod key): one :class:`Table` per
    question, the least recently asked dropped when there are ``keys``."""

    def __init__(self, keys: int = MEMO_KEYS) -> None:
        self._tables: dict[Hashable, Table] = {}
        self._keys = keys
        self._lock = threading.Lock()

    def table(self, question: Hashable) -> Table:
        """The question's table, made the most recently used (the least recently used is dropped when full)."""
        with self._lock:
            table = self._tables.pop(question, None)
            if table is None:
                table = Table()
                if len(self._tables) >= self._keys:
                    del self._tables[next(iter(self._tables))]
            self._tables[question] = table
        return table

    def forget(self, name: str) -> None:
        """Drop the node's answers to every question (the caller holds the node's lock)."""
        for table in list(self._tables.values()):
            table.drop(name)


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def pod_node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL


def _assigned_at(pod: Mapping[str, Any]) -> float:
    """When the pod was bound: its PodScheduled condition's time (LoadAware's assign time), else now."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            stamp = c.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
                except ValueError:
                    break
    return time.time()


def _same_holdings(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two copies of one pod hold the same on a node (requests, devices, NUMA shares: what spec,
    annotations and phase say), as the watch's copy of a pod this extender assumed does: it is not read again."""
    return (a.get("spec") == b.get("spec")
            and (a.get("status") or {}).get("phase") == (b.get("status") or {}).get("phase")
            and (a.get("metadata") or {}).get("annotations") == (b.get("metadata") or {}).get("annotations"))


@dataclass
class NodeState:
    """Everything the plugins read of one node; guarded by ``lock``."""

    name: str
    load: NodeLoad
    node: dict[str, Any] | None = None
    device_cr: dict[str, Any] | None = None
    devices: NodeDevices = field(default_factory=NodeDevices)
    metric: NodeMetricView | None = None
    nrt: dict[str, Any] | None = None
    topology: NodeTopology | None = None
    numa: NumaUsage = field(default_factory=NumaUsage)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)     # uid -> assigned pod (or assumed)
    since: dict[str, float] = field(default_factory=dict)             # uid -> when it was assigned here
    requested: dict[str, int] = field(default_factory=dict)           # cpu (milli) and memory its pods request
    lock: threading.RLock = field(default_factory=threading.RLock)

    allocatable: tuple[int, int] = (0, 0)                            # cpu (milli), memory: from ``node``
    gpu_model: str = ""                                              # its gpu-model label: from ``node``
    stale_at: float = math.inf                                       # when ``metric`` expires (LoadAware)
    answers: Answers = field(default_factory=Answers)                # the cache's: what was answered about nodes

    def changed(self) -> None:
        """Every write to the node's state ends here (under ``lock``): the answers given about it no longer hold."""
        self.answers.forget(self.name)

    def remove(self) -> None:
        """The Node was deleted: whoever still holds this state finds no node (under ``lock``)."""
        self.node = None
        self.changed()

    def set_node(self, node: dict[str, Any]) -> None:
        self.node = node
        self.gpu_model = str(((node.get("metadata") or {}).get("labels") or {}).get(LABEL_GPU_MODEL, ""))
        self.devices.set_inventory(parse_device(self.device_cr, node))
        self.topology = parse_topology(self.nrt, node) if self.nrt is not None else None
        status = (node.get("status") or {}).get("allocatable") or {}
        out = []
        for name, scale in (("cpu", 1000), ("memory", 1)):
            try:
                out.append(value(parse_quantity(status.get(name, 0)) * scale))
            except ValueError:
                out.append(0)
        self.allocatable = (out[0], out[1])
        self.changed()

    def set_device_cr(self, cr: dict[str, Any] | None) -> None:
        self.device_cr = cr
        self.devices.set_inventory(parse_device(cr, self.node))
        self.changed()

    def set_metric(self, metric: NodeMetricView | None, stale_at: float) -> None:
        self.metric, self.stale_at = metric, stale_at
        self.changed()

    def set_nrt(self, nrt: dict[str, Any] | None) -> None:
        self.nrt = nrt
        self.topology = parse_topology(nrt, self.node or {}) if nrt is not None else None
        self.changed()

    def free(self) -> tuple[int, int]:
        """Allocatable cpu (milli) and memory (bytes) less what the node's pods request."""
        return self.allocatable[0] - self.requested.get("cpu", 0), self.allocatable[1] - self.requested.get("memory", 0)

    def _add_requests(self, pod: Mapping[str, Any], sign: int) -> None:
        try:
            summed = pod_requests(pod.get("spec") or {})
        except ValueError:
            return
        for name, scale in (("cpu", 1000), ("memory", 1)):
            if name in summed:
                self.requested[name] = self.requested.get(name, 0) + sign * value(summed[name] * scale)

    def count(self, pod: dict[str, Any], assigned_at: float) -> None:
        uid = pod_uid(pod)
        old = self.pods.get(uid)
        self.pods[uid] = pod
        at = self.since.setdefault(uid, assigned_at)
        holdings = old is None or not _same_holdings(old, pod)
        if holdings:
            if old is not None:
                self._add_requests(old, -1)
            self._add_requests(pod, 1)
            self.devices.add_pod(pod)
            self.numa.add(pod)
        if self.load.add(pod, at) or holdings:      # the watch confirming an assumed pod changes neither
            self.changed()

    def uncount(self, uid: str) -> None:
        self.since.pop(uid, None)
        old = self.pods.pop(uid, None)
        if old is None:
            return
        self._add_requests(old, -1)
        self.devices.remove(uid)
        self.numa.remove(uid)
        self.load.remove(uid)
        self.changed()


@dataclass
class _Assumed:
    node: str
    deadline: float


class ClusterCache:
    """The per-node state plus the pods, fed by :meth:`on_node` & co. (the reflectors' handlers)."""

    def __init__(self, config: ExtenderConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or ExtenderConfig()
        self.load_aware = LoadAware(self.config.load_aware)
        self._lock = threading.Lock()
        self.answers = Answers()
        self._nodes: dict[str, NodeState] = {}
        self._pods: dict[str, dict[str, Any]] = {}          # uid -> every pod not terminated (pending ones too)
        self._where: dict[str, str] = {}                    # uid -> node it is counted on
        self._assumed: dict[str, _Assumed] = {}
        self._assume_ttl, self._clock = self.config.assume_ttl, clock
        self._reflectors: list[Reflector] = []
        self._announced = False

    # --- reading ---------------------------------------------------------------------------------------------------

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def gpus_by_model(self) -> dict[str, int]:
        """GPU cards per value of the nodes' gpu-model label (FragmentationAware's model pressure:
        :func:`scheduler.fgd.pressure`)."""
        with self._lock:
            states = list(self._nodes.values())
        out: dict[str, int] = {}
        for state in states:
            with state.lock:
                if state.node is None:
                    continue
                model, cards = state.gpu_model, len(state.devices.inventory.total(GPU))
            if cards:
                out[model] = out.get(model, 0) + cards
        return out

    def get(self, name: str) -> NodeState | None:
        with self._lock:
            return self._nodes.get(name)

    def pod(self, uid: str) -> dict[str, Any] | None:
        with self._lock:
            return self._pods.get(uid)

    @property
    def synced(self) -> bool:
        """Every watch has listed once (a cache fed without watches, as the simulator and tests feed it, is
        synced from the start); logged once when it first turns true."""
        if self._announced:
            return True
        done = all(r.synced.is_set() for r in self._reflectors)
        if done and self._reflectors:
            log.info("caches synced nodes=%d pods=%d", len(self._nodes), len(self._pods))
        self._announced = done
        return done

    def _state(self, name: str) -> NodeState:
        with self._lock:
            state = self._nodes.get(name)
            if state is None:
                state = self._nodes[name] = NodeState(name, NodeLoad(self.load_aware), answers=self.answers)
            return state

    # --- watch handlers --------------------------------------------------------------------------------------------

    def on_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            with self._lock:
                gone = self._nodes.pop(name, None)
            if gone is not None:
                with gone.lock:
                    gone.remove()
            return
        state = self._state(name)
        with state.lock:
            state.set_node(obj)

    def on_device(self, kind: str, obj: dict[str, Any]) -> None:
        state = self._state(str((obj.get("metadata") or {}).get("name", "")))
        with state.lock:
            state.set_device_cr(None if kind == "DELETED" else obj)

    def on_node_metric(self, kind: str, obj: dict[str, Any]) -> None:
        state = self._state(str((obj.get("metadata") or {}).get("name", "")))
        metric = None
        if kind != "DELETED":
            try:
                metric = parse_node_metric(obj)
            except ValueError as e:
                log.warning("nodemetric ignored node=%s error=%s", state.name, e)
        stale_at = math.inf if metric is None else self.load_aware.expires_at(metric)
        with state.lock:
            state.set_metric(metric, stale_at)

    def on_nrt(self, kind: str, obj: dict[str, Any]) -> None:
        state = self._state(str((obj.get("metadata") or {}).get("name", "")))
        with state.lock:
            state.set_nrt(None if kind == "DELETED" else obj)

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        uid = pod_uid(obj)
        gone = kind == "DELETED" or _terminal(obj)
        node = "" if gone else pod_node(obj)
        with self._lock:
            if gone:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = obj
            before = self._where.pop(uid, "")
            if node:
                self._where[uid] = node
                self._assumed.pop(uid, None)        # the API server's copy replaces the assumption
        if before and before != node:
            old = self.get(before)
            if old is not None:
                with old.lock:
                    old.uncount(uid)
        if node:
            state = self._state(node)
            with state.lock:
                state.count(obj, _assigned_at(obj))

    # --- assumed pods ----------------------------------------------------------------------------------------------

    def assume(self, state: NodeState, pod: dict[str, Any]) -> None:
        """Count ``pod`` (already carrying its new nodeName and annotations) on its node now; the caller holds
        ``state.lock``."""
        uid = pod_uid(pod)
        with self._lock:
            self._assumed[uid] = _Assumed(state.name, self._clock() + self._assume_ttl)
            self._where[uid] = state.name
        state.count(pod, time.time())

    def forget(self, uid: str) -> None:
        """Drop an assumption (the Binding failed) unless the watch has confirmed the pod meanwhile."""
        with self._lock:
            assumed = self._assumed.pop(uid, None)
            if assumed is None:
                return
            self._where.pop(uid, None)
        state = self.get(assumed.node)
        if state is not None:
            with state.lock:
                state.uncount(uid)

    def expire(self) -> int:
        """Forget assumptions older than the TTL that no watch event confirmed; returns how many."""
        now = self._clock()
        with self._lock:
            stale = [uid for uid, a in self._assumed.items() if a.deadline <= now]
        for uid in stale:
            log.warning("assumed pod expired uid=%s: its binding was never seen", uid)
            self.forget(uid)
        return len(stale)

    @property
    def assumed(self) -> int:
        with self._lock:
            return len(self._assumed)

    # --- running the watches ---------------------------------------------------------------------------------------

    def watch(self, api: KubeApi, stop: threading.Event) -> list[threading.Thread]:
        """Start one reflector thread per resource; ``synced`` turns true when each has listed once."""
        self._announced = False
        self._reflectors = [
            Reflector(api, kubeapi.NODES, self.on_node),
            Reflector(api, kubeapi.DEVICES, self.on_device),
            Reflector(api, kubeapi.NODE_METRICS, self.on_node_metric),
            Reflector(api, kubeapi.NODE_RESOURCE_TOPOLOGIES, self.on_nrt),
            Reflector(api, kubeapi.PODS, self.on_pod,
                      query={"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}),
        ]
        threads = []
        for r in self._reflectors:
            t = threading.Thread(target=r.run, args=(stop,), name=f"watch-{r.what}", daemon=True)
            t.start()
            threads.append(t)
        return threads

    def stop(self) -> None:
        for r in self._reflectors:
            r.stop()
