"""Small helpers the doubles share for the processes they start: the end of a process's log, and stopping it."""

from __future__ import annotations

import os
import signal
import subprocess


def file_tail(path: str, n: int) -> str:
    """The last ``n`` bytes of a log file as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
