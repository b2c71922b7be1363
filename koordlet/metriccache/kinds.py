"""The metric kinds the cache holds and the label keys ("properties") each one has.

Upstream declares every kind with a fixed property schema (pkg/koordlet/metriccache/metric_types.go and
metric_resources.go): a sample must carry exactly those properties, a query may name a subset. Our cache does not
check samples on the append path (it runs ~600 times a second); this table is the one place that says which kinds
exist and with which labels, so that a collector writes, and a reporter or predictor queries, what upstream's would,
and a test (tests/unit/test_collector_kinds.py) holds every registered collector to it.

``resctrl_resource_llc`` and ``resctrl_resource_mb`` are written with upstream's schemas by the resctrl
monitoring collector (``collectors/resctrl.py``, gate ``ResctrlCollector``). Upstream's own MB sample adds a
``resctrl_type`` property that its schema lacks, so its MB samples are never stored; the schema here is the
declared one.
"""

from __future__ import annotations

from collections.abc import Mapping

from koordlet.metriccache.sample import Sample

__all__ = ["EXTRA_KINDS", "KINDS", "UPSTREAM_KINDS", "schema_problem"]

_GPU = ("gpu_minor", "gpu_device_uuid")
_PSI = ("psi_resource", "psi_precision", "psi_degree")

#: upstream's kinds, name -> property keys (metric_resources.go at koordinator a7a1b76b)
UPSTREAM_KINDS: Mapping[str, frozenset[str]] = {name: frozenset(props) for name, props in (
    ("node_cpu_usage", ()),
    ("node_memory_usage", ()),
    ("node_memory_usage_with_page_cache", ()),
    ("node_gpu_core_usage", _GPU),
    ("node_gpu_memory_usage", _GPU),
    ("node_gpu_memory_total", _GPU),
    ("node_numa_cpu_usage", ("numa_node_id",)),
    ("node_numa_memory_usage", ("numa_node_id",)),
    ("sys_cpu_usage", ()),
    ("sys_memory_usage", ()),
    ("sys_numa_cpu_usage", ("numa_node_id",)),
    ("sys_numa_memory_usage", ("numa_node_id",)),
    ("node_be", ("be_resource", "be_allocation")),
    ("pod_cpu_usage", ("pod_uid",)),
    ("pod_memory_usage", ("pod_uid",)),
    ("pod_memory_usage_with_page_cache", ("pod_uid",)),
    ("pod_cpu_throttled", ("pod_uid",)),
    ("pod_gpu_core_usage", ("pod_uid", *_GPU)),
    ("pod_gpu_memory_usage", ("pod_uid", *_GPU)),
    ("container_cpu_usage", ("container_id",)),
    ("container_memory_usage", ("container_id",)),
    ("container_memory_usage_with_page_cache", ("container_id",)),
    ("container_gpu_core_usage", ("container_id", *_GPU)),
    ("container_gpu_memory_usage", ("container_id", *_GPU)),
    ("container_cpu_throttled", ("container_id",)),
    ("node_memory_with_hot_page_usage", ()),
    ("pod_memory_with_hot_page_usage", ("pod_uid",)),
    ("container_memory_with_hot_page_usage", ("container_id",)),
    ("host_application_memory_with_hot_page_usage", ("host_app_name",)),
    ("node_memory_cold_page_size", ()),
    ("pod_memory_cold_page_size", ("pod_uid",)),
    ("host_application_memory_cold_page_size", ("host_app_name",)),
    ("container_memory_cold_page_size", ("container_id",)),
    ("container_cpi", ("pod_uid", "container_id", "cpi_resource")),
    ("container_psi", ("pod_uid", "container_id", *_PSI)),
    ("container_psi_cpu_full_supported", ("pod_uid", "container_id")),
    ("pod_psi", ("pod_uid", *_PSI)),
    ("pod_psi_cpu_full_supported", ("pod_uid",)),
    ("host_application_cpu_usage", ("host_app_name",)),
    ("host_application_memory_usage", ("host_app_name",)),
    ("host_application_memory_usage_with_page_cache", ("host_app_name",)),
    ("resctrl_resource_llc", ("qos", "cache_id")),
    ("resctrl_resource_mb", ("qos", "cache_id", "resctrl_mb_type")),
)}

#: ours only: kubelet's working set (the memory eviction strategy's input) and node-level PSI (the PSI collector)
EXTRA_KINDS: Mapping[str, frozenset[str]] = {name: frozenset(props) for name, props in (
    ("pod_memory_working_set", ("pod_uid",)),
    ("container_memory_working_set", ("container_id",)),
    ("node_psi", _PSI),
)}

KINDS: Mapping[str, frozenset[str]] = {**UPSTREAM_KINDS, **EXTRA_KINDS}


def schema_problem(sample: Sample) -> str | None:
    """Why ``sample`` does not fit its kind's schema (unknown kind, missing or extra labels), or None when it fits."""
    schema = KINDS.get(sample.name)
    if schema is None:
        return f"unknown metric kind {sample.name!r}"
    keys = frozenset(k for k, _ in sample.labels)
    if keys != schema or len(keys) != len(sample.labels):
        return f"{sample.name}: labels {sorted(k for k, _ in sample.labels)}, schema {sorted(schema)}"
    return None
