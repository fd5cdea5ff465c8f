"""What aiohttp's server does not bound by itself: how long a client may take to send a
request's headers, and how loudly a malformed request is logged. Through aiohttp's and
asyncio's public API only, so that any aiohttp release pyproject.toml admits serves.

- ``HttpServer``: aiohttp's ``AppRunner`` behind a listening socket of our own, whose
  connections are each aiohttp's protocol wrapped in a ``HeaderDeadline``: a connection
  is closed when a request's line and headers have not all arrived within
  ``RMQ_HTTP_HEADER_TIMEOUT_MS`` of its first byte (or of the connection, for the first
  request), so a client sending a byte a second holds it that long, not forever. Bodies
  have their own deadline where they are read (``service.http.views.read_body``).
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

log = logging.getLogger(__name__)


class HeaderDeadline(asyncio.Protocol):
    """One connection: aiohttp's protocol for it (every event handed on as it is), and the
    deadline on request heads.

    aiohttp cannot be asked whether it holds part of a head, so the deadline is kept from
    what it can be told: bytes arriving while none of the connection's requests is being
    handled begin a head (or the connection's first) and start the clock; the handler of
    a request starting (``service.http.observe`` says so: ``begin``) means its head is
    complete and stops it. Bytes arriving while a request is handled (its body, or
    requests pipelined behind it) start nothing: the body has its own deadline, and the
    connection's keep-alive timeout bounds the rest."""

    __slots__ = ("inner", "transport", "handling", "_timeout", "_loop", "_since", "_timer")

    def __init__(self, inner: asyncio.Protocol, timeout_s: float, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.handling = 0  # requests of this connection whose handler runs
        self._timeout = timeout_s
        self._loop = loop
        # when the head now awaited began (None: none awaited); one timer per connection,
        # moved on when it fires early, rather than one scheduled and cancelled per request
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._start()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.handling and self._since is None:
            self._start()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.inner.connection_lost(exc)

    def begin(self) -> None:
        """A request's handler starts: its head is complete."""
        self.handling += 1
        self._since = None

    def end(self) -> None:
        self.handling -= 1

    def _start(self) -> None:
        self._since = self._loop.time()
        if self._timer is None:
            self._timer = self._loop.call_at(self._since + self._timeout, self._check)

    def _check(self) -> None:
        self._timer = None
        since = self._since
        if since is None or self.handling:
            return
        due = since + self._timeout
        if self._loop.time() < due:  # a later head than the one the timer was set for
            self._timer = self._loop.call_at(due, self._check)
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            log.info("closing HTTP connection from %s: no complete request headers within %.0f s "
                     "(RMQ_HTTP_HEADER_TIMEOUT_MS)", transport.get_extra_info("peername"), self._timeout)
            transport.close()


def deadline_of(request: web.BaseRequest) -> HeaderDeadline | None:
    """The head deadline of `request`'s connection; None when it has none (an app served
    by another runner, aiohttp's test server) or the connection is gone."""
    transport = request.transport
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, HeaderDeadline) else None


class HttpServer:
    """An app served on a port whose connections have a deadline on request heads:
    ``setup``, ``listen``, then ``cleanup`` (also after a failed start)."""

    def __init__(self, app: web.Application, *, header_timeout_s: float, shutdown_timeout_s: float = 60,
                 **runner: Any) -> None:
        self.runner = web.AppRunner(app, **runner)
        self.header_timeout_s = header_timeout_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self._listener: asyncio.AbstractServer | None = None

    async def setup(self) -> None:
        await self.runner.setup()

    async def listen(self, host: str, port: int, backlog: int = 128) -> None:
        """Accepts connections on `host`:`port` (0: a free port); OSError when it cannot."""
        server, timeout, loop = self.runner.server, self.header_timeout_s, asyncio.get_running_loop()
        assert server is not None, "setup() first"
        # web.Server is the protocol factory aiohttp's own sites hand to create_server
        # SO_REUSEADDR: a worker restarted on this host binds at once, past the connections
        # its predecessor closed (TIME_WAIT)
        self._listener = await loop.create_server(lambda: HeaderDeadline(server(), timeout, loop), host, port,
                                                  backlog=backlog, reuse_address=True)

    @property
    def port(self) -> int:
        assert self._listener is not None, "listen() first"
        return self._listener.sockets[0].getsockname()[1]

    def close_connections(self) -> None:
        """Closes idle keep-alive connections now and the others once their request is
        answered (aiohttp's ``RequestHandler.close``): at drain start, so that clients take
        their next request elsewhere and none holds the worker past its drain."""
        if self.runner.server is not None:
            for conn in self.runner.server.connections:
                conn.close()

    async def cleanup(self) -> None:
        """Stops accepting, lets in-flight requests finish (within the shutdown timeout),
        closes the connections, then runs the app's shutdown and cleanup."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self.runner.server is not None:
            # idle keep-alive connections opened since the drain began: aiohttp's shutdown
            # alone waits its whole timeout for their next request
            self.close_connections()
            # before the runner's cleanup: releases before 3.10 close connections only
            # through their sites, and this server has none
            await self.runner.server.shutdown(self.shutdown_timeout_s)
        await self.runner.cleanup()


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
