"""What aiohttp's server does not bound by itself: how long a client may take to send a
request's headers, and how loudly a malformed request is logged.

- ``HeaderDeadlineRunner``: an ``AppRunner`` whose connections are closed when a request's
  line and headers have not all arrived within ``RMQ_HTTP_HEADER_TIMEOUT_MS`` of its first
  byte (or of the connection, for the first request): a client sending a byte a second
  holds a connection that long, not forever. Bodies have their own deadline where they
  are read (``service.http.views.read_body``).
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

log = logging.getLogger(__name__)


class _Handler(RequestHandler):
    """aiohttp's connection handler with a deadline on each request's headers."""

    def __init__(self, manager: "_Server", **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = manager.header_timeout_s
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        # bytes arriving while no request is being handled nor parsed start the next one
        starts = self._current_request is None and not self._messages
        super().data_received(data)
        if self._messages:
            self._disarm()  # its headers are complete
        elif starts:
            self._arm()

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

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class HeaderDeadlineRunner(web.AppRunner):
    """``web.AppRunner`` whose connections have a deadline on request headers."""

    def __init__(self, app: web.Application, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.header_timeout_s = header_timeout_s

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same server, handing out connections with the deadline
        server.header_timeout_s = self.header_timeout_s  # type: ignore[attr-defined]
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
