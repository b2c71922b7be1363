"""The agent against a real containerd with NRI, pods created through CRI the way the kubelet creates them.

Every assertion is on the real container: the OCI spec containerd holds (ContainerStatus verbose ``runtimeSpec``),
the cgroup files runc wrote, and the container's processes (/proc/<pid>/status, environ, oom_score_adj, root).
The agent runs as its own daemon, standalone without a pods file (conftest.py), so what it knows of a pod is the
cgroup tree and what the runtime tells it over NRI.

1. creation: a BE pod's batch cpu.shares / cfs quota / memory limit (container and pod); an LSR pod's pinned
   cpuset with the quota lifted; an LS pod in the share pool without the LSR CPUs; oom_score_adj from the pod's
   annotation in /proc.
2. UpdateContainerResources as the kubelet sends it (shares 2 for BE) -> the plugin's UpdateContainer restores ours.
3. containerd restarted under the agent -> one reconnect, one Synchronize, nothing rewritten that was right.
4. the agent killed -> containerd keeps creating containers (fail-open); restarted -> Synchronize repairs them.
5. GPU env without a GPU: NVIDIA_VISIBLE_DEVICES in the container's environ; HAMi-core's mounts and limits.
6. the reconciler agrees with the plugin: after creation, reconcile cycles write nothing (audit trail).

No timing is asserted: waits poll for a state with generous limits; "a reconcile cycle has run" is read from the
agent's own cycle counter, not from the clock.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from doubles.agentproc import AgentProcess
from doubles.cri import Pod, Resources, RunningPod, kubelet_resources
from koordlet.host.cgroup import parse_cpu_list
from tests.realruntime.conftest import HamiHost, Node

pytestmark = [pytest.mark.root, pytest.mark.xdist_group("realruntime")]

QOS = "koordinator.sh/qosClass"
SPEC = "node.koordinator.sh/extended-resource-spec"
STATUS = "scheduling.koordinator.sh/resource-status"
DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
OOM_SCORE_ADJ = "koordinator.sh/oom-score-adj"
MI = 1 << 20
BATCH = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
         "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}}
BE_SHARES, BE_QUOTA, BE_MEMORY = 512, 100000, 512 * MI        # what BATCH comes to (cfs period 100 ms)
SLEEP = ("/bin/busybox", "sleep", "3600")
WAIT = 60.0                     # upper bound of every wait for the agent or the runtime (a loaded host)


# ---- pods -----------------------------------------------------------------------------------------------------------

def be_pod(name: str, containers: tuple[str, ...] = ("app",), annotations: dict[str, str] | None = None) -> Pod:
    """A koordinator BE pod: BestEffort to Kubernetes, batch resources in the extended-resource-spec annotation."""
    return Pod(name, str(uuid.uuid4()), labels={QOS: "BE"},
               annotations={SPEC: json.dumps({"containers": dict.fromkeys(containers, BATCH)}), **(annotations or {})},
               containers=dict.fromkeys(containers, Resources()))


def lsr_pod(name: str, cpus: str) -> Pod:
    """A Guaranteed LSR pod the scheduler pinned to ``cpus`` (resource-status)."""
    return Pod(name, str(uuid.uuid4()), labels={QOS: "LSR"}, annotations={STATUS: json.dumps({"cpuset": cpus})},
               containers={"app": Resources(cpu_request=1000, cpu_limit=1000, memory_request=64 * MI,
                                            memory_limit=64 * MI)})


def ls_pod(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Pod:
    return Pod(name, str(uuid.uuid4()), labels={QOS: "LS", **(labels or {})}, annotations=dict(annotations or {}),
               containers={"app": Resources(cpu_request=100, memory_request=32 * MI)})


class Pods:
    """The pods of one test, deleted at its end as the kubelet deletes them; each new pod is waited for until the
    agent has discovered it (its pod count went up), as a kubelet's image pull and the like give it time to."""

    def __init__(self, node: Node, agent: AgentProcess) -> None:
        self.node, self.agent = node, agent
        self.live: list[RunningPod] = []

    def run(self, pod: Pod, seen: bool = True) -> RunningPod:
        before = known_pods(self.agent)
        rp = self.node.kubelet.run_pod(pod)
        self.live.append(rp)
        if seen:
            self.agent.wait(lambda: known_pods(self.agent) > before, WAIT, f"the agent to see pod {pod.name}")
        return rp

    def start(self, rp: RunningPod, name: str = "app", command: tuple[str, ...] = SLEEP,
              env: dict[str, str] | None = None) -> str:
        return self.node.kubelet.start_container(rp, name, self.node.images.busybox, command, env)

    def close(self) -> None:
        """Delete this test's pods and wait until the agent no longer counts them (the next test's counting
        starts from there)."""
        known, gone = known_pods(self.agent), len(self.live)
        for rp in reversed(self.live):
            self.node.kubelet.delete_pod(rp)
        self.live.clear()
        if self.agent.pid is not None:
            self.agent.wait(lambda: known_pods(self.agent) <= known - gone, WAIT, "the agent to forget deleted pods")


@pytest.fixture
def pods(node: Node, agent: AgentProcess) -> Iterator[Pods]:
    p = Pods(node, agent)
    try:
        yield p
    finally:
        p.close()


# ---- reading the real container -------------------------------------------------------------------------------------

def known_pods(agent: AgentProcess) -> float:
    return agent.metric("koordlet_pods")


def spec_of(node: Node, cid: str) -> dict[str, Any]:
    _, info = node.cri.container_status(cid)
    spec = info["runtimeSpec"]
    assert isinstance(spec, dict)
    return spec


def pid_of(node: Node, cid: str) -> int:
    _, info = node.cri.container_status(cid)
    return int(info["pid"])


def resources(node: Node, cid: str) -> tuple[int | None, int | None, int | None]:
    """(cpu shares, cfs quota, memory limit) in the container's OCI spec; None for unset."""
    r = spec_of(node, cid)["linux"]["resources"]
    return r.get("cpu", {}).get("shares"), r.get("cpu", {}).get("quota"), r.get("memory", {}).get("limit")


def kernel(node: Node, rel: str) -> tuple[str, str, str]:
    """(cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes) of a cgroup, as the kernel has them."""
    c = node.cgroups
    return (c.read("cpu", rel, "cpu.shares"), c.read("cpu", rel, "cpu.cfs_quota_us"),
            c.read("memory", rel, "memory.limit_in_bytes"))


def proc_field(pid: int, key: str) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [e.decode() for e in f.read().split(b"\0") if e]
    return dict(e.split("=", 1) for e in items if "=" in e)


def cpus(text: str) -> set[int]:
    return set(parse_cpu_list(text))


def node_cpus(node: Node) -> set[int]:
    return cpus(node.cgroups.read("cpuset", "", "cpuset.cpus"))


def pinnable_cpu(node: Node) -> int:
    all_cpus = node_cpus(node)
    if len(all_cpus) < 2:
        pytest.skip("needs 2 CPUs: one pinned for the LSR pod, one left in the share pool")
    return max(all_cpus)


def wait_pinned(node: Node, agent: AgentProcess, lsr: RunningPod, cpu: int) -> None:
    """Until the agent's reconciler knows the LSR pod pinned to ``cpu``: it has moved the pod's sandbox (pause)
    container onto that CPU (upstream sets container and sandbox cpusets), so the view the NRI hooks decide from
    leaves ``cpu`` out of the share pools. A kubelet gives it that long and more (image pulls)."""
    sandbox = f"{lsr.cgroup_dir}/{lsr.sandbox_id}"
    agent.wait(lambda: cpus(node.cgroups.read("cpuset", sandbox, "cpuset.cpus")) == {cpu}, WAIT,
               f"the agent to pin the LSR pod's sandbox to CPU {cpu} (it has "
               f"{node.cgroups.read('cpuset', sandbox, 'cpuset.cpus')})")


def settle(agent: AgentProcess, cycles: int = 3) -> None:
    """Until the agent has run ``cycles`` more of its 1 s loops (its collect-cycle count), so its QoS reconcile
    loop, on the same period, has had as many chances to act."""
    metric = "koordlet_collect_cycle_duration_seconds_count"
    start = agent.metric(metric)
    agent.wait(lambda: agent.metric(metric) >= start + cycles, WAIT, f"{cycles} agent cycles")


def hook_calls(agent: AgentProcess, hook: str) -> float:
    return agent.metric("koordlet_nri_hook_seconds_count", hook=hook)


# ---- 0. the runtime -------------------------------------------------------------------------------------------------

def test_the_runtime_is_containerd_with_nri_and_the_plugin_is_registered(runtime, node, agent):
    version = node.cri.version()
    assert version.runtime_name == "containerd" and version.runtime_api_version == "v1"
    major, minor = (int(x) for x in version.runtime_version.lstrip("v").split(".")[:2])
    assert runtime.accepts((major, minor, 0)), (runtime.name, version.runtime_version)
    print(f"runtime: containerd {version.runtime_version}")
    assert agent.metric("koordlet_nri_connected") == 1
    configured = agent.log_lines(r"nri configured runtime=")
    assert configured and "runtime=containerd" in configured[-1], agent.log()[-2000:]


# ---- 1. creation ----------------------------------------------------------------------------------------------------

def test_be_container_gets_batch_shares_quota_and_memory_limit_at_creation(node, agent, pods):
    rp = pods.run(be_pod("be-create"))
    # the pod level, written at RunPodSandbox: the batch sums of its containers (one here)
    assert kernel(node, rp.cgroup_dir) == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))
    cid = pods.start(rp)
    assert resources(node, cid) == (BE_SHARES, BE_QUOTA, BE_MEMORY)
    assert kernel(node, f"{rp.cgroup_dir}/{cid}") == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))
    pid = pid_of(node, cid)
    with open(f"/proc/{pid}/cgroup") as f:
        assert f"/kubepods/besteffort/pod{rp.pod.uid}/{cid}" in f.read()
    assert kernel(node, rp.cgroup_dir) == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))


def test_lsr_container_is_pinned_with_no_quota(node, agent, pods):
    cpu = pinnable_cpu(node)
    rp = pods.run(lsr_pod("lsr-create", str(cpu)))
    assert node.cgroups.read("cpu", rp.cgroup_dir, "cpu.cfs_quota_us") == "-1"     # the kubelet's 100000, lifted
    cid = pods.start(rp)
    spec_cpu = spec_of(node, cid)["linux"]["resources"]["cpu"]
    assert cpus(spec_cpu["cpus"]) == {cpu}
    assert spec_cpu.get("quota", -1) <= 0, spec_cpu
    rel = f"{rp.cgroup_dir}/{cid}"
    assert cpus(node.cgroups.read("cpuset", rel, "cpuset.cpus")) == {cpu}
    assert node.cgroups.read("cpu", rel, "cpu.cfs_quota_us") == "-1"
    assert cpus(proc_field(pid_of(node, cid), "Cpus_allowed_list")) == {cpu}


def test_ls_container_gets_the_share_pool_without_the_lsr_cpus(node, agent, pods):
    cpu = pinnable_cpu(node)
    lsr = pods.run(lsr_pod("lsr-for-ls", str(cpu)))
    pods.start(lsr)
    wait_pinned(node, agent, lsr, cpu)
    rp = pods.run(ls_pod("ls-create"))
    cid = pods.start(rp)
    pool = node_cpus(node) - {cpu}
    assert cpus(spec_of(node, cid)["linux"]["resources"]["cpu"]["cpus"]) == pool
    assert cpus(node.cgroups.read("cpuset", f"{rp.cgroup_dir}/{cid}", "cpuset.cpus")) == pool
    assert cpus(proc_field(pid_of(node, cid), "Cpus_allowed_list")) == pool


def test_oom_score_adj_from_the_pod_annotation_reaches_the_process(node, agent, pods):
    """The kubelet gives a BestEffort container 1000; the pod asks 500 (gate OOMScoreAdj), and the process must end
    up with 500 on either runtime, each by its own path (nri_plugin/features/oom.py decides by the version the
    runtime names at Configure): containerd 2.x applies the NRI adjustment, so the OCI spec runc started the
    process from has 500 and the agent writes nothing to /proc; containerd 1.7 drops the adjustment without a word
    (its NRI is older than v0.7), so the spec keeps the kubelet's 1000 and the agent writes
    /proc/<pid>/oom_score_adj once the container has started."""
    version = node.runtime.version()
    assert version is not None
    adjusts = version >= (2, 0, 0)
    rp = pods.run(be_pod("be-oom", annotations={OOM_SCORE_ADJ: "500"}))
    cid = pods.start(rp)
    pid = pid_of(node, cid)

    def score() -> str:
        with open(f"/proc/{pid}/oom_score_adj") as f:
            return f.read().strip()
    spec_value = spec_of(node, cid)["process"].get("oomScoreAdj")
    agent.wait(lambda: score() == "500", WAIT, f"/proc/{pid}/oom_score_adj to be 500 (it is {score()}; the spec has "
               f"{spec_value})")
    settle(agent)
    written = [e for e in agent.events() if e["file"].endswith(f"/{pid}/oom_score_adj")]
    told = agent.log_lines(r"oom_score_adj adjustments; writing /proc/<pid>/oom_score_adj")
    print(f"containerd {'.'.join(map(str, version))}: spec oomScoreAdj={spec_value}, /proc writes={len(written)}")
    if adjusts:
        assert spec_value == 500, "containerd 2.x should have applied the adjustment"
        assert written == [] and told == [], (written, told)
    else:
        assert spec_value == 1000, "containerd 1.7 applied an oom_score_adj adjustment it is known to drop"
        assert [e["new"] for e in written] == ["500"], written
        assert told and "ignores oom_score_adj" in told[-1], told


# ---- 2. UpdateContainerResources ------------------------------------------------------------------------------------

def test_kubelet_update_is_answered_with_our_settings(node, agent, pods):
    rp = pods.run(be_pod("be-update"))
    cid = pods.start(rp)
    assert resources(node, cid) == (BE_SHARES, BE_QUOTA, BE_MEMORY)
    updates = hook_calls(agent, "UpdateContainer")
    sent = kubelet_resources(rp.pod, "app")                # what the kubelet sends for a BestEffort container
    assert (sent.cpu_shares, sent.cpu_quota, sent.memory_limit_in_bytes) == (2, 0, 0)
    node.cri.update_container_resources(cid, sent)
    assert hook_calls(agent, "UpdateContainer") == updates + 1
    assert resources(node, cid) == (BE_SHARES, BE_QUOTA, BE_MEMORY)
    assert kernel(node, f"{rp.cgroup_dir}/{cid}") == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))
    status, _ = node.cri.container_status(cid)
    assert status.resources.linux.cpu_shares == BE_SHARES


# ---- 3. containerd restarted ----------------------------------------------------------------------------------------

def test_containerd_restart_one_reconnect_one_synchronize_nothing_rewritten(node, agent, pods):
    cpu = pinnable_cpu(node)
    be = pods.run(be_pod("be-restart"))
    be_cid = pods.start(be)
    lsr = pods.run(lsr_pod("lsr-restart", str(cpu)))
    lsr_cid = pods.start(lsr)
    settle(agent)
    dirs = [be.cgroup_dir, f"{be.cgroup_dir}/{be_cid}", lsr.cgroup_dir, f"{lsr.cgroup_dir}/{lsr_cid}"]
    before = {rel: (kernel(node, rel), node.cgroups.read("cpuset", rel, "cpuset.cpus")) for rel in dirs}
    eofs, syncs = agent.metric("koordlet_nri_reconnects_total", reason="eof"), hook_calls(agent, "Synchronize")
    registered = len(agent.log_lines(r"nri plugin registered"))
    marker = time.time()

    node.runtime.restart()
    ready = time.monotonic()
    agent.wait(lambda: hook_calls(agent, "Synchronize") == syncs + 1 and agent.metric("koordlet_nri_connected") == 1,
               WAIT, "the plugin to reconnect and synchronize with the restarted containerd")
    print(f"synchronized {(time.monotonic() - ready) * 1000:.0f} ms after the restarted containerd answered CRI")
    settle(agent)
    assert agent.metric("koordlet_nri_reconnects_total", reason="eof") == eofs + 1     # the old runtime went away
    assert len(agent.log_lines(r"nri plugin registered")) == registered + 1             # one new registration
    assert hook_calls(agent, "Synchronize") == syncs + 1
    synced = agent.log_lines(r"nri synchronized ")[-1]
    assert "updates=0" in synced, synced
    assert {rel: (kernel(node, rel), node.cgroups.read("cpuset", rel, "cpuset.cpus")) for rel in dirs} == before
    ours = [e for e in agent.events() if e["createdAt"] >= marker
            and (be.pod.uid in e["file"] or lsr.pod.uid in e["file"])]
    assert ours == []
    assert resources(node, be_cid) == (BE_SHARES, BE_QUOTA, BE_MEMORY)


# ---- 4. the agent killed --------------------------------------------------------------------------------------------

def test_agent_killed_containers_still_created_then_synchronize_repairs_them(node, agent, pods):
    agent.kill()
    try:
        rp = pods.run(be_pod("be-failopen"), seen=False)
        cid = pods.start(rp)                                    # no plugin: created as the kubelet asked
        assert resources(node, cid)[0] == 2
        assert kernel(node, f"{rp.cgroup_dir}/{cid}")[:2] == ("2", "-1")
    finally:
        agent.start()
    agent.wait(lambda: agent.metric("koordlet_nri_connected") == 1 and hook_calls(agent, "Synchronize") >= 1, WAIT,
               "the restarted agent to register and synchronize")
    synced = agent.log_lines(r"nri synchronized ", start=agent.starts)
    assert synced and "updates=0" not in synced[0], synced
    agent.wait(lambda: resources(node, cid) == (BE_SHARES, BE_QUOTA, BE_MEMORY), WAIT,
               f"the container's spec to be repaired (it is {resources(node, cid)})")
    assert kernel(node, f"{rp.cgroup_dir}/{cid}") == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))


# ---- 5. GPU env injection without a GPU -----------------------------------------------------------------------------

def gpu(minor: int, **resources: str) -> dict[str, Any]:
    return {"minor": minor, "resources": {f"koordinator.sh/{k.replace('_', '-')}": v for k, v in resources.items()}}


def test_gpu_pod_gets_nvidia_visible_devices_in_its_environment(node, agent, pods):
    allocated = {"gpu": [gpu(1, gpu_core="100", gpu_memory_ratio="100"),
                         gpu(0, gpu_core="100", gpu_memory_ratio="100")]}
    rp = pods.run(ls_pod("gpu-env", annotations={DEVICE_ALLOCATED: json.dumps(allocated)}))
    cid = pods.start(rp)
    env = environ(pid_of(node, cid))
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "1,0"
    assert "LD_PRELOAD" not in env and "CUDA_DEVICE_MEMORY_LIMIT" not in env      # whole cards: no HAMi-core


@pytest.fixture
def hami_cache():
    """HAMi-core's per-container cache dirs (under /usr/local/vgpu/containers on the host, where the agent makes
    them); what this test made there is removed after it."""
    root = "/usr/local/vgpu"
    existed = {p for p in (root, os.path.join(root, "containers")) if os.path.isdir(p)}
    made: list[str] = []
    yield made
    for key in made:
        shutil.rmtree(os.path.join(root, "containers", key), ignore_errors=True)
    for p in (os.path.join(root, "containers"), root):
        if p not in existed:
            try:
                os.rmdir(p)
            except OSError:
                pass


def test_hami_core_pod_gets_the_mounts_and_the_cuda_limits(node, agent, pods, hami_host: HamiHost, hami_cache):
    allocated = {"gpu": [gpu(0, gpu_core="30", gpu_memory="4Gi", gpu_memory_ratio="25")]}
    rp = pods.run(ls_pod("hami", labels={"koordinator.sh/gpu-isolation-provider": "HAMi-core"},
                         annotations={DEVICE_ALLOCATED: json.dumps(allocated)}))
    hami_cache.append(f"{rp.pod.uid}_app")
    cid = pods.start(rp)
    pid = pid_of(node, cid)
    env = environ(pid)
    assert {k: env.get(k) for k in ("NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
                                    "LD_PRELOAD", "CUDA_DEVICE_MEMORY_SHARED_CACHE")} == {
        "NVIDIA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_MEMORY_LIMIT": str(4 << 30), "CUDA_DEVICE_SM_LIMIT": "30",
        "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/usr/local/vgpu/{rp.pod.uid}_app.cache"}
    mounts = {m["destination"]: m for m in spec_of(node, cid)["mounts"]}
    assert mounts["/usr/local/vgpu/libvgpu.so"]["source"] == hami_host.libvgpu
    assert mounts["/usr/local/vgpu"]["source"] == f"/usr/local/vgpu/containers/{rp.pod.uid}_app"
    assert mounts["/tmp/vgpulock"]["source"] == "/tmp/vgpulock"
    # inside the container (its root, as the kernel shows it): the library in place, the lock dir mounted
    with open(f"/proc/{pid}/root/usr/local/vgpu/libvgpu.so", "rb") as f:
        assert f.read() == hami_host.content
    with open(f"/proc/{pid}/mountinfo") as f:
        points = {line.split()[4] for line in f}
    assert {"/usr/local/vgpu", "/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock"} <= points


# ---- 6. the reconciler agrees with the plugin -----------------------------------------------------------------------

def test_reconciler_writes_nothing_after_the_plugin_set_up_the_pods(node, agent, pods):
    """From the first RunPodSandbox on, the audit trail may hold only the sandbox hook's pod-level writes, each once
    and with its final value; reconcile cycles afterwards write nothing (no container-level file, no pod value
    moved back and forth)."""
    cpu = pinnable_cpu(node)
    marker = time.time()
    lsr = pods.run(lsr_pod("lsr-agree", str(cpu)))
    lsr_cid = pods.start(lsr)
    wait_pinned(node, agent, lsr, cpu)
    be = pods.run(be_pod("be-agree", containers=("app", "side")))
    settle(agent, 2)                  # the kubelet's usual gap (image pull): the reconciler sees the bare sandbox
    be_cids = [pods.start(be, "app"), pods.start(be, "side")]
    ls = pods.run(ls_pod("ls-agree"))
    ls_cid = pods.start(ls)
    settle(agent, 4)

    pool = node_cpus(node) - {cpu}
    expected_pod = {be.cgroup_dir: (str(2 * BE_SHARES), str(2 * BE_QUOTA), str(2 * BE_MEMORY))}
    assert kernel(node, be.cgroup_dir) == expected_pod[be.cgroup_dir]
    assert node.cgroups.read("cpu", lsr.cgroup_dir, "cpu.cfs_quota_us") == "-1"
    for cid in be_cids:
        assert kernel(node, f"{be.cgroup_dir}/{cid}") == (str(BE_SHARES), str(BE_QUOTA), str(BE_MEMORY))
    assert cpus(node.cgroups.read("cpuset", f"{lsr.cgroup_dir}/{lsr_cid}", "cpuset.cpus")) == {cpu}
    assert cpus(node.cgroups.read("cpuset", f"{ls.cgroup_dir}/{ls_cid}", "cpuset.cpus")) == pool

    uids = (lsr.pod.uid, be.pod.uid, ls.pod.uid)
    ours = [e for e in agent.events() if e["createdAt"] >= marker and any(u in e["file"] for u in uids)]
    apps = {lsr_cid, ls_cid, *be_cids}
    sandboxes = {rp.sandbox_id: rp for rp in (lsr, be, ls)}
    level = {e["file"]: os.path.basename(os.path.dirname(e["file"])) for e in ours}
    assert [e for e in ours if level[e["file"]] in apps] == [], "the reconciler rewrote containers the plugin had set"
    # the sandbox containers: only their cpuset (NRI cannot adjust a sandbox; upstream's reconciler sets it)
    assert {os.path.basename(e["file"]) for e in ours if level[e["file"]] in sandboxes} <= {"cpuset.cpus"}, ours
    files = [e["file"] for e in ours]
    trail = "\n".join(f"  {e['file'].removeprefix(node.link_root)} {e['old']} -> {e['new']} ({e['reason']})"
                      for e in ours)
    assert len(files) == len(set(files)), f"a value was written more than once:\n{trail}"
    for e in ours:
        with open(e["file"]) as f:
            assert f.read().strip() == str(e["new"]), f"{e} was changed again since"
    assert cpus(node.cgroups.read("cpuset", f"{ls.cgroup_dir}/{ls.sandbox_id}", "cpuset.cpus")) == pool
