"""tests/budget.py: the per-example CPU budget of the fuzz tests fails on work, not on waiting."""

import time

import pytest

from tests.budget import cpu_budget


def test_work_beyond_the_budget_fails_even_when_the_body_raises():
    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    with pytest.raises(AssertionError, match="ms of CPU"), cpu_budget("spin", budget=0.02):
        spin(0.1)
    with pytest.raises(AssertionError, match="ms of CPU"), cpu_budget("spin then refuse", budget=0.02):
        spin(0.1)
        raise ValueError("refused, but too late")


def test_waiting_is_not_work():
    """What a loaded machine adds (time without a core) is not counted: a sleep of twice the budget passes."""
    with cpu_budget("sleep", budget=0.02):
        time.sleep(0.04)
    with pytest.raises(ValueError), cpu_budget("quick refusal", budget=0.02):
        raise ValueError("refused at once")
