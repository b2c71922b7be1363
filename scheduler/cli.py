"""``koord-scheduler-extender``: the companion scheduler's command line.

``serve`` (the default) runs the extender beside kube-scheduler: watches from the API server (in-cluster, or
``--kubeconfig``), the verbs on ``--address`` under ``--prefix``. Exit status 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

from koordlet import __version__
from koordlet.gcfreeze import FreezeAfterFullCollection
from koordlet.kubeapi import ConfigError as KubeConfigError
from koordlet.kubeapi import KubeApi, Resource
from koordlet.logutil import configure
from scheduler import config as extender_config
from scheduler.cache import ClusterCache
from scheduler.extender import Binder, Extender
from scheduler.server import DEFAULT_PREFIX, serve

log = logging.getLogger("scheduler")

DEFAULT_ADDRESS = "127.0.0.1:8888"
EXPIRE_EVERY = 5.0        # s between sweeps of assumed pods the watch never confirmed


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="koord-scheduler-extender",
                                description="kube-scheduler extender placing pods on what koordlet reports")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="serve the extender verbs (the default)")
    s.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to listen on (default %(default)s: a "
                   "sidecar of kube-scheduler)")
    s.add_argument("--prefix", default=DEFAULT_PREFIX, help="URL prefix of the verbs (kube's urlPrefix path)")
    s.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster config)")
    s.add_argument("--config", default=None, help="extender configuration (YAML: deviceShare, loadAware, "
                   "nodeNUMAResource, pluginWeights, assumeTTLSeconds)")
    s.add_argument("--kube-api-qps", type=float, default=50.0)
    s.add_argument("--kube-api-burst", type=int, default=100)
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    s.add_argument("--log-format", default="text", choices=("text", "json"))
    sub.add_parser("version", help="print the version")
    return p


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--address {text!r}: expected host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


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
        addr = _address(args.address)
        cfg = extender_config.load(args.config)
        api = KubeApi(args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst)
    except (ValueError, KubeConfigError) as e:
        print(f"koord-scheduler-extender: configuration error: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    cache = ClusterCache(cfg)
    extender = Extender(cache, make_binder(api))
    cache.watch(api, stop)
    # the cache of thousands of nodes and pods is long-lived: full collections walk only what churns
    # (koordlet/gcfreeze.py), so a verb is not paused for a walk over the whole cluster
    FreezeAfterFullCollection().install()
    server = serve(extender, addr, args.prefix)
    log.info("extender serving address=%s prefix=%s strategy=%s", args.address, args.prefix, cfg.strategy)
    while not stop.wait(EXPIRE_EVERY):
        cache.expire()
    log.info("extender stopping")
    cache.stop()
    server.stop()
    api.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(argv) if argv is not None else sys.argv[1:] or ["serve"])
    if args.command == "version":
        print(f"koord-scheduler-extender (koordlet-py) {__version__}")
        return 0
    if args.command is None:
        args = parser().parse_args(["serve", *(argv or sys.argv[1:])])
    configure(args.log_level, args.log_format)
    return cmd_serve(args)
