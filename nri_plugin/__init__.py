"""NRI plugin for containerd / CRI-O: our own ttRPC-over-multiplexer transport (``transport``), the plugin
service and its connection lifecycle (``plugin``), and the hooks that turn NRI requests into container
adjustments through :mod:`koordlet.rules` (``hooks``). Facts: reference/nri-hami-podresources.md §1–2, §6."""
