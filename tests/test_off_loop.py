"""Where a registration's work on a big table runs (service/registration.py ``off_loop``)."""

from __future__ import annotations

import contextvars
import os
import sys
import threading

import pytest

from service.registration import OFF_LOOP_MIN, OFF_LOOP_NICE, off_loop

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="")


def where() -> tuple[str, int, str]:
    return (threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
            MARK.get())


async def test_a_big_tables_work_runs_in_a_thread_below_the_loops_priority() -> None:
    MARK.set("request")
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    name, nice, mark = await off_loop(OFF_LOOP_MIN, where)
    assert name != threading.current_thread().name
    if sys.platform.startswith("linux"):
        assert nice == min(19, loop_nice + OFF_LOOP_NICE)
    assert mark == "request"  # the caller's context goes along, as with asyncio.to_thread


async def test_a_small_tables_work_runs_on_the_loop() -> None:
    name, _, _ = await off_loop(OFF_LOOP_MIN - 1, where)
    assert name == threading.current_thread().name


async def test_an_error_in_the_thread_reaches_the_caller() -> None:
    def fail() -> None:
        raise ValueError("bad table")

    with pytest.raises(ValueError, match="bad table"):
        await off_loop(OFF_LOOP_MIN, fail)
