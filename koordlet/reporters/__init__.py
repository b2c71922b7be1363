"""Reporters: NodeMetric status, NodeResourceTopology and Device objects, to the API server or to files.

Each report is a :class:`koordlet.component.Report` declared by a ``Plugin`` line in its module; the agent's report
loop sends each enabled one every its interval, retrying a failure sooner (5 s doubling up to the interval). To add
one: its module and one line below.
"""

from __future__ import annotations

from koordlet.component import Plugin, Report
from koordlet.reporters import device, files, nodemetric, nrt

REPORTS: tuple[Plugin[Report], ...] = (
    nodemetric.PLUGIN,
    nrt.PLUGIN,
    device.PLUGIN,
    files.PLUGIN,
)
