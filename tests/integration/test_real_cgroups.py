"""Collection against the real kernel: real pod/container cgroups, real busy/idle/memory processes."""

import os
import threading
import time

import pytest

from koordlet.collectors.usage import UsageCollection
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.host.paths import HostPaths
from koordlet.metrics import AgentMetrics
from koordlet.states.informer import PodsInformer
from koordlet.states.pleg import Pleg
from koordlet.states.standalone import StandalonePodSource
from tests.waits import wait_for
from tests.realcgroup import BUSY, IDLE, MEMORY_64M, proc_cpu_seconds, proc_rss_anon

pytestmark = pytest.mark.root

UID_LS = "11111111-2222-3333-4444-555555555555"
UID_BE = "66666666-7777-8888-9999-000000000000"
BUSY_ID, IDLE_ID, MEM_ID = "b" * 64, "d" * 64, "e" * 64


def setup_agent(tree):
    paths = HostPaths(tree.link_root, "/sys", "/sys/fs", "/proc", "/var/run", "/run", "/var/lib/kubelet")
    cgroups = Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
    metrics = AgentMetrics("test")
    collection = UsageCollection(paths, cgroups, metrics, interval=1.0, outdated=10.0)
    return paths, cgroups, metrics, collection


def values(samples):
    return {(s.name, s.labels): s.value for s in samples}


def test_usage_matches_the_kernel(real_tree):
    paths, cgroups, metrics, collection = setup_agent(real_tree)
    layout = cgroups.layout
    ls_pod = layout.pod_dir(KubeQOS.BURSTABLE, UID_LS)
    be_pod = layout.pod_dir(KubeQOS.BESTEFFORT, UID_BE)
    for rel in (f"{ls_pod}/{BUSY_ID}", f"{ls_pod}/{IDLE_ID}", f"{be_pod}/{MEM_ID}"):
        real_tree.mkdir(rel)
    busy = real_tree.spawn(f"{ls_pod}/{BUSY_ID}", BUSY)
    idle = real_tree.spawn(f"{ls_pod}/{IDLE_ID}", IDLE)
    mem = real_tree.spawn(f"{be_pod}/{MEM_ID}", MEMORY_64M)
    time.sleep(0.5)                                   # let the memory process touch its pages

    pods = StandalonePodSource(cgroups)()
    assert sorted(m.pod.uid for m in pods) == sorted([UID_LS, UID_BE])
    collection.run(pods)
    cpu0 = proc_cpu_seconds(busy.pid)
    t0 = time.monotonic()
    time.sleep(2.0)
    result = collection.run(pods)
    cpu1, t1 = proc_cpu_seconds(busy.pid), time.monotonic()
    v = values(result.samples)

    # busy container vs. the kernel's per-process account over (almost) the same window:
    # tolerance 0.1 core covers the tick granularity of /proc/<pid>/stat and the few ms between reads
    kernel_busy = (cpu1 - cpu0) / (t1 - t0)
    busy_cores = v[("container_cpu_usage", (("container_id", BUSY_ID),))]
    assert busy_cores == pytest.approx(kernel_busy, abs=0.1)
    assert busy_cores > 0.5                           # it really spun (2-core machine, one spinner)
    assert v[("container_cpu_usage", (("container_id", IDLE_ID),))] < 0.02
    ls_cores = v[("pod_cpu_usage", (("pod_uid", UID_LS),))]
    assert ls_cores == pytest.approx(busy_cores, abs=0.05)   # v1 cpuacct is hierarchical: pod ⊇ containers
    assert v[("node_cpu_usage", ())] >= ls_cores - 0.1       # the node saw at least the spinner

    # memory: the container holding 64 MiB of written anonymous pages vs. the process's own RssAnon
    rss = proc_rss_anon(mem.pid)
    anon = v[("container_memory_usage", (("container_id", MEM_ID),))]
    assert rss > 60 * 2**20
    assert anon == pytest.approx(rss, rel=0.1)
    assert v[("container_memory_working_set", (("container_id", MEM_ID),))] >= anon * 0.95
    assert v[("pod_memory_usage", (("pod_uid", UID_BE),))] >= anon
    be = {dict(s.labels)["be_allocation"]: s.value for s in result.samples if s.name == "node_be"}
    assert be["usage"] < 100                          # the BE tier only holds a sleeping process (milli-cores)
    assert be["real-limit"] >= 1000                   # unconstrained: at least one CPU
    assert v[("sys_cpu_usage", ())] >= 0
    idle.kill()


def test_vanishing_container_mid_cycle(real_tree):
    paths, cgroups, metrics, collection = setup_agent(real_tree)
    pod = cgroups.layout.pod_dir(KubeQOS.BURSTABLE, UID_LS)
    real_tree.mkdir(f"{pod}/{IDLE_ID}")
    pods = StandalonePodSource(cgroups)()
    collection.run(pods)
    for s in ("cpu", "cpuacct", "cpuset", "memory"):
        os.rmdir(real_tree.real(s, f"{pod}/{IDLE_ID}"))
    real_tree.dirs.remove(f"{pod}/{IDLE_ID}")
    v = values(collection.run(pods).samples)
    assert ("pod_memory_usage", (("pod_uid", UID_LS),)) in v
    assert metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "test", "collector": "pod", "reason": "vanished"}) == 1


def test_pleg_sees_new_pod_and_container_within_a_second(real_tree):
    paths, cgroups, metrics, collection = setup_agent(real_tree)
    for qos in KubeQOS:
        real_tree.mkdir(cgroups.layout.qos_dir(qos))
    # periodic sync every 60 s: only PLEG can make the pod appear within the deadline
    informer = PodsInformer(StandalonePodSource(cgroups), sync_interval=60.0, source_name="standalone")
    pleg = Pleg(cgroups, informer.on_pleg)
    informer.on_sync.append(pleg.rearm)
    stop = threading.Event()
    pleg.start()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert informer.synced.wait(2)
        assert informer.pods == ()
        pod = cgroups.layout.pod_dir(KubeQOS.BESTEFFORT, UID_BE)

        def seen(predicate):
            return wait_for(predicate, 1.0)        # the PLEG deadline

        real_tree.mkdir(pod)
        assert seen(lambda: [m.pod.uid for m in informer.pods] == [UID_BE])
        real_tree.mkdir(f"{pod}/{MEM_ID}")
        assert seen(lambda: informer.pods and [c.id for c, _ in informer.pods[0].containers] == [MEM_ID])
        assert pleg.watch_count == 4                # three QoS parents + the pod dir
    finally:
        stop.set()
        thread.join(2)
        pleg.stop()
