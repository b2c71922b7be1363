"""Kubernetes label selectors as the slo-controller reads a node strategy's ``nodeSelector``.

``match_label_selector`` is ``metav1.LabelSelectorAsSelector`` followed by ``labels.Selector.Matches``
(k8s.io/apimachinery ``pkg/apis/meta/v1/helpers.go``, ``pkg/labels/selector.go``): the same key and value syntax
checks, the same four operators. ``check_selector_types`` is the part Go's ``json.Unmarshal`` does when a
ConfigMap key is decoded into a ``metav1.LabelSelector``: a wrong type there rejects the whole key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from koordlet.states.nodeslo.decoder import DecodeContext, show

__all__ = ["match_label_selector", "check_selector_types"]

_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _check_label_key(key: str) -> None:
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"label key {key!r}: at most one '/' allowed")
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            raise ValueError(f"label key {key!r}: prefix must be a DNS subdomain")
    name = parts[-1]
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"label key {key!r}: name must be 1-63 alphanumerics, '-', '_' or '.', "
                         "starting and ending with an alphanumeric")


def _check_label_value(key: str, value: str) -> None:
    if len(value) > 63 or (value and not _LABEL_NAME.fullmatch(value)):
        raise ValueError(f"label {key!r}: invalid value {value!r}")


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` match a metav1.LabelSelector. Like upstream, a missing (None) selector matches
    nothing and an empty one matches everything. ValueError for an invalid selector (upstream skips such a
    strategy)."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    ok = True
    for key, value in match_labels.items():
        _check_label_key(key)
        _check_label_value(key, value)
        ok = ok and labels.get(key) == value
    for expr in expressions:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        _check_label_key(key)
        if op not in _OPERATORS:
            raise ValueError(f"{op!r} is not a valid label selector operator (expected one of "
                             f"{', '.join(_OPERATORS)})")
        if op in ("In", "NotIn"):
            if not values:
                raise ValueError(f"label {key!r}: operator {op} needs at least one value")
            for v in values:
                _check_label_value(key, v)
        elif values:
            raise ValueError(f"label {key!r}: operator {op} takes no values")
        if op == "In":
            ok = ok and key in labels and labels[key] in values
        elif op == "NotIn":
            ok = ok and (key not in labels or labels[key] not in values)
        elif op == "Exists":
            ok = ok and key in labels
        else:
            ok = ok and key not in labels
    return ok


def check_selector_types(sel: Any, path: str, ctx: DecodeContext) -> None:
    """The type checks Go's json.Unmarshal does on a metav1.LabelSelector (a failure rejects the whole key)."""
    if sel is None:
        return
    if not isinstance(sel, Mapping):
        ctx.bad(path, f"expected an object, got {show(sel)}")
        return
    for k in sel:
        if k not in ("matchLabels", "matchExpressions"):
            ctx.warnings.append((f"{path}.{k}", "unknown field"))
    labels = sel.get("matchLabels")
    if labels is not None:
        if not isinstance(labels, Mapping):
            ctx.bad(f"{path}.matchLabels", f"expected an object, got {show(labels)}")
        else:
            for k, v in labels.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    ctx.bad(f"{path}.matchLabels.{k}", f"expected a string, got {show(v)}")
    exprs = sel.get("matchExpressions")
    if exprs is None:
        return
    if not isinstance(exprs, list):
        ctx.bad(f"{path}.matchExpressions", f"expected a list, got {show(exprs)}")
        return
    for i, e in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            ctx.bad(p, f"expected an object, got {show(e)}")
            continue
        for k in ("key", "operator"):
            if not isinstance(e.get(k, ""), str):
                ctx.bad(f"{p}.{k}", f"expected a string, got {show(e.get(k))}")
        values = e.get("values")
        if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
            ctx.bad(f"{p}.values", f"expected a list of strings, got {show(values)}")
