"""``koord-scheduler-extender``: the companion scheduler's command line.

``simulate`` places a trace on a cluster through the same verbs for every policy and measures unallocated GPUs
(scheduler/simulate/); ``generate`` writes a synthetic trace (scheduler/trace/generator.py).

``serve`` (the default) runs the extender beside kube-scheduler: watches from the API server (in-cluster, or
``--kubeconfig``), the verbs on ``--address`` under ``--prefix``. The verbs bind pods, so ``--address`` is meant to
stay on loopback; ``--metrics-address`` opens a second listener with only GET /metrics, /healthz and /readyz for
what must reach the pod's IP (kubelet probes, Prometheus).

Exit status 2 for a configuration error (a bad address, config file or kubeconfig; a port that cannot be bound),
with one line on stderr naming it, before any watch starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from koordlet import __version__
from koordlet.base.gcfreeze import FreezeAfterFullCollection
from koordlet.base.logutil import configure
from koordlet.ops.server import format_addr, release_reserved, reserve
from koordlet.states.kubeapi import ConfigError as KubeConfigError
from koordlet.states.kubeapi import KubeApi, Resource
from scheduler import config as extender_config
from scheduler.cache import ClusterCache
from scheduler.extender import Binder, Extender
from scheduler.server import DEFAULT_PREFIX, ExtenderMetrics, serve, serve_metrics
from scheduler.simulate import protocol, report
from scheduler.simulate.policies import POLICIES
from scheduler.simulate.protocol import ORDERS
from scheduler.trace import agent_reports, cluster, generator, records

log = logging.getLogger("scheduler")

DEFAULT_ADDRESS = "127.0.0.1:8888"
EXPIRE_EVERY = 5.0        # s between sweeps of assumed pods the watch never confirmed
COMMANDS = ("serve", "simulate", "generate", "version")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="koord-scheduler-extender",
                                description="kube-scheduler extender placing pods on what koordlet reports")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="serve the extender verbs (the default)")
    s.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to listen on (default %(default)s: a "
                   "sidecar of kube-scheduler)")
    s.add_argument("--metrics-address", default="", help="host:port of a second listener serving only GET "
                   "/metrics, /healthz and /readyz, for kubelet probes and Prometheus (no verb is served there; "
                   "default: none). An empty host is every interface, IPv4 and IPv6")
    s.add_argument("--prefix", default=DEFAULT_PREFIX, help="URL prefix of the verbs (kube's urlPrefix path)")
    s.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster config)")
    s.add_argument("--config", default=None, help="extender configuration (YAML: deviceShare, loadAware, "
                   "nodeNUMAResource, pluginWeights, assumeTTLSeconds)")
    s.add_argument("--kube-api-qps", type=float, default=50.0)
    s.add_argument("--kube-api-burst", type=int, default=100)
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    s.add_argument("--log-format", default="text", choices=("text", "json"))
    m = sub.add_parser("simulate", help="place a trace's pods on its nodes through the extender's verbs, for every "
                       "policy, and measure unallocated and fragmented GPUs (docs: docs/scheduler.md)")
    m.add_argument("--nodes", help="nodes CSV (trace format: sn,cpu_milli,memory_mib,gpu,model)")
    m.add_argument("--report-dir", help="instead of --nodes: a directory of the agent's report files "
                   "(koordlet report --once -o yaml), one node each")
    m.add_argument("--pods", required=True, help="pods CSV (trace format: name,cpu_milli,memory_mib,num_gpu,"
                   "gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time; only name, "
                   "cpu_milli and num_gpu are required, the defaults of the others: scheduler/trace/records.py)")
    m.add_argument("--policies", default="all", help=f"comma-separated, or all: {', '.join(POLICIES)} "
                   "(the paper-* ones are the FGD paper's own policies)")
    m.add_argument("--out", default="simulation", help="directory for curve.csv, curve.json and unallocated.png "
                   "(default %(default)s)")
    m.add_argument("--order", default="arrival", choices=ORDERS, help="arrival: the trace in creation order, "
                   "resubmitted whole until --max-load; shuffle: the FGD paper's protocol, the pods shuffled by seed "
                   "and inflated by sampling with replacement (or thinned at random) to --max-load; churn: pods "
                   "arrive at creation_time and leave at deletion_time (the paper ignores departures; pods that "
                   "fail are not retried), the gaps between arrivals compressed so that the offered load (Σ GPU "
                   "asked × lifetime / (arrival span × capacity)) is --max-load, measured over time "
                   "(default %(default)s)")
    m.add_argument("--seed", type=int, default=42, help="the first seed: of the shuffle and inflation, and of the "
                   "draws among equally good nodes (default %(default)s, the paper's first)")
    m.add_argument("--seeds", type=int, default=1, help="runs per policy, with seeds --seed, --seed+1, ...; the "
                   "table shows the median and the min-max (the paper: 10; default %(default)s)")
    m.add_argument("--max-load", type=int, default=100, help="submit pods until they ask this much, percent of "
                   "the cluster's GPU capacity (the paper: 130; with --order churn: the offered load; "
                   "default %(default)s)")
    m.add_argument("--max-pods", type=int, default=110, help="pods a node takes at most, 0 for no limit (the "
                   "kubelet's default is 110; the paper's nodes take 1001, in effect none; default %(default)s)")
    m.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs at a time, each in its own process "
                   "(default: one per CPU, %(default)s here)")
    m.add_argument("--known-mix", action="store_true", help="fgd scores with the trace's own workload mix, as the "
                   "paper does (default: the mix is learned online from the pods seen, as the extender does)")
    g = sub.add_parser("generate", help="write a synthetic trace (nodes.csv, pods.csv) with the production trace's "
                       "marginals (docs: scheduler/trace/generator.py)")
    g.add_argument("--nodes", type=int, default=1523, help="nodes, apportioned as the production cluster's "
                   "(default %(default)s: its size; 1213 with --gpu-nodes-only)")
    g.add_argument("--pods", type=int, default=8400, help="pods (default %(default)s: enough to ask the cluster's "
                   "GPU capacity in arrival order)")
    g.add_argument("--seed", type=int, default=1, help="seed of every draw (default %(default)s)")
    g.add_argument("--gpu-nodes-only", action="store_true", help="no CPU-only nodes (as the FGD paper simulates)")
    g.add_argument("--gpushare", type=float, metavar="PERCENT", help="GPU-sharing pods ask this share of all GPU "
                   "requests, as the published openb_pod_list_gpushareN lists (100: every GPU pod a share; "
                   "default: the trace's, about 28)")
    g.add_argument("--multigpu", type=float, metavar="PERCENT", help="multi-GPU pods ask this share of all GPU "
                   "requests, as openb_pod_list_multigpuN (default: the trace's, about 7)")
    g.add_argument("--gpuspec", type=float, metavar="PERCENT", help="this share of GPU pods pins a GPU model, as "
                   "openb_pod_list_gpuspecN (default: 0, as the default list)")
    g.add_argument("--out", default=".", help="directory for nodes.csv and pods.csv (default %(default)s)")
    sub.add_parser("version", help="print the version")
    return p


def cmd_simulate(args: argparse.Namespace) -> int:
    names = list(POLICIES) if args.policies == "all" else [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        return _fail(f"--policies: unknown {', '.join(unknown) or '(none given)'} (known: {', '.join(POLICIES)})")
    if bool(args.nodes) == bool(args.report_dir):
        return _fail("simulate: give exactly one of --nodes and --report-dir")
    try:
        plan = protocol.Protocol(args.order, args.seed, args.seeds, args.max_load, args.max_pods or None,
                                 args.known_mix)
        nodes = (agent_reports.read_report_dir(args.report_dir) if args.report_dir
                 else [cluster.node_objects(n) for n in records.read_nodes(args.nodes)])
        pods = records.read_pods(args.pods)
    except (OSError, ValueError) as e:
        return _fail(str(e))
    capacity = 1000 * sum(int((n.get("status") or {}).get("allocatable", {}).get(cluster.WHOLE_GPU, 0))
                          for n, _ in nodes)
    if capacity == 0:
        source = f"--report-dir {args.report_dir}" if args.report_dir else f"--nodes {args.nodes}"
        return _fail(f"simulate: no GPU in the {len(nodes)} node(s) of {source} (none reports a healthy GPU): "
                     "there is no GPU capacity to measure")
    start = time.perf_counter()
    try:
        results = protocol.simulate(nodes, pods, [POLICIES[n] for n in names], plan, capacity=capacity,
                                    jobs=max(1, args.jobs))
    except ValueError as e:
        return _fail(f"simulate: {e}")
    for r in results.runs:
        log.info("simulated policy=%s seed=%d pods=%d placed=%d", r.policy, r.seed, r.submitted, r.placed)
    log.info("simulated runs=%d seconds=%.1f", len(results.runs), time.perf_counter() - start)
    print(report.table(results))
    for path in report.write_outputs(results, args.out):
        print(f"wrote {path}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    marginals = generator.Marginals(cpu_node_share=0.0) if args.gpu_nodes_only else generator.Marginals()
    try:
        marginals = marginals.emphasize(
            share_gpu=None if args.gpushare is None else args.gpushare / 100,
            multi_gpu=None if args.multigpu is None else args.multigpu / 100,
            gpu_spec=None if args.gpuspec is None else args.gpuspec / 100)
        nodes, pods = generator.generate(args.seed, args.nodes, args.pods, marginals)
        os.makedirs(args.out, exist_ok=True)
        records.write_nodes(os.path.join(args.out, "nodes.csv"), nodes)
        records.write_pods(os.path.join(args.out, "pods.csv"), pods)
    except (OSError, ValueError) as e:
        return _fail(str(e))
    print(f"wrote {len(nodes)} nodes ({sum(n.gpus for n in nodes)} GPUs) and {len(pods)} pods to {args.out}")
    return 0


def _address(flag: str, text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; an empty host is every interface, as koordlet.ops.server listens on it)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{flag} {text!r}: expected host:port")
    return host.strip("[]"), int(port)


def _fail(problem: str) -> int:
    """Exit status 2 with the problem on one line of stderr (a YAML error's message spans several)."""
    line = "; ".join(part.strip() for part in problem.splitlines() if part.strip())
    print(f"koord-scheduler-extender: {line}", file=sys.stderr)
    return 2


def make_binder(api: KubeApi) -> Binder:
    """POST a v1 Binding whose metadata carries the annotations (merged into the pod with nodeName, in one update).
    The kubernetes client's create_namespaced_binding cannot parse the reply (kubernetes-client/python #547), so
    the JSON is posted directly."""
    def bind(namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": dict(annotations)},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        api.request("POST", Resource("", "v1", "pods", namespace).item(name, "binding"), body=body)
    return bind


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        addr = _address("--address", args.address)
        metrics_addr = _address("--metrics-address", args.metrics_address) if args.metrics_address else None
        if metrics_addr == addr and addr[1] != 0:
            raise ValueError(f"--metrics-address {args.metrics_address!r}: the same as --address (the verbs would "
                             "be served to whoever may probe)")
        cfg = extender_config.load(args.config)
        api = KubeApi(args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst)
    except (ValueError, KubeConfigError) as e:
        return _fail(f"configuration error: {e}")
    # the listeners before the watches: a taken port fails start-up with one line, not a traceback after the
    # caches began to fill
    for flag, listen in (("--address", addr), ("--metrics-address", metrics_addr)):
        if listen is None:
            continue
        try:
            reserve(listen)
        except OSError as e:
            release_reserved()
            api.close()
            return _fail(f"cannot listen on {format_addr(*listen)} ({flag}): {e.strerror or e}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cache = ClusterCache(cfg)
    extender = Extender(cache, make_binder(api))
    cache.watch(api, stop)
    # the cache of thousands of nodes and pods is long-lived: full collections walk only what churns
    # (koordlet/base/gcfreeze.py), so a verb is not paused for a walk over the whole cluster
    FreezeAfterFullCollection().install()
    metrics = ExtenderMetrics()
    servers = [serve(extender, addr, args.prefix, metrics)]
    if metrics_addr is not None:
        servers.append(serve_metrics(extender, metrics_addr, metrics))
    log.info("extender serving address=%s metrics_address=%s prefix=%s strategy=%s",
             format_addr(*servers[0].address),
             format_addr(*servers[1].address) if len(servers) > 1 else "none", args.prefix, cfg.strategy)
    while not stop.wait(EXPIRE_EVERY):
        cache.expire()
    log.info("extender stopping")
    cache.stop()
    for server in servers:
        server.stop()
    api.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] not in (*COMMANDS, "-h", "--help"):
        words = ["serve", *words]          # serve is the default: flags alone are serve's
    args = parser().parse_args(words)
    if args.command == "version":
        print(f"koord-scheduler-extender (koordlet-py) {__version__}")
        return 0
    if args.command == "simulate":
        configure("info")
        return cmd_simulate(args)
    if args.command == "generate":
        return cmd_generate(args)
    configure(args.log_level, args.log_format)
    return cmd_serve(args)
