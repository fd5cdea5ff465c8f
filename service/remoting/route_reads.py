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
its answers is pushed back by the stream's path, which waits for the write buffer). What
the stream holds is counted here, through asyncio's public API only: the bytes this
protocol handed the stream, less those the connection took from it (``Taken``).

A frame is decoded once: the first frame ``answer`` decoded but did not answer is kept with
its place in the stream (``decoded``), and the connection takes it from there when it
reads that frame's bytes, instead of decoding them again.
"""

from __future__ import annotations

import asyncio
from typing import Callable

# payload (a frame without its length field) -> the whole answer frame; or the frame
# decoded, for the stream's path to answer; or None when it could not be decoded
Answerer = Callable[[bytes], object]


class Taken:
    """The connection's reader, counting the bytes taken from it (every read of the
    connection and of its PROXY header is a ``readexactly``)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.count = 0

    async def readexactly(self, n: int) -> bytes:
        data = await self.reader.readexactly(n)
        self.count += n
        return data


class RouteReads(asyncio.StreamReaderProtocol):
    """A StreamReaderProtocol that answers what ``answer`` can before feeding its reader."""

    def __init__(self, reader: asyncio.StreamReader, connected: Callable[..., object],
                 loop: asyncio.AbstractEventLoop, max_frame: int, max_unsent: int) -> None:
        super().__init__(reader, connected, loop=loop)
        # the connection reads through this; the bytes handed to the stream, to compare
        self.taken = Taken(reader)
        self.fed = 0
        # larger frames go to the stream (the server's frame budget counts them there); past
        # `max_unsent` bytes of answers not yet sent, all go there (it waits for the client)
        self.max_frame = max_frame
        self.max_unsent = max_unsent
        self._out: asyncio.WriteTransport | None = None
        # set by the connection once its frames may be answered here (after a PROXY header)
        self.answer: Answerer | None = None
        # (where the frame starts in the stream, what `answer` decoded of it): one at most,
        # since nothing more is looked at until the stream is taken up to here
        self._decoded: tuple[int, object] | None = None

    def decoded(self, at: int) -> object | None:
        """What ``answer`` decoded of the frame starting at stream offset ``at``, once."""
        kept, self._decoded = self._decoded, None
        return kept[1] if kept is not None and kept[0] == at else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._out = transport  # type: ignore[assignment]
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        answer, out = self.answer, self._out
        # bytes in the stream not taken yet: a frame is never split between the two paths
        if answer is None or out is None or self.fed != self.taken.count \
                or out.get_write_buffer_size() > self.max_unsent:
            self._feed(data)
            return
        answers: list[bytes] = []
        at, end = 0, len(data)
        while end - at >= 8:
            length = int.from_bytes(data[at:at + 4], "big")
            if length < 4 or length > self.max_frame or at + 4 + length > end:
                break
            frame = answer(data[at + 4:at + 4 + length])
            if not isinstance(frame, bytes):
                if frame is not None:
                    self._decoded = (self.fed, frame)  # the stream starts at this frame
                break
            answers.append(frame)
            at += 4 + length
        if answers:
            out.write(answers[0] if len(answers) == 1 else b"".join(answers))
        if at < end:
            self._feed(data[at:] if at else data)

    def _feed(self, data: bytes) -> None:
        self.fed += len(data)
        super().data_received(data)
