"""NRI plugin for containerd / CRI-O: our own ttRPC-over-multiplexer transport (``transport``), the plugin
service and its connection lifecycle (``plugin``), and the hooks that turn NRI requests into container
adjustments through :mod:`koordlet.rules` (``hooks``). The wire is containerd/nri's (``pkg/api/api.proto``,
``pkg/net/multiplex/mux.go``, ``pkg/adaptation/plugin.go``) over containerd/ttrpc (``PROTOCOL.md``); what the agent
does with it follows koordinator ``pkg/koordlet/runtimehooks/nri/handlers.go`` and ``server.go: NriServer``.

The agent runs it as a service (``PLUGIN``, listed in koordlet/services.py); the transport is imported only when it
is enabled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from koordlet.component import Context, Plugin, StartupError, running_as_root
from koordlet.host.cgroup import Cgroups
from koordlet.host.paths import HostPaths
from koordlet.ops.config import Config

if TYPE_CHECKING:
    from nri_plugin.plugin import NRIPlugin


def _build(ctx: Context) -> NRIPlugin:
    """The plugin with hooks owning what the feature gates give the agent (the reconciler's rules)."""
    from hami_bridge.inject import HostLayout
    from koordlet.host.cgroup import KubeQOS
    from nri_plugin.features import enabled
    from nri_plugin.hooks import Hooks
    from nri_plugin.plugin import NRIPlugin, PluginSettings, resolve_socket
    config = ctx.config
    try:
        settings = PluginSettings(
            socket_path=resolve_socket(config.runtime_hooks_nri_socket_path, ctx.paths.var_run_root),
            name=config.runtime_hooks_nri_plugin_name, index=config.runtime_hooks_nri_plugin_index,
            hook_budget=config.runtime_hooks_nri_hook_budget, backoff_max=config.runtime_hooks_nri_backoff_cap)
    except ValueError as e:
        raise StartupError(str(e)) from None
    layout = ctx.cgroups.layout
    hooks = Hooks(enabled(config.gate), layout, ctx.view, executor=ctx.executor,
                  bvt=ctx.cgroups.has_file("cpu", layout.qos_dir(KubeQOS.GUARANTEED), "cpu.bvt_warp_ns"),
                  resctrl_root=ctx.paths.sys_fs("resctrl"), nudge=ctx.nudge,
                  hami=HostLayout(libvgpu=config.hami_core_library_directory_path), host=ctx.paths,
                  runtime=ctx.node.runtime_pods, on_runtime_news=ctx.node.informer.poke, metrics=ctx.metrics)
    return NRIPlugin(settings, hooks, ctx.metrics)


def _probe(config: Config, paths: HostPaths, cgroups: Cgroups) -> tuple[bool, str]:
    from nri_plugin.plugin import probe_socket, resolve_socket
    return probe_socket(resolve_socket(config.runtime_hooks_nri_socket_path, paths.var_run_root))


# enable-nri-runtime-hook, and root only: the hooks change containers the reconciler would otherwise fix later
PLUGIN = Plugin("nri", _build, when=lambda c: c.enable_nri_runtime_hook and running_as_root(), probe=_probe)
