"""Golden allocation cases for the companion scheduler's DeviceShare: koord-scheduler's deviceshare unit tests as data.

Plain data only (nothing from ``scheduler`` is imported): each module holds ``CASES`` (allocation cases) or
``FORMATS`` (annotation formatting); ``tests/unit/test_sched_goldens.py`` runs them against the allocator. Upstream
cases left out are listed, with reasons, in ``skipped.SKIPPED``.
"""

from tests.unit.sched_goldens import autopilot, derived, gpu_allocator, plugin, requests
from tests.unit.sched_goldens.formats import FORMATS

ALLOCATION_CASES = [*autopilot.CASES, *gpu_allocator.CASES, *plugin.CASES, *requests.CASES, *derived.CASES]

__all__ = ["ALLOCATION_CASES", "FORMATS"]
