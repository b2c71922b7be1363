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
