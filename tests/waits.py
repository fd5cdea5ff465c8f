"""Waiting for something to have happened: poll its condition until it holds, fail past a
bound. A test that waits this way goes on as soon as the event happened (instead of
sleeping for what a loaded machine might need) and says what never happened when it
fails. The bound is generous: a slow machine only waits longer, a fast one never does.

A check begun past the bound is the last: one begun before it may end past it on a loaded
machine (a round of reads, say), and where the bound is what a test holds the code to, a
read sent past it must see the event, however long its answer then takes."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")
# what never happened, or a function saying it when the wait fails (a log's tail, say)
What = str | Callable[[], str]

POLL_S = 0.02  # short against every bound used with it, long enough not to busy the loop
# the bound for what is due within a second or so (an expiry, a poll, a scan pass): a loaded
# machine gets there late, never this late unless the awaited thing is broken
BOUND_S = 20.0


async def until(predicate: Callable[[], T | Awaitable[T]], timeout: float, what: What, poll_s: float = POLL_S) -> T:
    """The predicate's first true result (it may be a coroutine function); AssertionError
    naming `what` when a check begun `timeout` seconds on still found it false."""
    deadline = time.monotonic() + timeout
    while True:
        begun = time.monotonic()
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if begun >= deadline:
            raise AssertionError(_failed(what, timeout, result))
        await asyncio.sleep(poll_s)


def until_sync(predicate: Callable[[], T], timeout: float, what: What, poll_s: float = POLL_S) -> T:
    """until() for tests outside an event loop (processes driven over blocking calls)."""
    deadline = time.monotonic() + timeout
    while True:
        begun = time.monotonic()
        if result := predicate():
            return result
        if begun >= deadline:
            raise AssertionError(_failed(what, timeout, result))
        time.sleep(poll_s)


def _failed(what: What, timeout: float, last: object) -> str:
    return f"{what if isinstance(what, str) else what()}: not within {timeout} s (last: {last!r})"
