"""Concurrent reads of one key share one Redis call, when that call is sent after all of them began.

Many clients read the same hot routes; when the cache cannot answer them (a change just
evicted the route, or RMQ_MAX_STALENESS_MS=0) each would run the same read script. A read
finding a call for its key created but not yet sent (it is sent when its task first runs,
at the event loop's next turn) waits for that call instead of making its own. A call
already sent is never joined: it may have been read before a write that completed ahead of
the joining read, so every answer is still read from Redis after its request arrived.

Under an eager task factory (asyncio.eager_task_factory) a task's coroutine runs inside
create_task, so its call is sent before the task exists: such a call is never offered for
joining, and a read then always makes its own call.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

T = TypeVar("T")


class SharedReads(Generic[T]):
    def __init__(self) -> None:
        self._unsent: dict[Hashable, asyncio.Future[T]] = {}
        self.shared = 0  # reads answered by another read's call

    async def read(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        call = self._unsent.get(key)
        if call is None:
            send = self._send(key, fetch)
            call = asyncio.ensure_future(send)
            if inspect.getcoroutinestate(send) == inspect.CORO_CREATED:  # not sent yet: joinable
                self._unsent[key] = call
        else:
            self.shared += 1
        # a reader that goes away (its client hung up) leaves the call to the others
        return await asyncio.shield(call)

    async def _send(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        # sent from here on: a read beginning now makes its own call (pop: an eagerly run task
        # starts here before read() could offer it, and there is then nothing to take back)
        self._unsent.pop(key, None)
        return await fetch()
