"""Reading operator-written YAML files (config, pods file, NodeSLO) with errors that name the file.

The files are local but still input: a bounded size and a bounded nesting depth, refused with a message (deeper
documents would otherwise exhaust the parser's recursion and take the reading thread down with them).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

MAX_BYTES = 16 << 20       # far above a pods file of thousands of pods
MAX_DEPTH = 64             # Kubernetes objects nest ~10 levels


class _TooDeep(yaml.YAMLError):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document nested deeper than :data:`MAX_DEPTH` before recursing into it."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(f"nested deeper than {MAX_DEPTH} levels")
            # types-PyYAML says index: int; PyYAML also passes a mapping's key node (and None for the root)
            return super().compose_node(parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1


def load_yaml(path: str, what: str, error: type[Exception] = ValueError) -> Any:
    """The parsed document; ``error("<what> <path>: <problem>")`` when unreadable, too big, too deep or not YAML."""
    try:
        with open(path, encoding="utf-8") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                raise error(f"{what} {path}: {size} bytes, more than the {MAX_BYTES} accepted")
            loader = _BoundedLoader(f)
            try:
                return loader.get_single_data()
            finally:
                loader.dispose()
    except OSError as e:
        raise error(f"{what} {path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise error(f"{what} {path}: not UTF-8: {e.reason}") from None
    except yaml.YAMLError as e:
        raise error(f"{what} {path}: not valid YAML: {e}") from None
