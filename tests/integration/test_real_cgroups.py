"""Collection against the real kernel: real pod/container cgroups, real busy/idle/memory processes."""

import os
import threading
import time

import pytest

from koordlet.collectors.usage import UsageCollection
from koordlet.component import Tick
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.ops.metrics import AgentMetrics
from koordlet.states.informer import PodsInformer
from koordlet.states.pleg import Pleg
from koordlet.states.standalone import StandalonePodSource
from tests.builders import host_paths
from tests.realcgroup import BUSY, IDLE, MEMORY_64M, proc_cpu_seconds, proc_rss_anon
from tests.waits import wait_for

pytestmark = pytest.mark.root

UID_LS = "11111111-2222-3333-4444-555555555555"
UID_BE = "66666666-7777-8888-9999-000000000000"
BUSY_ID, IDLE_ID, MEM_ID = "b" * 64, "d" * 64, "e" * 64


def setup_agent(tree):
    paths = host_paths(tree.link_root)
    cgroups = Cgroups(tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
    metrics = AgentMetrics("test")
    collection = UsageCollection(paths, cgroups, metrics, interval=1.0, outdated=10.0)
    return paths, cgroups, metrics, collection


def values(samples):
    return {(s.name, s.labels): s.value for s in samples}


def test_usage_matches_the_kernel(real_tree):
    _paths, cgroups, _metrics, collection = setup_agent(real_tree)
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
    def busy_ns() -> int:
        with open(real_tree.real("cpuacct", f"{ls_pod}/{BUSY_ID}/cpuacct.usage")) as f:
            return int(f.read())

    # the kernel's account of the busy container, read just before and just after each of the agent's two
    # cycles: the agent's own reads (usage and clock) fall inside those brackets, so its rate lies between the
    # slowest and the fastest rate the brackets allow, however long a loaded host makes each cycle take
    u0b, t0b = busy_ns(), time.monotonic()
    collection.collect(Tick(time.time(), pods))
    u0a, t0a = busy_ns(), time.monotonic()
    cpu0 = proc_cpu_seconds(busy.pid)
    time.sleep(2.0)
    cpu1 = proc_cpu_seconds(busy.pid)
    u1b, t1b = busy_ns(), time.monotonic()
    result = collection.collect(Tick(time.time(), pods))
    u1a, t1a = busy_ns(), time.monotonic()
    v = values(result)

    busy_cores = v[("container_cpu_usage", (("container_id", BUSY_ID),))]
    lowest, highest = (u1b - u0a) / 1e9 / (t1a - t0b), (u1a - u0b) / 1e9 / (t1b - t0a)
    assert lowest * 0.99 <= busy_cores <= highest * 1.01, (lowest, busy_cores, highest)
    # and the per-process account (/proc/<pid>/stat, clock ticks) of the one task in it agrees
    assert busy_cores == pytest.approx((cpu1 - cpu0) / (t1b - t0a), abs=0.1)
    assert busy_cores > 0.5                           # it really spun (the test tree's weight: realcgroup.py)
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
    be = {dict(s.labels)["be_allocation"]: s.value for s in result if s.name == "node_be"}
    assert be["usage"] < 100                          # the BE tier only holds a sleeping process (milli-cores)
    assert be["real-limit"] >= 1000                   # unconstrained: at least one CPU
    assert v[("sys_cpu_usage", ())] >= 0
    idle.kill()


def test_vanishing_container_mid_cycle(real_tree):
    _paths, cgroups, metrics, collection = setup_agent(real_tree)
    pod = cgroups.layout.pod_dir(KubeQOS.BURSTABLE, UID_LS)
    real_tree.mkdir(f"{pod}/{IDLE_ID}")
    pods = StandalonePodSource(cgroups)()
    collection.collect(Tick(time.time(), pods))
    for s in ("cpu", "cpuacct", "cpuset", "memory"):
        os.rmdir(real_tree.real(s, f"{pod}/{IDLE_ID}"))
    real_tree.dirs.remove(f"{pod}/{IDLE_ID}")
    v = values(collection.collect(Tick(time.time(), pods)))
    assert ("pod_memory_usage", (("pod_uid", UID_LS),)) in v
    assert metrics.registry.get_sample_value("koordlet_collect_skipped_total",
                                             {"node": "test", "collector": "pod", "reason": "vanished"}) == 1


def test_pleg_sees_new_pod_and_container_within_a_second(real_tree):
    _paths, cgroups, _metrics, _collection = setup_agent(real_tree)
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
