"""Parsers of option values, and Go's spelling of durations.

Each parser takes a raw value as the command line and the environment give it (a string) or as a YAML file
gives it (any scalar) and returns the typed value, or raises ValueError saying what it expected; the
configuration builder (:mod:`koordlet.ops.config`) adds the option's name and where the value came from. The
spellings are upstream's: durations as Go's ``time.ParseDuration`` reads them (``1m30s``) and as ``go_duration``
prints them back, listen addresses as ``net.SplitHostPort`` reads them.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(raw: Any) -> float:
    """Go-style durations ("1s", "1m30s", "12h") or plain numbers of seconds; returns seconds."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a duration, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        text = str(raw).strip()
        try:
            value = float(text)
        except ValueError:
            pos, value = 0, 0.0
            for m in _DURATION_RE.finditer(text):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
                pos = m.end()
            if pos != len(text) or not text:
                raise ValueError(f"expected a duration like 1s, 10m or 12h, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"duration must not be negative, got {raw!r}")
    return value


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3,
               "ki": 1024, "mi": 1024**2, "gi": 1024**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(raw: Any) -> int:
    """Byte sizes: plain integers or quantities like 100Mi / 1Gi / 512MiB."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a size, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(raw))
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"expected a size like 104857600 or 100Mi, got {raw!r}")
        value = int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"size must be positive, got {raw!r}")
    return value


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "t", "true", "yes", "on"):
        return True
    if text in ("0", "f", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected an integer, got {raw!r}")
    try:
        return int(str(raw).strip(), 10)
    except ValueError:
        raise ValueError(f"expected an integer, got {raw!r}") from None


def parse_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"expected a number, got {raw!r}")
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {raw!r}")
    return value


def parse_non_negative_int(raw: Any) -> int:
    value = parse_int(raw)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {raw!r}")
    return value


def parse_positive_int(raw: Any) -> int:
    value = parse_int(raw)
    if value <= 0:
        raise ValueError(f"expected an integer > 0, got {raw!r}")
    return value


def parse_positive_duration(raw: Any) -> float:
    value = parse_duration(raw)
    if value <= 0:
        raise ValueError(f"expected a duration above 0, got {raw!r}")
    return value


def parse_port(raw: Any) -> int:
    port = parse_int(raw)
    if not 0 < port < 65536:
        raise ValueError(f"expected a TCP port 1-65535, got {raw!r}")
    return port


def parse_str(raw: Any) -> str:
    if isinstance(raw, (dict, list)):
        raise ValueError(f"expected a string, got {type(raw).__name__}")
    return "" if raw is None else str(raw)


def parse_path(raw: Any) -> str:
    """Paths must be absolute or explicitly relative and must not climb with '..' (rule: no escape)."""
    text = parse_str(raw)
    if text and ".." in text.split("/"):
        raise ValueError(f"path must not contain '..', got {text!r}")
    return text


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = parse_str(raw)
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return text
    parse.__name__ = "choice"
    return parse


def parse_addr(raw: Any) -> tuple[str, int]:
    """``host:port``, ``[ipv6]:port`` or ``:port``, read as Go's ``net.SplitHostPort`` reads upstream's ``-addr``:
    an IPv6 literal needs its brackets (``[::1]:9316``; ``::1:9316`` is ambiguous and refused, as Go refuses it).
    ``:port`` and ``[::]:port`` listen on every interface, IPv4 and IPv6 (koordlet.ops.server)."""
    text = parse_str(raw).strip()
    if text.startswith("["):
        host, close, port = text[1:].partition("]")
        if not close or not port.startswith(":"):
            raise ValueError(f"expected [ipv6]:port, got {raw!r}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in {raw!r} is not an IPv6 address") from None
        return host, parse_port(port[1:])
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"expected host:port, [ipv6]:port or :port, got {raw!r}")
    if ":" in host:
        raise ValueError(f"an IPv6 address needs brackets, [{host}]:{port}; got {raw!r}")
    return host, parse_port(port)


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a ``time.Duration`` (``12h0m0s`` shortened to ``12h``, ``1m30s``, ``100ms``), the
    spelling upstream's ``-help`` uses and ``parse_duration`` reads back."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{value:g}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value)

