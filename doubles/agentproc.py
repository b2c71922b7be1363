"""The agent as its own daemon (``python -m koordlet run --standalone ...``), for tests and benches that need the
real process: started, stopped (SIGTERM) or killed (SIGKILL) by PID, restarted with the same options; its log in a
file, its ``/metrics`` and ``/events`` read over HTTP on a free loopback port.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from doubles.processes import terminate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProcess:
    """``koordlet run --standalone`` with its state under ``workdir`` (metric cache, checkpoints, reports, and
    ``/var/run`` unless ``args`` name another) and ``args`` added to the command line."""

    def __init__(self, workdir: str, args: Sequence[str], node_name: str = "rt-node") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(workdir, "agent.log")
        defaults = {"--tsdb-path": os.path.join(workdir, "cache"), "--var-run-root-dir": os.path.join(workdir, "run"),
                    "--prediction-checkpoint-filepath": os.path.join(workdir, "checkpoints"),
                    "--report-dir": os.path.join(workdir, "reports")}
        self.cmd = [sys.executable, "-m", "koordlet", "run", "--standalone", "--node-name", node_name,
                    "--addr", f"127.0.0.1:{self.port}",
                    *(x for flag, value in defaults.items() if flag not in args for x in (flag, value)), *args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        os.makedirs(os.path.join(workdir, "run"), exist_ok=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts + 1}: {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        self.starts += 1

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``; the exit status."""
        if self.proc is None:
            return None
        rc, self.proc = terminate(self.proc, timeout), None
        return rc

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind (the NRI connection simply drops)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    # --- reading it -------------------------------------------------------------------------------------------

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``; 0 when there is none."""
        try:
            _, text = self.get("/metrics")
        except OSError:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, _, value = line.rpartition(" ")
            found = dict(re.findall(r'(\w+)="([^"]*)"', head))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(value)
        return total

    def events(self, limit: int = 1024) -> list[dict[str, Any]]:
        """The executor's audit trail (/events), oldest first."""
        status, body = self.get(f"/events?limit={limit}")
        if status != 200:
            raise RuntimeError(f"/events answered {status}: {body[:200]}")
        events = json.loads(body)
        assert isinstance(events, list)
        return events

    def ready(self) -> bool:
        try:
            return self.get("/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_lines(self, pattern: str, start: int = 1) -> list[str]:
        """Lines of the log matching ``pattern``, from the ``start``-th start of the process on."""
        text = self.log()
        marker = f"---- start {start}:"
        text = text[text.find(marker):] if marker in text else text
        return [line for line in text.splitlines() if re.search(pattern, line)]

    def wait(self, predicate: Any, timeout: float, what: str, step: float = 0.05) -> None:
        """Poll ``predicate`` until true; on timeout, AssertionError with ``what`` and the log's tail."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"agent exited ({self.proc.returncode}) waiting for {what}: {self.log()[-3000:]}")
            time.sleep(step)
        raise AssertionError(f"timed out waiting for {what}: {self.log()[-3000:]}")
