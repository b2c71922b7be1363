"""Stand-ins for what the agent talks to, shared by tests/ and bench/ (neither imports the other).

Fakes of the kernel's interfaces (resctrl, perf_event_open, PCI sysfs, NVML), peers that speak the real wire
protocols (an NRI runtime over ttRPC, the kubelet's PodResources gRPC service), and real cgroup v1 trees under a
unique test root. Not part of the agent (not packaged), and free of pytest: the pytest fixture for a real tree is
in tests/realcgroup.py.
"""
