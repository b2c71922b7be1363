import pytest

from koordlet.base.quantity import format_bytes, format_milli, milli, parse_quantity


@pytest.mark.parametrize("m,text", [(0, "0"), (1250, "1250m"), (2000, "2"), (1500, "1500m"), (12000, "12"),
                                    (12000000, "12k"), (7, "7m"), (1000000000, "1M"), (-250, "-250m")])
def test_format_milli_canonical(m, text):
    assert format_milli(m) == text
    assert milli(text) == m                      # round-trips through our parser


@pytest.mark.parametrize("n,text", [(0, "0"), (1, "1"), (1000, "1k"), (1024, "1Ki"), (4 * 2**30, "4Gi"),
                                    (1536 * 1024, "1536Ki"), (1234567, "1234567"), (3 * 2**20 + 1, "3145729")])
def test_format_bytes_canonical(n, text):
    assert format_bytes(n) == text
    assert parse_quantity(text) == n
