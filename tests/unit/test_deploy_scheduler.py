"""deploy/scheduler/ (the companion scheduler's deployment) checked offline, as test_deploy_manifests.py checks the
agent's manifests, and with its helpers.

- Every file parses into kinds the API server (or kube-scheduler, for KubeSchedulerConfiguration) knows.
- Both KubeSchedulerConfigurations pass what kube-scheduler checks before it starts: strict decoding (an unknown
  field is an error), the profile and leader-election rules, and the extender rules of
  pkg/scheduler/apis/config/validation (a positive weight with prioritizeVerb, at most one binder, managedResources
  valid extended resource names and unique across extenders; the kube-scheduler double's load_config applies
  those), plus a urlPrefix kube can dial. Tests break a configuration on purpose to show each rule is noticed.
- The two ways agree: (S) and (M) run the same extender container, ignore the same device resources and weigh a
  device pod's extender score alike; which pods reach which entry is the double's IsInterested.
- Each configuration reaches its container: the --config paths resolve through the pods' volume mounts to the
  ConfigMaps here, and kube-scheduler dials the extender where the extender listens.
- The extender's command line goes through its own parser (scheduler/cli.py) and its --config file through its
  own loader (scheduler/config.py), which refuse an unknown flag or key.
- RBAC: the extender's ClusterRole grants exactly the requests its API calls send (as the API server derives their
  attributes); kube-scheduler gets what Kubernetes gives a second scheduler, and its own Lease, never the cluster
  scheduler's.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import posixpath
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from doubles.crdschema import _is_qualified_name
from doubles.kube_scheduler import DEFAULT_SCHEDULER_NAME, ExtenderConfig, load_config, parse_go_duration
from koordlet.base import wire
from koordlet.ops.server import HttpServer
from scheduler import config as extender_config
from scheduler.allocator import DEFAULT_WEIGHTS as DEFAULT_DEVICE_WEIGHTS
from scheduler.cache import ClusterCache
from scheduler.cli import parser as extender_parser
from scheduler.extender import Extender
from scheduler.server import ExtenderMetrics, serve_metrics
from tests.unit.test_deploy_manifests import (
    DEPLOY,
    REPO,
    Access,
    api_access,
    cluster_role,
    container,
    covering,
    daemonset,
    docs,
    granted,
    mounts,
    node_selected,
    pod_spec,
    probe_port,
)

DIR = "scheduler"
FILES = ("extender.yaml", "companion.yaml", "main-scheduler.yaml", "main-scheduler-config.yaml")
NAMESPACE = "kube-system"
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}
API_KINDS = {
    ("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"),
    *(("rbac.authorization.k8s.io/v1", k) for k in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")),
}
CONFIG_API = ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")

# The two ways to run the extender: (file, kind, name) of the workload that runs it.
COMPANION = ("companion.yaml", "Deployment", "koord-companion")
MAIN = ("main-scheduler.yaml", "DaemonSet", "koord-scheduler-extender")
MAIN_CONFIG = "main-scheduler-config.yaml"

EXTENDER_SCRIPT, EXTENDER_ENTRY = "koord-scheduler-extender", "scheduler.cli:main"    # the console script
EXTENDER_VERBS = {"filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind",
                  "preemptVerb": "preempt"}
KUBE_SCHEDULER_SECURE_PORT = 10259     # kube-scheduler's default --secure-port (HTTPS, /healthz without credentials)
# Device resources no node advertises without koord-manager (its slo-controller's gpudeviceresource and
# rdmadevicereource plugins, pkg/slo-controller/noderesource/plugins): NodeResourcesFit must
# skip them. nvidia.com/gpu is advertised by NVIDIA's device plugin, so it is managed by the extender but counted.
UNADVERTISED = {wire.RESOURCE_GPU, wire.RESOURCE_GPU_CORE, wire.RESOURCE_GPU_MEMORY, wire.RESOURCE_GPU_MEMORY_RATIO,
                wire.RESOURCE_GPU_SHARED, wire.RESOURCE_RDMA}
ADVERTISED = {"nvidia.com/gpu"}

# The API calls the extender makes, as the requests they send: scheduler/cache.py's reflectors (list, then watch,
# through koordlet.states.watcher) and scheduler/cli.py's binder.
EXTENDER_CALLS: list[tuple[str, str, dict[str, list[str]], str]] = [
    *((method, path, query, f"{what} cache")
      for what, path in (("Node", "/api/v1/nodes"), ("Pod", "/api/v1/pods"),
                         ("Device", "/apis/scheduling.koordinator.sh/v1alpha1/devices"),
                         ("NodeMetric", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"),
                         ("NRT", "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies"))
      for method, query in (("GET", {}), ("GET", {"watch": ["true"]}))),
    ("POST", "/api/v1/namespaces/team-a/pods/trainer-0/binding", {}, "bind: the Binding with the annotations"),
]


# --------------------------------------------------------------------------------------------------
# reading the files
# --------------------------------------------------------------------------------------------------

def objects(file: str) -> list[dict[str, Any]]:
    return docs(f"{DIR}/{file}")


def the(file: str, kind: str, name: str | None = None) -> dict[str, Any]:
    (obj,) = [d for d in objects(file) if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    return obj


def workload(spec: tuple[str, str, str]) -> dict[str, Any]:
    return the(*spec)


def flag_values(argv: list[str], known: set[str]) -> dict[str, str]:
    """``--flag=value`` / ``--flag value`` pairs; a flag outside ``known`` or a positional argument is an error."""
    out, rest = {}, list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        assert name in known, f"unknown flag or argument {arg!r}"
        if not eq:
            assert rest, f"{name} without a value"
            value = rest.pop(0)
        out[name] = value
    return out


def serve_args(ctr: dict[str, Any]) -> argparse.Namespace:
    """What the extender makes of its container's command and args: its own parser (SystemExit on an unknown flag),
    subcommand serve."""
    argv = [*ctr["command"], *ctr.get("args", [])]
    assert argv[0] == EXTENDER_SCRIPT, argv
    args = extender_parser().parse_args(argv[1:])
    assert args.command == "serve", argv
    return args


def mounted_configmap(obj: dict[str, Any], ctr: dict[str, Any], path: str) -> tuple[str, str]:
    """(ConfigMap name, key) of the file the container sees at ``path`` through a configMap volume."""
    found = covering(mounts(obj, ctr), path)
    assert found, f"{path} is not mounted in {ctr['name']}"
    mount, rel = found
    (vm,) = [m for m in ctr["volumeMounts"] if posixpath.normpath(m["mountPath"]) == mount.path]
    (volume,) = [v for v in pod_spec(obj)["volumes"] if v["name"] == vm["name"]]
    assert "configMap" in volume and "subPath" not in vm and "items" not in volume["configMap"], volume
    return volume["configMap"]["name"], rel


def configmap_file(obj: dict[str, Any], ctr: dict[str, Any], path: str) -> str:
    """The text of that file: the ConfigMap must be one of this directory's, in the pod's namespace."""
    name, key = mounted_configmap(obj, ctr, path)
    (cm,) = [d for f in FILES for d in objects(f) if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name]
    assert cm["metadata"]["namespace"] == obj["metadata"]["namespace"], name
    return str(cm["data"][key])


def extender_container(obj: dict[str, Any]) -> dict[str, Any]:
    return container(obj, "extender")


def companion_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration the companion's kube-scheduler reads (its --config, through its mount)."""
    obj = workload(COMPANION)
    ctr = container(obj, "kube-scheduler")
    assert ctr["command"][0] == "kube-scheduler"
    path = flag_values(ctr["command"][1:], {"--config"})["--config"]
    loaded: dict[str, Any] = yaml.safe_load(configmap_file(obj, ctr, path))
    return loaded


def main_config() -> dict[str, Any]:
    (cfg,) = objects(MAIN_CONFIG)
    return cfg


# --------------------------------------------------------------------------------------------------
# what kube-scheduler checks before it starts
# --------------------------------------------------------------------------------------------------

# The extender entries are decoded and validated by the kube-scheduler double (doubles/kube_scheduler.py:
# load_config decodes them strictly and applies validateExtenders). What it leaves out is checked here: the rest
# of the file's fields (kubescheduler.config.k8s.io/v1, staging/src/k8s.io/kube-scheduler/config/v1/types.go, with
# component-base's LeaderElectionConfiguration, ClientConnectionConfiguration and DebuggingConfiguration, decoded
# as strictly: serializer.EnableStrict), leader election, the profiles and NodeResourcesFit's args.
DURATION = "duration"   # metav1.Duration: a Go duration string ("5s", "1m30s"); a bare number does not decode
_PLUGIN_SET = {"enabled": [{"name": str, "weight": int}], "disabled": [{"name": str, "weight": int}]}
_PLUGINS = dict.fromkeys(("preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score",
                          "reserve", "permit", "preBind", "bind", "postBind", "multiPoint"), _PLUGIN_SET)
_PROFILE = {"schedulerName": str, "percentageOfNodesToScore": int, "plugins": _PLUGINS,
            "pluginConfig": [{"name": str, "args": dict}]}
_LEADER_ELECTION = {"leaderElect": bool, "leaseDuration": DURATION, "renewDeadline": DURATION,
                    "retryPeriod": DURATION, "resourceLock": str, "resourceName": str, "resourceNamespace": str}
_CLIENT_CONNECTION = {"kubeconfig": str, "acceptContentTypes": str, "contentType": str, "qps": float, "burst": int}
CONFIG_FIELDS = {"apiVersion": str, "kind": str, "parallelism": int, "leaderElection": _LEADER_ELECTION,
                 "clientConnection": _CLIENT_CONNECTION, "enableProfiling": bool, "enableContentionProfiling": bool,
                 "percentageOfNodesToScore": int, "podInitialBackoffSeconds": int, "podMaxBackoffSeconds": int,
                 "profiles": [_PROFILE], "extenders": list, "delayCacheUntilActive": bool}
# NodeResourcesFitArgs, decoded as strictly when a profile's pluginConfig names NodeResourcesFit.
NODE_RESOURCES_FIT_ARGS = {"apiVersion": str, "kind": str, "ignoredResources": [str], "ignoredResourceGroups": [str],
                           "scoringStrategy": dict}
DEFAULT_LEASE = "kube-scheduler"   # the cluster scheduler's Lease (SchedulerDefaultLockObjectName)


def is_duration(value: Any) -> bool:
    try:
        parse_go_duration(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def shape_problems(value: Any, spec: Any, path: str) -> list[str]:
    """What a strict decoder would refuse: unknown fields and values of the wrong JSON type."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        problems = [f"{path}.{k}: unknown field" for k in value if k not in spec]
        for k, v in value.items():
            if k in spec:
                problems += shape_problems(v, spec[k], f"{path}.{k}")
        return problems
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [p for i, v in enumerate(value) for p in shape_problems(v, spec[0], f"{path}[{i}]")]
    if spec == DURATION:
        return [] if is_duration(value) else [f"{path}: {value!r} is not a duration such as 5s"]
    if spec is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif spec is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, spec)
    return [] if ok else [f"{path}: {value!r} is not a {spec.__name__}"]


def profiles(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiles after v1 defaulting: none means one default-scheduler profile; a missing name defaults too."""
    return [{"schedulerName": DEFAULT_SCHEDULER_NAME, **p} for p in cfg.get("profiles") or [{}]]


def leader_election(cfg: dict[str, Any]) -> dict[str, Any]:
    """leaderElection after v1 defaulting (kube-scheduler's Lease in kube-system, elected)."""
    return {"leaderElect": True, "resourceLock": "leases", "resourceName": DEFAULT_LEASE,
            "resourceNamespace": NAMESPACE, **cfg.get("leaderElection", {})}


def kube_scheduler_problems(cfg: dict[str, Any]) -> list[str]:
    """What kube-scheduler refuses in a --config file, for what this directory configures; plus a urlPrefix kube
    can dial (kube does not check it: without one every call fails at run time)."""
    if (cfg.get("apiVersion"), cfg.get("kind")) != CONFIG_API:
        return [f"not a {'/'.join(CONFIG_API)}"]
    problems = shape_problems(cfg, CONFIG_FIELDS, "config")
    election = leader_election(cfg)
    if election["leaderElect"]:
        if election["resourceLock"] != "leases":
            problems.append('leaderElection.resourceLock: resourceLock value must be "leases"')
        if not election["resourceName"] or not election["resourceNamespace"]:
            problems.append("leaderElection: resourceName and resourceNamespace are required")
    names = [p["schedulerName"] for p in profiles(cfg)]
    problems += [f"profiles: duplicate schedulerName {n!r}" for n in sorted(set(names)) if names.count(n) > 1]
    problems += ["profiles: schedulerName is required" for n in names if not n]
    for i, prof in enumerate(profiles(cfg)):
        plugin_config = prof.get("pluginConfig") or []
        seen = [pc.get("name") for pc in plugin_config]
        problems += [f"profiles[{i}].pluginConfig: duplicate {n!r}" for n in sorted(set(seen)) if seen.count(n) > 1]
        for j, pc in enumerate(plugin_config):
            if pc.get("name") != "NodeResourcesFit":
                continue
            path, args = f"profiles[{i}].pluginConfig[{j}].args", pc.get("args") or {}
            problems += shape_problems(args, NODE_RESOURCES_FIT_ARGS, path)
            problems += [f"{path}.ignoredResources: {r!r} is not a qualified name"
                         for r in args.get("ignoredResources", []) if not _is_qualified_name(str(r))]
            problems += [f"{path}.ignoredResourceGroups: {g!r} is not a group name"
                         for g in args.get("ignoredResourceGroups", []) if "/" in str(g) or not _is_qualified_name(g)]
    for name in names:      # the extenders (shared by every profile) and each profile's percentageOfNodesToScore
        try:
            load_config(cfg, name)
        except ValueError as e:
            problems.append(str(e))
    for i, ext in enumerate(cfg.get("extenders") or []):
        url = urlsplit(str(ext.get("urlPrefix", "")))
        if url.scheme not in ("http", "https") or not url.hostname:
            problems.append(f"extenders[{i}].urlPrefix: {ext.get('urlPrefix')!r} is not an http(s) URL")
    return problems


def extender_entries(cfg: dict[str, Any], scheduler_name: str) -> tuple[ExtenderConfig, ...]:
    return load_config(cfg, scheduler_name).extenders


def pod_asking_for(*names: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "main", "resources": {"limits": dict.fromkeys(names, "1")}}]}}


def verbs(ext: ExtenderConfig) -> dict[str, str]:
    """The verbs an entry sets, under their configuration keys."""
    got = {"filterVerb": ext.filter_verb, "prioritizeVerb": ext.prioritize_verb, "bindVerb": ext.bind_verb,
           "preemptVerb": ext.preempt_verb}
    return {k: v for k, v in got.items() if v}

# --------------------------------------------------------------------------------------------------
# tests: files and kinds
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("file", sorted({p.name for p in (DEPLOY / DIR).glob("*.yaml")} | set(FILES)))
def test_every_file_parses_into_known_kinds(file: str) -> None:
    loaded = objects(file)
    assert loaded, file
    for d in loaded:
        api = (d.get("apiVersion"), d.get("kind"))
        if api == CONFIG_API:        # a kube-scheduler --config file, not an API object
            assert file == MAIN_CONFIG and len(loaded) == 1
            continue
        assert api in API_KINDS, (file, api)
        meta = d["metadata"]
        assert meta.get("name"), (file, api)
        assert meta.get("namespace") == (None if d["kind"] in CLUSTER_SCOPED else NAMESPACE), (file, meta)
        if d["kind"] in ("Deployment", "DaemonSet"):
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items(), file


def test_the_companion_config_is_the_mounted_file() -> None:
    cfg = companion_config()
    assert (cfg["apiVersion"], cfg["kind"]) == CONFIG_API


# --------------------------------------------------------------------------------------------------
# tests: kube-scheduler's validation
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("load", [companion_config, main_config], ids=["companion", "main"])
def test_kube_scheduler_accepts_the_configuration(load: Callable[[], dict[str, Any]]) -> None:
    assert kube_scheduler_problems(load()) == []


def _broken(cfg: dict[str, Any], change: Callable[[dict[str, Any]], object]) -> list[str]:
    cfg = copy.deepcopy(cfg)
    change(cfg)
    return kube_scheduler_problems(cfg)


def test_the_validation_can_fail() -> None:
    main, companion = main_config(), companion_config()
    device, load_aware = main["extenders"]

    def each(cfg: dict[str, Any], i: int) -> dict[str, Any]:
        ext: dict[str, Any] = cfg["extenders"][i]
        return ext

    cases: list[tuple[dict[str, Any], Callable[[dict[str, Any]], object], str]] = [
        # the extender rules (the double's validateExtenders and strict decoding)
        (main, lambda c: each(c, 1).update(weight=0), "extenders[1].weight: Invalid value: 0"),
        (main, lambda c: each(c, 1).pop("weight"), "must have a positive weight applied to it"),
        (main, lambda c: each(c, 1).update(bindVerb="bind"), "only one extender can implement bind"),
        (main, lambda c: each(c, 0)["managedResources"].append({"name": "kubernetes.io/batch-cpu"}),
         '"kubernetes.io/batch-cpu": is an invalid extended resource name'),
        (main, lambda c: each(c, 0)["managedResources"].append({"name": "gpu"}),
         '"gpu": is an invalid extended resource name'),
        (main, lambda c: each(c, 1).update(managedResources=[{"name": wire.RESOURCE_RDMA}]),
         'extenders[1].managedResources[0].name: Invalid value: "koordinator.sh/rdma": duplicate extender managed'),
        (main, lambda c: each(c, 0).update(httpTimeout=5), "extenders[0].httpTimeout: expected str"),
        (main, lambda c: each(c, 0).update(managedResource=[]), 'unknown field "extenders[0].managedResource"'),
        (main, lambda c: each(c, 0)["managedResources"][1].update(ignored=True),
         'unknown field "extenders[0].managedResources[1].ignored"'),
        # ours: a URL kube can dial
        (main, lambda c: each(c, 0).pop("urlPrefix"), "extenders[0].urlPrefix: None is not an http(s) URL"),
        # the rest of the file
        (main, lambda c: c.update(extender=[]), "config.extender: unknown field"),
        (main, lambda c: c["profiles"].append({}), "profiles: duplicate schedulerName 'default-scheduler'"),
        (companion, lambda c: c["leaderElection"].update(resourceLock="endpoints"), "resourceLock value must be"),
        (companion, lambda c: c["leaderElection"].update(leaseDuration=15), "leaseDuration: 15 is not a duration"),
        (companion, lambda c: c["profiles"][0].update(percentageOfNodesToScore=101), "not in valid range [0-100]"),
        (companion, lambda c: c["profiles"][0]["pluginConfig"][0]["args"]["ignoredResources"].append("a/b/c"),
         "'a/b/c' is not a qualified name"),
        (companion, lambda c: c["profiles"][0]["pluginConfig"][0]["args"].update(ignoredResource=[]),
         "args.ignoredResource: unknown field"),
    ]
    for cfg, change, expect in cases:
        problems = _broken(cfg, change)
        assert any(expect in p for p in problems), (expect, problems)
    assert device["bindVerb"] and not load_aware.get("bindVerb")      # the cases above broke copies only


# --------------------------------------------------------------------------------------------------
# tests: (S) the companion scheduler, (M) the main scheduler's entries
# --------------------------------------------------------------------------------------------------

def test_companion_is_a_separate_profile_that_sees_every_pod_and_every_node() -> None:
    cfg = companion_config()
    (profile,) = profiles(cfg)
    assert profile["schedulerName"] == "koord-companion" != DEFAULT_SCHEDULER_NAME
    assert profile["percentageOfNodesToScore"] == 100
    election = leader_election(cfg)
    assert election["leaderElect"] and election["resourceName"] != DEFAULT_LEASE
    assert load_config(cfg, profile["schedulerName"]).percentage_of_nodes_to_score == 100
    (ext,) = extender_entries(cfg, profile["schedulerName"])
    assert verbs(ext) == EXTENDER_VERBS
    assert ext.node_cache_capable and not ext.ignorable and not ext.managed_resources
    assert ext.is_interested(pod_asking_for()) and ext.is_interested(pod_asking_for(wire.RESOURCE_GPU_CORE))
    # with no managedResources nothing is ignoredByScheduler: NodeResourcesFit is told directly
    (fit,) = [pc for pc in profile["pluginConfig"] if pc["name"] == "NodeResourcesFit"]
    assert set(fit["args"]["ignoredResources"]) == UNADVERTISED
    image = container(workload(COMPANION), "kube-scheduler")["image"]
    assert image.startswith("registry.k8s.io/kube-scheduler:v1.")


def test_main_scheduler_has_a_device_binder_and_an_ignorable_load_aware_entry() -> None:
    cfg = main_config()
    (profile,) = profiles(cfg)
    assert profile["schedulerName"] == DEFAULT_SCHEDULER_NAME
    assert leader_election(cfg)["resourceName"] == DEFAULT_LEASE      # the cluster scheduler's own election
    entries = extender_entries(cfg, profile["schedulerName"])
    (device,) = [e for e in entries if e.bind_verb]
    (load_aware,) = [e for e in entries if not e.bind_verb]
    assert verbs(device) == EXTENDER_VERBS and not device.ignorable
    assert {r.name for r in device.managed_resources if r.ignored_by_scheduler} == UNADVERTISED
    assert {r.name for r in device.managed_resources if not r.ignored_by_scheduler} == ADVERTISED
    assert set(wire.WHOLE_GPU_RESOURCES) >= ADVERTISED and set(wire.DEVICE_RESOURCES) >= UNADVERTISED
    assert load_aware.ignorable and not load_aware.managed_resources
    assert set(verbs(load_aware)) == {"filterVerb", "prioritizeVerb"}
    for ext in (device, load_aware):
        assert ext.node_cache_capable and ext.url_prefix == device.url_prefix
    # who sees which pod: every pod meets the load-aware entry; a device pod also meets the binder, whether it
    # asks by a whole card, a share or an RDMA VF
    assert [e.is_interested(pod_asking_for("cpu")) for e in (device, load_aware)] == [False, True]
    for name in (*ADVERTISED, *UNADVERTISED):
        assert device.is_interested(pod_asking_for(name, "cpu")) and load_aware.is_interested(pod_asking_for(name))


def test_device_pods_score_alike_in_both_modes() -> None:
    """kube adds score x weight x 10 per interested extender: the main scheduler's two entries together weigh a
    device pod's extender score as the companion's one entry does."""
    (companion,) = extender_entries(companion_config(), "koord-companion")
    main = extender_entries(main_config(), DEFAULT_SCHEDULER_NAME)
    for name in (*ADVERTISED, *UNADVERTISED):
        pod = pod_asking_for(name)
        assert sum(e.weight for e in main if e.prioritize_verb and e.is_interested(pod)) == companion.weight, name


# --------------------------------------------------------------------------------------------------
# tests: the extender's containers
# --------------------------------------------------------------------------------------------------

@pytest.fixture(params=[COMPANION, MAIN], ids=["companion", "main"])
def extender_pod(request: pytest.FixtureRequest) -> dict[str, Any]:
    return workload(request.param)


def test_extender_runs_its_console_script_in_cluster(extender_pod: dict[str, Any]) -> None:
    ctr = extender_container(extender_pod)
    with open(REPO / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"][ctr["command"][0]] == EXTENDER_ENTRY
    args = serve_args(ctr)
    assert args.address and args.config
    assert args.kubeconfig is None                # the pod's ServiceAccount (in-cluster config)
    # the agent's image: it carries both console scripts
    assert ctr["image"] == container(daemonset("koordlet", "koordlet.yaml"), "koordlet")["image"]


def test_the_flag_check_can_fail(extender_pod: dict[str, Any]) -> None:
    ctr = copy.deepcopy(extender_container(extender_pod))
    ctr["args"].append("--adress=0.0.0.0:8888")
    with pytest.raises(SystemExit):
        serve_args(ctr)
    ctr = copy.deepcopy(extender_container(extender_pod))
    ctr["command"] = ["koordlet", "serve"]
    with pytest.raises(AssertionError):
        serve_args(ctr)


def test_both_modes_run_the_same_extender() -> None:
    """main-scheduler.yaml's container is companion.yaml's sidecar: a change to one is made to both."""
    assert extender_container(workload(MAIN)) == extender_container(workload(COMPANION))
    assert pod_spec(workload(MAIN))["securityContext"] == pod_spec(workload(COMPANION))["securityContext"]


def test_extender_config_reaches_the_extender(extender_pod: dict[str, Any]) -> None:
    """Its --config is extender.yaml's ConfigMap, and the extender's own loader takes it (it refuses an unknown key
    or a bad value)."""
    ctr = extender_container(extender_pod)
    path = serve_args(ctr).config
    assert mounted_configmap(extender_pod, ctr, path)[0] in {
        d["metadata"]["name"] for d in objects("extender.yaml") if d["kind"] == "ConfigMap"}
    doc = yaml.safe_load(configmap_file(extender_pod, ctr, path))
    # every value written out is the default
    parsed = extender_config.parse(doc)
    assert parsed.device_weights == DEFAULT_DEVICE_WEIGHTS
    assert dataclasses.replace(parsed, device_weights=None) == extender_config.parse(None)
    broken = copy.deepcopy(doc)
    broken["loadAware"]["usageThreshold"] = broken["loadAware"].pop("usageThresholds")
    with pytest.raises(ValueError, match="usageThreshold"):
        extender_config.parse(broken)


def test_kube_scheduler_dials_the_extender_where_it_listens() -> None:
    """(S): the sidecar's loopback in the same pod. (M): the control-plane node's loopback, the DaemonSet on the
    host network of every control-plane node (kubeadm labels them "", k3s and RKE2 "true")."""
    companion = workload(COMPANION)
    address = serve_args(extender_container(companion)).address
    assert not pod_spec(companion).get("hostNetwork")
    (ext,) = companion_config()["extenders"]
    assert ext["urlPrefix"] == f"http://{address}{serve_args(extender_container(companion)).prefix}"

    main = workload(MAIN)
    address = serve_args(extender_container(main)).address
    assert pod_spec(main)["hostNetwork"] is True
    prefix = serve_args(extender_container(main)).prefix
    assert {e["urlPrefix"] for e in main_config()["extenders"]} == {f"http://{address}{prefix}"}
    for value in ("", "true"):
        assert node_selected(main, {"node-role.kubernetes.io/control-plane": value})
    assert not node_selected(main, {"node-role.kubernetes.io/worker": ""})
    assert {"operator": "Exists"} in pod_spec(main)["tolerations"]

    for obj in (companion, main):
        host = urlsplit(f"http://{serve_args(extender_container(obj)).address}").hostname
        assert host in ("127.0.0.1", "::1"), "bind must not be reachable from other pods or nodes"


class _SyncSwitch(ClusterCache):
    """A real cache whose sync the test switches instead of watches (none runs here)."""

    switched = False

    @property
    def synced(self) -> bool:
        return self.switched


@pytest.fixture
def metrics_listener() -> Iterator[tuple[int, _SyncSwitch, HttpServer]]:
    """The extender's own metrics listener (scheduler.server.serve_metrics) on a free loopback port (the real
    process is tests/integration/test_sched_cli.py's)."""
    cache = _SyncSwitch()
    server = serve_metrics(Extender(cache), ("127.0.0.1", 0), ExtenderMetrics())
    try:
        yield server.address[1], cache, server
    finally:
        server.stop()


def _http_probe(probe: dict[str, Any], port: int) -> bool:
    """An httpGet probe as the kubelet runs it (pkg/probe/http), with 127.0.0.1:port standing for the pod's IP and
    the probe's port: a status from 200 to 399 passes; an error status, a refused connection or a timeout fails."""
    url = f"http://127.0.0.1:{port}{probe['httpGet']['path']}"
    try:
        with urllib.request.urlopen(url, timeout=probe.get("timeoutSeconds", 1)) as r:
            status = int(r.status)
    except urllib.error.HTTPError as e:
        status = int(e.code)
    except OSError:                 # URLError (refused), TimeoutError
        return False
    return 200 <= status < 400


def _metrics_port(ctr: dict[str, Any]) -> int:
    port = urlsplit(f"http://{serve_args(ctr).metrics_address}").port
    assert port, "the extender needs --metrics-address: the kubelet cannot probe its loopback --address"
    return port


def test_probes_ask_the_extender_on_its_metrics_address(
        extender_pod: dict[str, Any], metrics_listener: tuple[int, _SyncSwitch, HttpServer]) -> None:
    ctr = extender_container(extender_pod)
    live, ready = ctr["livenessProbe"], ctr["readinessProbe"]
    for probe in (live, ready):
        get = probe["httpGet"]
        assert "host" not in get and get.get("scheme", "HTTP") == "HTTP"     # the pod's IP, plain HTTP
        assert probe_port(ctr, probe) == _metrics_port(ctr)
    assert (live["httpGet"]["path"], ready["httpGet"]["path"]) == ("/healthz", "/readyz")
    port, cache, server = metrics_listener
    # syncing: alive (the kubelet must not restart it), not ready
    assert (_http_probe(live, port), _http_probe(ready, port)) == (True, False)
    cache.switched = True
    assert (_http_probe(live, port), _http_probe(ready, port)) == (True, True)
    server.stop()
    assert not _http_probe(live, port)                # nothing listening: the probe fails instead of hanging


def test_metrics_address_is_every_interface_and_serves_no_verb(
        extender_pod: dict[str, Any], metrics_listener: tuple[int, _SyncSwitch, HttpServer]) -> None:
    """The kubelet and Prometheus reach the pod's IP (the node's, for (M)'s host network; IPv6 on an IPv6 cluster):
    the metrics listener is on every interface, on a port the container declares, apart from the verbs' loopback
    port. Reachable by anyone, it must never take a verb: a bind POSTed there is refused."""
    ctr = extender_container(extender_pod)
    args = serve_args(ctr)
    url = urlsplit(f"http://{args.metrics_address}")
    assert url.hostname in (None, "0.0.0.0", "::"), args.metrics_address
    assert _metrics_port(ctr) != urlsplit(f"http://{args.address}").port
    assert _metrics_port(ctr) in [p["containerPort"] for p in ctr["ports"]]
    port, _, _ = metrics_listener
    bind = urllib.request.Request(f"http://127.0.0.1:{port}{args.prefix}/bind", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bind, timeout=5)
    assert refused.value.code == 405
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert b"koord_scheduler_extender_request_duration_seconds" in r.read()


def test_kube_scheduler_probe_is_its_secure_port() -> None:
    ctr = container(workload(COMPANION), "kube-scheduler")
    assert not [a for a in ctr["command"] if a.startswith(("--secure-port", "--bind-address"))]
    get = ctr["livenessProbe"]["httpGet"]
    assert (get["port"], get["scheme"], get["path"]) == (KUBE_SCHEDULER_SECURE_PORT, "HTTPS", "/healthz")


# --------------------------------------------------------------------------------------------------
# tests: RBAC
# --------------------------------------------------------------------------------------------------

def bindings(kind: str, role: str) -> list[dict[str, Any]]:
    """Every binding in this directory of ``kind`` (ClusterRoleBinding / RoleBinding) whose roleRef names ``role``."""
    return [d for f in FILES for d in objects(f) if d.get("kind") == kind and d["roleRef"]["name"] == role]


def subjects(binding: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["kind"], s["name"], s["namespace"]) for s in binding["subjects"]]


def service_account(obj: dict[str, Any]) -> tuple[str, str, str]:
    return "ServiceAccount", pod_spec(obj)["serviceAccountName"], obj["metadata"]["namespace"]


def test_extender_role_grants_exactly_its_calls() -> None:
    used = {api_access(method, path, query) for method, path, query, _ in EXTENDER_CALLS}
    rules = granted(cluster_role(f"{DIR}/extender.yaml"))
    assert sorted(used - rules) == [], "calls the role does not allow"
    assert sorted(rules - used) == [], "granted, used by no call"
    assert Access("create", "", "pods/binding") in rules
    # the annotations ride on the Binding: no write to the pod itself, nor to what the agents report
    assert [a for a in rules if a.verb not in ("get", "list", "watch")] == [Access("create", "", "pods/binding")]


def test_each_extender_runs_with_the_extender_role() -> None:
    (role,) = [d for d in objects("extender.yaml") if d["kind"] == "ClusterRole"]
    bound = [s for b in bindings("ClusterRoleBinding", role["metadata"]["name"]) for s in subjects(b)]
    assert sorted(bound) == sorted(service_account(workload(w)) for w in (COMPANION, MAIN))
    for file, _, _ in (COMPANION, MAIN):
        (sa,) = [d for d in objects(file) if d["kind"] == "ServiceAccount"]
        assert ("ServiceAccount", sa["metadata"]["name"], sa["metadata"]["namespace"]) in bound


def test_kube_scheduler_has_a_second_schedulers_rights_and_its_own_lease() -> None:
    companion = workload(COMPANION)
    sa = service_account(companion)
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        assert [subjects(b) for b in bindings("ClusterRoleBinding", role)] == [[sa]], role
    (reader,) = bindings("RoleBinding", "extension-apiserver-authentication-reader")
    assert reader["metadata"]["namespace"] == NAMESPACE and reader["roleRef"]["kind"] == "Role"
    assert subjects(reader) == [sa]
    # system:kube-scheduler allows get/update only on the Lease named kube-scheduler: ours is granted here
    election = leader_election(companion_config())
    (lease_role,) = [d for d in objects(COMPANION[0]) if d["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == election["resourceNamespace"]
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "resourceNames": [election["resourceName"]], "verbs": ["get", "update"]}]
    (lease_binding,) = bindings("RoleBinding", lease_role["metadata"]["name"])
    assert subjects(lease_binding) == [sa]
    # the main scheduler's extender gets nothing of a scheduler's
    main_sa = service_account(workload(MAIN))
    assert not [b for f in FILES for b in objects(f) if b.get("kind", "").endswith("RoleBinding")
                and b["roleRef"]["name"] != "koord-scheduler-extender" and main_sa in subjects(b)]
