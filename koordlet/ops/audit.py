"""Upstream koordlet's audit log (gate ``AuditEvents``) and its HTTP reader (gate ``AuditEventsHTTPHandler``).

Facts: upstream ``pkg/koordlet/audit`` (auditor.go, event_logger.go, logger.go, types.go, config.go) and
``cmd/koordlet/main.go``:

- **The log.** One JSON object per line in ``<audit-log-dir>/audit.log``:
  ``{"createdAt","type","level","namespace","name","container","reason","message"}`` (Go's ``omitempty``: empty
  fields are left out, ``createdAt`` is always there, RFC 3339 with nanoseconds and the local offset). An event
  logged at a verbosity above ``audit-verbose`` is dropped (0 keeps all); upstream logs kernel writes at 3 and
  evictions at 0, and so does the agent (``Executor``, ``qos.evict``). At 2 MiB the file is renamed to
  ``audit-<YYYY-MM-DD-hh-mm-ss>-<n>.log`` (local time, n from 0 to 8 for renames within one second) and a new
  ``audit.log`` begun; the oldest rotated files go so that ``audit-max-disk-space-mb`` / 2 files remain,
  ``audit.log`` included. The directory is created (0755) at start-up, the file at the first event.
- **The reader** (``/events``): ``?size=N`` events per page (default 256, more than ``audit-max-events-limit`` is
  400 ``size(N) exceeds the limit(M)``; a size that is not an integer means the default), newest first, across
  ``audit.log`` then the rotated files newest to oldest. A first request opens a reader with a random page token;
  ``?pageToken=T`` continues it (409 ``invalid pageToken T`` when unknown or expired). At most
  ``audit-max-concurrent-readers`` readers are kept (the oldest go first), each for 10 minutes after its last
  use. ``Accept: application/json`` answers ``{"NextPageToken": T, "Events": [...]}`` (no token once the log is
  exhausted); otherwise the events as JSON lines with a ``Next-Page-Token`` header while more remain.

Differences, each because upstream's behaviour is a defect: the writer writes each event through to the file (Go
buffers up to 1 MiB and flushes at most every 5 s, so a reader misses the newest events); an ``audit.log`` left by
an earlier run counts toward its 2 MiB (upstream counts from 0 after each restart); a reader whose page
token expired is refused without the page being written after the error (upstream writes both); expired readers
are dropped at each request instead of by a ticker whose list walk stops at the first removal.

The event store itself is :class:`AuditLog` (files) or, with ``AuditEvents`` off, any newest-first iterable of
events (the agent serves its in-memory trail of kernel writes then, where upstream answers nothing).
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from koordlet.base.diskfull import AUDIT, DiskFull

log = logging.getLogger(__name__)

MAX_FILE_SIZE = 1 << 21          # 2 MiB: upstream's MaxFileSize
LOG_NAME = "audit.log"
DIR_MODE = 0o755
CHUNK = 4096                     # upstream's ChunkSize for reading backwards
DEFAULT_EVENTS_LIMIT = 256
READER_TTL = 600.0               # upstream's ActiveReaderTTL: 10 minutes

V_WRITE = 3                      # upstream: every kernel write (resourceexecutor, the hooks' updaters)
V_EVICT = 0                      # upstream: every eviction (qosmanager/plugins/util/evictor.go)


def go_time(ts: float) -> str:
    """A Unix time as Go's ``time.Time`` marshals to JSON: RFC 3339, nanoseconds without trailing zeros, the local
    offset (``Z`` when it is zero)."""
    moment = dt.datetime.fromtimestamp(ts).astimezone()
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{moment.microsecond:06d}".rstrip("0")
    if frac:
        text += "." + frac
    offset = moment.utcoffset() or dt.timedelta(0)
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@dataclass(frozen=True)
class Event:
    """Upstream's ``audit.Event``; ``created_at`` in Unix seconds."""

    created_at: float
    type: str = ""              # node | pod | group | unknown
    namespace: str = ""
    name: str = ""
    container: str = ""
    reason: str = ""
    message: str = ""
    level: str = ""

    def to_json(self) -> dict[str, object]:
        """As Go marshals it (``omitempty`` on every field but the time)."""
        out: dict[str, object] = {"createdAt": go_time(self.created_at)}
        for key, value in (("type", self.type), ("level", self.level), ("namespace", self.namespace),
                           ("name", self.name), ("container", self.container), ("reason", self.reason),
                           ("message", self.message)):
            if value:
                out[key] = value
        return out


def event_of_owner(created_at: float, owner: str, reason: str, message: str) -> Event:
    """An event from the executor's owner string: ``pod <ns>/<name>`` is a pod event, ``qos <tier>`` and
    ``hostapp <name>`` are group events (upstream names the kube QoS tier or the host application), ``node`` a node
    event, anything else an unknown object named by the owner."""
    kind, _, rest = owner.partition(" ")
    if kind == "pod" and "/" in rest:
        namespace, _, name = rest.partition("/")
        return Event(created_at, "pod", namespace, name, reason=reason, message=message)
    if kind in ("qos", "hostapp") and rest:
        return Event(created_at, "group", name=rest, reason=reason, message=message)
    if owner == "node":
        return Event(created_at, "node", reason=reason, message=message)
    return Event(created_at, "unknown", name=owner, reason=reason, message=message)


def parse_event(line: bytes) -> dict[str, object] | None:
    """One line of the log as the JSON object it holds; None for a line that is not one (a torn write)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------------------------------
# the log files
# --------------------------------------------------------------------------------------------------

def rotated_files(directory: str) -> list[str]:
    """The rotated files, oldest first (their names sort by time)."""
    return sorted(glob.glob(os.path.join(glob.escape(directory), "audit-*.log")))


def _backwards(path: str) -> Iterator[bytes]:
    """The non-empty lines of a file, last first, read in chunks from the end (a 2 MiB file is never held whole).
    The file's size is taken when it is opened: what is appended later is not read (as upstream)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally (a generator may be abandoned)
    except OSError:
        return
    try:
        end = os.fstat(f.fileno()).st_size
        tail = b""
        while end > 0:
            start = max(0, end - CHUNK)
            f.seek(start)
            block = f.read(end - start) + tail
            end = start
            lines = block.split(b"\n")
            tail = lines[0] if start > 0 else b""
            for line in reversed(lines if start == 0 else lines[1:]):
                line = line.strip()
                if line:
                    yield line
    finally:
        f.close()


@dataclass
class AuditLog:
    """Upstream's event writer and reverse reader over ``directory``. Thread-safe."""

    directory: str
    max_disk_mb: int = 16
    verbose: int = 3
    max_file_size: int = MAX_FILE_SIZE
    clock: Callable[[], float] = time.time
    disk_full: DiskFull = field(default_factory=DiskFull)     # the agent's, shared with its other writers
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _fd: int | None = field(default=None, init=False)
    _size: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.max_disk_mb <= 0:
            raise ValueError(f"audit-max-disk-space-mb must be above 0, got {self.max_disk_mb}")
        os.makedirs(self.directory, DIR_MODE, exist_ok=True)
        os.chmod(self.directory, DIR_MODE)
        self.disk_full.watch(AUDIT, self.directory, "audit events are not recorded until there is space")

    @property
    def max_files(self) -> int:
        """Files kept, audit.log included (upstream's maxFileNum)."""
        return self.max_disk_mb * (1 << 20) // MAX_FILE_SIZE

    def log(self, verbose: int, event: Event) -> bool:
        """Append ``event`` unless its verbosity is above the log's; True when written. An OSError is logged and
        returned as False, never raised into a strategy; a full filesystem is the ``audit`` state of
        ``disk_full`` instead, logged when it begins and ends."""
        if self.verbose > 0 and verbose > self.verbose:
            return False
        line = json.dumps(event.to_json(), separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                if self._fd is None:
                    self._open()
                assert self._fd is not None
                os.write(self._fd, line)
                self._size += len(line)
                if self._size >= self.max_file_size:
                    self._rotate()
            except OSError as e:
                if not self.disk_full.failed(AUDIT, e):
                    log.warning("audit log write failed dir=%s error=%s", self.directory, e)
                return False
        self.disk_full.wrote(AUDIT)
        return True

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def newest_first(self) -> Iterator[dict[str, object]]:
        """Every event in the log, newest first: audit.log, then the rotated files newest to oldest. Lines that do
        not parse are skipped (upstream logs and skips them too)."""
        files = [os.path.join(self.directory, LOG_NAME)] + list(reversed(rotated_files(self.directory)))
        for path in files:
            for line in _backwards(path):
                event = parse_event(line)
                if event is not None:
                    yield event

    # --- internals (under the lock) -------------------------------------------------------------------------

    def _open(self) -> None:
        path = os.path.join(self.directory, LOG_NAME)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
        # what the file already holds counts (upstream starts from 0 at each start, so a file grows past 2 MiB
        # once per restart)
        self._size = os.fstat(self._fd).st_size

    def _rotate(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.localtime(self.clock()))
        target = os.path.join(self.directory, f"audit-{stamp}-0.log")
        for i in range(1, 9):
            if not os.path.exists(target):
                break
            target = os.path.join(self.directory, f"audit-{stamp}-{i}.log")
        os.rename(os.path.join(self.directory, LOG_NAME), target)
        old = rotated_files(self.directory)
        for path in old[:max(0, len(old) - max(self.max_files - 1, 0))]:
            try:
                os.unlink(path)
                log.info("audit log file removed path=%s", path)
            except OSError as e:
                log.warning("audit log file not removed path=%s error=%s", path, e)
        self._open()


# --------------------------------------------------------------------------------------------------
# the HTTP reader
# --------------------------------------------------------------------------------------------------

@dataclass
class _Reader:
    token: str
    events: Iterator[dict[str, object]]
    used: float
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Page:
    """An HTTP answer of /events, independent of the server."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


TEXT = "text/plain; charset=utf-8"


def _error(status: int, message: str) -> Page:
    return Page(status, TEXT, (message + "\n").encode())     # Go's http.Error appends a newline


@dataclass
class EventPager:
    """Upstream's ``/events`` handler over ``source``, a function returning the events newest first."""

    source: Callable[[], Iterable[dict[str, object]]]
    max_readers: int = 4
    max_limit: int = 2048
    default_limit: int = DEFAULT_EVENTS_LIMIT
    reader_ttl: float = READER_TTL
    clock: Callable[[], float] = time.monotonic
    _readers: dict[str, _Reader] = field(default_factory=dict, init=False)     # insertion order = age
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def serve(self, query: str, accept: str) -> Page:
        """One request: ``query`` is the URL's query string, ``accept`` the Accept header ("" when absent)."""
        params = parse_qs(query, keep_blank_values=True)
        size_text = (params.get("size") or [""])[0]
        token = (params.get("pageToken") or [""])[0]
        size = self.default_limit
        try:
            asked = int(size_text, 10)
        except ValueError:
            asked = None
        if asked is not None:
            if asked > self.max_limit:
                return _error(400, f"size({asked}) exceeds the limit({self.max_limit})")
            size = asked
        now = self.clock()
        with self._lock:
            self._expire(now)
            if token:
                reader = self._readers.get(token)
                if reader is None:
                    return _error(409, f"invalid pageToken {token}")
            else:
                reader = _Reader(str(uuid.uuid4()), iter(self.source()), now)
                self._readers[reader.token] = reader
                while len(self._readers) > self.max_readers:
                    del self._readers[next(iter(self._readers))]
            reader.used = now
        events: list[dict[str, object]] = []
        exhausted = False
        with reader.lock:
            for _ in range(max(size, 0)):
                try:
                    events.append(next(reader.events))
                except StopIteration:
                    exhausted = True
                    break
        if exhausted:
            with self._lock:
                self._readers.pop(reader.token, None)      # nothing more to page: its token goes too
        if any(part.strip() == "application/json" for part in accept.split(",")):
            body = {"NextPageToken": "" if exhausted else reader.token, "Events": events}
            return Page(200, "application/json; charset=utf-8", json.dumps(body, separators=(",", ":")).encode())
        if not events:
            return Page(200, TEXT, b"")
        lines = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events)
        return Page(200, TEXT, lines, () if exhausted else (("Next-Page-Token", reader.token),))

    def readers(self) -> int:
        with self._lock:
            return len(self._readers)

    def _expire(self, now: float) -> None:
        for token in [t for t, r in self._readers.items() if now - r.used > self.reader_ttl]:
            log.info("audit reader expired token=%s", token)
            del self._readers[token]


def trail_source(events: Callable[[], list[dict[str, object]]]) -> Callable[[], Iterator[dict[str, object]]]:
    """The executor's in-memory trail (oldest first, its own format) as upstream events, newest first."""
    def newest_first() -> Iterator[dict[str, object]]:
        for e in reversed(events()):
            message = f"update {e.get('file')} to {e.get('new')}"
            if e.get("old"):
                message += f" (was {e.get('old')})"
            created = e.get("createdAt")
            stamp = float(created) if isinstance(created, (int, float)) else 0.0
            yield event_of_owner(stamp, str(e.get("owner", "")), str(e.get("reason", "")), message).to_json()
    return newest_first


__all__ = ["V_EVICT", "V_WRITE", "AuditLog", "Event", "EventPager", "Page", "event_of_owner", "go_time",
           "parse_event", "trail_source"]
