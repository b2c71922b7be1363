"""HAMi-core GPU sharing: what a container of a pod with a ``device-allocated`` annotation gets injected (env,
mounts) so that ``libvgpu.so`` enforces its GPU memory and SM share, as koordinator
``pkg/koordlet/runtimehooks/hooks/gpu/gpu.go: gpuPlugin.InjectContainerGPUEnv`` does, and as HAMi-core
(``src/multiprocess/multiprocess_memory_limit.c``) reads it."""
