"""Standalone pod source: pods discovered from the kubepods cgroup tree, named by an optional pods file.

Without a cluster the cgroup tree is the only truth about what runs here. The pods file (a YAML list of Pod
objects, or a ``kind: List``/``PodList`` with ``items`` as ``kubectl get pods -o yaml`` prints) adds names,
labels, annotations and container names, matched by pod UID. It is re-read when its mtime changes; a file
that does not parse keeps the previous good content, and a bad entry is skipped with an error naming it.

When the NRI plugin is connected, the runtime's word (:mod:`koordlet.states.runtimepods`) names the pods the file
does not: labels, annotations, container names (their batch resources from the extended-resource-spec annotation,
as the runtime hooks read them), and which child dir is the sandbox's, so it is not counted as a container. A
child dir that nobody names is kept for collection but marked unknown: no batch settings are derived from it.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from koordlet.base.logutil import LogOnce
from koordlet.base.yamlfile import load_yaml
from koordlet.host.cgroup import Cgroups
from koordlet.states.decode import DecodeError
from koordlet.states.informer import PodMeta
from koordlet.states.pod import NO_RESOURCES, Container, Pod, Resources, extended_resource_spec, pod_from_k8s
from koordlet.states.runtimepods import RuntimePod, RuntimePods

log = logging.getLogger(__name__)


class PodsFileError(ValueError):
    pass


def load_pods_file(path: str) -> tuple[dict[str, Pod], list[str]]:
    """({uid: Pod}, [error per rejected entry]); PodsFileError when the file as a whole is unusable."""
    data = load_yaml(path, "pods file", PodsFileError)
    if data is None:
        return {}, []
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = data["items"]
    if not isinstance(data, list):
        raise PodsFileError(f"pods file {path}: expected a list of Pod objects or a List with items")
    pods: dict[str, Pod] = {}
    errors: list[str] = []
    for i, obj in enumerate(data):
        try:
            pod = pod_from_k8s(obj)
        except ValueError as e:
            errors.append(f"pods file {path}: entry {i}: {e}")
            continue
        if pod.uid in pods:
            errors.append(f"pods file {path}: entry {i}: duplicate uid {pod.uid}")
            continue
        pods[pod.uid] = pod
    return pods, errors


class StandalonePodSource:
    def __init__(self, cgroups: Cgroups, pods_file: str = "", runtime: RuntimePods | None = None) -> None:
        self._cgroups = cgroups
        self._file = pods_file
        self._runtime = runtime           # what the NRI plugin was told (labels, annotations, container names)
        self._mtime: float | None = None
        self._known: dict[str, Pod] = {}
        self._bad = LogOnce(log, logging.ERROR)
        self._bad_spec = LogOnce(log)         # per pod uid: a malformed extended-resource-spec from the runtime

    def _refresh_file(self) -> None:
        if not self._file:
            return
        try:
            mtime = os.stat(self._file).st_mtime
        except OSError as e:
            if self._mtime != -1.0:
                log.error("pods file unreadable path=%s error=%s; using cgroup discovery only", self._file,
                          e.strerror)
                self._mtime, self._known = -1.0, {}
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            pods, errors = load_pods_file(self._file)
        except PodsFileError as e:
            log.error("%s; keeping %d pods from the previous version", e, len(self._known))
            return
        for message in errors:
            self._bad(message, message)
        self._bad.keep_only(errors)
        self._known = pods
        log.info("pods file loaded path=%s pods=%d rejected=%d", self._file, len(pods), len(errors))

    def __call__(self) -> list[PodMeta]:
        self._refresh_file()
        metas = []
        live = set()
        for qos, uid, pod_dir in self._cgroups.list_pods():
            live.add(uid)
            described = self._known.get(uid)
            told = self._runtime.get(uid) if self._runtime is not None else None
            by_id = {c.id: c for c in described.containers} if described else {}
            resources = self._told_resources(told, described) if told is not None else None
            containers = []
            for runtime, cid, rel in self._cgroups.list_containers(pod_dir):
                if told is not None and cid == told.sandbox_id:
                    continue                      # the pause container: the pod's, not an application's
                container = by_id.get(cid)
                if container is None and told is not None and cid in told.containers:
                    name = told.containers[cid]
                    container = (Container(name, runtime, cid, resources.get(name, NO_RESOURCES))
                                 if resources is not None else Container(name, runtime, cid, known=False))
                if container is None:
                    container = Container(name=cid[:12], runtime=runtime, id=cid, known=False)
                containers.append((container, rel))
            if described is None and told is not None:
                described = Pod(uid=uid, name=told.name, namespace=told.namespace, kube_qos=qos,
                                labels=told.labels, annotations=told.annotations)
            if described is None:
                pod = Pod(uid=uid, name=pod_dir.rsplit("/", 1)[-1], namespace="", kube_qos=qos, phase="Running",
                          containers=tuple(c for c, _ in containers))
                metas.append(PodMeta(pod, pod_dir, tuple(containers), described=False))
                continue
            if described.kube_qos is not qos:
                log.warning("pods file qos differs from cgroup tree uid=%s file=%s cgroup=%s; using cgroup",
                            uid, described.kube_qos.value, qos.value)
            pod = dataclasses.replace(described, kube_qos=qos, phase=described.phase or "Running",
                                      containers=tuple(c for c, _ in containers))
            metas.append(PodMeta(pod, pod_dir, tuple(containers)))
        self._bad_spec.keep_only(live)
        return metas

    def _told_resources(self, told: RuntimePod, described: Pod | None) -> dict[str, Resources] | None:
        """Per-container resources of a pod named by the runtime: the pods file's spec, else the
        extended-resource-spec annotation (what the runtime hooks use); None when that annotation is malformed
        (logged once for the pod; its containers' batch settings are then left alone)."""
        if described is not None:
            return {c.name: c.resources for c in described.containers}
        try:
            return extended_resource_spec(told.annotations)
        except DecodeError as e:
            self._bad_spec(told.uid, "pod %s/%s: annotation %s; batch resources left alone", told.namespace,
                      told.name, e)
            return None

