"""The loop the companion scheduler closes: the agent's own Device report (from the NVML fake's machine profiles)
→ the extender's filter, prioritize and bind → the annotation the Binding carries → the agent's NRI hook, which
gives the container ``NVIDIA_VISIBLE_DEVICES`` of exactly the minors allocated."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from doubles import fakenvml
from doubles import schedcluster as sc
from koordlet.host.nvml import Nvml
from koordlet.host.paths import HostPaths
from koordlet.reporters import device
from koordlet.states.node import NodeInfo
from nri_plugin.hooks import Hooks
from scheduler.cache import ClusterCache
from scheduler.extender import Extender
from tests.hookfeatures import hook_features
from tests.unit.test_nri_hooks import container, sandbox
from tests.unit.test_qos_strategies import fake_host

GPU_ALLOC = "scheduling.koordinator.sh/device-allocated"


def agent_device_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                        profile: Callable[[HostPaths], fakenvml.FakeNvmlLibrary], policy: str = "Prefer") -> dict:
    """The Device CR the agent writes for a machine of this profile."""
    paths = HostPaths.under(str(tmp_path / name))
    monkeypatch.setitem(sys.modules, "pynvml", profile(paths))
    inventory = Nvml.open(paths).inventory()
    return device.desired(NodeInfo(name), inventory, lambda bus: None, [], policy, 0.0)


class Cluster:
    def __init__(self) -> None:
        self.cache = ClusterCache()
        self.bound: dict[str, dict[str, str]] = {}
        self.extender = Extender(self.cache, binder=self._bind)

    def _bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        self.bound[name] = dict(annotations)

    def add_node(self, report: dict) -> None:
        name = report["metadata"]["name"]
        self.cache.on_node("ADDED", sc.node(name))
        self.cache.on_device("ADDED", report)

    def schedule(self, pod: dict) -> str | None:
        """filter → prioritize → highest score → bind, as kube-scheduler drives an extender."""
        self.cache.on_pod("ADDED", pod)
        names = sorted(self.cache.node_names())
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        fits = self.extender.filter(args)["NodeNames"]
        if not fits:
            return None
        scores = {e["Host"]: e["Score"] for e in self.extender.prioritize({**args, "NodeNames": fits})}
        node = max(fits, key=lambda n: (scores[n], -fits.index(n)))
        meta = pod["metadata"]
        error = self.extender.bind({"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                    "PodUID": meta["uid"], "Node": node})["Error"]
        assert error == ""
        return node


def visible_devices(tmp_path: Path, pod_name: str, annotations: dict[str, str]) -> str:
    """What the agent's NRI hook injects into the pod's container at creation."""
    _paths, cg, _ = fake_host(tmp_path / f"node-{pod_name}", files=())
    hooks = Hooks(hook_features("gpu_env"), cg.layout, lambda: None)
    sb = sandbox("11111111-2222-3333-4444-" + f"{abs(hash(pod_name)) % 10**12:012d}", "LS", annotations=annotations)
    adjust = hooks.create_container(sb, container(sb, "app"))
    return {e.key: e.value for e in adjust.env}["NVIDIA_VISIBLE_DEVICES"]


def test_four_gpu_pods_on_the_h100_board_take_one_nvlink_half_each(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    cluster.add_node(agent_device_report(tmp_path, monkeypatch, "h100", fakenvml.h100_sxm8))
    halves = []
    for i in range(2):
        pod = sc.pod(f"train-{i}", {"nvidia.com/gpu": "4"})
        assert cluster.schedule(pod) == "h100"
        halves.append(visible_devices(tmp_path, pod["metadata"]["name"], cluster.bound[f"train-{i}"]))
    assert sorted(halves) == ["0,1,2,3", "4,5,6,7"]
    assert cluster.schedule(sc.pod("one-more", {"nvidia.com/gpu": "1"})) is None


def test_shared_gpu_pods_on_l40s_pack_within_the_cards_and_the_hook_names_the_card(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    cluster.add_node(agent_device_report(tmp_path, monkeypatch, "l40s", fakenvml.l40s_pcie4))
    cards = []
    for i in range(8):       # eight half cards fill the four L40S exactly
        pod = sc.pod(f"infer-{i}", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
        assert cluster.schedule(pod) == "l40s"
        cards.append(visible_devices(tmp_path, pod["metadata"]["name"], cluster.bound[f"infer-{i}"]))
    assert sorted(cards) == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert cluster.schedule(sc.pod("late", {"koordinator.sh/gpu-core": "10",
                                            "koordinator.sh/gpu-memory-ratio": "10"})) is None


def test_a_mig_card_is_not_offered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster()
    cluster.add_node(agent_device_report(tmp_path, monkeypatch, "a100", fakenvml.a100_mig))
    cluster.add_node(agent_device_report(tmp_path, monkeypatch, "l40s", fakenvml.l40s_pcie4))
    assert cluster.schedule(sc.pod("whole", {"nvidia.com/gpu": "1"})) == "l40s"
    args = {"Pod": sc.pod("x", {"nvidia.com/gpu": "1"}), "Nodes": None, "NodeNames": ["a100"]}
    # the node has a GPU, unusable as a whole card: it fails as a node of unhealthy GPUs does upstream
    result = cluster.extender.filter(args)
    assert result["NodeNames"] == [] and list(result["FailedNodes"]) == ["a100"]
