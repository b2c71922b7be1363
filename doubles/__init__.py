"""Stand-ins for what the agent talks to, shared by tests/ and bench/ (neither imports the other).

Fakes of the kernel's interfaces (resctrl, perf_event_open, core scheduling prctl, PCI sysfs, NVML, host trees),
peers that speak the real wire protocols (an NRI runtime over ttRPC, the kubelet's HTTP and PodResources gRPC
services, an API server with watches and the CRDs' schemas, a Multus-like client), real cgroup v1 trees under a
unique test root, and the real container runtime driven as the kubelet drives it (containerd.py: a containerd with
NRI in a test root of every cgroup hierarchy; cri.py: the kubelet's CRI calls; ociimage.py: images without a
registry; agentproc.py: the agent as its own daemon). Not part of the agent (not packaged), and free of pytest:
the pytest fixtures for a real tree and a real runtime are in tests/realcgroup.py and tests/realruntime/conftest.py.
"""
