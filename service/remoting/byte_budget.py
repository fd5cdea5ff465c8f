"""The bytes that large frames being read may hold over all of a worker's connections."""

from __future__ import annotations

import asyncio
from collections import deque


class ByteBudget:
    """Bytes that frames being read may hold over all connections; first come, first served."""

    def __init__(self, total: int) -> None:
        self.free = total
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, n: int) -> None:
        if not self._waiters and self.free >= n:
            self.free -= n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, fut)
        self._waiters.append(entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as it was cancelled: give it back
            else:
                self._waiters.remove(entry)
                self._wake()
            raise

    def release(self, n: int) -> None:
        self.free += n
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._waiters[0][0] <= self.free:
            n, fut = self._waiters.popleft()
            self.free -= n
            fut.set_result(None)
