"""The executor's write cache stays bounded by the live pods : pods churned through real reconcile cycles on a fake
cgroup tree, with no NRI RemovePodSandbox to tell the executor they went."""

from __future__ import annotations

import os

import pytest

from doubles.churn import Clock, add_be_pod, remove_pod, view
from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS
from koordlet.qos.pod_resources import PodResources
from koordlet.qos.reconciler import Reconciler
from koordlet.states.informer import PodMeta
from koordlet.writer.executor import Executor
from tests.fakehost import FakeHost


@pytest.fixture(params=[(CgroupVersion.V1, Driver.CGROUPFS), (CgroupVersion.V2, Driver.SYSTEMD)],
                ids=["v1-cgroupfs", "v2-systemd"])
def host(request, tmp_path) -> FakeHost:
    version, driver = request.param
    return FakeHost(str(tmp_path), version, driver)


# pods churned: the full 2,000 of the report on v2 (one hierarchy); v1 makes 2.5x the dirs, so fewer there
CHURN = {CgroupVersion.V1: 600, CgroupVersion.V2: 2000}


@pytest.mark.slow
def test_cache_stays_bounded_by_live_pods_through_2000_pods_of_churn(host):
    cg = Cgroups.detect(host.paths)
    clock = Clock()                  # frozen: the expiry sweep never runs, so the live-set prune does all the work
    ex = Executor(cg, clock=clock)
    rec = Reconciler(ex, [PodResources()])
    live: list[PodMeta] = [add_be_pod(host, cg, n) for n in range(20)]
    rec.run_once(view(live))
    steady = ex.cache_size()
    assert steady >= 20 * 6          # pod + container: shares, quota, memory limit each
    sizes = []
    for n in range(20, CHURN[host.version], 20):   # each cycle 20 pods leave (cgroups removed) and 20 arrive
        for meta in live[:20]:
            remove_pod(cg, meta)
        live = live[20:] + [add_be_pod(host, cg, m) for m in range(n, n + 20)]
        rec.run_once(view(live))
        sizes.append(ex.cache_size())
    assert max(sizes) == steady      # before: +120 entries a cycle (12,000 after 2,000 pods), none alive
    # one (relative, absolute) pod dir pair per pod and hierarchy, shared by its entries, gone with them
    pairs = [c.pod for c in ex._cache.values() if c.pod is not None]
    assert set(ex._pods) == {p[1] for p in pairs} and all(ex._pods[p[1]] is p for p in pairs)
    # a steady cycle over the live pods still costs no write and no cache miss
    written = ex.total.written
    r = PodResources()
    before = ex.total.unchanged
    r.reconcile(view(live), ex)
    assert ex.total.written == written and ex.total.unchanged - before == steady


def test_a_pod_gone_from_the_view_keeps_its_entries_while_its_cgroup_exists(host):
    """The kubelet removes a pod's cgroups after the pod leaves the list (and NRI may show a pod before the view
    does): the entries go only once the directory is gone."""
    cg = Cgroups.detect(host.paths)
    clock = Clock()
    ex = Executor(cg, clock=clock)
    rec = Reconciler(ex, [PodResources()])
    a, b, c = (add_be_pod(host, cg, n) for n in range(3))
    rec.run_once(view([a, b, c]))
    full = ex.cache_size()
    rec.run_once(view([a, b]))            # c left the view, its dirs are still there
    assert ex.cache_size() == full
    remove_pod(cg, c)
    rec.run_once(view([a]))               # b leaves too: this prune sees c's dirs gone
    assert ex.cache_size() == full // 3 * 2
    remove_pod(cg, b)
    rec.run_once(view([a]))               # no change in the live set: nothing scanned
    assert ex.cache_size() == full // 3 * 2
    clock.t += ex.force_refresh           # ... the expiry sweep catches b's entries
    rec.run_once(view([a]))
    assert ex.cache_size() == full // 3


def test_expiry_sweep_drops_only_entries_that_would_be_reread_anyway(tmp_path):
    host = FakeHost(str(tmp_path))
    cg = Cgroups.detect(host.paths)
    clock = Clock()
    ex = Executor(cg, clock=clock)
    a = add_be_pod(host, cg, 1)
    rec = Reconciler(ex, [PodResources()])
    rec.run_once(view([a]))
    n = ex.cache_size()
    # a QoS-dir or host-app entry that nobody asks for again (not under a pod dir)
    qos_file = cg.path("cpu", cg.layout.qos_dir(KubeQOS.BESTEFFORT), "cpu.cfs_quota_us")
    ex.update([ex.cgroup(cg.layout.qos_dir(KubeQOS.BESTEFFORT), "cpu.cfs_quota_us", -1, "qos", "t")])
    assert ex.cache_size() == n + 1 and os.path.exists(qos_file)
    clock.t += ex.force_refresh - 1
    rec.run_once(view([a]))               # not yet due: first sweep is force_refresh after the first prune
    assert ex.cache_size() == n + 1
    clock.t += 1
    rec.run_once(view([a]))               # the pod's entries were re-verified this cycle, the QoS entry was not
    assert ex.cache_size() == n
