"""Logging helpers: one line per event, and no repeats of the same problem every cycle."""

from __future__ import annotations

import logging
from collections.abc import Iterable


class LogOnce:
    """Logs each distinct (key, message) once until ``forget``/``keep_only`` clears it.

    A broken pod, file or endpoint is reported when it breaks (and again if the problem changes), not on
    every sync or collection cycle.
    """

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self._logger = logger
        self._level = level
        self._seen: dict[str, str] = {}

    def __call__(self, key: str, message: str, *args: object) -> bool:
        text = message % args if args else message
        if self._seen.get(key) == text:
            return False
        self._seen[key] = text
        self._logger.log(self._level, text)
        return True

    def forget(self, key: str) -> bool:
        """True when the key had a logged problem (so the caller can log a recovery)."""
        return self._seen.pop(key, None) is not None

    def keep_only(self, keys: Iterable[str]) -> None:
        keep = set(keys)
        for key in [k for k in self._seen if k not in keep]:
            del self._seen[key]
