"""Reading operator-written YAML files (config, pods file, NodeSLO) with errors that name the file.

The files are local but still input: a bounded size and a bounded nesting depth, refused with a message (deeper
documents would otherwise exhaust the parser's recursion and take the reading thread down with them). Aliases
are bounded too: a few lines of anchors that refer to anchors (``&a [x, x]``, ``&b [*a, *a]``, ...) stand for a
document exponentially larger than the file, which any code walking it (an error message that prints a value,
a comparison) would expand; a document whose aliases would add more than :data:`MAX_ALIAS_NODES` nodes, or nest
it deeper than :data:`MAX_DEPTH` once expanded (an alias to an enclosing node never ends), is refused. A scalar
that PyYAML recognizes but cannot build (``2020-13-45``, ``!!int abc``, an integer of more than 4300 digits) is
refused like any invalid YAML.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

MAX_BYTES = 16 << 20       # far above a pods file of thousands of pods
MAX_DEPTH = 64             # Kubernetes objects nest ~10 levels
MAX_ALIAS_NODES = 1_000_000   # nodes the aliases of one document may add once expanded (go-yaml limits them too)


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


def _check_aliases(root: yaml.Node) -> None:
    """Refuse (``_TooDeep``) a node graph whose aliases, expanded, nest deeper than MAX_DEPTH or add more than
    MAX_ALIAS_NODES nodes. Linear in the distinct nodes: each is measured once (its expanded size and height)."""
    measured: dict[int, tuple[int, int]] = {}          # id(node) -> (expanded size, height)

    def measure(node: yaml.Node, level: int) -> tuple[int, int]:
        known = measured.get(id(node))
        if known is None:
            if level > MAX_DEPTH:                       # also ends an alias to an enclosing node
                raise _TooDeep(f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded")
            size, height = 1, 0
            if isinstance(node, yaml.SequenceNode):
                children: list[yaml.Node] = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            else:
                children = []
            for child in children:
                child_size, child_height = measure(child, level + 1)
                size, height = size + child_size, max(height, child_height + 1)
            known = measured[id(node)] = (size, height)
        if level + known[1] > MAX_DEPTH:
            raise _TooDeep(f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded")
        return known

    size, _ = measure(root, 1)
    if size - len(measured) > MAX_ALIAS_NODES:
        raise _TooDeep(f"its aliases expand to {size} nodes ({len(measured)} written), more than "
                       f"{MAX_ALIAS_NODES} added nodes accepted")


def _parse(f: Any) -> Any:
    loader = _BoundedLoader(f)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: str, what: str, error: type[Exception] = ValueError) -> Any:
    """The parsed document; ``error("<what> <path>: <problem>")`` when unreadable, too big, too deep, with too
    many aliases or not YAML. Nothing else escapes for any file content."""
    try:
        with open(path, encoding="utf-8") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                problem = f"{size} bytes, more than the {MAX_BYTES} accepted"
            else:
                try:
                    return _parse(f)
                except yaml.YAMLError as e:
                    problem = f"not valid YAML: {e}"
                except UnicodeDecodeError as e:
                    problem = f"not UTF-8: {e.reason}"
                # PyYAML's constructors build scalars with int(), float(), datetime(), dict lookups: a scalar
                # that matches a type's pattern but is out of range raises these, not a YAMLError
                except (ValueError, ArithmeticError, LookupError, TypeError, AttributeError) as e:
                    problem = f"not valid YAML: {type(e).__name__}: {e}"
    except OSError as e:
        problem = f"cannot read: {e.strerror or e}"
    raise error(f"{what} {path}: {problem}")
