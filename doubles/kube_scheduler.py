"""A kube-scheduler double that drives real scheduler extenders over real HTTP, the way kube-scheduler does.

No kube-scheduler can run here, so the companion extender (``scheduler/``) is tested and benchmarked against this
stand-in. It follows kube-scheduler's extender path (``pkg/scheduler/extender.go`` and ``schedule_one.go``:
``findNodesThatPassFilters``, ``numFeasibleNodesToFind``, ``findNodesThatPassExtenders``, ``prioritizeNodes``,
``selectHost``, ``extendersBinding``) closely enough that an extender which works with it works with the real one:

* **Transport**: ``POST urlPrefix/verb`` with ``Content-Type: application/json`` over HTTP/1.1 keep-alive, one
  persistent connection per extender per thread (Go's transport keeps idle connections the same way); the timeout
  is ``httpTimeout`` (5 s when unset); any status but 200 is an error. Replies are decoded as Go's ``encoding/json``
  decodes them into the ``extender/v1`` structs: keys case-insensitively, a non-integer ``Score`` or a string where a
  list belongs is an error, ``null`` leaves a field unset.
* **One cycle** (:meth:`KubeSchedulerDouble.schedule_one`): the in-tree filter (NodeResourcesFit by default) over the
  nodes, starting where the previous cycle stopped and stopping at ``numFeasibleNodesToFind``; then every interested
  extender's filter, **one after another**, each on what the previous one left; prioritize on the extenders **in
  parallel**, each score × weight × 10 added, unclamped, to the in-tree score; ``selectHost`` (highest total, ties
  broken by reservoir sampling from a seeded RNG); bind through the first interested extender with a ``bindVerb``,
  else (or after an ``ignorable`` binder failed) the default binder, which POSTs a v1 Binding to the API server.
* :meth:`KubeSchedulerDouble.preempt` runs the extenders' ``preemptVerb`` over victims the caller chose, as
  DefaultPreemption's ``callExtenders`` does.

Simplifications, each a place where the real scheduler does more: no scheduling queue, retries, backoff or events;
no assume cache (the caller passes the pods already on nodes); no nominated node, PreFilter, PostFilter or other
in-tree plugins unless passed as ``in_tree_filter`` / ``in_tree_score``, but the profile is taken to have Score
plugins, as every real one has (so the "stop at the first feasible node when nothing scores" shortcut never
applies); the in-tree filter walks the nodes in order instead of 16 at a time (the sample has the same size, its
members can differ); ties go to the reservoir-sampling ``selectHost`` of earlier releases (the newest
``schedule_one.go`` pops a heap ordered by score, then by a random number drawn only for nodes an extender scored);
HTTP only (no ``enableHTTPS``).
The real scheduler runs one scheduling cycle at a time and binds asynchronously (``scheduleOne`` starts the binding
cycle in a goroutine and returns to the next pod): :meth:`KubeSchedulerDouble.schedule` does the same, the
scheduling cycle in the caller's thread and the binding cycle on a pool of binder threads; ``schedule_one`` waits
for both. The double is thread-safe.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import logging
import math
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

from doubles.connections import NoDelayHTTPConnection
from koordlet.base.quantity import parse_quantity
from scheduler import requests

log = logging.getLogger(__name__)

Pod = dict[str, Any]
Node = dict[str, Any]
# PreFilter then Filter, as kube's framework runs them: pod -> (once per cycle: what the pod asks, computed once)
# (node, pods already on that node) -> why the pod does not fit (empty: it fits). Reasons are counted per text in
# the "0/N nodes are available" message, as kube-scheduler's FitError does.
NodeFilter = Callable[[Node, Sequence[Pod]], Sequence[str]]
InTreeFilter = Callable[[Pod], NodeFilter]
# (pod, node, pods already on that node) -> the weighted sum of in-tree Score plugins for that node.
InTreeScore = Callable[[Pod, Node, Sequence[Pod]], int]

MAX_EXTENDER_PRIORITY = 10
MAX_NODE_SCORE = 100
DEFAULT_HTTP_TIMEOUT_S = 5.0                 # DefaultExtenderTimeout
DEFAULT_SCHEDULER_NAME = "default-scheduler"
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"
NO_NODES_AVAILABLE = "no nodes available to schedule pods"  # ErrNoNodesAvailable
BINDERS = 32                                 # binding cycles in flight at once

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NATIVE_COMPUTE = ("cpu", "memory", "ephemeral-storage")


class ExtenderError(Exception):
    """An extender call failed: transport, status, an undecodable reply or the reply's own ``Error``."""


# --- configuration ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ManagedResource:
    """``managedResources[]`` of an extender entry."""

    name: str
    ignored_by_scheduler: bool = False


@dataclasses.dataclass(frozen=True)
class ExtenderConfig:
    """One ``extenders[]`` entry of a KubeSchedulerConfiguration (v1), in Python names.

    ``http_timeout`` is in seconds; 0 means 5 s, as NewHTTPExtender defaults it.
    """

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    node_cache_capable: bool = False
    ignorable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()
    http_timeout: float = 0.0

    @property
    def timeout(self) -> float:
        return self.http_timeout or DEFAULT_HTTP_TIMEOUT_S

    def url(self, verb: str) -> str:
        """Where a verb is POSTed: the prefix without trailing slashes, "/", the verb."""
        return self.url_prefix.rstrip("/") + "/" + verb

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        """IsInterested: every pod when no resource is managed, else a pod whose containers or init containers
        request **or limit** a managed resource. Gates filter, prioritize, preempt and bind alike."""
        if not self.managed_resources:
            return True
        managed = {r.name for r in self.managed_resources}
        spec = pod.get("spec") or {}
        for container in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
            resources = container.get("resources") or {}
            if managed & {*(resources.get("requests") or {}), *(resources.get("limits") or {})}:
                return True
        return False


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """What the double takes from a KubeSchedulerConfiguration: the extenders and one profile's sampling."""

    extenders: tuple[ExtenderConfig, ...]
    percentage_of_nodes_to_score: int = 0


# camelCase key -> (Python field, JSON type the Go struct decodes)
_EXTENDER_FIELDS: dict[str, tuple[str, type]] = {
    "urlPrefix": ("url_prefix", str),
    "filterVerb": ("filter_verb", str),
    "preemptVerb": ("preempt_verb", str),
    "prioritizeVerb": ("prioritize_verb", str),
    "bindVerb": ("bind_verb", str),
    "weight": ("weight", int),
    "nodeCacheCapable": ("node_cache_capable", bool),
    "ignorable": ("ignorable", bool),
    "httpTimeout": ("http_timeout", str),
    "managedResources": ("managed_resources", list),
    "enableHTTPS": ("", bool),
    "tlsConfig": ("", dict),
}
_MANAGED_FIELDS: dict[str, type] = {"name": str, "ignoredByScheduler": bool}


def load_config(doc: Mapping[str, Any], scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> SchedulerConfig:
    """The extenders and the ``scheduler_name`` profile's ``percentageOfNodesToScore`` from a parsed
    KubeSchedulerConfiguration (``yaml.safe_load`` of the file kube-scheduler reads).

    Decoding is strict as kube-scheduler's is for v1 (an unknown or mistyped extender field is an error), and the
    result is validated as ``validateExtenders`` does; every problem is raised at once as a ValueError whose text
    follows upstream's field errors. ``enableHTTPS: true`` is refused: the double speaks plain HTTP only.
    """
    if doc.get("apiVersion") != CONFIG_API_VERSION or doc.get("kind") != "KubeSchedulerConfiguration":
        raise ValueError(f"not a {CONFIG_API_VERSION} KubeSchedulerConfiguration: "
                         f"apiVersion={doc.get('apiVersion')!r} kind={doc.get('kind')!r}")
    raw_extenders = doc.get("extenders") or []
    if not isinstance(raw_extenders, list):
        raise ValueError("extenders: must be a list")
    extenders = tuple(_decode_extender(i, raw) for i, raw in enumerate(raw_extenders))
    errors = validate_extenders(extenders)
    percentage = _percentage(doc, "percentageOfNodesToScore", errors)
    profile = _profile(doc, scheduler_name)
    if "percentageOfNodesToScore" in profile and profile["percentageOfNodesToScore"] is not None:
        percentage = _percentage(profile, "percentageOfNodesToScore", errors, where="profiles[].")
    if errors:
        raise ValueError(_aggregate(errors))
    return SchedulerConfig(extenders, percentage)


def _aggregate(errors: Sequence[str]) -> str:
    """utilerrors.NewAggregate's text: one error as it is, several as "[a, b]"."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def validate_extenders(extenders: Sequence[ExtenderConfig]) -> list[str]:
    """``validateExtenders`` of KubeSchedulerConfiguration validation: positive weight with a prioritize verb, at
    most one binder, managed resources valid extended resource names, none twice across all extenders."""
    errors: list[str] = []
    binders = 0
    seen: set[str] = set()
    for i, extender in enumerate(extenders):
        if extender.prioritize_verb and extender.weight <= 0:
            errors.append(f"extenders[{i}].weight: Invalid value: {extender.weight}: "
                          "must have a positive weight applied to it")
        binders += bool(extender.bind_verb)
        for j, resource in enumerate(extender.managed_resources):
            path = f"extenders[{i}].managedResources[{j}].name"
            problems = _qualified_name_errors(resource.name)
            if not problems and not is_extended_resource_name(resource.name):
                problems = ["is an invalid extended resource name"]
            errors += [f'{path}: Invalid value: "{resource.name}": {problem}' for problem in problems]
            if resource.name in seen:
                errors.append(f'{path}: Invalid value: "{resource.name}": duplicate extender managed resource name')
            seen.add(resource.name)
    if binders > 1:
        errors.append(f'extenders: Invalid value: "found {binders} extenders implementing bind": '
                      "only one extender can implement bind")
    return errors


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: namespaced (has a "/"), not in the ``kubernetes.io/`` namespace, not a
    ``requests.`` quota name, and still a qualified name with ``requests.`` in front."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not _qualified_name_errors("requests." + name)


_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _qualified_name_errors(name: str) -> list[str]:
    """validation.IsQualifiedName, messages abridged: ``[prefix/]name`` with a DNS-subdomain prefix."""
    parts = name.split("/")
    if len(parts) > 2:
        return [("a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional "
                 "DNS subdomain prefix and '/'")]
    errors = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    short = parts[-1]
    if not short:
        errors.append("name part must be non-empty")
    elif len(short) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _NAME_PART.fullmatch(short):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                      "with an alphanumeric character")
    return errors


def _decode_extender(index: int, raw: Any) -> ExtenderConfig:
    where = f"extenders[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _EXTENDER_FIELDS:
            raise ValueError(f'strict decoding error: unknown field "{where}.{key}"')
        field, kind = _EXTENDER_FIELDS[key]
        if value is None:
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
        if key == "enableHTTPS" and value:
            raise ValueError(f"{where}.enableHTTPS: the kube-scheduler double speaks plain HTTP only")
        if isinstance(value, str) and key == "httpTimeout":
            value = parse_go_duration(value)
        elif isinstance(value, list) and key == "managedResources":
            value = tuple(_decode_managed(f"{where}.managedResources[{j}]", item) for j, item in enumerate(value))
        if field:
            values[field] = value
    return ExtenderConfig(values.pop("url_prefix", ""), **values)


def _decode_managed(where: str, raw: Any) -> ManagedResource:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    for key, value in raw.items():
        if key not in _MANAGED_FIELDS:
            raise ValueError(f'strict decoding error: unknown field "{where}.{key}"')
        if value is not None and not isinstance(value, _MANAGED_FIELDS[key]):
            raise ValueError(f"{where}.{key}: expected {_MANAGED_FIELDS[key].__name__}, got {type(value).__name__}")
    return ManagedResource(raw.get("name") or "", bool(raw.get("ignoredByScheduler")))


_DURATION_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string (``time.ParseDuration``: "5s", "1m30s", "500ms", "0")."""
    body = text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _DURATION_TERM.match(body, pos)
        if match is None:
            break
        total += float(match[1]) * _DURATION_UNIT_S[match[2]]
        pos = match.end()
    if not body or pos != len(body):
        raise ValueError(f'time: invalid duration "{text}"')
    return -total if text.startswith("-") else total


def _percentage(doc: Mapping[str, Any], key: str, errors: list[str], where: str = "") -> int:
    value = doc.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        errors.append(f"{where}{key}: Invalid value: {value}: not in valid range [0-100]")
        return 0
    return value


def _profile(doc: Mapping[str, Any], scheduler_name: str) -> Mapping[str, Any]:
    """The profile serving ``scheduler_name``; one unnamed profile is the default scheduler's, as defaulting does."""
    profiles = doc.get("profiles") or [{}]
    if len(profiles) == 1 and not profiles[0].get("schedulerName"):
        profiles = [{**profiles[0], "schedulerName": DEFAULT_SCHEDULER_NAME}]
    for profile in profiles:
        if profile.get("schedulerName") == scheduler_name:
            return dict(profile)
    raise ValueError(f'no profile has schedulerName "{scheduler_name}"')


def num_feasible_nodes_to_find(percentage_of_nodes_to_score: int, num_all_nodes: int) -> int:
    """How many feasible nodes a cycle looks for before it stops filtering (all of them below 100 nodes)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = percentage_of_nodes_to_score
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


# --- the in-tree side -------------------------------------------------------------------------------------------


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """What the pod asks a node for: Kubernetes' PodRequests (containers, sidecars, init containers, overhead; a
    limit without a request counts as its request, as API defaulting fills it in), the same sum the extender
    makes (``scheduler.requests.pod_requests``)."""
    return requests.pod_requests(pod.get("spec") or {})


def _int_value(name: str, quantity: Fraction) -> int:
    """How NodeInfo holds an amount: cpu as ``MilliValue()``, everything else as ``Value()`` (both round up)."""
    return math.ceil(quantity * 1000) if name == "cpu" else math.ceil(quantity)


def _listed_amounts(listed: Mapping[str, Any]) -> Callable[[str], int]:
    """A node's allocatable amounts, each parsed when first asked for (one that does not parse fails only the
    cycles that read it)."""
    return lambda name: _int_value(name, parse_quantity(listed.get(name, 0)))


def _requested_amounts(pod: Mapping[str, Any]) -> Callable[[str], int]:
    """A pod's requests, summed at once."""
    summed = pod_requests(pod)
    return lambda name: _int_value(name, summed.get(name, Fraction(0)))


class _Parsed:
    """Amounts parsed once per object, as kube-scheduler's cache parses a Node or a Pod once per update and its
    cycles read integers (``NodeInfo.Allocatable``, ``NodeInfo.Requested``): for as long as the caller passes the
    same mapping under a key, ``read(mapping)`` is not called again."""

    def __init__(self, read: Callable[[Mapping[str, Any]], Callable[[str], int]]) -> None:
        self._read = read
        self._seen: dict[str, tuple[Mapping[str, Any], Callable[[str], int], dict[str, int]]] = {}

    def get(self, key: str, source: Mapping[str, Any], name: str) -> int:
        """``name``'s amount in ``source``, the object known as ``key`` (another object under that key is read
        afresh)."""
        known = self._seen.get(key)
        if known is None or known[0] is not source:
            known = self._seen[key] = (source, self._read(source), {})
        values = known[2]
        value = values.get(name)
        if value is None:
            value = values[name] = known[1](name)
        return value


def node_resources_fit(ignored: Iterable[str] = ()) -> InTreeFilter:
    """NodeResourcesFit: its PreFilter sums the pod's requests once per cycle (``computePodResourceRequest``); its
    Filter checks the pod count against ``allocatable.pods``, then cpu, memory, ephemeral-storage and scalar
    resources (extended, hugepages) against allocatable minus the requests of the pods on the node, in NodeInfo's
    integers. ``ignored`` are the extenders' ``ignoredByScheduler`` resources, which it skips. A node without
    ``status.allocatable`` uses its capacity, as the API server's defaulting does."""
    skipped = frozenset(ignored)
    allocatable = _Parsed(_listed_amounts)
    requested = _Parsed(_requested_amounts)

    def prefilter(pod: Pod) -> NodeFilter:
        wanted = {name: _int_value(name, value) for name, value in pod_requests(pod).items()
                  if value > 0 and _is_checked(name) and name not in skipped}
        ordered = [n for n in _NATIVE_COMPUTE if n in wanted] + sorted(n for n in wanted if n not in _NATIVE_COMPUTE)

        def fit(node: Node, pods_on_node: Sequence[Pod]) -> list[str]:
            status = node.get("status") or {}
            listed = status.get("allocatable") or status.get("capacity") or {}
            node_name = _name(node)
            reasons = []
            if len(pods_on_node) + 1 > allocatable.get(node_name, listed, "pods"):
                reasons.append("Too many pods")
            for name in ordered:
                used = sum(requested.get(_uid(other), other, name) for other in pods_on_node)
                if wanted[name] > allocatable.get(node_name, listed, name) - used:
                    reasons.append(f"Insufficient {name}")
            return reasons

        return fit

    return prefilter


def _is_checked(name: str) -> bool:
    """Resources NodeResourcesFit compares: cpu, memory, ephemeral-storage and the scalar ones."""
    return name in _NATIVE_COMPUTE or "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


# --- the wire -----------------------------------------------------------------------------------------------------


class _Http:
    """POSTs of JSON over HTTP/1.1 keep-alive to one server: one connection per calling thread.

    A reused connection that the server had already closed is reopened and the request sent once more, as Go's
    transport drops idle connections the server closed. The timeout applies to each socket operation (Go's client
    timeout covers the whole exchange; for small bodies on loopback the two agree).
    """

    def __init__(self, base_url: str, timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base_url!r}: the kube-scheduler double speaks plain http:// only")
        self._host, self._port = parts.hostname, parts.port or 80
        self._base_path = parts.path.rstrip("/")
        self._timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[http.client.HTTPConnection] = []

    def post(self, path: str, payload: Any) -> tuple[int, bytes]:
        body = json.dumps(payload).encode()
        connection = self._connection()
        reused = connection.sock is not None
        try:
            return self._exchange(connection, path, body)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
        return self._exchange(connection, path, body)

    def close(self) -> None:
        with self._lock:
            connections, self._all = self._all, []
        for connection in connections:
            connection.close()

    def _connection(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = NoDelayHTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.connection = connection
            with self._lock:
                self._all.append(connection)
        return connection

    def _exchange(self, connection: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, bytes]:
        try:
            connection.request("POST", self._base_path + path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        except BaseException:
            connection.close()  # the next request reconnects
            raise
        if response.will_close:
            connection.close()
        return response.status, data


def _field(obj: Mapping[str, Any], key: str) -> Any:
    """A key as Go's encoding/json finds it: the exact name, else any name that matches ignoring case."""
    if key in obj:
        return obj[key]
    folded = key.casefold()
    return next((value for name, value in obj.items() if name.casefold() == folded), None)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtenderError(f"json: cannot unmarshal {_json_kind(value)} into Go value of type {what}")
    return value


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ExtenderError(f"json: cannot unmarshal {_json_kind(value)} into Go struct field {what} of type string")
    return value


def _string_list(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ExtenderError(f"json: cannot unmarshal {_json_kind(value)} into Go struct field {what} of type []string")
    return value


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ExtenderError(f"json: cannot unmarshal {_json_kind(value)} into Go struct field {what} of type "
                            "map[string]string")
    return value


def _int64(value: Any, what: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ExtenderError(f"json: cannot unmarshal {json.dumps(value)} into Go struct field {what} of type int64")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "value"


def _describe(exc: BaseException) -> str:
    """An exception's text, or its type where it has none (RemoteDisconnected, a bare timeout)."""
    return str(exc) or type(exc).__name__


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


@dataclasses.dataclass(frozen=True)
class Victims:
    """``extender/v1 Victims``: pods a preemption would evict from one node, and the PDBs that would break."""

    pods: tuple[Pod, ...]
    num_pdb_violations: int = 0


class _Extender:
    """HTTPExtender: one configured extender and its connections."""

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self._http = _Http(config.url_prefix, config.timeout)

    @property
    def name(self) -> str:
        return self.config.url_prefix

    def close(self) -> None:
        self._http.close()

    def _send(self, verb: str, args: Any) -> Any:
        url = self.config.url(verb)
        try:
            status, body = self._http.post("/" + verb, args)
        except (OSError, http.client.HTTPException) as exc:
            raise ExtenderError(f'Post "{url}": {_describe(exc)}') from exc
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {url}, code {status}")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise ExtenderError(f"{verb} reply from {url} is not JSON: {exc}") from exc

    def _args(self, pod: Pod, nodes: Sequence[Node]) -> dict[str, Any]:
        """ExtenderArgs: node names for a node-cache-capable extender, whole Node objects otherwise."""
        if self.config.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [_name(n) for n in nodes]}
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}

    def filter(self, pod: Pod, nodes: Sequence[Node]) -> tuple[list[Node], dict[str, str], dict[str, str]]:
        """(what passed, FailedNodes, FailedAndUnresolvableNodes). A name that was not sent is an error; so are
        the reply's ``Error`` and a malformed reply. Both NodeNames and Nodes null: nothing passed."""
        if not self.config.filter_verb:
            return list(nodes), {}, {}
        result = _object(self._send(self.config.filter_verb, self._args(pod, nodes)), "v1.ExtenderFilterResult")
        error = _string(_field(result, "Error"), "ExtenderFilterResult.Error")
        if error:
            raise ExtenderError(error)
        failed = _string_map(_field(result, "FailedNodes"), "ExtenderFilterResult.FailedNodes")
        unresolvable = _string_map(_field(result, "FailedAndUnresolvableNodes"),
                                   "ExtenderFilterResult.FailedAndUnresolvableNodes")
        names = _string_list(_field(result, "NodeNames"), "ExtenderFilterResult.NodeNames")
        node_list = _field(result, "Nodes")
        if not (self.config.node_cache_capable and names is not None):
            # Upstream takes the returned Node objects as they are; the double keys them by name, and so also
            # refuses a Node that was not sent.
            items = _field(_object(node_list, "v1.NodeList"), "items") if node_list is not None else None
            if items is not None and not (isinstance(items, list) and all(isinstance(n, dict) for n in items)):
                raise ExtenderError("json: cannot unmarshal ExtenderFilterResult.Nodes.items into []v1.Node")
            names = [_name(n) for n in items] if items is not None else []
        by_name = {_name(n): n for n in nodes}
        for name in names:
            if name not in by_name:
                raise ExtenderError(f'extender "{self.name}" claims a filtered node "{name}" which is not found in '
                                    "the input node list")
        return [by_name[name] for name in names], failed, unresolvable

    def prioritize(self, pod: Pod, nodes: Sequence[Node]) -> list[tuple[str, int]]:
        """The HostPriorityList as (host, score) pairs, unweighted and unclamped."""
        reply = self._send(self.config.prioritize_verb, self._args(pod, nodes))
        if reply is None:
            return []
        if not isinstance(reply, list):
            raise ExtenderError(f"json: cannot unmarshal {_json_kind(reply)} into Go value of type "
                                "v1.HostPriorityList")
        scores = []
        for entry in reply:
            entry = _object(entry, "v1.HostPriority")
            scores.append((_string(_field(entry, "Host"), "HostPriority.Host"),
                           _int64(_field(entry, "Score"), "HostPriority.Score")))
        return scores

    def bind(self, pod: Pod, node: str) -> None:
        metadata = pod.get("metadata") or {}
        args = {"PodName": metadata.get("name", ""), "PodNamespace": metadata.get("namespace", ""),
                "PodUID": metadata.get("uid", ""), "Node": node}
        result = _object(self._send(self.config.bind_verb, args), "v1.ExtenderBindingResult")
        error = _string(_field(result, "Error"), "ExtenderBindingResult.Error")
        if error:
            raise ExtenderError(error)

    def preempt(self, pod: Pod, victims: Mapping[str, Victims],
                pods_by_node: Mapping[str, Sequence[Pod]]) -> dict[str, Victims]:
        """ProcessPreemption: UIDs only (NodeNameToMetaVictims) to a node-cache-capable extender, whole pods
        (NodeNameToVictims) otherwise; the reply's UIDs are turned back into the pods on each node."""
        if self.config.node_cache_capable:
            meta = {node: {"Pods": [{"UID": (p.get("metadata") or {}).get("uid", "")} for p in v.pods],
                           "NumPDBViolations": v.num_pdb_violations} for node, v in victims.items()}
            args: dict[str, Any] = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
        else:
            full = {node: {"Pods": list(v.pods), "NumPDBViolations": v.num_pdb_violations}
                    for node, v in victims.items()}
            args = {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}
        result = _object(self._send(self.config.preempt_verb, args), "v1.ExtenderPreemptionResult")
        chosen = _object(_field(result, "NodeNameToMetaVictims"), "map[string]*v1.MetaVictims")
        out: dict[str, Victims] = {}
        for node, raw in chosen.items():
            if node not in pods_by_node:
                raise ExtenderError(f'nodeinfo not found for node name "{node}"')
            meta_victims = _object(raw, "v1.MetaVictims")
            on_node = {(p.get("metadata") or {}).get("uid"): p for p in pods_by_node[node]}
            meta_pods = _field(meta_victims, "Pods") or []
            if not isinstance(meta_pods, list):
                raise ExtenderError(f"json: cannot unmarshal {_json_kind(meta_pods)} into Go struct field "
                                    "MetaVictims.Pods of type []*v1.MetaPod")
            pods = []
            for meta_pod in meta_pods:
                uid = _string(_field(_object(meta_pod, "v1.MetaPod"), "UID"), "MetaPod.UID")
                if uid not in on_node:
                    raise ExtenderError(f"extender: {self.name} claims to preempt pod (UID: {uid}) on node: {node}, "
                                        "but the pod is not found on that node")
                pods.append(on_node[uid])
            out[node] = Victims(tuple(pods), _int64(_field(meta_victims, "NumPDBViolations"),
                                                    "MetaVictims.NumPDBViolations"))
        return out


# --- the scheduler ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    """The outcome of one scheduling cycle and its binding.

    ``node``: where the pod went (bound, or only selected when the double has no API server and no extender
    binds); None when it did not. ``reason``: empty on success, else kube-scheduler's text for the failure (the
    "0/N nodes are available: ..." FitError, an extender error, or the binding error). ``filtered``: node → why it
    was filtered out (in-tree reasons joined by ", "). ``unresolvable``: the filtered nodes an extender marked
    FailedAndUnresolvable. ``feasible``: what passed every filter, in order. ``scores``: the total per prioritized
    node (empty when a single node passed: kube then skips scoring). ``selected``: selectHost's choice, kept when
    binding failed. ``bound_by``: the binding extender's urlPrefix, "default" for the default binder, "" if unbound.
    """

    node: str | None
    reason: str
    filtered: Mapping[str, str]
    unresolvable: frozenset[str]
    feasible: tuple[str, ...]
    scores: Mapping[str, int]
    selected: str | None
    bound_by: str


@dataclasses.dataclass
class _NodeStatus:
    reasons: list[str]
    unresolvable: bool = False


class KubeSchedulerDouble:
    """kube-scheduler's extender path around real extenders; use as a context manager (or call :meth:`close`).

    ``api``: the API server the default binder POSTs Bindings to; None binds nothing by default (for benches that
    time the scheduling cycle alone; extender binders still bind). ``percentage_of_nodes_to_score``: the profile's
    value (0: adaptive, as upstream). ``seed``: the RNG that breaks score ties. ``in_tree_filter`` replaces the
    default NodeResourcesFit (which skips the extenders' ``ignoredByScheduler`` resources); ``in_tree_score`` gives
    the in-tree total per node (default 0 for every node).
    """

    def __init__(
        self,
        extenders: Sequence[ExtenderConfig],
        *,
        api: str | None,
        percentage_of_nodes_to_score: int = 0,
        seed: int = 0,
        in_tree_filter: InTreeFilter | None = None,
        in_tree_score: InTreeScore | None = None,
    ) -> None:
        errors = validate_extenders(extenders)
        if errors:
            raise ValueError(_aggregate(errors))
        self._extenders = [_Extender(config) for config in extenders]
        self._api = _Http(api, DEFAULT_HTTP_TIMEOUT_S) if api is not None else None
        self._percentage = percentage_of_nodes_to_score
        ignored = {r.name for c in extenders for r in c.managed_resources if r.ignored_by_scheduler}
        self._filter = in_tree_filter or node_resources_fit(ignored)
        self._score = in_tree_score
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._next_start_node_index = 0
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(4, 4 * len(self._extenders)), thread_name_prefix="kube-scheduler-double-prioritize")
        # binding cycles: a goroutine each upstream; a pool here, wide enough that binds never queue behind it
        self._binders = concurrent.futures.ThreadPoolExecutor(
            max_workers=BINDERS, thread_name_prefix="kube-scheduler-double-bind")

    @classmethod
    def from_config(cls, config: SchedulerConfig, *, api: str | None, seed: int = 0) -> KubeSchedulerDouble:
        return cls(config.extenders, api=api, percentage_of_nodes_to_score=config.percentage_of_nodes_to_score,
                   seed=seed)

    def __enter__(self) -> KubeSchedulerDouble:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._binders.shutdown(wait=True)
        self._pool.shutdown(wait=True)
        for extender in self._extenders:
            extender.close()
        if self._api is not None:
            self._api.close()

    # --- one cycle ------------------------------------------------------------------------------------------

    def schedule_one(self, pod: Pod, nodes: Sequence[Node], *, assigned: Iterable[Pod] = ()) -> Result:
        """Schedule and bind ``pod`` onto one of ``nodes``; ``assigned`` are the pods already on nodes (those of
        other nodes and finished pods are ignored), what kube-scheduler's cache would hold."""
        return self.schedule(pod, nodes, assigned=assigned).result()

    def schedule(self, pod: Pod, nodes: Sequence[Node], *,
                 assigned: Iterable[Pod] = ()) -> concurrent.futures.Future[Result]:
        """:meth:`schedule_one` as ``scheduleOne`` runs it: the scheduling cycle now, in this thread; the binding
        cycle on a binder thread, so the caller can start the next pod's cycle while this one binds. The future
        holds the outcome once the pod is bound (or failed)."""
        statuses: dict[str, _NodeStatus] = {}
        if not nodes:
            return _settled(_failed(NO_NODES_AVAILABLE, statuses))
        on_node: dict[str, list[Pod]] = {}
        for other in assigned:
            phase = (other.get("status") or {}).get("phase")
            node_name = (other.get("spec") or {}).get("nodeName")
            if node_name and phase not in ("Succeeded", "Failed"):
                on_node.setdefault(node_name, []).append(other)
        feasible = self._filter_in_tree(pod, nodes, on_node, statuses)
        try:
            feasible = self._filter_extenders(pod, feasible, statuses)
        except ExtenderError as exc:
            return _settled(_failed(str(exc), statuses))
        if not feasible:
            return _settled(_failed(_fit_error(len(nodes), statuses), statuses))
        scores: dict[str, int] = {}
        if len(feasible) == 1:
            host = _name(feasible[0])
        else:
            scores = self._prioritize(pod, feasible, on_node)
            host = self._select_host(scores)

        def binding_cycle() -> Result:
            bound_by, error = self._bind(pod, host)
            return Result(
                node=None if error else host, reason=error, filtered=_reasons(statuses),
                unresolvable=frozenset(n for n, s in statuses.items() if s.unresolvable),
                feasible=tuple(_name(n) for n in feasible), scores=scores, selected=host, bound_by=bound_by,
            )

        return self._binders.submit(binding_cycle)

    def _filter_in_tree(
        self, pod: Pod, nodes: Sequence[Node], on_node: Mapping[str, Sequence[Pod]], statuses: dict[str, _NodeStatus]
    ) -> list[Node]:
        """findNodesThatPassFilters: from where the last cycle stopped, until enough nodes fit."""
        wanted = num_feasible_nodes_to_find(self._percentage, len(nodes))
        with self._lock:
            start = self._next_start_node_index % len(nodes)
        feasible: list[Node] = []
        processed = 0
        fits = self._filter(pod)
        for i in range(len(nodes)):
            if len(feasible) == wanted:
                break
            node = nodes[(start + i) % len(nodes)]
            processed += 1
            name = _name(node)
            reasons = list(fits(node, on_node.get(name, ())))
            if reasons:
                statuses[name] = _NodeStatus(reasons)
            else:
                feasible.append(node)
        with self._lock:
            self._next_start_node_index = (start + processed) % len(nodes)
        return feasible

    def _filter_extenders(self, pod: Pod, feasible: list[Node], statuses: dict[str, _NodeStatus]) -> list[Node]:
        """findNodesThatPassExtenders: one extender after another, each on what the last one left."""
        for extender in self._extenders:
            if not feasible:
                break
            if not extender.config.is_interested(pod):
                continue
            try:
                passed, failed, unresolvable = extender.filter(pod, feasible)
            except ExtenderError as exc:
                if extender.config.ignorable:
                    log.info("extender filter skipped, ignorable extender=%s error=%s", extender.name, exc)
                    continue
                raise
            for node, message in unresolvable.items():
                statuses[node] = _NodeStatus([message], unresolvable=True)
            for node, message in failed.items():
                if node not in unresolvable:  # FailedAndUnresolvableNodes takes precedence
                    statuses[node] = _NodeStatus([message])
            feasible = passed
        return feasible

    def _prioritize(self, pod: Pod, feasible: Sequence[Node], on_node: Mapping[str, Sequence[Pod]]) -> dict[str, int]:
        """prioritizeNodes: in-tree totals, plus each interested prioritizer's score × weight × 10, all extenders
        asked at once; an extender that fails gives no score."""
        totals = {_name(n): (self._score(pod, n, on_node.get(_name(n), ())) if self._score else 0) for n in feasible}
        calls = {
            self._pool.submit(extender.prioritize, pod, feasible): extender
            for extender in self._extenders
            if extender.config.prioritize_verb and extender.config.is_interested(pod)
        }
        for future in concurrent.futures.as_completed(calls):
            extender = calls[future]
            try:
                scores = future.result()
            except ExtenderError as exc:
                log.info("extender prioritize failed, no score given extender=%s error=%s", extender.name, exc)
                continue
            for host, score in scores:
                if host in totals:
                    totals[host] += score * extender.config.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        return totals

    def _select_host(self, totals: Mapping[str, int]) -> str:
        """selectHost: the highest total; among equal ones, reservoir sampling (each replaces the pick with
        probability 1/count), in the order the nodes were filtered."""
        items = iter(totals.items())
        selected, best = next(items)
        count = 1
        with self._lock:
            for host, total in items:
                if total > best:
                    selected, best, count = host, total, 1
                elif total == best:
                    count += 1
                    if self._rng.randrange(count) == 0:
                        selected = host
        return selected

    def _bind(self, pod: Pod, host: str) -> tuple[str, str]:
        """extendersBinding, then the default binder: (who bound, error text)."""
        for extender in self._extenders:
            if not extender.config.bind_verb or not extender.config.is_interested(pod):
                continue
            try:
                extender.bind(pod, host)
            except ExtenderError as exc:
                if extender.config.ignorable:
                    log.info("extender bind skipped, ignorable extender=%s error=%s", extender.name, exc)
                    continue
                return "", str(exc)
            return extender.name, ""
        if self._api is None:
            return "", ""
        return self._default_bind(self._api, pod, host)

    @staticmethod
    def _default_bind(api: _Http, pod: Pod, host: str) -> tuple[str, str]:
        """DefaultBinder: POST a v1 Binding to the pod's binding subresource."""
        metadata = pod.get("metadata") or {}
        namespace, name = metadata.get("namespace", "default"), metadata.get("name", "")
        binding = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": metadata.get("uid", "")},
            "target": {"kind": "Node", "name": host},
        }
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"
        try:
            status, body = api.post(path, binding)
        except (OSError, http.client.HTTPException) as exc:
            return "", f"binding {namespace}/{name}: {_describe(exc)}"
        if 200 <= status < 300:
            return "default", ""
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = ""
        return "", message or f"binding {namespace}/{name}: HTTP {status}"

    # --- preemption ------------------------------------------------------------------------------------------

    def preempt(
        self, pod: Pod, victims: Mapping[str, Victims], pods_by_node: Mapping[str, Sequence[Pod]]
    ) -> dict[str, Victims]:
        """DefaultPreemption's callExtenders: each interested extender with a ``preemptVerb`` narrows the candidate
        victims in turn (``pods_by_node``: every pod on each node, to resolve the UIDs it answers with). An error,
        or a node left with no victim, fails the call unless the extender is ignorable (then it is skipped, or the
        node dropped). The caller picks the victims (the double runs no in-tree preemption)."""
        current = dict(victims)
        for extender in self._extenders:
            if not current:
                break
            if not extender.config.preempt_verb or not extender.config.is_interested(pod):
                continue
            try:
                answer = extender.preempt(pod, current, pods_by_node)
            except ExtenderError as exc:
                if extender.config.ignorable:
                    log.info("extender preempt skipped, ignorable extender=%s error=%s", extender.name, exc)
                    continue
                raise
            for node, chosen in list(answer.items()):
                if not chosen.pods:
                    if not extender.config.ignorable:
                        raise ExtenderError(f'expected at least one victim pod on node "{node}"')
                    del answer[node]
            current = answer
        return current


def _reasons(statuses: Mapping[str, _NodeStatus]) -> dict[str, str]:
    return {node: ", ".join(status.reasons) for node, status in statuses.items()}


def _failed(reason: str, statuses: Mapping[str, _NodeStatus]) -> Result:
    return Result(node=None, reason=reason, filtered=_reasons(statuses),
                  unresolvable=frozenset(n for n, s in statuses.items() if s.unresolvable),
                  feasible=(), scores={}, selected=None, bound_by="")


def _settled(result: Result) -> concurrent.futures.Future[Result]:
    """A cycle that ended before binding, as the future :meth:`KubeSchedulerDouble.schedule` returns."""
    done: concurrent.futures.Future[Result] = concurrent.futures.Future()
    done.set_result(result)
    return done


def _fit_error(num_all_nodes: int, statuses: Mapping[str, _NodeStatus]) -> str:
    """FitError's text: "0/N nodes are available: " and a count per reason, sorted as strings."""
    histogram: dict[str, int] = {}
    for status in statuses.values():
        for reason in status.reasons:
            histogram[reason] = histogram.get(reason, 0) + 1
    counted = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{num_all_nodes} nodes are available: {', '.join(counted)}."
