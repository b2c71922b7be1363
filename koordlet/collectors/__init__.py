"""Collectors: read usage through koordlet.host and turn it into metric-cache samples.

Each one is a :class:`koordlet.component.Collector` (``collect(tick) -> samples``) declared by a ``Plugin`` line
in its module; the agent runs each enabled one every its period in a supervised loop and appends what it returns
to the metric cache. To add one: its module, one line below, and its case in tests/unit/test_collector_kinds.py.
"""

from __future__ import annotations

from koordlet.collectors import cpi, gpu, hami_vgpu, memory, psi, resctrl, throttled, usage
from koordlet.component import Collector, Plugin

COLLECTORS: tuple[Plugin[Collector], ...] = (
    usage.PLUGIN,
    throttled.PLUGIN,
    gpu.PLUGIN,
    cpi.PLUGIN,
    memory.COLD_PAGES,
    memory.PAGE_CACHE,
    psi.PLUGIN,
    resctrl.PLUGIN,
    hami_vgpu.PLUGIN,
)
