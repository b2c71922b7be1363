"""HAMi-core GPU sharing: what a container of a pod with a ``device-allocated`` annotation gets injected (env,
mounts) so that ``libvgpu.so`` enforces its GPU memory and SM share. Facts: reference/nri-hami-podresources.md §3."""
