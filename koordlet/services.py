"""Services: components that serve a peer rather than run on a period (``start()`` / ``stop()``).

To add one: its module with a ``PLUGIN = Plugin(...)`` line (koordlet.component) and one line below.
"""

from __future__ import annotations

from typing import Protocol

import nri_plugin
from koordlet import podresources
from koordlet.component import Plugin


class Service(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


SERVICES: tuple[Plugin[Service], ...] = (
    nri_plugin.PLUGIN,
    podresources.PLUGIN,
)
