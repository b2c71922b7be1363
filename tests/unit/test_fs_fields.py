"""host/fs.parse_fields: the values of a few keys of a ``key value`` kernel file, without splitting all of it."""

from __future__ import annotations

import pytest

from koordlet.host.fs import parse_fields

V1_MEMORY_STAT = (b"cache 4096\nrss 8192\ninactive_anon 1\nactive_anon 2\nunevictable 0\n"
                  b"total_cache 40960\ntotal_rss 81920\ntotal_inactive_anon 11\ntotal_active_anon 22\n"
                  b"total_unevictable 3\ntotal_active_file 44\ntotal_inactive_file 55\n")


def test_keys_anywhere_in_the_file_in_the_order_asked():
    assert parse_fields(V1_MEMORY_STAT, (b"total_inactive_file", b"cache", b"total_inactive_anon")) == [55, 4096, 11]
    assert parse_fields(b"nr_periods 7\nnr_throttled 3\nthrottled_time 9", (b"throttled_time", b"nr_periods")) == [9, 7]


def test_a_key_is_never_matched_inside_a_longer_one():
    # v1 memory.stat holds inactive_anon and total_inactive_anon; v2 holds inactive_anon and anon
    assert parse_fields(V1_MEMORY_STAT, (b"inactive_anon", b"active_anon")) == [1, 2]
    assert parse_fields(b"inactive_anon 5\nanon 9\n", (b"anon",)) == [9]
    with pytest.raises(KeyError):
        parse_fields(b"total_rss 1\n", (b"rss",))


def test_missing_key_and_bad_value_are_errors():
    with pytest.raises(KeyError) as e:
        parse_fields(V1_MEMORY_STAT, (b"total_rss", b"total_swap"))
    assert e.value.args[0] == b"total_swap"
    with pytest.raises(ValueError):
        parse_fields(b"nr_periods x1\n", (b"nr_periods",))
    with pytest.raises(ValueError):
        parse_fields(b"nr_periods \n", (b"nr_periods",))


def test_consecutive_keys_and_every_other_layout_agree():
    """Keys that are consecutive lines are split off in one go; any other layout is searched key by key, with the
    same answers and the same errors."""
    run = (b"total_inactive_anon", b"total_active_anon", b"total_unevictable", b"total_active_file")
    assert parse_fields(V1_MEMORY_STAT, run) == [11, 22, 3, 44]
    assert parse_fields(V1_MEMORY_STAT, run[::-1]) == [44, 3, 22, 11]
    assert parse_fields(b"nr_periods 7\nnr_throttled 3\n", (b"nr_periods", b"nr_throttled")) == [7, 3]
    assert parse_fields(b"a 1\nb 2 9\nc 3\n", (b"a", b"c")) == [1, 3]
    with pytest.raises(ValueError):
        parse_fields(b"a 1\nb 2 9\nc 3\n", (b"a", b"b"))         # a line with two values is no integer
    with pytest.raises(KeyError):
        parse_fields(b"a 1\nb\nc 3\n", (b"a", b"b"))          # "b" alone is no "b <value>" line
    with pytest.raises(ValueError):
        parse_fields(b"a 1\nb x\n", (b"a", b"b"))
    with pytest.raises(KeyError):
        parse_fields(b"a 1\nc 3\n", (b"b", b"c"))
