"""koord-scheduler-extender: the companion scheduler, a kube-scheduler extender that places pods on what the agent
reports (Device, NodeMetric, NodeResourceTopology), as koord-scheduler's DeviceShare, LoadAware and NodeNUMAResource
plugins would. See docs/architecture.md "The companion scheduler"."""
