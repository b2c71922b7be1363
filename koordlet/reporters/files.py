"""Standalone sink: the objects that would be sent to the API server, written as YAML files.

Each file is replaced atomically (write a temporary file in the same directory, fsync, rename), so a reader
never sees half a report.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import yaml


def write_yaml_atomic(directory: str, name: str, obj: Any) -> str:
    os.makedirs(directory, mode=0o755, exist_ok=True)
    path = os.path.join(directory, name)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(obj, f, sort_keys=False, default_flow_style=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
