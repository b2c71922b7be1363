"""tests/budget.py: the per-example CPU budget of the fuzz tests fails on work, not on waiting or interference."""

import sys
import time

import pytest

from tests.budget import ATTEMPTS, within_budget


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_work_beyond_the_budget_fails_even_when_it_raises():
    with pytest.raises(AssertionError, match="ms of CPU"):
        within_budget("spin", spin, 0.05, budget=0.02)

    def refuse_late() -> None:
        spin(0.05)
        raise ValueError("refused, but too late")
    with pytest.raises(AssertionError, match="ms of CPU"):
        within_budget("spin then refuse", refuse_late, budget=0.02)


def test_the_result_or_the_error_comes_back_and_waiting_is_not_work():
    """What a loaded machine adds (time without a core) is not counted: a sleep of twice the budget passes."""
    assert within_budget("sleep", lambda: time.sleep(0.04) or 7, budget=0.02) == 7

    def refuse() -> None:
        raise ValueError("refused at once")
    with pytest.raises(ValueError, match="at once"):
        within_budget("quick refusal", refuse, budget=0.02)


def test_one_slow_run_among_fast_ones_is_interference():
    """The first run pays for something outside the parser (here: a spin); the repeats do not: the least counts."""
    calls = []

    def first_slow() -> int:
        calls.append(1)
        if len(calls) == 1:
            spin(0.05)
        return len(calls)
    assert within_budget("first slow", first_slow, budget=0.02) == 2 and len(calls) == 2
    calls.clear()
    with pytest.raises(AssertionError, match=f"least of {ATTEMPTS}"):
        within_budget("always slow", lambda: spin(0.03), budget=0.02)


def test_a_tracer_of_the_harness_is_not_counted_and_is_restored():
    """Hypothesis traces the lines of the examples it generates; what the parser costs is measured untraced."""
    def tracer(frame, event, arg):
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        inside = within_budget("parse", sys.gettrace)
        after = sys.gettrace()
    finally:
        sys.settrace(old)
    assert inside is None and after is tracer
