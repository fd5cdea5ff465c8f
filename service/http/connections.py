"""What aiohttp's server does not bound by itself: how long a client may take to send a
request's headers, and how loudly a malformed request is logged.

- ``HeaderDeadlineRunner``: an ``AppRunner`` whose connections are closed when a request's
  line and headers have not all arrived within ``RMQ_HTTP_HEADER_TIMEOUT_MS`` of its first
  byte (or of the connection, for the first request): a client sending a byte a second
  holds a connection that long, not forever. Bodies have their own deadline where they
  are read (``service.http.views.read_body``).
- Cached route reads: ``_Handler`` answers the leading requests of each chunk of bytes
  that are plain cached route reads itself (service.http.route_reads), when aiohttp is
  idle and its parser between requests; the first other request, and all after it, go to
  aiohttp as they would have.
- ``OneLineErrors``: aiohttp logs a malformed request (an over-long line, too many
  headers, not HTTP at all) as "Error handling request" with a traceback; anyone could
  fill the log with those. They become one line without the traceback, as do clients
  hanging up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from service.http.route_reads import MAX_HEAD, ROUTE_READS, RouteReads, bodiless

log = logging.getLogger(__name__)

# Past this many bytes of answers not yet sent, cached reads go through aiohttp too, which
# waits for the client to read them.
MAX_UNSENT = 64 * 1024


class _Handler(RequestHandler):
    """aiohttp's connection handler with a deadline on each request's headers, answering
    cached route reads itself when it safely can."""

    def __init__(self, manager: "_Server", **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = manager.header_timeout_s
        self._header_deadline: asyncio.TimerHandle | None = None
        # with an access log every request must go through aiohttp, which writes it
        self._reads = None if self._logging_enabled else manager.route_reads
        # Whether every byte handed to aiohttp ended a request that has no body: then its
        # parser holds nothing, and the next bytes start a request. aiohttp cannot be asked,
        # so once it was handed anything else (a body, part of a head, an upgrade), it stays
        # False on this connection and everything goes to aiohttp.
        self._between = True
        # the start of a request head, kept until it is whole (never handed to aiohttp)
        self._held = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        reads = self._reads
        # b"": aiohttp re-reading the requests its parser held back while its queue was full
        if reads is None or not data or not self._between or self._force_close or self._close:
            self._hand_over(data)
            return
        if self._held:
            data = self._held + data
            self._held = b""
        at = self._answer(reads, data) if self._idle() else 0
        if at == len(data):  # all answered (the usual case): idle again, no head begun
            if self._header_deadline is not None:
                self._disarm()
            return
        rest = data[at:] if at else data
        # hand over the whole requests that follow; keep a request's unfinished head back
        end, plain = 0, True
        while True:
            i = rest.find(b"\r\n\r\n", end)
            if i < 0:
                break
            if i - end > MAX_HEAD or not bodiless(rest[end:i]):
                plain = False
                break
            end = i + 4
        if plain and len(rest) - end <= MAX_HEAD:
            self._held = rest[end:]
            rest = rest[:end]
        else:
            self._between = False
        if rest:
            self._hand_over(rest)
        else:
            self._arm()  # only the start of a head, kept here: it has the header deadline

    def _hand_over(self, data: bytes) -> None:
        """aiohttp's data_received, arming the header deadline when a request begins."""
        # bytes arriving while no request is being handled nor parsed start the next one
        starts = self._current_request is None and not self._messages
        super().data_received(data)
        if self._messages:
            self._disarm()  # its headers are complete
        elif starts:
            self._arm()

    def _idle(self) -> bool:
        """Whether aiohttp waits for the next request with nothing else to do, and the
        client reads its answers: only then may one be written before aiohttp's next.
        (No request in progress means none being handled; an upgrade or a body never
        leaves ``_between`` True, so aiohttp's payload parser need not be asked.)"""
        waiter, transport = self._waiter, self.transport
        return (waiter is not None and not waiter.done() and not self._messages
                and not self._request_in_progress and not self._buffer_paused and not self._paused
                and transport is not None and transport.get_write_buffer_size() <= MAX_UNSENT)

    def _answer(self, reads: RouteReads, data: bytes) -> int:
        """Answers the leading cached route reads of `data` in one write; where the rest
        begins."""
        i = data.find(b"\r\n\r\n")
        if i < 0 or i > MAX_HEAD:
            return 0
        end = len(data)
        if i + 4 == end:  # one request: what a client that waits for each answer sends
            out = reads.answer(data[:i])
            if out is None:
                return 0
            self.transport.write(out)  # type: ignore[union-attr]  # _idle said so
            self._served(1)
            return end
        answers: list[bytes] = []
        at = 0
        while True:
            out = reads.answer(data[at:i])
            if out is None:
                break
            answers.append(out)
            at = i + 4
            i = data.find(b"\r\n\r\n", at)
            if i < 0 or i - at > MAX_HEAD:
                break
        if answers:
            self.transport.write(b"".join(answers))  # type: ignore[union-attr]
            self._served(len(answers))
        return at

    def _served(self, n: int) -> None:
        """aiohttp's bookkeeping for `n` requests answered: counted, and the connection
        idle from now, not since the last request aiohttp answered itself."""
        self._request_count += n
        if self._manager is not None:
            self._manager.requests_count += n
        if self._keepalive_timeout > 0:
            close_time = self._loop.time() + self._keepalive_timeout
            self._next_keepalive_close_time = close_time
            if self._keepalive_handle is None:
                self._keepalive_handle = self._loop.call_at(close_time, self._process_keepalive)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self._loop.call_later(self._header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _expire(self) -> None:
        self._header_deadline = None
        if self._current_request is None and not self._messages:
            log.info("closing HTTP connection from %s: no complete request headers within %.0f s "
                     "(RMQ_HTTP_HEADER_TIMEOUT_MS)", self.peername, self._header_timeout)
            self.force_close()


class _Server(web.Server):
    header_timeout_s: float
    route_reads: RouteReads | None

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class HeaderDeadlineRunner(web.AppRunner):
    """``web.AppRunner`` whose connections have a deadline on request headers."""

    def __init__(self, app: web.Application, *, header_timeout_s: float, route_reads: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.header_timeout_s = header_timeout_s
        # False: every request goes through aiohttp (tests compare the two paths)
        self.route_reads = route_reads

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same server, handing out connections with the deadline
        server.header_timeout_s = self.header_timeout_s  # type: ignore[attr-defined]
        server.route_reads = self.app.get(ROUTE_READS) if self.route_reads else None  # type: ignore[attr-defined]
        return server


class OneLineErrors(logging.Filter):
    """Turns aiohttp's traceback for a malformed request, or for a client that hung up,
    into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (HttpProcessingError, ConnectionResetError)):
            what = "malformed HTTP request" if isinstance(exc, HttpProcessingError) else "client hung up"
            record.msg = f"{what} ({record.getMessage()}): %s"
            record.args = (str(exc).replace("\n", " ")[:200],)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def quiet_malformed_requests() -> None:
    """Installs ``OneLineErrors`` on aiohttp's server logger, once."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, OneLineErrors) for f in server_log.filters):
        server_log.addFilter(OneLineErrors())
