"""The plugin configuration an NRI runtime hands over in Configure: which events to subscribe to.

containerd and CRI-O pass a plugin the contents of its configuration file (for a plugin they launch, or one
named in their NRI config); a plugin that connects on its own, like this one, usually gets an empty string.
Upstream koordlet honours one key, ``events`` (pkg/koordlet/runtimehooks/nri/handlers.go ``Configure``, types.go
``nriConfig``), through the containerd/nri v0.11 stub (pkg/stub/stub.go ``Configure``, pkg/api/event.go
``ParseEventMask``):

* an empty config keeps the default subscription;
* otherwise the text is YAML holding an object; its ``events`` key (matched without regard to case, as Go's JSON
  decoding matches struct fields) is a list of strings; a text that is not YAML, not an object, or whose events are
  not a list of strings fails Configure, and the runtime then drops the plugin;
* each entry is lower-cased and split at commas; ``all`` means every event, ``pod``/``podsandbox`` every event with
  "pod" in its name, ``container`` every event with "container" in its name (these three only as written, with no
  spaces around them); any other name is trimmed and must be an event name (``RunPodSandbox``, ...), or Configure
  fails;
* no events at all (``events: []``, ``events: null``, no ``events`` key) means the default subscription;
* events the plugin has no handler for fail Configure ("unhandled events"), so a runtime never calls the plugin
  with a request it cannot answer.

One difference: upstream decodes each config over the previous one, so a second Configure without ``events``
would keep the first one's list; here it gets the default (a runtime sends the same file every time).
"""

from __future__ import annotations

from typing import Any

from koordlet._proto.nri import api_pb2 as api
from koordlet.base.yamlfile import loads_yaml

__all__ = ["ConfigError", "EVENT_BITS", "VALID_EVENTS", "event_name", "parse_event_mask", "subscription"]


class ConfigError(ValueError):
    """The runtime's plugin configuration cannot be used; Configure answers with this message."""


def event_name(event: int) -> str:
    """NRI's name of an event (``RUN_POD_SANDBOX`` -> ``RunPodSandbox``), also the name of its Plugin method."""
    return "".join(part.capitalize() for part in api.Event.Name(api.Event.ValueType(event)).split("_"))


#: the events ParseEventMask knows, by lower-case name (UNKNOWN and LAST are not events)
EVENT_BITS: dict[str, int] = {event_name(e).lower(): 1 << (e - 1)
                              for e in api.Event.values() if api.UNKNOWN < e < api.LAST}
VALID_EVENTS = (1 << (api.LAST - 1)) - 1


def parse_event_mask(events: list[str]) -> int:
    """NRI's ParseEventMask: the subscription bits of event names (see the module docstring)."""
    mask = 0
    for entry in events:
        for name in entry.lower().split(","):
            if name == "all":
                mask |= VALID_EVENTS
            elif name in ("pod", "podsandbox"):
                mask |= sum(bit for n, bit in EVENT_BITS.items() if "pod" in n)
            elif name == "container":
                mask |= sum(bit for n, bit in EVENT_BITS.items() if "container" in n)
            else:
                bit = EVENT_BITS.get(name.strip())
                if bit is None:
                    raise ConfigError(f"unknown event {name!r}")
                mask |= bit
    return mask


def subscription(config: str, default: int, handled: int) -> int:
    """The event mask to answer Configure with for the runtime's ``config``; ConfigError when Configure must fail.

    ``default``: the plugin's own subscription; ``handled``: the events it has handlers for."""
    if config == "":
        return default
    doc: Any = loads_yaml(config, "nri plugin configuration", ConfigError)
    if doc is None:
        return default
    if not isinstance(doc, dict):
        raise ConfigError(f"nri plugin configuration: expected an object, got {type(doc).__name__}")
    key = "events" if "events" in doc else next((k for k in doc if isinstance(k, str) and k.lower() == "events"),
                                                None)
    events = doc.get(key) if key is not None else None
    if events is None:
        return default
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ConfigError(f"nri plugin configuration: events must be a list of strings, got {events!r:.200}")
    mask = parse_event_mask(events) or default
    extra = mask & ~handled
    if extra:
        names = ",".join(event_name(e) for e in range(1, api.LAST) if extra & (1 << (e - 1)))
        raise ConfigError(f"nri plugin configuration subscribes to unhandled events {names} ({extra:#x})")
    return mask
