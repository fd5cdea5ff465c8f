"""One open RocketMQ connection: as the server tracks it for its limits, and as its
requests' handlers see it (``CHANNEL``)."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field


class Connection:
    """What the server tracks of one open connection for its limits."""

    __slots__ = ("peer", "writer", "last", "frame_started", "in_flight", "closing", "loop")

    def __init__(self, peer: object, writer: asyncio.StreamWriter, now: float) -> None:
        self.peer = peer
        self.writer = writer
        self.last = now  # when the last whole frame (or the connection) came
        self.frame_started: float | None = None  # when the current frame's length field came
        self.in_flight: set[asyncio.Task[None]] = set()
        self.closing: str | None = None  # why the server is closing it
        self.loop = asyncio.get_running_loop()

    def close(self, reason: str) -> None:
        if self.closing is None:
            self.closing = reason
            self.writer.transport.abort()


@dataclass
class Channel:
    """One client connection: its id, and the brokers that registered or refreshed on it."""

    id: str
    brokers: set[str] = field(default_factory=set)
    peer: str = ""  # the client's address (the PROXY header's when there is one): whitelists check it


# the connection a request came on; set by the server for each connection's tasks
CHANNEL: ContextVar[Channel | None] = ContextVar("remoting_channel", default=None)
