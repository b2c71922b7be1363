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

import io
import json
import os
import re
from typing import Any

import yaml

MAX_BYTES = 16 << 20       # far above a pods file of thousands of pods
MAX_DEPTH = 64             # Kubernetes objects nest ~10 levels
MAX_ALIAS_NODES = 1_000_000   # nodes the aliases of one document may add once expanded (go-yaml limits them too)


class _TooDeep(yaml.YAMLError):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document nested deeper than :data:`MAX_DEPTH` before recursing into it.

    Flow collections (``[[[...``) are refused as the scanner opens them: it looks up to 1024 characters ahead for
    a possible key at every open level, which costs ~0.2 s per load on a line of brackets before the composer
    gets to count them."""

    _depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:    # PyYAML's parameter name
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeep(f"nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(TokenClass)

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


_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_YAML_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?")   # YAML 1.1 (PyYAML): a dot, a signed exponent


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _yaml_float(text: str) -> Any:
    """A JSON number with a fraction or exponent as PyYAML reads it: a float, or a string (``1e3``)."""
    return float(text) if _YAML_FLOAT.fullmatch(text) else text


def _parse_json(f: Any) -> tuple[bool, Any]:
    """(True, document) when the file is one JSON document, nested less than :data:`MAX_DEPTH` levels; (False, None)
    to read it as YAML.

    JSON is YAML, and the json module reads a 200-pod pods file (235 KB) in ~6 ms where the bounded pure-Python
    loader takes ~1 s of CPU: a pods file rewritten every few seconds under pod churn kept a CPU busy and, through
    the GIL, stretched the agent's /healthz answers past 100 ms (tests/soak). The result is what PyYAML would give
    for the same text (numbers as YAML 1.1 reads them; NaN/Infinity, control characters, trailing text and anything
    deeper go the YAML way, which keeps its own bounds and messages)."""
    text = f.read()
    f.seek(0)
    if text.lstrip()[:1] not in ("{", "["):
        return False, None
    depth = 0
    for c in _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text))):
        depth += 1 if c in "[{" else -1
        if depth >= MAX_DEPTH - 1:
            return False, None
    try:
        return True, json.loads(text, parse_float=_yaml_float, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return False, None


def load_yaml(path: str, what: str, error: type[Exception] = ValueError) -> Any:
    """The parsed document; ``error("<what> <path>: <problem>")`` when unreadable, too big, too deep, with too
    many aliases or not YAML. Nothing else escapes for any file content."""
    try:
        with open(path, encoding="utf-8") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                problem = f"{size} bytes, more than the {MAX_BYTES} accepted"
            else:
                ok, doc, problem = _document(f)
                if ok:
                    return doc
    except OSError as e:
        problem = f"cannot read: {e.strerror or e}"
    raise error(f"{what} {path}: {problem}")


def loads_yaml(text: str, what: str, error: type[Exception] = ValueError) -> Any:
    """:func:`load_yaml` for a text received rather than read from a file (the configuration an NRI runtime
    hands its plugins): the same bounds, ``error("<what>: <problem>")``."""
    if len(text) > MAX_BYTES:
        raise error(f"{what}: {len(text)} characters, more than the {MAX_BYTES} accepted")
    ok, doc, problem = _document(io.StringIO(text))
    if ok:
        return doc
    raise error(f"{what}: {problem}")


def _document(f: Any) -> tuple[bool, Any, str]:
    """(True, document, "") or (False, None, problem) for the text behind the file object ``f``."""
    try:
        is_json, doc = _parse_json(f)
        return True, doc if is_json else _parse(f), ""
    except yaml.YAMLError as e:
        return False, None, f"not valid YAML: {e}"
    except UnicodeDecodeError as e:
        return False, None, f"not UTF-8: {e.reason}"
    # PyYAML's constructors build scalars with int(), float(), datetime(), dict lookups: a scalar that matches a
    # type's pattern but is out of range raises these, not a YAMLError
    except (ValueError, ArithmeticError, LookupError, TypeError, AttributeError) as e:
        return False, None, f"not valid YAML: {type(e).__name__}: {e}"
