"""NRI Configure honours the runtime's plugin configuration (``events``) as upstream koordlet does (handlers.go
Configure over containerd/nri v0.11's ParseEventMask and stub): the table of configurations, the plugin's
Configure answer, and the handshake with a runtime peer over a real socket."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles.nriruntime import FakeRuntime
from koordlet._proto.nri import api_pb2 as api
from nri_plugin.hooks import Hooks
from nri_plugin.plugin import EVENTS, NRIPlugin, PluginSettings
from nri_plugin.runtimeconfig import VALID_EVENTS, ConfigError, parse_event_mask, subscription
from nri_plugin.transport.ttrpc import Code, TTRPCError
from tests.budget import within_budget
from tests.fakehost import FakeHost
from tests.hookfeatures import hook_features
from tests.waits import wait_for

RUN, STOP, REMOVE = 1 << 0, 1 << 1, 1 << 2                 # RunPodSandbox, StopPodSandbox, RemovePodSandbox
CREATE, POST_START, UPDATE = 1 << 3, 1 << 6, 1 << 7        # CreateContainer, PostStartContainer, UpdateContainer
STOP_C, REMOVE_C = 1 << 9, 1 << 10                         # StopContainer, RemoveContainer
POD_EVENTS = RUN | STOP | REMOVE | 1 << 11 | 1 << 12       # + UpdatePodSandbox, PostUpdatePodSandbox
HANDLED = RUN | REMOVE | CREATE | POST_START | UPDATE | STOP_C | REMOVE_C


@pytest.mark.parametrize(("events", "mask"), [
    (["RunPodSandbox", "RemovePodSandbox", "CreateContainer", "UpdateContainer"], 0x8D),    # upstream's default
    (["RunPodSandbox,RemovePodSandbox,CreateContainer,UpdateContainer"], 0x8D),            # one comma list
    (["runpodsandbox", "CREATECONTAINER", " UpdateContainer "], RUN | CREATE | UPDATE),   # case, trimmed names
    (["all"], VALID_EVENTS),
    (["ALL"], 0x3FFF),                                                                       # 14 events
    (["pod"], POD_EVENTS),
    (["PodSandbox"], POD_EVENTS),
    (["container"], VALID_EVENTS & ~POD_EVENTS),
    ([], 0),
])
def test_parse_event_mask_as_nri(events, mask):
    assert parse_event_mask(events) == mask


@pytest.mark.parametrize("events", [["RunPod"], ["all "], ["RunPodSandbox,,CreateContainer"], ["pod, container"]])
def test_parse_event_mask_refuses_unknown_names(events):
    # NRI matches all/pod/container only as written; "" and " container" are looked up as event names and fail
    with pytest.raises(ConfigError, match="unknown event"):
        parse_event_mask(events)


@pytest.mark.parametrize(("config", "mask"), [
    ("", EVENTS),                                                   # externally started plugin: our default
    ("events: [RunPodSandbox, CreateContainer]", RUN | CREATE),
    ('{"events": ["CreateContainer", "UpdateContainer"]}', CREATE | UPDATE),     # JSON is YAML too
    ("Events:\n- RemovePodSandbox\n", REMOVE),                      # Go's JSON decoding ignores the key's case
    ("events: []", EVENTS),                                         # no events: the default subscription
    ("events: null", EVENTS),
    ("otherKey: 1", EVENTS),                                        # unknown keys are ignored
    ("# comments only\n", EVENTS),
    ("events: [container]", None),                                  # includes events we have no handler for
    ("events: [StopPodSandbox]", None),
    ("events: RunPodSandbox", None),                                # a string, not a list
    ("events: [1, 2]", None),
    ("- events", None),                                             # not an object
    ("events: [RunPodSandbox", None),                               # not YAML
    ("events: [Bogus]", None),
])
def test_subscription_from_the_runtime_config(config, mask):
    if mask is None:
        with pytest.raises(ConfigError):
            subscription(config, EVENTS, HANDLED)
    else:
        assert subscription(config, EVENTS, HANDLED) == mask


def plugin(tmp_path, socket_path: str = "/nonexistent/nri.sock") -> NRIPlugin:
    host = FakeHost(str(tmp_path))
    hooks = Hooks(hook_features(), host.layout, lambda: None)   # type: ignore[arg-type]
    return NRIPlugin(PluginSettings(socket_path=socket_path, backoff_initial=0.1), hooks)


def configure(p: NRIPlugin, config: str) -> api.ConfigureResponse:
    req = api.ConfigureRequest(config=config, runtime_name="containerd", runtime_version="2.1.0",
                               request_timeout=2000)
    return api.ConfigureResponse.FromString(asyncio.run(p._configure(req.SerializeToString(), None)))


def test_plugin_configure_answers_with_the_configured_events(tmp_path):
    p = plugin(tmp_path)
    try:
        assert configure(p, "").events == EVENTS == RUN | REMOVE | CREATE | UPDATE | POST_START
        assert configure(p, "events: [RunPodSandbox,StopContainer]").events == RUN | STOP_C
        # every event with a handler may be subscribed: the plugin's handlers decide, as the NRI stub's do
        assert configure(p, "events: [" + ",".join(["RunPodSandbox", "RemovePodSandbox", "CreateContainer",
                                                     "PostStartContainer", "UpdateContainer", "StopContainer",
                                                     "RemoveContainer"]) + "]").events == HANDLED
        with pytest.raises(TTRPCError) as err:
            configure(p, "events: [StartContainer]")
        assert err.value.code == Code.INVALID_ARGUMENT and "StartContainer" in err.value.message
    finally:
        p.stop()


@pytest.mark.parametrize(("config", "mask"), [("events: [RunPodSandbox, CreateContainer]", RUN | CREATE),
                                              ("events: [nope]", None)])
def test_handshake_with_a_runtime_that_passes_a_config(tmp_path, config, mask):
    short = tempfile.mkdtemp(prefix="nricfg")           # AF_UNIX paths are limited to 107 bytes
    rt = FakeRuntime(os.path.join(short, "nri", "nri.sock"), config=config)
    rt.start()
    p = plugin(tmp_path, rt.socket_path)
    try:
        p.start()
        if mask is not None:
            assert rt.wait_ready(5.0), rt.closed_reasons
            assert rt.events_mask == mask
        else:       # Configure failed: the runtime drops the plugin, which retries later (and is refused again)
            assert wait_for(lambda: any("handshake failed" in r and "unknown event" in r
                                        for r in rt.closed_reasons), 5.0), rt.closed_reasons
            assert rt.events_mask is None
    finally:
        p.stop()
        rt.stop()
        shutil.rmtree(short, ignore_errors=True)


# ------------------------------------------------------------------------------- property: any configuration text

_WORDS = st.sampled_from(["events", "Events", ":", "[", "]", "{", "}", ",", "-", " ", "\n", "all", "pod",
                          "container", "RunPodSandbox", "CreateContainer", "null", "1", '"', "&a", "*a"])
_CONFIG = st.lists(_WORDS, max_size=30).map("".join) | st.text(max_size=200)
_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]


def _subscribe(config: str) -> None:
    try:
        mask = within_budget("NRI Configure subscription", subscription, config, EVENTS, HANDLED)
    except ConfigError:
        return
    assert mask and not mask & ~HANDLED          # never an event without a handler


@settings(max_examples=60, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)
@given(config=_CONFIG)
def test_property_any_config_is_a_subscription_or_a_config_error(config: str) -> None:
    _subscribe(config)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=timedelta(seconds=1), suppress_health_check=_CHECKS)
@given(config=_CONFIG)
def test_property_any_config_is_a_subscription_or_a_config_error_long(config: str) -> None:
    _subscribe(config)
