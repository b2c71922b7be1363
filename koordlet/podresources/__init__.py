"""The kubelet PodResources v1 API on our own socket, with koordinator's device allocations merged in, for
Multus-CNI (gate PodResourcesProxy). A service of the agent (``PLUGIN``, listed in koordlet/services.py); grpc is
imported only when it is enabled."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from koordlet.component import Context, Plugin
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.ops.config import Config

if TYPE_CHECKING:
    from koordlet.podresources.proxy import ProxyServer


def kubelet_socket(config: Config) -> str:
    return os.path.join(config.var_lib_kubelet_dir, "pod-resources", "kubelet.sock")


def _build(ctx: Context) -> ProxyServer:
    from koordlet.podresources.proxy import PodResourcesProxy, ProxyServer
    from koordlet.podresources.upstream import KubeletPodResources
    informer = ctx.node.informer
    proxy = PodResourcesProxy(KubeletPodResources(kubelet_socket(ctx.config)), lambda: informer.pods, ctx.metrics,
                              sync_pods=informer.sync_now, timeout=ctx.config.kubelet_sync_timeout)
    return ProxyServer(proxy, ctx.config.pod_resources_proxy_path, ctx.metrics)


def _probe(config: Config, paths: HostPaths, cgroups: Cgroups) -> tuple[bool, str]:
    from koordlet.podresources.upstream import probe
    return probe(kubelet_socket(config))


PLUGIN = Plugin("podresources-proxy", _build, gates=("PodResourcesProxy",), probe=_probe)
