"""YARN co-location against the real kernel: the whole agent (standalone, a pods file naming the pods) beside the
copilot double (doubles/copilot.py) on a real unix socket, whose YARN containers are real processes in real cgroup
v1 dirs below a BestEffort NodeManager pod.

- the YARN containers are discovered, get their batch settings (capped by the NodeManager pod's) in their own
  cgroup files, and their usage is in the metric cache, on /metrics (namespace "yarn") and, once, in the
  NodeManager pod's NodeMetric usage;
- a memory eviction that picks the NodeManager pod kills the newest YARN container that is not the
  ApplicationMaster, through the copilot, and not the pod;
- a dead copilot costs one log line and changes nothing else; a copilot that comes and goes is followed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import pytest

from doubles.copilot import CopilotDouble, container_id
from koordlet.agent import Agent
from koordlet.base.logutil import LogOnce
from koordlet.base.quantity import parse_quantity
from koordlet.host.cgroup import Driver, KubeQOS, Layout
from koordlet.ops import config as configmod
from koordlet.reporters.nodemetric import node_metric
from tests.builders import pod_object
from tests.realcgroup import IDLE, MEMORY_64M, proc_rss_anon
from tests.waits import wait_for

pytestmark = pytest.mark.root

NM_UID, SPARK_UID = "44444444-0000-0000-0000-000000000001", "44444444-0000-0000-0000-000000000002"
NM_CID, SPARK_CID = "1" * 64, "2" * 64
LAYOUT = Layout(Driver.CGROUPFS)
NM_DIR, SPARK_DIR = (LAYOUT.pod_dir(KubeQOS.BESTEFFORT, uid) for uid in (NM_UID, SPARK_UID))
TS = 1700000000000
AM, TASK, NEWEST = (container_id(TS, 1, 1, n) for n in (1, 2, 3))
MiB = 2**20
BATCH = {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "2Gi"}


def kernel(tree, sub: str, rel: str, file: str) -> str:
    with open(tree.real(sub, os.path.join(rel, file))) as f:
        return f.read().strip()


def host_memory_percent() -> int:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":")
            fields[name] = int(value.split()[0])
    return (fields["MemTotal"] - fields["MemAvailable"]) * 100 // fields["MemTotal"]


class Node:
    """The real tree with a NodeManager pod (its daemon and three YARN containers below its dir) and another BE
    pod, the pods file naming them, a NodeSLO file, and the agent's configuration."""

    def __init__(self, tree, tmp_path, copilot_socket: str) -> None:
        self.tree, self.tmp = tree, tmp_path
        nm_container = f"{NM_DIR}/{NM_CID}"
        spark_container = f"{SPARK_DIR}/{SPARK_CID}"
        self.yarn_dirs = {cid: f"{NM_DIR}/{cid}" for cid in (AM, TASK, NEWEST)}
        for rel in (nm_container, spark_container, *self.yarn_dirs.values()):
            tree.mkdir(rel)
        self.nm = tree.spawn(nm_container, IDLE)
        self.spark = tree.spawn(spark_container, IDLE)
        self.yarn = {cid: tree.spawn(rel, MEMORY_64M) for cid, rel in self.yarn_dirs.items()}
        assert wait_for(lambda: all(proc_rss_anon(p.pid) > 60 * MiB for p in self.yarn.values()), timeout=20)
        pods = [pod_object(NM_UID, "nodemanager", namespace="hadoop-yarn", qos="BestEffort", qos_class="BE",
                           labels={"app.kubernetes.io/component": "node-manager"}, containers={"nm": NM_CID},
                           resources={"nm": {"requests": BATCH, "limits": BATCH}}),
                pod_object(SPARK_UID, "spark", qos="BestEffort", qos_class="BE", containers={"c": SPARK_CID})]
        (tmp_path / "pods.json").write_text(json.dumps(pods))
        self.slo({})
        self.flags = {"standalone": True, "node-name": "n", "cgroup-root-dir": tree.link_root,
                      "cgroup-driver": "cgroupfs", "pods-file": str(tmp_path / "pods.json"),
                      "nodeslo-file": str(tmp_path / "nodeslo.json"), "tsdb-path": str(tmp_path / "tsdb"),
                      "report-dir": "", "addr": ("127.0.0.1", 0), "enable-nri-runtime-hook": False,
                      "prediction-checkpoint-filepath": str(tmp_path / "ckpt"),
                      "feature-gates": {"BEMemoryEvict": True},
                      "evict-by-copilot-agent": True, "evict-by-copilot-endpoint": copilot_socket}

    def slo(self, threshold: dict) -> None:
        spec = {"resourceUsedThresholdWithBE": {"enable": True, **threshold},
                "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}
        path = self.tmp / "nodeslo.json"
        path.write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                    "metadata": {"name": "n"}, "spec": spec}))
        os.utime(path, (time.time() + 1, time.time() + 1))      # a new mtime even within the same second

    def serve(self, double: CopilotDouble) -> None:
        """The NodeManager's containers as the copilot lists them: the AM first, the newest last; the newest asks
        for more memory than the NodeManager pod's limit (its cgroup gets the pod's)."""
        double.add(AM, 1, 512, self.yarn_dirs[AM], created=time.time() - 30)
        double.add(TASK, 1, 512, self.yarn_dirs[TASK], created=time.time() - 20)
        double.add(NEWEST, 1, 64 * 1024, self.yarn_dirs[NEWEST], created=time.time() - 10)


class Running:
    def __init__(self, agent: Agent) -> None:
        self.agent, self.stop = agent, threading.Event()
        self.thread = threading.Thread(target=agent.run, args=(self.stop,))

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def yarn_settings(tree, rel: str) -> tuple[str, str, str]:
    return (kernel(tree, "cpu", rel, "cpu.shares"), kernel(tree, "cpu", rel, "cpu.cfs_quota_us"),
            kernel(tree, "memory", rel, "memory.limit_in_bytes"))


@pytest.mark.skipif(not os.path.exists("/sys/fs/cgroup/cpu/cpu.idle"), reason="kernel without cpu.idle")
def test_yarn_containers_are_managed_counted_once_and_evicted_one_by_one(real_tree, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    socket_path = str(tmp_path / "run" / "yarn-copilot.sock")
    node = Node(real_tree, tmp_path, socket_path)
    with CopilotDouble(socket_path, cgroup_root=real_tree.link_root) as copilot:
        node.serve(copilot)
        agent = Agent.build(configmod.build(flags=node.flags, environ={}))
        with Running(agent):
            # discovered, and the BE tier's settings on their own cgroups (their own, or the pod's when looser)
            wanted = {AM: ("1024", "100000", str(512 * MiB)), TASK: ("1024", "100000", str(512 * MiB)),
                      NEWEST: ("1024", "100000", str(2 << 30))}
            assert wait_for(lambda: {c: yarn_settings(real_tree, rel) for c, rel in node.yarn_dirs.items()} == wanted,
                            15), {c: yarn_settings(real_tree, rel) for c, rel in node.yarn_dirs.items()}
            assert (kernel(real_tree, "cpu", NM_DIR, "cpu.cfs_quota_us"),
                    kernel(real_tree, "memory", NM_DIR, "memory.limit_in_bytes")) == ("200000", str(2 << 30))
            assert kernel(real_tree, "cpu", "kubepods/besteffort", "cpu.idle") == "1"
            # usage: each YARN container in the cache and on /metrics, the NodeManager pod counting them once
            cache = agent.cache

            def last(kind: str, labels: dict) -> float | None:
                result = cache.query(kind, labels, time.time() - 5, time.time() + 1)
                return result.value("last") if result.count() else None

            assert wait_for(lambda: all(last("container_memory_usage", {"container_id": c}) for c in node.yarn), 10)
            for cid, proc in node.yarn.items():
                assert last("container_memory_usage", {"container_id": cid}) == \
                    pytest.approx(proc_rss_anon(proc.pid), rel=0.15)
            gauge = agent.metrics.yarn_container_resource_usage
            assert wait_for(lambda: gauge._values, 5)
            assert {(labels[1], labels[2]) for labels in gauge._values} >= {("yarn", c) for c in node.yarn}

            def pods_metric() -> dict:
                status = node_metric(agent.ctx, LogOnce(logging.getLogger("test")))["status"]
                return {p["name"]: p for p in status["podsMetric"]}

            assert wait_for(lambda: len(pods_metric()) == 2, 10)          # a CPU rate needs two readings
            pods = pods_metric()
            assert set(pods) == {"nodemanager", "spark"}                  # the YARN containers are not pods
            reported = parse_quantity(pods["nodemanager"]["podUsage"]["resources"]["memory"])
            processes = sum(proc_rss_anon(p.pid) for p in (node.nm, *node.yarn.values()))
            assert processes * 0.8 < reported < processes * 1.2, (reported, processes)   # once, not twice
            assert pods["nodemanager"]["priority"] == "koord-batch"
            # memory pressure: the NodeManager pod is the BE pod using the most, the copilot frees the newest task
            percent = host_memory_percent()
            threshold = max(percent - 3, 2)
            node.slo({"memoryEvictThresholdPercent": threshold, "memoryEvictLowerPercent": threshold - 1})
            assert wait_for(lambda: copilot.killed, 15), "no eviction through the copilot"
            assert copilot.killed[0] == NEWEST
        assert wait_for(lambda: node.yarn[NEWEST].poll() is not None, 5)
        assert node.yarn[AM].poll() is None and node.nm.poll() is None and node.spark.poll() is None
        evicted = [r.message for r in caplog.records if r.name == "koordlet.qos.evict"]
        assert any("evict yarn containers pod=hadoop-yarn/nodemanager" in m and "result=released" in m
                   for m in evicted)
        assert not any("would evict" in m for m in evicted), evicted        # the pod itself was not evicted
        assert agent.metrics.pod_eviction.labels("n", "evictedYarnContainers")._value.get() >= 1


def test_a_dead_copilot_changes_nothing_else(real_tree, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    socket_path = str(tmp_path / "run" / "yarn-copilot.sock")
    node = Node(real_tree, tmp_path, socket_path)
    untouched = {cid: yarn_settings(real_tree, rel) for cid, rel in node.yarn_dirs.items()}
    agent = Agent.build(configmod.build(flags=node.flags, environ={}))
    with Running(agent):
        # nobody serves the socket: the pods get their settings as ever, the YARN dirs are left as they are
        assert wait_for(lambda: kernel(real_tree, "memory", NM_DIR, "memory.limit_in_bytes") == str(2 << 30), 15)
        assert wait_for(lambda: kernel(real_tree, "cpu", f"{NM_DIR}/{NM_CID}", "cpu.shares") == "2048", 5)
        time.sleep(2.5)                                               # a few more listings
        assert {cid: yarn_settings(real_tree, rel) for cid, rel in node.yarn_dirs.items()} == untouched
        down = [r for r in caplog.records if "yarn copilot unavailable" in r.message]
        assert len(down) == 1 and socket_path in down[0].message
        assert agent.verdict().healthy and agent.ready()[0]
        # the copilot comes: its containers are managed; it dies again: they stay managed, one more line
        with CopilotDouble(socket_path, cgroup_root=real_tree.link_root) as copilot:
            node.serve(copilot)
            assert wait_for(lambda: yarn_settings(real_tree, node.yarn_dirs[TASK]) == ("1024", "100000",
                                                                                       str(512 * MiB)), 10)
        kernel_before = {cid: yarn_settings(real_tree, rel) for cid, rel in node.yarn_dirs.items()}
        assert wait_for(lambda: len([r for r in caplog.records if "yarn copilot unavailable" in r.message]) == 2, 5)
        time.sleep(2.0)
        assert {cid: yarn_settings(real_tree, rel) for cid, rel in node.yarn_dirs.items()} == kernel_before
        assert len([r for r in caplog.records if "yarn copilot unavailable" in r.message]) == 2
        assert agent.verdict().healthy
    assert all(p.poll() is None for p in (node.nm, node.spark, *node.yarn.values()))
