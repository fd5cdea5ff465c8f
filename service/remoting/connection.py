"""One open RocketMQ connection as the server tracks it: for its limits, and the cached
answers waiting to be written together."""

from __future__ import annotations

import asyncio


class Connection:
    """What the server tracks of one open connection for its limits, and the cached
    answers waiting to be written."""

    __slots__ = ("peer", "writer", "last", "frame_started", "in_flight", "closing", "batch", "batched", "loop")

    def __init__(self, peer: object, writer: asyncio.StreamWriter, now: float) -> None:
        self.peer = peer
        self.writer = writer
        self.last = now  # when the last whole frame (or the connection) came
        self.frame_started: float | None = None  # when the current frame's length field came
        self.in_flight: set[asyncio.Task[None]] = set()
        self.closing: str | None = None  # why the server is closing it
        self.batch: list[bytes] = []
        self.batched = 0  # bytes in `batch`
        self.loop = asyncio.get_running_loop()

    def send_soon(self, frame: bytes) -> None:
        """Queues an answer frame. The answers to the frames read in one go (a client's
        pipelined requests) leave together, in one write when the loop next runs: one
        system call for the lot instead of one each."""
        if not self.batch:
            self.loop.call_soon(self.flush)
        self.batch.append(frame)
        self.batched += len(frame)

    def flush(self) -> None:
        if self.batch:
            if not self.writer.is_closing():
                self.writer.write(b"".join(self.batch) if len(self.batch) > 1 else self.batch[0])
            self.batch.clear()
            self.batched = 0

    def close(self, reason: str) -> None:
        if self.closing is None:
            self.closing = reason
            self.writer.transport.abort()
