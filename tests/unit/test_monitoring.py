"""deploy/monitoring/ against the agent: every metric an alert rule or a dashboard panel reads is one the agent exports,
with every label the expression matches on; the rules pass ``promtool check rules`` and their ``promtool test rules``
unit test; the PrometheusRule carries the same groups as the rule file.

"What the agent exports" is read from a scrape of the agent's HTTP server (koordlet.ops.server over a real socket)
serving an ``AgentMetrics`` in which every family holds a series: the names exactly as Prometheus stores them
(upstream's counters without ``_total``, ours with it, histograms as ``_bucket``/``_sum``/``_count``), nothing
restated here. tests/integration/test_operator_surface.py checks the same names on a running daemon's /metrics.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from koordlet.ops.metrics import AgentMetrics
from koordlet.ops.server import HttpServer
from tests.scrape import Scrape

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "koordlet-rules.yaml"
DASHBOARD = MONITORING / "koordlet-dashboard.json"

# Labels Prometheus adds to every series of a target; series Prometheus makes about the target itself
TARGET_LABELS = frozenset({"job", "instance"})
PROMETHEUS_SERIES = {"up": frozenset()}

_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                       "unless", "offset", "inf", "nan"})
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
# aggregation operators may be followed by "by (...)" rather than "(" (``sum by (node) (x)``)
_AGGREGATIONS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                           "bottomk", "topk", "quantile", "limitk", "limit_ratio"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_TOKEN = re.compile(r"(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_:][\w:]*)|(?P<sel>\{[^}]*\})|(?P<other>\S)")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*\"\"")


def selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """The series selectors of a PromQL expression: (metric name, label names matched on). Function and
    aggregation names (an identifier before ``(``), keywords and the label lists of by / without / on /
    ignoring / group_left / group_right are not metrics; strings and range brackets are dropped first."""
    text = re.sub(r"\[[^\]]*\]", "", _STRING.sub('""', expr))
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)]
    out: list[tuple[str, frozenset[str]]] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "id" and value in _GROUPING:
            i += 1
            if following == "(":                       # skip the label list
                while tokens[i][1] != ")":
                    i += 1
        elif kind == "id" and following != "(" and value not in _KEYWORDS | _AGGREGATIONS:
            labels: frozenset[str] = frozenset()
            if following.startswith("{"):
                labels = frozenset(_MATCHER.findall(following))
                i += 1
            out.append((value, labels))
        elif kind == "sel":
            raise AssertionError(f"a selector without a metric name in {expr!r}: name the metric")
        i += 1
    return out


def rule_expressions() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {rule.get("alert") or rule["record"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_queries() -> tuple[dict[str, str], dict[str, str]]:
    """(panel title / refId -> expr, template variable -> query) of the dashboard."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = {f"{p['title']} / {t['refId']}": t["expr"] for p in board["panels"] for t in p.get("targets", [])}
    variables = {v["name"]: v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"}
    return exprs, variables


def populated() -> AgentMetrics:
    """An AgentMetrics with one series in every labelled family (each vector it holds, found by type)."""
    m = AgentMetrics("node-a")
    vectors = {id(v): v for v in (*vars(m).values(), *m._vectors.values())
               if isinstance(v, (Gauge, Counter, Histogram))}
    for vector in vectors.values():
        child = vector.labels(*["x"] * len(vector._labelnames)) if vector._labelnames else vector
        if isinstance(child, Histogram):
            child.observe(0.01)
        elif isinstance(child, Counter):
            child.inc()
        else:
            child.set(1)
    return m


@pytest.fixture(scope="module")
def exported() -> Iterator[dict[str, frozenset[str]]]:
    """Series name -> label names, from a real scrape of /metrics (both registries, as upstream serves it)."""
    server = HttpServer(("127.0.0.1", 0), populated().pages(), lambda: (True, "ok"))
    server.start()
    try:
        scrape = Scrape.get(f"http://127.0.0.1:{server.address[1]}/metrics")
    finally:
        server.stop()
    # the raw sample lines: the text parser renames a bare counter's samples to <name>_total, Prometheus does not
    names: dict[str, set[str]] = {}
    for line in scrape.text.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            name = name.split(" ")[0]
            names.setdefault(name, set()).update(re.findall(r'([A-Za-z_]\w*)="', rest.rpartition("}")[0]))
    assert set(names) == set(scrape.sample_names)
    yield {name: frozenset(labels) for name, labels in names.items()}


def problems(where: str, expr: str, exported: dict[str, frozenset[str]]) -> list[str]:
    out = []
    for name, labels in selectors(expr):
        known = exported.get(name, PROMETHEUS_SERIES.get(name))
        if known is None:
            out.append(f"{where}: {name} is not exported by the agent")
        elif labels - known - TARGET_LABELS:
            out.append(f"{where}: {name} has no label {', '.join(sorted(labels - known - TARGET_LABELS))}")
    return out


def test_the_promql_reader_finds_metrics_and_their_matchers():
    expr = ('sum by (node, le) (rate(koordlet_x_bucket{job=~"$job", node=~"a|b"}[$__rate_interval])) '
            '* on(instance, job) group_left(node) (0 * koordlet_start_time + 1) > 0.5 '
            'unless max without (le) (up{job="koordlet"} offset 5m) and bool 1e3')
    assert selectors(expr) == [("koordlet_x_bucket", frozenset({"job", "node"})),
                               ("koordlet_start_time", frozenset()), ("up", frozenset({"job"}))]
    assert selectors('histogram_quantile(0.9, sum(rate(a_bucket{le="+Inf"}[5m])) by (le))') == \
        [("a_bucket", frozenset({"le"}))]
    with pytest.raises(AssertionError):
        selectors('{__name__="x"}')


def test_every_metric_a_rule_reads_is_exported(exported):
    found = [p for alert, expr in rule_expressions().items() for p in problems(f"alert {alert}", expr, exported)]
    assert found == []
    # and the check notices a name the agent does not export, or a label it does not have
    assert problems("x", "rate(koordlet_pod_eviction_total[5m])", exported) != []   # upstream's: no _total
    assert problems("x", 'koordlet_executor_updates_total{result="x"}', exported) != []


def test_every_metric_a_panel_reads_is_exported(exported):
    exprs, variables = dashboard_queries()
    assert exprs and variables
    found = [p for title, expr in exprs.items() for p in problems(f"panel {title}", expr, exported)]
    for name, query in variables.items():
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert m, query
        found += problems(f"variable {name}", m.group(1), exported)
        (metric, _), = selectors(m.group(1))
        if m.group(2) not in exported.get(metric, frozenset()) | TARGET_LABELS:
            found.append(f"variable {name}: {metric} has no label {m.group(2)}")
    assert found == []


def test_alerts_cover_what_operators_look_at():
    """The issue's list: node usage vs reclaimable, BE suppress, evictions, NRI latency / errors / connection,
    executor failures, collection cycle time, agent CPU / RSS (some in panels, the failure modes as alerts)."""
    read = {name for expr in rule_expressions().values() for name, _ in selectors(expr)}
    for name in ("koordlet_nri_connected", "koordlet_nri_hook_errors_total", "koordlet_nri_hook_seconds_bucket",
                 "koordlet_executor_updates_total", "koordlet_collect_cycle_duration_seconds_bucket",
                 "koordlet_pod_eviction", "process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_threads"):
        assert name in read, name
    exprs, _ = dashboard_queries()
    shown = {name for expr in exprs.values() for name, _ in selectors(expr)}
    for name in ("koordlet_node_used_cpu_cores", "koordlet_node_priority_resource_reclaimable",
                 "koordlet_be_suppress_cpu_cores", "koordlet_pod_eviction", "koordlet_nri_hook_seconds_bucket",
                 "koordlet_executor_updates_total", "koordlet_collect_cycle_duration_seconds_bucket",
                 "process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_collections_total"):
        assert name in shown, name


def test_dashboard_panels_use_the_datasource_variable_and_unique_ids():
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
            grid = p["gridPos"]
            assert grid["x"] + grid["w"] <= 24, p["title"]


def test_prometheus_rule_carries_the_rule_file():
    (rule,) = [d for d in yaml.safe_load_all((MONITORING / "prometheusrule.yaml").read_text(encoding="utf-8"))
               if d]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=MONITORING)


def test_promtool_check_rules_is_clean():
    result = run_promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    # and it is a real check: promtool refuses a broken expression
    broken: dict[str, Any] = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    broken["groups"][0]["rules"][0]["expr"] = "sum by (node (up)"
    result = subprocess.run([promtool(), "check", "rules"], input=yaml.safe_dump(broken), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0


def test_promtool_unit_tests_of_the_alerts_pass():
    result = run_promtool("test", "rules", "koordlet-rules.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
