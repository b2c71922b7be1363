"""The NRI plugin: one connection to the runtime's socket, the Plugin service, and the reconnect loop.

Lifecycle (containerd/nri ``pkg/adaptation/plugin.go``: ``plugin.connect``, ``RegisterPlugin``, ``configure``,
``synchronize``; koordinator ``pkg/koordlet/runtimehooks/nri/server.go: NriServer.connect``): connect; RegisterPlugin on
conn 2; the runtime calls Configure (we answer with our event mask) and Synchronize on conn 1, then the subscribed
events. When the runtime restarts, drops us (a call over its 2 s timeout) or the socket is not there yet, we retry with
capped exponential back-off — also at start-up, where upstream gives up for good — and we reconnect at once when a new
socket appears: inotify on its directory says so even when the new socket got the old one's inode number (ext4 does
that; a stat poll alone would miss it and wait out the back-off), with the stat poll kept beside it for where inotify is
not available. A runtime that sends part of a frame and goes silent gets its trunk closed after
``partial_frame_timeout`` and is reconnected like any other drop. The old connection is always closed before a new one
is dialed: two live registrations under one name make the runtime fail containers on field-ownership conflicts
(koordinator #2334).

Every hook runs on a small thread pool under a budget far below the runtime's timeout (default 100 ms); an
answer that would be late, a hook that raises and an undecodable request all get the empty answer (fail open):
the container is created and the reconciler applies the settings on its next cycle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import random
import re
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError, Message

from koordlet._proto.nri import api_pb2 as api
from nri_plugin.hooks import Hooks
from nri_plugin.runtimeconfig import ConfigError, event_name, subscription
from nri_plugin.socketwatch import SocketWatch
from nri_plugin.transport.mux import DEFAULT_PARTIAL_TIMEOUT, PLUGIN_CONN, RUNTIME_CONN, Mux
from nri_plugin.transport.ttrpc import Channel, Code, Handler, TTRPCError

if TYPE_CHECKING:
    from koordlet.ops.metrics import AgentMetrics

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_SOCKET = "/var/run/nri/nri.sock"
_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+")
_INDEX_RE = re.compile(r"[0-9]{2}")
# Failures meaning "a socket is there but nobody accepts on it yet": right after a new socket is noticed, a runtime
# may still be between bind and listen, so these are retried quickly (up to _QUICK_RETRY_MAX apart) instead of
# backing off.
_NOT_LISTENING = frozenset({"socket_absent", "refused"})
_FIRST_QUICK_RETRY = 0.01
_QUICK_RETRY_MAX = 0.1        # a new socket not listening yet is retried this often at most


def event_mask(*events: int) -> int:
    """Subscription bits: event v is bit ``1 << (v - 1)``."""
    mask = 0
    for e in events:
        mask |= 1 << (e - 1)
    return mask


# Koordlet's 0x8D (run/remove sandbox, create/update container) plus post-start, where cookies and resctrl task
# moves can act on the new processes. All within 0x7FF, which every runtime version accepts.
EVENTS = event_mask(api.RUN_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER, api.UPDATE_CONTAINER,
                    api.POST_START_CONTAINER)


@dataclass(frozen=True)
class PluginSettings:
    socket_path: str = DEFAULT_SOCKET
    name: str = "koordlet_nri"
    index: str = "00"
    hook_budget: float = 0.1               # seconds a hook may take before the empty answer goes out
    registration_timeout: float = 6.0      # a bit over the runtime's 5 s (nri PR #292)
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # while waiting to retry: how often to stat the socket (inotify's fallback) and re-arm the directory watch. Once a
    # second: a node without NRI waits like this for ever, and at 10 Hz the wake-ups cost 2.5 millicores
    socket_poll: float = 1.0
    socket_settle: float = 1.0             # after a new socket is noticed: how long a refusal is retried at once
    partial_frame_timeout: float = DEFAULT_PARTIAL_TIMEOUT   # a started frame must complete within this

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"nri plugin name {self.name!r}: only letters, digits and _.+- are accepted by runtimes")
        if not _INDEX_RE.fullmatch(self.index):
            raise ValueError(f"nri plugin index {self.index!r}: must be exactly two digits")
        if not 0 < self.hook_budget < 2.0:
            raise ValueError(f"nri hook budget {self.hook_budget}s: must be above 0 and below the runtime's 2 s")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ValueError("nri back-off: need 0 < initial <= max")
        if self.socket_poll <= 0 or self.socket_settle < 0 or self.partial_frame_timeout <= 0:
            raise ValueError("nri socket poll and partial frame timeout must be above 0, settle not below 0")


def resolve_socket(configured: str, var_run_root: str) -> str:
    """The socket path from ``runtime-hooks-nri-socket-path``: relative paths are under the host's /var/run."""
    return configured if os.path.isabs(configured) else os.path.join(var_run_root, configured)


def probe_socket(path: str) -> tuple[bool, str]:
    """For ``doctor``: is a runtime listening there? (No connection is made: it would count as a plugin.)"""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False, (f"{path} missing: runtime without NRI (containerd < 2.0 needs [plugins.\"io.containerd.nri"
                       f".v1.nri\"] disable = false; CRI-O: enable_nri) — the reconciler still applies settings")
    except OSError as e:
        return False, f"{path}: {e.strerror or e}"
    if not stat.S_ISSOCK(st.st_mode):
        return False, f"{path} is not a socket"
    return True, f"runtime socket at {path}"


def _socket_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class NRIPlugin:
    """Connects, serves and reconnects. ``start()``/``stop()`` run it on its own thread and event loop."""

    def __init__(self, settings: PluginSettings, hooks: Hooks, metrics: AgentMetrics | None = None,
                 events: int = EVENTS, workers: int = 4) -> None:
        self.settings = settings
        self.hooks = hooks
        self.events = events
        self._metrics = metrics
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="nri-hook")
        self._request_timeout = 2.0            # the runtime's, from Configure
        self._sync: tuple[list[api.PodSandbox], list[api.Container]] = ([], [])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.connected = False
        self.registrations = 0                 # successful registrations since start
        self._mux: Mux | None = None
        handlers: dict[str, Callable[[bytes, float | None], Awaitable[bytes]]] = {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "StateChange": self._state_change,
            "RunPodSandbox": self._event(api.RunPodSandboxRequest, api.RunPodSandboxResponse, self._run_sandbox),
            "RemovePodSandbox": self._event(api.RemovePodSandboxRequest, api.RemovePodSandboxResponse,
                                            self._remove_sandbox),
            "PostStartContainer": self._event(api.PostStartContainerRequest, api.PostStartContainerResponse,
                                              self._post_start),
            "StopContainer": self._stop_container,
            "RemoveContainer": self._event(api.RemoveContainerRequest, api.RemoveContainerResponse, None),
            "CreateContainer": self._create_container,
            "UpdateContainer": self._update_container,
        }
        self._services = {PLUGIN_SERVICE: {name: self._timed(name, h) for name, h in handlers.items()}}

    # --- running ------------------------------------------------------------------------------------------

    def start(self) -> None:
        ready = threading.Event()

        def main() -> None:
            async def run() -> None:
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                ready.set()
                await self.serve(self._stop)
            asyncio.run(run())

        self._thread = threading.Thread(target=main, name="nri", daemon=True)
        self._thread.start()
        ready.wait(5)

    def stop(self, timeout: float = 5.0) -> None:
        """End the plugin and wait for its thread; safe to call again (the loop may be gone by then)."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def serve(self, stop: asyncio.Event) -> None:
        """Connect, serve until the connection ends, back off, repeat, until ``stop`` is set."""
        s = self.settings
        delay, quiet, settle_until, quick = s.backoff_initial, False, 0.0, 0.0
        log.info("nri plugin starting socket=%s name=%s-%s events=%#x budget_ms=%.0f", s.socket_path, s.index,
                 s.name, self.events, s.hook_budget * 1000)
        watch = SocketWatch(s.socket_path)
        try:
            while not stop.is_set():
                watch.reset()                    # a socket made from here on is news to the wait below
                seen = _socket_id(s.socket_path)
                registered, reason, detail = await self._session_until(stop)
                if stop.is_set():
                    break
                if self._metrics is not None:
                    self._metrics.nri_reconnects.labels(self._metrics.node, reason).inc()
                if registered:
                    delay, quiet = s.backoff_initial, False
                if not registered and reason in _NOT_LISTENING and time.monotonic() < settle_until:
                    # the new socket is not listening yet: look again soon (10 ms, doubling up to 100 ms),
                    # with no back-off step and no log line
                    wait, quick = quick, min(quick * 2, _QUICK_RETRY_MAX)
                else:
                    settle_until = 0.0
                    if not quiet:
                        log.warning("nri runtime unavailable reason=%s detail=%s retry_in=%.1fs", reason, detail,
                                    delay)
                        if delay >= s.backoff_max:
                            log.warning("nri plugin keeps retrying every %.0fs and when %s appears; no further logs "
                                        "until connected", s.backoff_max, s.socket_path)
                            quiet = True
                    wait = delay * random.uniform(0.9, 1.1)
                    delay = min(delay * 2, s.backoff_max)
                if await self._wait_retry(wait, seen, stop, watch) and not settle_until:
                    settle_until, quick = time.monotonic() + s.socket_settle, _FIRST_QUICK_RETRY
        finally:
            watch.close()
        log.info("nri plugin stopped")

    async def _wait_retry(self, delay: float, seen: tuple[int, int] | None, stop: asyncio.Event,
                          watch: SocketWatch) -> bool:
        """Sleep ``delay``, cut short by stop or by a new socket (a restarted runtime); True for the latter.

        A new socket is one inotify saw created since the last dial, or one whose (st_dev, st_ino) differs from
        ``seen`` — the stat poll, which alone covers a missing directory or no inotify, but cannot tell a socket
        re-created with a reused inode number (ext4) from the old one.
        """
        end = time.monotonic() + delay
        waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(watch.changed.wait())}
        try:
            while not stop.is_set():
                if watch.changed.is_set():
                    log.debug("nri socket re-created (inotify); retrying now socket=%s", self.settings.socket_path)
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return False
                await asyncio.wait(waiters, timeout=min(left, self.settings.socket_poll),
                                   return_when=asyncio.FIRST_COMPLETED)
                if watch.changed.is_set() or stop.is_set():
                    continue
                watch.arm()                      # the directory may exist by now
                now = _socket_id(self.settings.socket_path)
                if now is not None and now != seen:
                    log.debug("nri socket appeared (stat); retrying now socket=%s", self.settings.socket_path)
                    return True
            return False
        finally:
            for w in waiters:
                w.cancel()

    async def _session_until(self, stop: asyncio.Event) -> tuple[bool, str, str]:
        session = asyncio.ensure_future(self._session())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not session.done():
            self._close("plugin stopping")
        return await session

    def _close(self, reason: str) -> None:
        if self._mux is not None:
            self._mux.close(reason)

    async def _session(self) -> tuple[bool, str, str]:
        """One connection from dial to close: (registered, reason label, detail)."""
        loop = asyncio.get_running_loop()
        try:
            _, mux = await loop.create_unix_connection(
                functools.partial(Mux, self.settings.partial_frame_timeout, self.settings.socket_path),
                self.settings.socket_path)
        except FileNotFoundError:
            return False, "socket_absent", self.settings.socket_path
        except ConnectionRefusedError:
            return False, "refused", f"nobody listens on {self.settings.socket_path}"
        except OSError as e:
            return False, "connect_error", str(e)
        runtime = Channel(functools.partial(mux.send, RUNTIME_CONN), name="runtime")
        plugin = Channel(functools.partial(mux.send, PLUGIN_CONN), self._services, name="plugin")
        mux.open(PLUGIN_CONN, plugin.feed, plugin.partial)
        mux.open(RUNTIME_CONN, runtime.feed, runtime.partial)

        def closed(fut: asyncio.Future[str]) -> None:
            runtime.close(fut.result())
            plugin.close(fut.result())
        mux.closed.add_done_callback(closed)
        self._mux, self._sync = mux, ([], [])
        registered = False
        try:
            req = api.RegisterPluginRequest(plugin_name=self.settings.name, plugin_idx=self.settings.index)
            await runtime.call(RUNTIME_SERVICE, "RegisterPlugin", req.SerializeToString(),
                               self.settings.registration_timeout)
            registered = True
            self._set_connected(True)
            log.info("nri plugin registered socket=%s name=%s-%s", self.settings.socket_path, self.settings.index,
                     self.settings.name)
            detail = await mux.closed
        except (TTRPCError, ConnectionError) as e:
            return False, "register_failed", str(e)
        finally:
            mux.close("session over")
            self._mux = None
            self._set_connected(False)
        if detail.startswith("protocol error"):
            return registered, "protocol_error", detail
        if detail.startswith("stalled"):
            return registered, "partial_timeout", detail
        return registered, "eof" if "EOF" in detail else "closed", detail

    def _set_connected(self, up: bool) -> None:
        if up:
            self.registrations += 1
        self.connected = up
        if self._metrics is not None:
            self._metrics.nri_connected.labels(self._metrics.node).set(1 if up else 0)

    # --- running hooks under the budget ---------------------------------------------------------------------

    async def _run(self, hook: str, budget: float, fn: Callable[..., Any], *args: Any) -> tuple[Any, bool]:
        """(result, True), or (None, False) after logging and counting why the empty answer goes out."""
        loop = asyncio.get_running_loop()
        started, ok = time.perf_counter(), False
        try:
            result, ok = await asyncio.wait_for(loop.run_in_executor(self._pool, fn, *args), budget), True
            return result, ok
        except TimeoutError:
            self._failed(hook, "timeout", f"no answer within {budget * 1000:.0f} ms")
        except Exception as e:            # a hook bug must not fail the container: fail open, say so
            log.debug("nri hook failure detail hook=%s", hook, exc_info=True)
            self._failed(hook, "error", f"{type(e).__name__}: {e}")
        finally:                          # upstream's koordlet_runtime_hook_invoked_duration_milliseconds
            if self._metrics is not None:
                self._metrics.runtime_hook(hook, ok, time.perf_counter() - started)
        return None, False

    def _failed(self, hook: str, reason: str, detail: str) -> None:
        log.warning("nri hook answered empty (fail-open) hook=%s reason=%s detail=%s", hook, reason, detail)
        if self._metrics is not None:
            self._metrics.nri_hook_errors.labels(self._metrics.node, hook, reason).inc()

    def _budget(self, deadline: float | None) -> float:
        budget = self.settings.hook_budget
        return min(budget, deadline / 2) if deadline else budget

    def _decode(self, hook: str, cls: type[Message], payload: bytes) -> Any:
        try:
            return cls.FromString(payload)
        except DecodeError as e:
            self._failed(hook, "bad_request", f"undecodable {cls.__name__}: {e}")
            return None

    def _timed(self, hook: str, handler: Handler) -> Handler:
        async def timed(payload: bytes, deadline: float | None) -> bytes:
            started = time.perf_counter()
            try:
                return await handler(payload, deadline)
            finally:
                if self._metrics is not None:
                    self._metrics.nri_hook_seconds.labels(self._metrics.node, hook).observe(
                        time.perf_counter() - started)
        return timed

    # --- the Plugin service -----------------------------------------------------------------------------------

    async def _configure(self, payload: bytes, deadline: float | None) -> bytes:
        """Answer with our event mask, or the one the runtime's plugin configuration names (``events``, as
        upstream: nri_plugin/runtimeconfig.py); a configuration that cannot be honoured fails Configure, and the
        runtime drops the plugin, as upstream's does."""
        req = self._decode("Configure", api.ConfigureRequest, payload)
        events = self.events
        if req is not None:
            methods = self._services[PLUGIN_SERVICE]
            handled = sum(1 << (e - 1) for e in range(1, api.LAST) if event_name(e) in methods)
            try:
                events = subscription(req.config, self.events, handled)
            except ConfigError as e:
                log.error("nri configuration refused runtime=%s error=%s", req.runtime_name, e)
                raise TTRPCError(Code.INVALID_ARGUMENT, str(e)) from None
            if req.request_timeout > 0:
                self._request_timeout = req.request_timeout / 1000
            log.info("nri configured runtime=%s version=%s nri=%s request_timeout_ms=%d events=%#x", req.runtime_name,
                     req.runtime_version, req.NRI_version or "<0.12", req.request_timeout, events)
            self.hooks.configure(req.runtime_name, req.runtime_version)
        return api.ConfigureResponse(events=events).SerializeToString()

    async def _synchronize(self, payload: bytes, deadline: float | None) -> bytes:
        """Chunks (more=true) are collected and answered {more: true}; the last one gets the drift updates."""
        req = self._decode("Synchronize", api.SynchronizeRequest, payload)
        if req is None:
            return api.SynchronizeResponse().SerializeToString()
        pods, containers = self._sync
        pods.extend(req.pods)
        containers.extend(req.containers)
        if req.more:
            return api.SynchronizeResponse(more=True).SerializeToString()
        self._sync = ([], [])
        budget = max(self.settings.hook_budget, self._request_timeout / 2)
        updates, ok = await self._run("Synchronize", budget, self.hooks.synchronize, pods, containers)
        log.info("nri synchronized pods=%d containers=%d updates=%d", len(pods), len(containers),
                 len(updates) if ok else 0)
        return api.SynchronizeResponse(update=updates if ok else []).SerializeToString()

    async def _shutdown(self, payload: bytes, deadline: float | None) -> bytes:
        log.info("nri runtime asked the plugin to shut down; reconnecting later")
        return api.Empty().SerializeToString()

    async def _state_change(self, payload: bytes, deadline: float | None) -> bytes:
        """NRI ≤ v0.11 delivers sandbox and post-start events here."""
        ev = self._decode("StateChange", api.StateChangeEvent, payload)
        if ev is not None:
            action = {api.RUN_POD_SANDBOX: self._run_sandbox, api.REMOVE_POD_SANDBOX: self._remove_sandbox,
                      api.POST_START_CONTAINER: self._post_start}.get(ev.event)
            if action is not None:
                await action(ev, deadline)
        return api.Empty().SerializeToString()

    def _event(self, req_cls: type[Message], resp_cls: type[Message],
               action: Callable[[Any, float | None], Awaitable[None]] | None) -> Handler:
        """A dedicated event RPC (NRI ≥ v0.12): the same action as its StateChange, an empty reply."""
        name = req_cls.__name__.removesuffix("Request")

        async def handler(payload: bytes, deadline: float | None) -> bytes:
            req = self._decode(name, req_cls, payload)
            if req is not None and action is not None:
                await action(req, deadline)
            return resp_cls().SerializeToString()
        return handler

    async def _run_sandbox(self, ev: Any, deadline: float | None) -> None:
        await self._run("RunPodSandbox", self._budget(deadline), self.hooks.run_pod_sandbox, ev.pod)

    async def _remove_sandbox(self, ev: Any, deadline: float | None) -> None:
        await self._run("RemovePodSandbox", self._budget(deadline), self.hooks.remove_pod_sandbox, ev.pod)

    async def _post_start(self, ev: Any, deadline: float | None) -> None:
        await self._run("PostStartContainer", self._budget(deadline), self.hooks.post_start_container, ev.pod,
                        ev.container)

    async def _create_container(self, payload: bytes, deadline: float | None) -> bytes:
        req = self._decode("CreateContainer", api.CreateContainerRequest, payload)
        resp = api.CreateContainerResponse()
        if req is not None:
            adjust, ok = await self._run("CreateContainer", self._budget(deadline), self.hooks.create_container,
                                         req.pod, req.container)
            if ok and adjust.ByteSize():
                resp.adjust.CopyFrom(adjust)
        return resp.SerializeToString()

    async def _update_container(self, payload: bytes, deadline: float | None) -> bytes:
        req = self._decode("UpdateContainer", api.UpdateContainerRequest, payload)
        resp = api.UpdateContainerResponse()
        if req is not None:
            updates, ok = await self._run("UpdateContainer", self._budget(deadline), self.hooks.update_container,
                                          req.pod, req.container, req.linux_resources)
            if ok:
                resp.update.extend(updates)
        return resp.SerializeToString()

    async def _stop_container(self, payload: bytes, deadline: float | None) -> bytes:
        """Nothing of ours changes when a container stops: no updates (answered if a runtime calls it)."""
        return api.StopContainerResponse().SerializeToString()
