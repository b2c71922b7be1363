"""Command line: ``koordlet [run] [--once] | report --once | doctor | topology | version``.

Without a subcommand, ``koordlet <flags>`` is ``koordlet run <flags>``: upstream's image runs ``/koordlet <args>``,
so an upstream DaemonSet's command and args start the agent unchanged. Upstream's flags that are not options here
are accepted too (:mod:`koordlet.ops.compat`), each announced with one log line at start-up.

Exit codes: 0 ok, 1 runtime failure, 2 bad configuration or usage (the message names the key), 141 stdout closed
before everything was written (``koordlet doctor | head -3``; what a shell shows for a command a closed pipe
stopped), quietly.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from koordlet import __version__
from koordlet.base.logutil import configure as configure_logging
from koordlet.host.sdnotify import Notifier
from koordlet.ops.compat import Note, add_upstream_flags, announce, gate_notes, normalize_argv, resolve
from koordlet.ops.config import ArgParser, Config, ConfigError, add_flags, build, flag_values
from koordlet.ops.options import OPTIONS
from koordlet.ops.values import go_duration

if TYPE_CHECKING:
    from koordlet.agent import Agent
    from koordlet.component import Plugin
    from koordlet.host.cgroup import Cgroups
    from koordlet.host.paths import HostPaths
    from koordlet.host.probes import Feature
    from koordlet.metriccache import Sample
    from koordlet.states.topology import Devices

log = logging.getLogger(__name__)

COMMANDS = ("run", "report", "doctor", "topology", "version")
_TOP_LEVEL = ("-h", "--help", "--version")

# The options each one-shot command reads, so that its --help lists only those (the config file and KOORDLET_*
# may still set any option). tests/unit/test_cli_surface.py runs each command with a Config that records what it
# reads and holds these lists to it.
_LOGGING = ("log-level", "log-format")
_HOST = ("agent-mode", "cgroup-root-dir", "sys-root-dir", "sys-fs-root-dir", "proc-root-dir", "var-run-root-dir",
         "run-root-dir", "var-lib-kubelet-dir", "terway-qos-dir")
# doctor: the host, and what decides whether each component is on (gates, periods, enable-* switches) and where
# its probe looks, and whether this is a node of a cluster (which profile doctor shows by default)
_DOCTOR = frozenset(_HOST + _LOGGING + ("node-name", "standalone", "cgroup-driver", "feature-gates", "report-dir",
                                        "runtime-hooks-nri-socket-path", "hami-core-library-directory-path",
                                        "pod-resources-proxy-path", "xpu-device-infos-dir", "pod-source",
                                        "kubelet-token-file", "kubelet-insecure-tls")
                    + tuple(o.name for o in OPTIONS if o.name.endswith("-interval") or o.name.startswith("enable-")))
# report: everything but what only the daemon uses (the listener, the on-disk cache and checkpoints, the API server
# connection: a one-shot run never connects, and the audit log)
_DAEMON_ONLY = frozenset({"addr", "tsdb-path", "metric-cache-flush-interval", "prediction-checkpoint-filepath",
                          "kubeconfig", "kube-api-qps", "kube-api-burst"}
                         | {o.name for o in OPTIONS if o.name.startswith("audit-")})
COMMAND_OPTIONS: dict[str, frozenset[str] | None] = {
    "run": None,                                              # all of them
    "report": frozenset(o.name for o in OPTIONS) - _DAEMON_ONLY,
    "doctor": _DOCTOR,
    "topology": frozenset(_HOST + _LOGGING),
}


def _parser() -> argparse.ArgumentParser:
    parser = ArgParser(prog="koordlet", description="Koordinator-compatible node agent (koordlet-py). Without a "
                       "COMMAND, `koordlet <flags>` is `koordlet run <flags>`, as upstream's `/koordlet <args>`.")
    parser.add_argument("--version", action="version", version=f"koordlet-py {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgParser)
    run = sub.add_parser("run", help="run the agent (daemon); the default command")
    run.add_argument("--once", action="store_true", help="one full collection cycle, print a summary, exit")
    add_flags(run)
    add_upstream_flags(run)          # upstream's DaemonSet args are run's (`/koordlet <args>`)
    report = sub.add_parser("report", help="collect briefly, then print the objects the agent would report")
    report.add_argument("--once", action="store_true", help="one report and exit (the only mode for now)")
    report.add_argument("--output", "-o", choices=("yaml", "json"), default="yaml")
    add_flags(report, COMMAND_OPTIONS["report"])
    doctor = sub.add_parser("doctor", help="which kernel/cgroup features this host supports, and why not")
    add_flags(doctor, COMMAND_OPTIONS["doctor"])
    topo = sub.add_parser("topology", help="CPU/NUMA topology, GPUs and RDMA NICs of this host")
    topo.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table")
    add_flags(topo, COMMAND_OPTIONS["topology"])
    sub.add_parser("version", help="print the version")
    return parser


def _argv(argv: Sequence[str] | None) -> list[str]:
    """The command line with ``run`` put in front when it names no subcommand (upstream's ``/koordlet <args>``),
    and Go's ``-v`` spelled as argparse reads it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0] not in COMMANDS and args[0] not in _TOP_LEVEL):
        args.insert(0, "run")
    return normalize_argv(args)


def _config(args: argparse.Namespace, **implied: Any) -> tuple[Config, tuple[Note, ...]]:
    """The configuration, and one note per upstream flag given that is mapped or inert here and per feature gate
    that is on but has no effect (:func:`koordlet.ops.compat.gate_notes`). ``implied``: options the command sets
    as if given on the command line."""
    flags = {**implied, **flag_values(args)}
    upstream = resolve(args, flags)
    config = build(file=args.config_file, flags={**upstream.options, **flags},
                   require_node=args.command in ("run", "report"))
    return config, upstream.notes + gate_notes(config)


def _setup_logging(config: Config) -> None:
    configure_logging(config.log_level, config.log_format)


def _table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


class StdoutClosed(Exception):
    """Whoever read stdout has gone (``koordlet doctor | head -3``): the command ends quietly."""


def out(text: str, end: str = "\n") -> None:
    """Print ``text`` to stdout and flush it, so that a reader that has gone is found here, as :class:`StdoutClosed`
    (a write anywhere else that meets a closed pipe stays the error it is)."""
    try:
        print(text, end=end, flush=True)
    except BrokenPipeError:
        raise StdoutClosed from None


def _flush() -> None:
    """Flush stdout, a reader that has gone found as in :func:`out`."""
    if sys.stdout is None:      # started with stdout closed: print writes nowhere
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutClosed from None


_STANDALONE_HINT = ("without a cluster, run with --standalone (pods from this host's cgroup tree, named by "
                    "--pods-file if given)")


def no_cluster(config: Config) -> str | None:
    """Why this node plainly has no cluster to read pods from, before anything is built (None: it may have one).
    Pods come from the kubelet's HTTPS port with the pod's service-account token: no token file, no pod."""
    if config.standalone or config.pod_source != "kubelet" or config.kubelet_insecure_tls:
        return None
    if os.path.exists(config.kubelet_token_file):
        return None
    return f"the kubelet token file {config.kubelet_token_file} does not exist (not in a pod of a cluster)"


def _one_shot(config: Config) -> tuple[Agent, list[Sample]] | int:
    """An agent with an in-memory cache that has run two collection cycles (CPU rates need two), or the exit code
    after saying why there is none. Outside a cluster it says to use --standalone rather than fail on a token
    file or summarise an empty pod list as a success."""
    from koordlet.agent import Agent, StartupError
    problem = no_cluster(config)
    if problem:
        print(f"koordlet: {problem}; {_STANDALONE_HINT}", file=sys.stderr)
        return 2
    try:
        agent = Agent.build(config, persist=False, connect=False)
    except StartupError as e:
        print(f"koordlet: cannot start: {e}", file=sys.stderr)
        return 2
    if not agent.informer.sync() and not config.standalone:
        print(f"koordlet: cannot list this node's pods from the {config.pod_source} (the log line above says why); "
              f"{_STANDALONE_HINT}", file=sys.stderr)
        return 1
    agent.collect_once()
    time.sleep(max(config.collect_res_used_interval, 0.5))
    return agent, agent.collect_once()


def cmd_report(config: Config, output: str) -> int:
    """The NodeMetric and NodeResourceTopology objects as they would be reported now (YAML documents, or a JSON
    List). Aggregates over minutes are empty after a short run (the cold-start rule); a running daemon's full
    view is in report-dir (standalone) or the API server."""
    shot = _one_shot(config)
    if isinstance(shot, int):
        return shot
    agent, _ = shot
    try:
        objects = list(agent.report_objects().values())
    except Exception as e:     # e.g. the kubelet /configz the NRT needs is unreachable
        print(f"koordlet: cannot build the reports: {e}", file=sys.stderr)
        return 1
    if output == "json":
        out(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        out(yaml.safe_dump_all(objects, sort_keys=False), end="")
    return 0


def cmd_run(config: Config, once: bool) -> int:
    from koordlet.agent import Agent, StartupError
    from koordlet.ops import server
    if once:
        shot = _one_shot(config)
        if isinstance(shot, int):
            return shot
        agent, samples = shot
        out(summary(agent, samples))
        return 0
    # the listener first: a taken port must fail before anything exists on disk (the metric cache directory)
    try:
        server.reserve(config.addr)
    except OSError as e:
        print(f"koordlet: cannot listen on {server.format_addr(*config.addr)} (option addr): {e.strerror or e}; "
              f"stop what holds the port or pass another --addr", file=sys.stderr)
        return 2
    notifier = Notifier.from_environ()      # systemd Type=notify: STATUS while starting, then READY and WATCHDOG
    notifier.status("starting: building the agent")
    try:
        agent = Agent.build(config)
    except StartupError as e:
        server.release_reserved()
        print(f"koordlet: cannot start: {e}", file=sys.stderr)
        return 2
    announce_run(agent)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        agent.run(stop, notifier=notifier)
    finally:
        notifier.close()
    return 0


def announce_run(agent: Agent) -> None:
    """The start-up lines a person running the agent by hand needs: that it changes this host (root, standalone:
    `make run`) and how to stop that, and where its state and reports go and when the first report appears."""
    config = agent.config
    problem = no_cluster(config)
    if problem:             # the daemon keeps trying (a token mounted late), but says what is likely wrong
        log.warning("%s; %s", problem, _STANDALONE_HINT)
    if agent.reconciler is not None and config.standalone:
        log.warning("enforcing QoS on this host: as root the agent writes the cgroup, sysctl and resctrl settings "
                    "of the pods it finds every %s%s; --reconcile-interval-seconds=0 turns that off (make run "
                    "ARGS='--reconcile-interval-seconds=0%s'), collection and reports go on",
                    go_duration(config.reconcile_interval_seconds),
                    " and sets them on new containers over NRI" if config.enable_nri_runtime_hook else "",
                    " --enable-nri-runtime-hook=false" if config.enable_nri_runtime_hook else "")
    log.info("agent state metric_cache=%s prediction_checkpoints=%s", os.path.abspath(config.tsdb_path),
             os.path.abspath(config.prediction_checkpoint_filepath) if config.prediction_checkpoint_filepath
             else "off")
    for _, report in agent.reports:
        if report.kind == "files":
            log.info("reports dir=%s first_in=%s every=%s (nodemetric.yaml, noderesourcetopology.yaml%s)",
                     os.path.abspath(config.report_dir), go_duration(report.interval()),
                     go_duration(report.interval()), ", device.yaml" if config.gate("Accelerators") else "")
        elif report.kind == "nodemetric":
            log.info("reports to=api-server nodemetric_first_in=%s (the NodeMetric's reportIntervalSeconds)",
                     go_duration(report.interval()))


def summary(agent: Agent, samples: list[Sample]) -> str:
    """Human summary of one cycle's samples: node, system, BE tier, then one row per pod."""
    by_key = {(s.name, s.labels): s.value for s in samples}

    def get(name: str, labels: tuple[tuple[str, str], ...] = ()) -> str:
        v = by_key.get((name, labels))
        if v is None:
            return "-"
        return f"{v:.3f}" if "cpu" in name else f"{v / 2**20:.1f}"

    lines = [(f"koordlet-py {__version__}  node={agent.config.node_name}  pods={len(agent.informer.pods)}  "
              f"source={agent.config.pod_source}  cgroup=v{int(agent.cgroups.version)}/"
              f"{agent.cgroups.layout.driver.value}"), ""]
    be = {dict(s.labels)["be_allocation"]: s.value for s in samples if s.name == "node_be"}
    lines.append(_table([
        ("node", get("node_cpu_usage"), get("node_memory_usage")),
        ("system", get("sys_cpu_usage"), get("sys_memory_usage")),
        ("besteffort (milli-cores)", f"{be['usage']:.0f}" if "usage" in be else "-", "-"),
    ], ("SCOPE", "CPU(cores)", "MEMORY(MiB)")))
    rows = []
    for meta in agent.informer.pods:
        labels = (("pod_uid", meta.pod.uid),)
        rows.append((meta.pod.key, meta.pod.qos_class, get("pod_cpu_usage", labels),
                     get("pod_memory_usage", labels), get("pod_memory_working_set", labels),
                     len(meta.containers)))
    if rows:
        lines += ["", _table(rows, ("POD", "QOS", "CPU(cores)", "MEMORY(MiB)", "WORKINGSET(MiB)",
                                    "CONTAINERS"))]
    return "\n".join(lines)


def device_features(devices: Devices) -> list[Feature]:
    """Doctor lines for NVML GPUs and RDMA NICs: what was found, or why nothing was."""
    from koordlet.host.probes import Feature
    inv = devices.gpus
    if inv.error:
        gpu = Feature("gpus (nvml)", False, inv.error)
    else:
        lost = [g.bus_id for g in inv.gpus if g.lost]
        gpu = Feature("gpus (nvml)", bool(inv.gpus), f"{len(inv.gpus)} GPU(s), driver {inv.driver_version or '?'}, "
                      f"CUDA {inv.cuda_version or '?'}" + (f", lost: {','.join(lost)}" if lost else "")
                      if inv.gpus else "NVML works but lists no GPU")
    nics = devices.rdma
    rdma = Feature("rdma nics", bool(nics), f"{len(nics)} PF(s): " + ",".join(
        "+".join(n.ib_devices) for n in nics) if nics else "no PCI network function with an InfiniBand device "
                   "in sysfs")
    return [gpu, rdma]


def component_support(config: Config, paths: HostPaths, cgroups: Cgroups) -> list[tuple[str, str, bool, bool, str]]:
    """(name, kind, enabled, supported, detail) of every registered component: what doctor prints below the host
    features. A component without a probe needs nothing the host could lack; a report for the API server is off
    standalone, and says where its object goes instead."""
    from koordlet import collectors, qos, reporters, services
    rows = []
    kinds: list[tuple[str, tuple[Plugin[Any], ...]]] = [
        ("strategy", qos.STRATEGIES), ("collector", collectors.COLLECTORS), ("report", reporters.REPORTS),
        ("service", services.SERVICES)]
    for kind, plugins in kinds:
        for plugin in plugins:
            ok, why = plugin.probe(config, paths, cgroups) if plugin.probe else (True, "-")
            if plugin.cluster and config.standalone:
                why = ("standalone: no API server; the files report writes its object into report-dir"
                       if config.report_dir else "standalone: no API server, and no report-dir for its object")
            rows.append((plugin.name, kind, plugin.enabled(config), ok, why))
    return rows


def doctor_profile(args: argparse.Namespace, config: Config,
                   notes: tuple[Note, ...]) -> tuple[Config, tuple[Note, ...], str]:
    """The configuration doctor reports for, its notes, and the line that says which profile that is and why.
    Outside a cluster that is the standalone profile (what ``make run`` runs) unless the standalone option is set
    either way: the components a person will run here are the ones to check."""
    if config.standalone:
        return config, notes, "profile: standalone (as `make run` and `koordlet run --standalone` run the agent)"
    problem = no_cluster(config)
    if problem is None or config.sources.get("standalone") != "default":
        return config, notes, ("profile: cluster (pods from the kubelet, reports to the API server); --standalone "
                               "shows what `make run` runs")
    config, notes = _config(args, standalone=True)
    return config, notes, (f"profile: standalone, as `make run` runs the agent: {problem}; --standalone=false "
                           "shows the cluster profile")


def cmd_doctor(config: Config, profile: str = "") -> int:
    """The host's features, then every component: on or off under ``config``, supported here or why not.
    ``profile``: the line that says which profile ``config`` is (:func:`doctor_profile`)."""
    from koordlet.host.cgroup import Cgroups
    from koordlet.host.paths import HostPaths
    from koordlet.host.probes import probe
    paths = HostPaths.from_config(config)
    cgroups = Cgroups.detect(paths, config.cgroup_driver)
    features = probe(paths, cgroups) + device_features(read_devices(paths))
    out(f"koordlet-py {__version__} doctor  cgroup-root={config.cgroup_root_dir}  sys-root={config.sys_root_dir}")
    if profile:
        out(profile)
    out(_table([(f.name, "yes" if f.supported else "no", f.detail) for f in features],
               ("FEATURE", "SUPPORTED", "DETAIL")))
    out("")
    out(_table([(name, kind, "on" if on else "off", "yes" if ok else "no", why)
                for name, kind, on, ok, why in component_support(config, paths, cgroups)],
               ("COMPONENT", "KIND", "ENABLED", "SUPPORTED", "DETAIL")))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; one whose stdout was closed before it finished ends quietly with 141 (module docstring)."""
    try:
        try:
            return _command(argv)
        finally:
            _flush()            # what argparse's --help and --version left in the buffer
    except StdoutClosed:
        # what is still buffered can go nowhere: stdout onto /dev/null, so the interpreter's last flush is quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


def _command(argv: Sequence[str] | None) -> int:
    parser = _parser()
    words = _argv(argv)
    implied = words[:1] == ["run"] and (argv if argv is not None else sys.argv[1:])[:1] != ["run"]
    profile = ""
    try:
        args = parser.parse_args(words)
        if args.command == "version":
            out(f"koordlet-py {__version__}")
            return 0
        config, notes = _config(args)
        if args.command == "doctor":
            config, notes, profile = doctor_profile(args, config, notes)
    except ConfigError as e:
        hint = " (no command given, so `koordlet run`; `koordlet --help` lists the commands)" if implied else ""
        print(f"koordlet: configuration error: {e}{hint}", file=sys.stderr)
        return 2
    _setup_logging(config)
    announce(notes)
    if args.command == "run":
        return cmd_run(config, args.once)
    if args.command == "doctor":
        return cmd_doctor(config, profile)
    if args.command == "report":
        return cmd_report(config, args.output)
    return cmd_topology(config, args.output)


def read_devices(paths: HostPaths) -> Devices:
    """GPUs (one short NVML session) and RDMA NICs of this host, with the partition table they imply."""
    from koordlet.host.nvml import GpuInventory, Nvml, NvmlUnavailable
    from koordlet.host.rdma import discover_rdma
    from koordlet.reporters.device import partition_inputs
    from koordlet.reporters.gpu_partitions import derive_partitions
    from koordlet.states.topology import Devices
    try:
        session = Nvml.open(paths)
    except NvmlUnavailable as e:
        inventory = GpuInventory(error=str(e))
    else:
        try:
            inventory = session.inventory()
        finally:
            session.close()
    nics, problems = discover_rdma(paths)
    return Devices(inventory, nics, problems, derive_partitions(partition_inputs(inventory.gpus),
                                                                inventory.pcie_levels))


def cmd_topology(config: Config, output: str) -> int:
    from koordlet.host.paths import HostPaths
    from koordlet.host.topology import read_topology
    from koordlet.states.topology import render
    paths = HostPaths.from_config(config)
    topo = read_topology(paths)
    out(render(topo, output, read_devices(paths)))
    for problem in topo.problems:
        print(f"koordlet topology: skipped: {problem}", file=sys.stderr)
    return 0
