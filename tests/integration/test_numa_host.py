"""Per-NUMA usage on this machine's real /proc and /sys (no root needed: only reads)."""

import time

import pytest

from koordlet.collectors.usage import NUMACollector
from koordlet.host.procfs import CLK_TCK, read_cpu_stat
from koordlet.host.topology import read_node_meminfo, read_topology
from koordlet.ops.metrics import AgentMetrics
from tests.builders import host_paths

REAL = host_paths()


def test_numa_usage_of_this_machine_is_sane_and_adds_up_to_the_node():
    topo = read_topology(REAL)
    if not topo.numa_from_sysfs:
        pytest.skip("this kernel has no NUMA nodes in sysfs (built without CONFIG_NUMA)")
    numa = NUMACollector(REAL, topo, AgentMetrics("t"))
    first, t0 = read_cpu_stat(REAL), time.monotonic()
    numa.collect(time.time(), t0, first.per_cpu)
    deadline = t0 + 1.0
    while time.monotonic() < deadline:            # keep one CPU busy so the window has real usage in it
        pass
    second, t1 = read_cpu_stat(REAL), time.monotonic()
    samples = numa.collect(time.time(), t1, second.per_cpu)
    cpu = {int(dict(s.labels)["numa_node_id"]): s.value for s in samples if s.name == "node_numa_cpu_usage"}
    memory = {int(dict(s.labels)["numa_node_id"]): s.value for s in samples if s.name == "node_numa_memory_usage"}

    online = set(topo.online)
    with_cpus = {n.id: [c for c in n.cpus if c in online] for n in topo.nodes if set(n.cpus) & online}
    assert set(cpu) == set(with_cpus)
    # a tick is counted whole: allow one tick per CPU of slack over the window
    slack = 1 / ((t1 - t0) * CLK_TCK)
    for node, value in cpu.items():
        assert 0.0 <= value <= len(with_cpus[node]) * (1 + slack), (node, value)
    # the aggregate cpu line is the kernel's sum over CPUs, so the nodes add up to node_cpu_usage; the kernel
    # reads each CPU's counters twice for one /proc/stat (aggregate loop, then per-CPU loop), so a CPU can tick
    # in between: one tick per CPU per reading of slack
    node_cores = (second.busy - first.busy) / ((t1 - t0) * CLK_TCK)
    assert sum(cpu.values()) == pytest.approx(node_cores, abs=2 * len(online) * slack)
    assert sum(cpu.values()) >= 0.3                # this test's own busy loop

    assert set(memory) >= set(with_cpus)
    for node, used in memory.items():
        total = read_node_meminfo(REAL, node)["MemTotal"] * 1024
        assert 0 <= used <= total, (node, used, total)
    assert sum(memory.values()) > 0
