"""Cached route reads answered as their bytes arrive, before the connection's stream sees them.

A connection's frames normally go through asyncio's StreamReader to the connection's
coroutine (service/remoting/server.py): two awaits and a buffer copy per frame, then the
answer written on its own. For the requests most clients send most (GET_ROUTEINFO_BY_TOPIC
of a route the cache holds), that machinery cost more than the answer itself. So the
connection's protocol looks at each chunk of bytes the socket gives it first: the whole,
small frames at its start that the cache answers (``answer`` returns their answer frame)
are answered there, all in one write; the first frame it does not answer, and everything
after it, goes to the stream as it would have, where every limit of the server applies.

It only looks while the stream holds no bytes of its own (a frame is never split between
the two) and the answers already written have not piled up (a client that does not read
its answers is pushed back by the stream's path, which waits for the write buffer).
"""

from __future__ import annotations

import asyncio
from typing import Callable

# payload (a frame without its length field) -> the whole answer frame, or None
Answerer = Callable[[bytes], "bytes | None"]


class RouteReads(asyncio.StreamReaderProtocol):
    """A StreamReaderProtocol that answers what ``answer`` can before feeding its reader."""

    def __init__(self, reader: asyncio.StreamReader, connected: Callable[..., object],
                 loop: asyncio.AbstractEventLoop, max_frame: int, max_unsent: int) -> None:
        super().__init__(reader, connected, loop=loop)
        self._reader = reader
        # larger frames go to the stream (the server's frame budget counts them there); past
        # `max_unsent` bytes of answers not yet sent, all go there (it waits for the client)
        self.max_frame = max_frame
        self.max_unsent = max_unsent
        self._out: asyncio.WriteTransport | None = None
        # set by the connection once its frames may be answered here (after a PROXY header)
        self.answer: Answerer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._out = transport  # type: ignore[assignment]
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        answer, out = self.answer, self._out
        # `_buffer` is the reader's unread bytes (no public way to ask): without it, no shortcut
        if answer is None or out is None or getattr(self._reader, "_buffer", b"?") \
                or out.get_write_buffer_size() > self.max_unsent:
            super().data_received(data)
            return
        answers: list[bytes] = []
        at, end = 0, len(data)
        while end - at >= 8:
            length = int.from_bytes(data[at:at + 4], "big")
            if length < 4 or length > self.max_frame or at + 4 + length > end:
                break
            frame = answer(data[at + 4:at + 4 + length])
            if frame is None:
                break
            answers.append(frame)
            at += 4 + length
        if answers:
            out.write(answers[0] if len(answers) == 1 else b"".join(answers))
        if at < end:
            super().data_received(data[at:] if at else data)
