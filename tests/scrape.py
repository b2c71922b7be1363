"""Reading a Prometheus scrape as Prometheus does, for the metric-family checks (prometheus_client's parser, plus
the raw ``# TYPE`` lines: the parser strips a counter's ``_total``, so it cannot tell ``koordlet_pod_eviction``
from ``koordlet_pod_eviction_total`` by itself)."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from koordlet.ops.metrics.upstream import Family


@dataclass(frozen=True)
class Scrape:
    text: str
    families: dict[str, Metric]           # parsed, by family name
    types: dict[str, str]                 # the names and types exactly as the # TYPE lines give them
    sample_names: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Scrape:
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
        names = frozenset(line.split("{")[0].split(" ")[0] for line in text.splitlines()
                          if line and not line.startswith("#"))
        return cls(text, {m.name: m for m in text_string_to_metric_families(text)}, types, names)

    @classmethod
    def get(cls, url: str) -> Scrape:
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return cls.of(r.read().decode())

    def problems(self, family: Family, *, series: bool) -> list[str]:
        """What a scrape shows wrong about an upstream family: its name and type as the TYPE line writes them, no
        prometheus_client-only series (``_total``, ``_created``), and (when ``series``: at least one series is
        required) the label names of every series."""
        out = []
        if self.types.get(family.name) != family.type:
            out.append(f"{family.name}: TYPE line {self.types.get(family.name)!r}, want {family.type!r}")
        for suffix in ("_total", "_created"):
            if family.name + suffix in self.types or family.name + suffix in self.sample_names:
                out.append(f"{family.name}: exposes {family.name + suffix}")
        metric = self.families.get(family.name)
        if metric is None:
            return out + [f"{family.name}: not parsed"]
        if metric.type != family.type:
            out.append(f"{family.name}: parsed as {metric.type}")
        if series and not metric.samples:
            out.append(f"{family.name}: no series")
        for s in metric.samples:
            names = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
            if names != set(family.labels):
                out.append(f"{family.name}: series {s.name} labels {sorted(names)}, want {sorted(family.labels)}")
                break
        return out
