"""Validate custom resources against CRD ``openAPIV3Schema``s, as the kube-apiserver does on create/update.

Tests use this to prove that what the agent sends (NodeMetric status, Device, NodeResourceTopology) would be
accepted by a real API server holding the CRDs in ``deploy/crds/``, and that a typo is caught instead of being
silently pruned. The rules follow apiextensions-apiserver:

* the served version's schema is found from the object's ``apiVersion`` + ``kind``;
* ``apiVersion``, ``kind`` and ``metadata`` are always allowed at the root; ``metadata`` is checked as ObjectMeta
  (name as a DNS subdomain, label/annotation syntax, owner references), not against the schema;
* fields the apiserver would prune (not in ``properties``, no ``additionalProperties``, no
  ``x-kubernetes-preserve-unknown-fields``) are reported as errors: the server would drop them without a word,
  so for us they are bugs. ``fieldValidation=Strict`` makes the real server report them the same way;
* a ``null`` object field or map value that is not ``nullable`` is pruned before validation (what Go clients
  rely on when they send ``"labels": null``), so it is accepted unless the field is required; a required field
  with a ``default`` is satisfied, because defaulting runs before validation;
* anything the schema could say that this module does not check (CEL rules, list types, other formats) makes
  :meth:`CrdSchemas.load` fail, so a missing check can never pass silently.

Stricter than the apiserver, on purpose: integers outside ``format: int32`` / ``int64`` and floats where an
integer is declared are errors (Go decoders in koord-scheduler and koord-manager would reject them).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

# Schema keywords this module enforces (or, for documentation keywords, may ignore without losing a check).
_KEYWORDS = frozenset({
    "type", "properties", "additionalProperties", "items", "required", "anyOf", "oneOf", "allOf",
    "enum", "format", "pattern", "minimum", "maximum", "minLength", "maxLength", "nullable", "default",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "description", "title", "example", "externalDocs",
})
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
# format -> inclusive integer range; date-time is checked separately; double/float carry no constraint.
_INT_FORMATS = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
_FORMATS = frozenset({*_INT_FORMATS, "date-time", "double", "float"})

# The pattern controller-gen puts on every resource.Quantity; named in errors because it is unreadable.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
                    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")

# RFC 3339 full date-time as kube-openapi's strfmt accepts it (a zone is mandatory).
_DATE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_ANNOTATIONS_MAX_BYTES = 256 * 1024
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")

# ObjectMeta fields a client may send, with the JSON type each must have.
_OBJECT_META: dict[str, str] = {
    "name": "string", "generateName": "string", "namespace": "string", "selfLink": "string", "uid": "string",
    "resourceVersion": "string", "generation": "integer", "creationTimestamp": "date-time",
    "deletionTimestamp": "date-time", "deletionGracePeriodSeconds": "integer", "labels": "string-map",
    "annotations": "string-map", "ownerReferences": "array", "finalizers": "string-array",
    "managedFields": "array",
}
_OWNER_REFERENCE: dict[str, str] = {
    "apiVersion": "string", "kind": "string", "name": "string", "uid": "string", "controller": "boolean",
    "blockOwnerDeletion": "boolean",
}
_OWNER_REFERENCE_REQUIRED = ("apiVersion", "kind", "name", "uid")


class CrdSchemas:
    """The CRDs of one directory, indexed for validation by (group, version, kind)."""

    def __init__(self, crds: list[dict[str, Any]]) -> None:
        self._crds: dict[tuple[str, str], dict[str, Any]] = {}
        self._versions: dict[tuple[str, str, str], dict[str, Any]] = {}
        for doc in crds:
            spec = doc["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            if (group, kind) in self._crds:
                raise ValueError(f"two CRDs define {kind}.{group}")
            self._crds[(group, kind)] = doc
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                _check_supported(schema, f"{doc['metadata']['name']} {version['name']}")
                self._versions[(group, version["name"], kind)] = version

    @classmethod
    def load(cls, directory: str | Path) -> CrdSchemas:
        """Every CRD in the ``*.yaml`` / ``*.yml`` files of ``directory``; anything else there is an error."""
        crds = []
        paths = sorted(p for p in Path(directory).iterdir() if p.suffix in (".yaml", ".yml"))
        for path in paths:
            with path.open(encoding="utf-8") as f:
                for doc in yaml.safe_load_all(f):
                    if doc is None:
                        continue
                    if (doc.get("apiVersion"), doc.get("kind")) != ("apiextensions.k8s.io/v1",
                                                                    "CustomResourceDefinition"):
                        raise ValueError(f"{path}: not an apiextensions.k8s.io/v1 CustomResourceDefinition")
                    crds.append(doc)
        if not crds:
            raise ValueError(f"{directory}: no CRDs found")
        return cls(crds)

    def crd(self, group: str, kind: str) -> dict[str, Any]:
        """The raw CRD document that defines ``kind`` in ``group``."""
        return self._crds[(group, kind)]

    def has_status_subresource(self, group: str, version: str, kind: str) -> bool:
        """Whether writes to ``status`` go through ``/status`` (and spec changes there are ignored)."""
        return "status" in (self._versions[(group, version, kind)].get("subresources") or {})

    def validate(self, obj: dict[str, Any]) -> list[str]:
        """Errors as ``"<path>: <problem>"`` the apiserver would raise (or prune silently); [] when valid.

        Raises KeyError when no loaded CRD serves the object's apiVersion and kind.
        """
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        group, _, version = str(api_version).rpartition("/")
        entry = self._versions.get((group, version, str(kind)))
        if entry is None or not entry.get("served"):
            raise KeyError(f"no loaded CRD serves apiVersion={api_version!r} kind={kind!r}")
        errors: list[str] = []
        _check_metadata(obj.get("metadata"), errors)
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        _check(body, entry["schema"]["openAPIV3Schema"], "", errors, structural=True)
        return errors


def _check_supported(schema: Any, where: str, path: str = "") -> None:
    """Refuse schemas that use keywords, types or formats this module would not enforce."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where}: schema at {path or '<root>'} is not an object")
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"{where}: unsupported schema keyword(s) {sorted(unknown)} at {path or '<root>'}")
    if "type" in schema and schema["type"] not in _TYPES:
        raise ValueError(f"{where}: unsupported type {schema['type']!r} at {path or '<root>'}")
    if "format" in schema and schema["format"] not in _FORMATS:
        raise ValueError(f"{where}: unsupported format {schema['format']!r} at {path or '<root>'}")
    for name, sub in (schema.get("properties") or {}).items():
        _check_supported(sub, where, _child(path, name))
    if isinstance(schema.get("additionalProperties"), dict):
        _check_supported(schema["additionalProperties"], where, _child(path, "*"))
    if "items" in schema:
        _check_supported(schema["items"], where, f"{path}[*]")
    for keyword in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(keyword) or ()):
            _check_supported(sub, where, f"{path}.{keyword}[{i}]")


def _check(value: Any, schema: Schema, path: str, errors: list[str], structural: bool) -> None:
    """Validate ``value``; ``structural`` is False inside anyOf/oneOf/allOf branches, which never prune."""
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{_show_path(path)}: must not be null")
        return
    if schema.get("x-kubernetes-int-or-string") and not (_is_int(value) or isinstance(value, str)):
        errors.append(f"{_show_path(path)}: expected integer or string, got {_describe(value)}")
        return
    declared = schema.get("type")
    if declared is not None and not _has_type(value, declared):
        errors.append(f"{_show_path(path)}: expected {declared}, got {_describe(value)}")
        return
    _check_combinators(value, schema, path, errors)
    if "enum" in schema and not any(type(v) is type(value) and v == value for v in schema["enum"]):
        errors.append(f"{_show_path(path)}: unsupported value {value!r}, expected one of {schema['enum']!r}")
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, path, errors)
    elif isinstance(value, dict):
        _check_object(value, schema, path, errors, structural)
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{i}]", errors, structural)


def _check_combinators(value: Any, schema: Schema, path: str, errors: list[str]) -> None:
    for branch in schema.get("allOf") or ():
        _check(value, branch, path, errors, structural=False)
    if "anyOf" in schema:
        failures = [_branch_errors(value, branch, path) for branch in schema["anyOf"]]
        if all(failures):
            errors.append(f"{_show_path(path)}: matches no anyOf branch ({_summarise(failures)})")
    if "oneOf" in schema:
        failures = [_branch_errors(value, branch, path) for branch in schema["oneOf"]]
        matched = sum(1 for f in failures if not f)
        if matched == 0:
            errors.append(f"{_show_path(path)}: matches no oneOf branch ({_summarise(failures)})")
        elif matched > 1:
            errors.append(f"{_show_path(path)}: matches {matched} oneOf branches, expected exactly one")


def _branch_errors(value: Any, branch: Schema, path: str) -> list[str]:
    errors: list[str] = []
    _check(value, branch, path, errors, structural=False)
    return errors


def _summarise(failures: list[list[str]]) -> str:
    return "; ".join(f[0].split(": ", 1)[1] for f in failures)


def _check_string(value: str, schema: Schema, path: str, errors: list[str]) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{_show_path(path)}: shorter than minLength {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{_show_path(path)}: longer than maxLength {schema['maxLength']}")
    pattern = schema.get("pattern")
    if pattern is not None and not _go_regex(pattern).search(value):
        if pattern == QUANTITY_PATTERN:
            errors.append(f"{_show_path(path)}: {value!r} is not a valid quantity")
        else:
            errors.append(f"{_show_path(path)}: {value!r} does not match pattern {pattern}")
    if schema.get("format") == "date-time" and not _is_date_time(value):
        errors.append(f"{_show_path(path)}: {value!r} is not an RFC 3339 date-time")


def _check_number(value: int | float, schema: Schema, path: str, errors: list[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        errors.append(f"{_show_path(path)}: {value!r} is not a finite number")
        return
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{_show_path(path)}: {value!r} is less than minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{_show_path(path)}: {value!r} is greater than maximum {schema['maximum']}")
    bounds = _INT_FORMATS.get(schema.get("format", ""))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        errors.append(f"{_show_path(path)}: {value!r} overflows {schema['format']}")


def _check_object(value: dict[str, Any], schema: Schema, path: str, errors: list[str], structural: bool) -> None:
    properties: dict[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    present = set()
    for key, item in value.items():
        sub = properties.get(key, additional if isinstance(additional, dict) else None)
        if sub is None:
            if structural and additional is not True and not preserve:
                errors.append(f"{_show_path(_child(path, key))}: unknown field")
            present.add(key)
            continue
        if item is None and not sub.get("nullable"):
            continue                      # pruned before validation, as the apiserver does
        present.add(key)
        _check(item, sub, _child(path, key), errors, structural)
    for key in schema.get("required") or ():
        if key not in present and "default" not in properties.get(key, {}):
            errors.append(f"{_show_path(_child(path, key))}: required field missing")


def _check_metadata(meta: Any, errors: list[str]) -> None:
    """ObjectMeta as the apiserver validates it for a custom resource (ValidateObjectMetaAccessor)."""
    if not isinstance(meta, dict):
        errors.append(f"metadata: expected object, got {_describe(meta)}")
        return
    _check_fields(meta, _OBJECT_META, "metadata", errors)
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errors.append("metadata.name: required field missing")
    elif isinstance(name, str) and name and not _is_dns_subdomain(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, val in labels.items():
            if not _is_qualified_name(key):
                errors.append(f"metadata.labels[{key}]: key is not a qualified name")
            if isinstance(val, str) and not (val == "" or (len(val) <= 63 and _QUALIFIED_NAME.fullmatch(val))):
                errors.append(f"metadata.labels[{key}]: {val!r} is not a valid label value")
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in annotations:
            if not _is_qualified_name(key):
                errors.append(f"metadata.annotations[{key}]: key is not a qualified name")
        size = sum(len(k) + len(v) for k, v in annotations.items() if isinstance(v, str))
        if size > _ANNOTATIONS_MAX_BYTES:
            errors.append(f"metadata.annotations: {size} bytes, more than {_ANNOTATIONS_MAX_BYTES}")
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        controllers = 0
        for i, ref in enumerate(owners):
            where = f"metadata.ownerReferences[{i}]"
            if not isinstance(ref, dict):
                errors.append(f"{where}: expected object, got {_describe(ref)}")
                continue
            _check_fields(ref, _OWNER_REFERENCE, where, errors)
            errors.extend(f"{where}.{k}: required field missing" for k in _OWNER_REFERENCE_REQUIRED if not ref.get(k))
            controllers += ref.get("controller") is True
        if controllers > 1:
            errors.append("metadata.ownerReferences: only one reference can have controller set to true")


def _check_fields(obj: dict[str, Any], kinds: dict[str, str], path: str, errors: list[str]) -> None:
    """Known field names and their JSON types, for the fixed (non-CRD) shapes of ObjectMeta."""
    for key, val in obj.items():
        where = f"{path}.{key}"
        kind = kinds.get(key)
        if kind is None:
            errors.append(f"{where}: unknown field")
        elif val is None:
            continue                      # Go decodes null to the zero value
        elif kind == "date-time":
            if not (isinstance(val, str) and _is_date_time(val)):
                errors.append(f"{where}: {val!r} is not an RFC 3339 date-time")
        elif kind == "string-map":
            if not (isinstance(val, dict) and all(isinstance(v, str) for v in val.values())):
                errors.append(f"{where}: expected a map of strings, got {_describe(val)}")
        elif kind == "string-array":
            if not (isinstance(val, list) and all(isinstance(v, str) for v in val)):
                errors.append(f"{where}: expected an array of strings, got {_describe(val)}")
        elif not _has_type(val, kind):
            errors.append(f"{where}: expected {kind}, got {_describe(val)}")


def _has_type(value: Any, declared: str) -> bool:
    if declared == "integer":
        return _is_int(value)
    if declared == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if declared == "boolean":
        return isinstance(value, bool)
    if declared == "string":
        return isinstance(value, str)
    if declared == "object":
        return isinstance(value, dict)
    return isinstance(value, list)        # "array"; other types are refused at load


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_date_time(value: str) -> bool:
    m = _DATE_TIME.fullmatch(value)
    if m is None:
        return False
    try:
        dt.date.fromisoformat(m.group(1))
    except ValueError:
        return False
    hour, minute, second = int(m.group(2)), int(m.group(3)), int(m.group(4))
    return hour < 24 and minute < 60 and second < 60


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None


def _is_qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and _is_dns_subdomain(prefix)):
        return False
    return 0 < len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


@functools.cache
def _go_regex(pattern: str) -> re.Pattern[str]:
    """Compile an RE2 pattern for Python: ``$`` (outside a class) means end of text, never before a final \\n."""
    out, in_class, escaped = [], False, False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        elif ch == "$" and not in_class:
            out.append(r"\Z")
            continue
        out.append(ch)
    return re.compile("".join(out))


def _child(path: str, key: str) -> str:
    """``a.b`` for identifier-like keys, ``a[koordinator.sh/gpu-core]`` for map keys that are not."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


def _show_path(path: str) -> str:
    return path or "<root>"


def _describe(value: Any) -> str:
    name = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{name} {text if len(text) <= 60 else text[:57] + '...'}"
