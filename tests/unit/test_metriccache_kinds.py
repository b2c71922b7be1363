"""The metric-kind table (koordlet/metriccache/kinds.py): upstream's kinds with upstream's label keys, and the
check that names a sample which does not fit it (the collectors are held to it in test_collector_kinds.py)."""

from koordlet.metriccache import KINDS, Sample, schema_problem
from koordlet.metriccache.kinds import EXTRA_KINDS, UPSTREAM_KINDS


def test_the_kinds_issue_20_found_missing_are_declared_as_upstream():
    # pkg/koordlet/metriccache/metric_resources.go: SystemNUMA*UsageMetric, Pod/ContainerCPUThrottledMetric,
    # ResctrlLLCMetric, ResctrlMBMetric
    assert KINDS["sys_numa_cpu_usage"] == {"numa_node_id"}
    assert KINDS["sys_numa_memory_usage"] == {"numa_node_id"}
    assert KINDS["pod_cpu_throttled"] == {"pod_uid"}
    assert KINDS["container_cpu_throttled"] == {"container_id"}
    assert KINDS["resctrl_resource_llc"] == {"qos", "cache_id"}
    assert KINDS["resctrl_resource_mb"] == {"qos", "cache_id", "resctrl_mb_type"}
    assert len(UPSTREAM_KINDS) == 43 and not UPSTREAM_KINDS.keys() & EXTRA_KINDS.keys()


def test_schema_problem_names_unknown_kinds_and_label_mismatches():
    assert schema_problem(Sample("sys_numa_cpu_usage", (("numa_node_id", "0"),), 1.0, 0.5)) is None
    assert "unknown metric kind" in schema_problem(Sample("sys_numa_cpu", (), 1.0, 0.5))
    assert "schema ['numa_node_id']" in schema_problem(Sample("sys_numa_cpu_usage", (), 1.0, 0.5))
    assert schema_problem(Sample("pod_cpu_throttled", (("pod_uid", "u"), ("qos", "LS")), 1.0, 0.0)) is not None
