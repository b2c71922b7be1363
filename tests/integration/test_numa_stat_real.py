"""A pod's memory per NUMA node from the real kernel's v1 ``memory.numa_stat`` (the per-NUMA system usage
subtracts it): its processes live in a container cgroup, so only the hierarchical lines of the pod dir count them;
the plain ``total=`` line upstream reads shows the pod dir's own pages."""

import os
import time

import pytest

from koordlet.host.cgroup import Cgroups, CgroupVersion, Driver, KubeQOS, parse_numa_stat
from koordlet.host.fs import read_bytes
from tests.realcgroup import MEMORY_64M, proc_rss_anon

pytestmark = pytest.mark.root

UID = "11111111-2222-3333-4444-0000000000b7"
CID = "f" * 64


def test_pod_numa_memory_counts_its_containers_pages(real_tree):
    cgroups = Cgroups(real_tree.link_root, CgroupVersion.V1, Driver.CGROUPFS)
    pod = cgroups.layout.pod_dir(KubeQOS.BURSTABLE, UID)
    real_tree.mkdir(f"{pod}/{CID}")
    proc = real_tree.spawn(f"{pod}/{CID}", MEMORY_64M)
    deadline = time.monotonic() + 30
    while proc_rss_anon(proc.pid) < 60 * 2**20 and time.monotonic() < deadline:     # until its pages are touched
        time.sleep(0.05)
    rss = proc_rss_anon(proc.pid)
    assert rss >= 60 * 2**20
    per_node = cgroups.read_numa_memory(pod)
    assert sum(per_node.values()) >= rss * 0.9                   # the container's anon pages, on some node
    plain = parse_numa_stat(read_bytes(cgroups.path("memory", pod, "memory.numa_stat")), (b"total",),
                            os.sysconf("SC_PAGE_SIZE"))
    assert sum(plain.values()) < rss * 0.1                       # what upstream subtracts: the dir's own pages
