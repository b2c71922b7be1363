"""Reading operator-written YAML files (config, pods file, later NodeSLO) with errors that name the file."""

from __future__ import annotations

from typing import Any

import yaml


def load_yaml(path: str, what: str, error: type[Exception] = ValueError) -> Any:
    """The parsed document; ``error("<what> <path>: <problem>")`` when unreadable or not YAML."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise error(f"{what} {path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise error(f"{what} {path}: not valid YAML: {e}") from None
