"""tests/waits.py, the wait every test's polling goes through: it fails naming what never
happened, and holds its bound to when a check began, not to when a slow one ended."""

from __future__ import annotations

import time

import pytest

from tests.waits import until, until_sync


def test_a_condition_that_never_holds_fails_naming_what_with_the_last_result() -> None:
    with pytest.raises(AssertionError, match=r"^the thing happening: not within 0.05 s \(last: 0\)$"):
        until_sync(lambda: 0, 0.05, "the thing happening", poll_s=0.01)


def test_a_what_given_as_a_function_is_said_as_it_is_when_the_wait_fails() -> None:
    log = ["started"]

    def check() -> bool:
        log.append("still nothing")
        return False

    with pytest.raises(AssertionError, match=r"^started, still nothing"):  # what the log had by then
        until_sync(check, 0.01, lambda: ", ".join(log), poll_s=0.01)


async def test_a_check_begun_before_the_bound_and_ended_past_it_is_followed_by_one_more() -> None:
    began: list[float] = []

    def slow_check() -> bool:
        began.append(time.monotonic())
        time.sleep(0.3)  # past the 0.2 s bound: the first check, begun before it, ends after it
        return len(began) == 2

    assert await until(slow_check, 0.2, "the second check", poll_s=0.0)
    assert began[1] - began[0] >= 0.3
