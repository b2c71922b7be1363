"""Stand-ins for what the agent talks to, shared by tests/ and bench/ (neither imports the other).

Fakes of the kernel's interfaces (resctrl, perf_event_open, core scheduling prctl, PCI sysfs, NVML, host trees),
peers that speak the real wire protocols (an NRI runtime over ttRPC, the kubelet's HTTP and PodResources gRPC
services, an API server with watches and the CRDs' schemas, a Multus-like client), and real cgroup v1 trees under a
unique test root. Not part of the agent (not packaged), and free of pytest: the pytest fixture for a real tree is
in tests/realcgroup.py.
"""
