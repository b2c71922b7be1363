"""koordlet.base.yamlfile reads a JSON file with the json module (a 200-pod pods file: milliseconds instead of a second
of the pure-Python YAML parser, found by the soak): the same document PyYAML gives, and everything the json
module would read differently, or that is too deep, still goes the YAML way."""

from __future__ import annotations

import json
import random

import pytest

from koordlet.base import yamlfile
from koordlet.base.yamlfile import load_yaml


def both(tmp_path, text: str):
    """(fast path taken, its document, the YAML parser's document)."""
    path = tmp_path / "f"
    path.write_text(text)
    with open(path) as f:
        taken, doc = yamlfile._parse_json(f)
    with open(path) as f:
        return taken, doc, yamlfile._parse(f)


def random_doc(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 5 or r < 0.4:
        return rng.choice([0, -3, 12345678901234567890, 1.5, -0.25, 1e300, "s", 'a"b\\c', "ü\u2028", True, False,
                           None, "1e3", "", "\t", "null", "yes", "0x1f"])
    if r < 0.7:
        return [random_doc(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", 'k"', "é", "1"]): random_doc(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_json_documents_read_as_pyyaml_reads_them(tmp_path):
    rng = random.Random(18)
    for _ in range(500):
        doc = random_doc(rng)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        taken, fast, slow = both(tmp_path, text)
        assert taken == text.lstrip().startswith(("{", "[")), text
        if taken:
            assert fast == slow, text


@pytest.mark.parametrize("text, expected", [
    ("[1e3, 1.0e+3, 1.0e3, -2.50, 7]", ["1e3", 1000.0, "1.0e3", -2.5, 7]),   # YAML 1.1: a dot and a signed exponent
    ('{"a": {"b": [null, true]}}', {"a": {"b": [None, True]}}),
])
def test_numbers_and_values_as_yaml(tmp_path, text, expected):
    taken, fast, slow = both(tmp_path, text)
    assert taken and fast == slow == expected


@pytest.mark.parametrize("text", [
    '{"a": NaN}',                               # the json module's extensions are not JSON
    '{"a": 1} trailing',
    '{"a": "tab\there"}',                       # a raw control character in a string
    "[" * 70 + "]" * 70,                        # deeper than MAX_DEPTH: the YAML way refuses it with its message
    'a: 1\n',
])
def test_the_rest_goes_the_yaml_way(tmp_path, text):
    path = tmp_path / "f"
    path.write_text(text)
    with open(path) as f:
        assert yamlfile._parse_json(f) == (False, None)


def test_too_deep_json_is_refused_with_the_yaml_message(tmp_path):
    path = tmp_path / "f"
    path.write_text("[" * 70 + "]" * 70)
    with pytest.raises(ValueError, match="nested deeper than 64"):
        load_yaml(str(path), "t")


def test_a_big_pods_file_is_fast(tmp_path):
    """200 pods as `kubectl get pods -o json` would list them: the json module's speed, not PyYAML's."""
    import time
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}", "labels": {"a": "b"},
                          "annotations": {"x": json.dumps({"containers": {"c": {"limits": {"cpu": "1"}}}})}},
             "spec": {"containers": [{"name": f"c{k}", "resources": {"limits": {"cpu": "500m"}}} for k in range(2)]},
             "status": {"phase": "Running", "qosClass": "Burstable"}} for i in range(200)]
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": pods}))
    start = time.process_time()
    doc = load_yaml(str(path), "pods file")
    assert doc["items"] == pods
    assert time.process_time() - start < 0.2       # PyYAML's pure-Python parser: ~1 s of CPU for this file
