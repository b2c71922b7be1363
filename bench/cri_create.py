"""Benchmark: CreateContainer through CRI on a real containerd, with the agent's NRI plugin vs no plugin.

Two containerd instances from the same binary and the same config, both with NRI enabled (doubles/containerd.py:
own root/state/sockets, the native snapshotter, local images, cgroupfs, one cgroup test root shared by both):

- **plugin**: the agent runs as its daemon (``koordlet run --standalone``, the production hook budget) and is
  registered on this runtime's NRI socket, so every CreateContainer waits for its adjustment;
- **no plugin**: nobody is registered on this runtime's NRI socket.

The agent's reconciler runs throughout and sees both runtimes' pods (one host), so background load is the same
for both. Measured from the CRI client: CreateContainer request sent -> response received (containerd creates the
container record, its snapshot and its OCI spec, and with the plugin asks it over NRI; the container is not
started; the image is the 0.7 MB pause image, so the native snapshotter's copy stays small). Each round makes one
pod on each runtime (BE with batch resources, LS, LSR pinned to a CPU, in turn) and then ``--per-round``
containers in each, alternating between the runtimes container by container (which one goes first alternates by
round), so both see the same moments of the host; the pods are removed outside the timing. A warm-up round
comes first. Reported: p50 / p90 / p99 / max per runtime, their differences, and the median of the paired
differences (the plugin's container minus the no-plugin container created right next to it).

Budget: the plugin adds <= 2 ms at p50 and <= 5 ms at p99.

Usage: python bench/cri_create.py [--containers 200 --per-round 20]   (root, cgroup v1, .ci/install-runtime)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles import containerd
from doubles.agentproc import AgentProcess
from doubles.cri import CRIClient, Kubelet, Pod, Resources
from doubles.ociimage import archive, pause_image

BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
         "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}}
MI = 1 << 20


def pod_of(kind: int, names: list[str], pinned_cpu: int) -> Pod:
    uid = str(uuid.uuid4())
    if kind == 0:
        return Pod(f"be-{uid[:8]}", uid, namespace="bench", labels={"koordinator.sh/qosClass": "BE"},
                   annotations={"node.koordinator.sh/extended-resource-spec":
                                json.dumps({"containers": dict.fromkeys(names, BATCH)})},
                   containers=dict.fromkeys(names, Resources()))
    if kind == 1:
        return Pod(f"ls-{uid[:8]}", uid, namespace="bench", labels={"koordinator.sh/qosClass": "LS"},
                   containers=dict.fromkeys(names, Resources(cpu_request=100, memory_request=32 * MI)))
    return Pod(f"lsr-{uid[:8]}", uid, namespace="bench", labels={"koordinator.sh/qosClass": "LSR"},
               annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": str(pinned_cpu)})},
               containers=dict.fromkeys(names, Resources(cpu_request=1000, cpu_limit=1000, memory_request=64 * MI,
                                                         memory_limit=64 * MI)))


def one_round(kubelets: list[Kubelet], image: str, kind: int, n: int, pinned_cpu: int,
              first: int) -> list[list[float]]:
    """One pod on each runtime, then ``n`` containers in each, created alternately (``first`` runtime first, then
    the other, container by container, so both see the same moment of the host); the pods are removed after,
    outside the timing. Per runtime, the CreateContainer times."""
    names = [f"c{i}" for i in range(n)]
    pods = [k.run_pod(pod_of(kind, names, pinned_cpu)) for k in kubelets]
    times: list[list[float]] = [[] for _ in kubelets]
    order = (first, 1 - first)
    try:
        for name in names:
            for i in order:
                k, rp = kubelets[i], pods[i]
                config = k.client.container_config(rp.pod, name, image, ("/pause",))
                t0 = time.perf_counter()
                rp.containers[name] = k.client.create_container(rp.sandbox_id, config, rp.config)
                times[i].append(time.perf_counter() - t0)
    finally:
        for k, rp in zip(kubelets, pods, strict=True):
            k.delete_pod(rp)
    return times


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=200, help="CreateContainer calls per runtime")
    ap.add_argument("--per-round", type=int, default=20, help="containers per pod (one pod per round)")
    args = ap.parse_args()
    reason = containerd.missing()
    if reason:
        print(f"skipped: {reason}")
        return
    bin_dir = containerd.containerd_dir()
    assert bin_dir is not None
    work = tempfile.mkdtemp(prefix="cribench")
    link_root = os.path.join(work, "cgroup")
    os.mkdir(link_root)
    roots = containerd.CgroupRoots(link_root)
    runtimes: list[containerd.Containerd] = []
    clients: list[CRIClient] = []
    agent: AgentProcess | None = None
    try:
        pause = pause_image(work)
        path = os.path.join(work, "pause.tar")
        with open(path, "wb") as f:
            f.write(archive(pause))
        for _ in range(2):
            rt = containerd.Containerd(bin_dir, roots, pause.ref)
            runtimes.append(rt)
            rt.start()
            rt.import_image(path)
            clients.append(CRIClient(rt.socket))
        kubelets = [Kubelet(c, roots) for c in clients]
        kubelets[0].setup()
        version = clients[0].version().runtime_version
        agent_dir = os.path.join(work, "agent")
        os.mkdir(agent_dir)
        daemon = agent = AgentProcess(agent_dir, [
            "--cgroup-root-dir", link_root, "--cgroup-driver", "cgroupfs", "--var-run-root-dir", runtimes[0].base,
            "--runtime-hooks-nri-socket-path", os.path.basename(runtimes[0].nri_socket)])
        daemon.start()
        daemon.wait(lambda: daemon.metric("koordlet_nri_connected") == 1, 60, "NRI registration")
        with open(roots.real("cpuset", "cpuset.cpus")) as f:
            pinned = max(int(x.split("-")[-1]) for x in f.read().strip().split(","))

        names = ("plugin", "no plugin")
        results: dict[str, list[float]] = {n: [] for n in names}
        one_round(kubelets, pause.ref, 0, min(5, args.per_round), pinned, 0)       # warm-up: snapshots, shims
        rounds = -(-args.containers // args.per_round)
        for r in range(rounds):
            n = min(args.per_round, args.containers - r * args.per_round)
            for name, times in zip(names, one_round(kubelets, pause.ref, r % 3, n, pinned, r % 2), strict=True):
                results[name] += times
        hooks = daemon.metric("koordlet_nri_hook_seconds_count", hook="CreateContainer")
        hook_sum = daemon.metric("koordlet_nri_hook_seconds_sum", hook="CreateContainer")
        failed_open = daemon.metric("koordlet_nri_hook_errors_total", hook="CreateContainer")

        print(f"CreateContainer through CRI, containerd {version} (runc from PATH), {args.containers} containers per "
              f"runtime in {rounds} interleaved rounds of {args.per_round} (BE / LS / LSR pods in turn)")
        print("| runtime | calls | p50 | p90 | p99 | max |")
        print("|---|---|---|---|---|---|")
        for name in names:
            t = results[name]
            print(f"| {name} | {len(t)} | {statistics.median(t) * 1e3:.2f} ms | {pct(t, 0.90) * 1e3:.2f} ms | "
                  f"{pct(t, 0.99) * 1e3:.2f} ms | {max(t) * 1e3:.2f} ms |")
        a, b = results["plugin"], results["no plugin"]
        print(f"added by the plugin: p50 {(statistics.median(a) - statistics.median(b)) * 1e3:+.2f} ms, "
              f"p99 {(pct(a, 0.99) - pct(b, 0.99)) * 1e3:+.2f} ms (budget: <= 2 ms p50, <= 5 ms p99); median of the "
              f"paired differences {statistics.median(x - y for x, y in zip(a, b, strict=True)) * 1e3:+.2f} ms")
        if hooks:
            print(f"the plugin's own CreateContainer time (koordlet_nri_hook_seconds, incl. warm-up): mean "
                  f"{hook_sum / hooks * 1e3:.2f} ms over {hooks:.0f} calls; answered empty (fail-open): "
                  f"{failed_open:.0f}")
    finally:
        if agent is not None:
            agent.stop()
        for c in clients:
            c.close()
        for rt in runtimes:
            rt.close()
        roots.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
