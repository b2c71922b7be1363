"""Logging helpers: one line per event, no repeats of the same problem every cycle, and the process's log format
(text, or one JSON object per line with the message's ``key=value`` fields as keys)."""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from collections.abc import Iterable
from typing import TextIO


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


# --- the process's log format (``log-format``) -------------------------------------------------------------------

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# a field starts at a word followed by "=" after a space: the agent's messages are "<what happened> key=value ..."
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.]*)=")
_RESERVED = frozenset({"ts", "level", "logger", "msg", "exc"})


def message_fields(message: str) -> dict[str, str]:
    """The ``key=value`` fields of one of the agent's log messages. A value runs to the next `` key=`` (so values
    with spaces, such as an error text, stay whole) or to the end, less a trailing ``; <clause>`` that is the
    message's own prose (``...error=timed out; keeping 3 known pods``); a value quoted as Python prints strings
    (``reason='low memory'``) loses its quotes. The first occurrence of a key wins."""
    found = list(_FIELD.finditer(message))
    fields: dict[str, str] = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(message)
        value = message[m.end():end].strip()
        if i + 1 == len(found):
            value = value.split("; ", 1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        fields.setdefault(m.group(1), value)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``msg`` (the whole
    message, as the text format prints it), the message's ``key=value`` fields as keys of their own (a field that
    would shadow one of those five is left in ``msg`` only), and ``exc`` with the traceback when there is one. Log
    collectors (Loki, Elasticsearch, Cloud Logging) then index the fields without a parsing rule."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        doc: dict[str, str] = {"ts": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
                               "level": record.levelname.lower(), "logger": record.name, "msg": message}
        for key, value in message_fields(message).items():
            if key not in _RESERVED:
                doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exc"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False)


def configure(level: str, fmt: str = "text", stream: TextIO | None = None) -> None:
    """The root logger's one handler: ``fmt`` "text" (``<time> <LEVEL> <logger> <message>``) or "json"
    (:class:`JsonFormatter`), at ``level``, to ``stream`` (stderr). Does nothing if the root logger already has a
    handler (a test's capture), as ``logging.basicConfig``."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
