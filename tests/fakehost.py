"""The fake host tree the tests build on: it lives in doubles/fakehost.py (bench/ uses it too, and bench imports
nothing from tests/); the tests keep importing it from here."""

from doubles.fakehost import V1_SUBSYSTEMS, CgroupValues, FakeHost  # noqa: F401
