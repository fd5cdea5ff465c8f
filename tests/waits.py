"""Waiting for something to have happened: poll its condition until it holds, fail past a
bound. A test that waits this way goes on as soon as the event happened (instead of
sleeping for what a loaded machine might need) and says what never happened when it
fails. The bound is generous: a slow machine only waits longer, a fast one never does."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")

POLL_S = 0.02  # short against every bound used with it, long enough not to busy the loop
# the bound for what is due within a second or so (an expiry, a poll, a scan pass): a loaded
# machine gets there late, never this late unless the awaited thing is broken
BOUND_S = 20.0


async def until(predicate: Callable[[], T | Awaitable[T]], timeout: float, what: str, poll_s: float = POLL_S) -> T:
    """The predicate's first true result (it may be a coroutine function); AssertionError
    naming `what` when it has not held within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {result!r})")
        await asyncio.sleep(poll_s)


def until_sync(predicate: Callable[[], T], timeout: float, what: str, poll_s: float = POLL_S) -> T:
    """until() for tests outside an event loop (processes driven over blocking calls)."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {result!r})")
        time.sleep(poll_s)
    return result
