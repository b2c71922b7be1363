"""The service manager's notification protocol (``Type=notify``, ``WatchdogSec=``) without libsystemd.

systemd passes ``$NOTIFY_SOCKET`` (a filesystem path, or ``@name`` for Linux's abstract namespace) and, with
``WatchdogSec=``, ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``: the watchdog is ours only when it names our PID). Each
message is one datagram of ``KEY=value`` lines; systemd checks the sender's PID against the unit's main PID
(``NotifyAccess=main``), so every message goes out from this process, never from a child.

What the agent says and when is decided above this module (:mod:`koordlet.agent` from
:func:`koordlet.component.assess`); this module only speaks the protocol: ``READY=1`` once, ``STATUS=`` when its
text changes, ``WATCHDOG=1`` when the caller says every loop makes progress, ``STOPPING=1`` at shutdown. Outside
systemd (no ``$NOTIFY_SOCKET``) every call is a cheap no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def socket_address(value: str) -> str | None:
    """``$NOTIFY_SOCKET`` as an AF_UNIX address: an absolute path, or ``@name`` (abstract: a leading NUL byte).
    None for anything else (unset, relative, or a transport this module does not speak, such as ``vsock:``)."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between ``WATCHDOG=1`` messages: half of ``$WATCHDOG_USEC`` (as sd_watchdog_enabled(3) advises),
    or None when no watchdog is set for this process (``$WATCHDOG_PID`` naming another process: a child that
    inherited the environment must not ping for its parent)."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    owner = environ.get("WATCHDOG_PID", "")
    if usec <= 0 or (owner and owner != str(pid)):
        return None
    return usec / 2e6


class Notifier:
    """One process's messages to its service manager. ``address`` None: not started by systemd, nothing is sent.

    ``clock`` is injectable for tests; the datagram socket is opened on first use and kept (one fd)."""

    def __init__(self, address: str | None, watchdog: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self.watchdog_interval = watchdog if address is not None else None
        self._clock = clock
        self._sock: socket.socket | None = None
        self._status: str | None = None
        self._pinged: float | None = None
        self._failed = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, pid: int | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = socket_address(env.get("NOTIFY_SOCKET", ""))
        if env.get("NOTIFY_SOCKET") and address is None:
            log.warning("NOTIFY_SOCKET=%s is not a unix socket path or @abstract name; not notifying systemd",
                        env["NOTIFY_SOCKET"])
        return cls(address, watchdog_interval(env, os.getpid() if pid is None else pid))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *assignments: str) -> bool:
        """One datagram of ``KEY=value`` lines; False when not under systemd or the socket refused it (a service
        manager that went away must not stop the agent: logged once, then quiet until it works again)."""
        if self.address is None or not assignments:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as e:
            if not self._failed:
                log.warning("sd_notify failed socket=%s error=%s", self.address.replace("\0", "@"), e)
            self._failed = True
            return False
        if self._failed:
            log.info("sd_notify works again socket=%s", self.address.replace("\0", "@"))
        self._failed = False
        return True

    def status(self, text: str) -> None:
        """``STATUS=`` (what ``systemctl status`` shows), sent only when the text changed."""
        if text != self._status and self.send(f"STATUS={_one_line(text)}"):
            self._status = text

    def ready(self, status: str) -> None:
        """``READY=1``: start-up is complete (systemd's start job ends, units ordered after us start)."""
        if self.send("READY=1", f"STATUS={_one_line(status)}"):
            self._status = status

    def alive(self, progressing: bool, status: str) -> None:
        """Called at least every :attr:`watchdog_interval`: ``WATCHDOG=1`` only while ``progressing`` (every
        supervised loop made progress within its deadline), so a stuck loop lets ``WatchdogSec=`` run out and
        systemd restarts the agent. ``STATUS=`` follows ``status``."""
        now = self._clock()
        ping = (progressing and self.watchdog_interval is not None
                and (self._pinged is None or now - self._pinged >= self.watchdog_interval * 0.9))
        changed = status != self._status
        fields = (["WATCHDOG=1"] if ping else []) + ([f"STATUS={_one_line(status)}"] if changed else [])
        if fields and self.send(*fields):
            if ping:
                self._pinged = now
            if changed:
                self._status = status

    def stopping(self, status: str) -> None:
        """``STOPPING=1``: shutdown has begun (systemd stops expecting watchdog pings and shows the status)."""
        if self.send("STOPPING=1", f"STATUS={_one_line(status)}"):
            self._status = status

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(text: str) -> str:
    """A newline would start a new assignment in the datagram: STATUS must stay one line."""
    return " ".join(text.split())
