"""The TCP server: asyncio streams, many frames per connection, answers matched by opaque.

Each connection reads frames in a loop and runs each request as its own task (at most
``max_in_flight`` at once per connection, then reading pauses; at most ``max_running``
handlers at once over the server), so a client may pipeline
requests and receive answers in any order, as with RocketMQ's Netty server. Route reads
the cache answers are answered as their bytes arrive, by the connection's protocol, before
the stream sees them (service/remoting/route_reads.py). A request's
failure is answered (SYSTEM_ERROR) and the connection goes on; a frame that cannot be
decoded, or is above the 16 MiB limit, closes that connection only, as NettyDecoder does.
Each connection is TLS or plain as its first byte says (RMQ_REMOTING_TLS_MODE, as
RocketMQ's tls.server.mode): service/remoting/tls.py accepts them in modes permissive
(the default) and enforcing; in mode disabled an asyncio server does.

What one client can hold is bounded (docs/remoting.md lists every limit):

- connections: past ``RMQ_REMOTING_MAX_CONNECTIONS`` a new one is closed at once;
- idle connections (no frame for ``RMQ_REMOTING_IDLE_MS``, nothing in flight) are closed,
  as Netty's idle handler closes them in RocketMQ;
- a frame must arrive whole within ``RMQ_REMOTING_FRAME_TIMEOUT_MS`` of its length field;
- the bodies of large frames being read or handled share one budget per worker,
  ``RMQ_REMOTING_FRAME_BUFFER_BYTES``: a connection whose frame does not fit waits (its
  bytes stay in the kernel, TCP pushes back on the sender) instead of buffering them;
- a connection reading pipelined frames gives the event loop back every few milliseconds;
- requests with large bodies take at most a few of the running places (their decoding
  waits its turn, ``context.decoded``), so small requests always find one.

Connections closed for these reasons, or refused, are counted for /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import itertools
import socket
import uuid
from collections import Counter

from service.logs import WindowedLog
from service.removals import CONNECTION_CLOSED, Removal
from service.remoting import codec, codes, proxy, tls
from service.remoting.byte_budget import ByteBudget
from service.remoting.connection import CHANNEL, Channel, Connection
from service.remoting.context import SMALL_BODY, HandlerContext
from service.remoting.dispatch import dispatch
from service.remoting.handlers import topic_not_exist, zone_asked
from service.remoting.route_reads import RouteReads

log = logging.getLogger(__name__)


# A connection whose peer reads its answers slower than it sends requests is paused once
# this much is waiting to be written.
WRITE_BUFFER_LIMIT = 1 << 20
# Frames up to this size are not counted against the frame buffer budget: asyncio's stream
# reader holds this much per connection anyway, and RocketMQ's requests are mostly this small.
SMALL_FRAME = 64 * 1024
# How long one connection may decode pipelined frames before letting other work run.
SLICE_S = 0.005
# How often idle connections and slow frames are looked for.
SWEEP_S = 1.0

_NO_LIMIT = contextlib.nullcontext()


def tls_record(prefix: bytes) -> bool:
    """Whether a connection's first 4 bytes are a TLS handshake record's (type 0x16, version
    3.x), not a frame: as a length field they read 369 MB and up, never a frame's."""
    return prefix[0] == tls.HANDSHAKE and prefix[1] == 3


class RemotingServer:
    def __init__(self, ctx: HandlerContext, host: str, port: int, *, max_in_flight: int = 256, max_running: int = 64,
                 request_timeout: float | None = None) -> None:
        self.ctx = ctx
        self.host = host
        self.port = port
        self.max_in_flight = max_in_flight
        # every Redis call is bounded by the store's timeout; a request makes a few at most
        self.request_timeout = request_timeout or max(1.0, 4 * ctx.settings.redis_timeout_ms / 1000)
        # requests running at once over all connections: below the Redis pool's size (redis-py's
        # asyncio pool holds 100 connections and fails, rather than waits, beyond that)
        self.running = asyncio.Semaphore(max_running)
        self.heavy = asyncio.Semaphore(max(1, max_running // 16))
        settings = ctx.settings
        self.idle_s = settings.remoting_idle_ms / 1000
        self.frame_timeout_s = settings.remoting_frame_timeout_ms / 1000
        self.max_connections = settings.remoting_max_connections
        self.budget = ByteBudget(settings.remoting_frame_buffer_bytes)
        # route reads need no credentials: the cached answer may be sent straight away
        self.open_reads = settings.auth_tokens_file is None or settings.auth_reads == "open"
        self.proxy_protocol = settings.remoting_proxy_protocol
        self.counts: Counter[tuple[int, int]] = Counter()  # (request code, response code) -> n
        self.refused: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()
        self.served: Counter[str] = Counter()  # "plain" / "tls": connections past the cap
        self._refusal_log = WindowedLog(log, 10, ("refused connection", "refused connections"),
                                        of="over RMQ_REMOTING_MAX_CONNECTIONS")
        self.server: asyncio.Server | tls.Listener | None = None
        self._bound: int | None = None
        self.connections: set[asyncio.Task[None]] = set()
        self.open: dict[asyncio.Task[None], Connection] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # channel ids unique across workers and restarts: this server's id plus a counter
        self._server_id = uuid.uuid4().hex[:12]
        self._sequence = itertools.count(1)

    @property
    def bound_port(self) -> int:
        """The port listened on (the chosen one when started with port 0)."""
        if self._bound is None:
            raise RuntimeError("the remoting server has not started")
        return self._bound

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def protocol(source: tuple[str, int] | None = None) -> RouteReads:
            """asyncio.start_server's protocol, answering cached route reads as they arrive."""
            connected = self._connection if source is None else functools.partial(self._connection, source=source)
            return RouteReads(asyncio.StreamReader(loop=loop), connected, loop, SMALL_FRAME, WRITE_BUFFER_LIMIT)

        settings = self.ctx.settings
        if settings.remoting_tls_mode == "disabled":
            self.server = await loop.create_server(protocol, self.host, self.port, reuse_address=True)
            self._bound = self.server.sockets[0].getsockname()[1]
        else:  # the first byte of each connection says TLS or plain (service/remoting/tls.py)
            context = await asyncio.to_thread(tls.context_for, settings.remoting_tls_mode, settings.remoting_tls_cert,
                                              settings.remoting_tls_key, settings.remoting_tls_client_ca)
            self.server = tls.Listener(settings.remoting_tls_mode, context, protocol, proxy_protocol=self.proxy_protocol,
                                       first_byte_s=self.idle_s, handshake_s=self.frame_timeout_s,
                                       admit=self._admit, refused=self.refused, closed=self.closed)
            self._bound = await self.server.start(self.host, self.port)
        self.ctx.listen_port = self._bound
        self._sweeper = asyncio.create_task(self._sweep())
        log.info("RocketMQ remoting endpoint on %s:%d", self.host, self.bound_port)

    def stop_accepting(self) -> None:
        """Stops listening (the worker's drain begins): clients connect to another name
        server from now, while the connections open are served until ``stop``."""
        if self.server is not None and self._bound is not None:
            self.server.close()
            log.info("RocketMQ port %d: not accepting connections (stopping); the %d open are served until "
                     "the worker stops", self._bound, len(self.open))

    async def stop(self) -> None:
        """Stops listening and closes every connection (no broker is destroyed by it)."""
        if self.server is not None:
            self.server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.ctx.refusals.close()
        self._refusal_log.close()
        self.ctx.failures.close()
        while pending := [t for t in self.connections if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
        if self.server is not None:
            await self.server.wait_closed()

    async def _sweep(self) -> None:
        """Closes idle connections and those whose frame is too slow to arrive."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_S)
            now = loop.time()
            for conn in list(self.open.values()):
                if conn.frame_started is not None:
                    if now - conn.frame_started > self.frame_timeout_s:
                        log.info("closing connection %s: a frame not whole within %.0f s", conn.peer,
                                 self.frame_timeout_s)
                        conn.close("slow_frame")
                elif not conn.in_flight and now - conn.last > self.idle_s:
                    log.info("closing connection %s: idle for %.0f s", conn.peer, self.idle_s)
                    conn.close("idle")

    # ------------------------------------------------------------------ connections
    def _admit(self, pending: int = 0) -> bool:
        """Whether a new connection may be served (`pending`: connections accepted and not
        yet open, tls.Listener's); the caller closes it when not."""
        if len(self.open) + pending < self.max_connections:
            return True
        self.refused["too_many_connections"] += 1
        self._refusal_log.write("cap", f"refusing RocketMQ connections: {len(self.open) + pending} open, "
                                       f"RMQ_REMOTING_MAX_CONNECTIONS={self.max_connections}")
        return False

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          source: tuple[str, int] | None = None) -> None:
        """One connection's frames. `source`: the client's address, when tls.Listener has
        read the connection's PROXY header already."""
        if not self._admit():
            writer.transport.abort()
            return
        self.served["tls" if writer.get_extra_info("ssl_object") is not None else "plain"] += 1
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        loop = asyncio.get_running_loop()
        conn = Connection(writer.get_extra_info("peername"), writer, loop.time())
        self.open[task] = conn
        peer = conn.peer
        in_flight = conn.in_flight
        slots = asyncio.Semaphore(self.max_in_flight)
        channel = Channel(f"{self._server_id}/{next(self._sequence)}", peer=peer[0] if peer else "")
        CHANNEL.set(channel)  # this connection's request tasks inherit it
        closed_by_peer = True
        slice_start = loop.time()
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, RouteReads)  # start() makes every connection's
        frames = protocol.taken  # the reader, counting what this loop takes from it
        first = True
        try:
            if source is not None:  # read off the socket before TLS (tls.Listener)
                peer = conn.peer = source
                channel.peer = peer[0]
            elif self.proxy_protocol and self.ctx.settings.remoting_tls_mode == "disabled":
                # the balancer's header names the client: it is the peer from now on
                peer = conn.peer = await proxy.client_address(frames, peer)
                channel.peer = peer[0]
            if self.open_reads:
                protocol.answer = functools.partial(self._answer_cached, conn)
            while True:
                start = frames.count
                try:
                    prefix = await frames.readexactly(4)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        log.info("connection %s closed inside a frame", peer)
                    break
                conn.frame_started = loop.time()
                if first and tls_record(prefix):  # in mode disabled: the other modes' Listener takes TLS
                    self.refused["tls_disabled"] += 1
                    log.warning("closing connection %s: a TLS handshake, and RMQ_REMOTING_TLS_MODE=disabled serves "
                                "plain connections only (permissive serves both)", peer)
                    break
                first = False
                length = codec.frame_length(prefix)
                reserved = length if length > SMALL_FRAME else 0
                if reserved:
                    try:
                        await asyncio.wait_for(self.budget.acquire(reserved), self.frame_timeout_s)
                    except asyncio.TimeoutError:
                        log.info("closing connection %s: no room for its %d-byte frame within %.0f s "
                                 "(RMQ_REMOTING_FRAME_BUFFER_BYTES)", peer, length, self.frame_timeout_s)
                        conn.close("slow_frame")
                        break
                try:
                    payload = await frames.readexactly(length)
                    cmd = protocol.decoded(start) or codec.decode_payload(payload)
                except BaseException:
                    self.budget.release(reserved)
                    raise
                conn.last = now = loop.time()
                conn.frame_started = None
                if cmd.is_response:
                    self.budget.release(reserved)
                    log.debug("ignoring a response frame from %s (we send no requests)", peer)
                    continue
                await slots.acquire()
                t = asyncio.create_task(self._request(cmd, conn))
                in_flight.add(t)
                t.add_done_callback(lambda done, n=reserved: (in_flight.discard(done), slots.release(),
                                                              self.budget.release(n)))
                if now - slice_start > SLICE_S:
                    await asyncio.sleep(0)
                    slice_start = loop.time()
            # the peer has finished sending: let the answers it waits for go out first
            if in_flight:
                await asyncio.wait(set(in_flight), timeout=self.request_timeout + 1)
        except codec.FrameError as e:
            self.closed["bad_frame"] += 1
            log.warning("closing connection %s: %s", peer, e)
        except proxy.ProxyHeaderError as e:
            log.warning("closing connection %s (RMQ_REMOTING_PROXY_PROTOCOL=true): %s", peer, e)
        except asyncio.IncompleteReadError:
            if conn.closing is None:
                log.info("connection %s closed inside a frame", peer)
        except (ConnectionError, OSError) as e:
            log.debug("connection %s lost: %s", peer, e)
        except asyncio.CancelledError:
            closed_by_peer = False  # server stopping: close without touching any broker's routes
        finally:
            if conn.closing is not None:
                self.closed[conn.closing] += 1
            for t in in_flight:
                t.cancel()
            if closed_by_peer and channel.brokers:
                self._channel_closed(channel)
            writer.close()
            # a plain connection's transport flushes and closes on its own: no wait, so a
            # storm of hundreds of closes costs the loop less in the turn they all end in;
            # TLS has its close_notify exchange to finish
            if writer.get_extra_info("ssl_object") is not None:
                try:
                    await asyncio.wait_for(writer.wait_closed(), 1)
                except (ConnectionError, OSError, asyncio.TimeoutError, asyncio.CancelledError):
                    pass
            self.open.pop(task, None)
            self.connections.discard(task)

    def _channel_closed(self, channel: Channel) -> None:
        """As RocketMQ does when a broker's connection closes: its routes go at once, unless
        the broker has since registered or refreshed through another connection or HTTP.
        Queued on the worker's removal path (service/removals.py), which removes a storm
        of closes in a few bounded scripts and retries while Redis is unavailable."""
        self.ctx.removals.submit(Removal(addr, channel.id, CONNECTION_CLOSED) for addr in channel.brokers)

    def _answer_cached(self, conn: Connection, payload: bytes) -> bytes | codec.Command | None:
        """RouteReads' answerer: the answer frame to a route read the cache answers; else the
        frame decoded, which the stream's path then handles without decoding it again; None
        when it cannot be decoded (the stream's path refuses it)."""
        try:
            cmd = codec.decode_payload(payload)
        except codec.FrameError:
            return None
        if cmd.code != codes.GET_ROUTEINFO_BY_TOPIC or cmd.flag & (codec.FLAG_RESPONSE | codec.FLAG_ONEWAY):
            return cmd
        frame = self._cached_route(cmd)
        if frame is None:
            return cmd
        conn.last = conn.loop.time()
        return frame

    def _cached_route(self, cmd: codec.Command) -> bytes | None:
        """The whole answer frame to a route request the cache can answer as it is, its
        route or TOPIC_NOT_EXIST (as handlers.get_route would answer it), or None to take
        the usual way."""
        if not self.open_reads:
            return None
        topic = cmd.ext_fields.get("topic")
        if topic is None or zone_asked(cmd.ext_fields) is not None:
            return None  # a zone-mode read is answered filtered (handlers.get_route)
        standard = cmd.version >= codes.V4_9_4 or cmd.ext_fields.get("acceptStandardJsonOnly", "").strip().lower() == "true"
        answer = self.ctx.cache.lookup_route("tcp-std" if standard else "tcp", topic)
        if answer is None:
            return None
        if answer.status != 200:
            self.counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.TOPIC_NOT_EXIST)] += 1
            return codec.encode(topic_not_exist(cmd, topic))
        self.counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.SUCCESS)] += 1
        return codec.success_frame(cmd.opaque, cmd.serialize_type, answer.body, codes.V5_3_3)

    async def _request(self, cmd: codec.Command, conn: Connection) -> None:
        writer = conn.writer
        # requests with large bodies hold at most a few of the running places, so that
        # pipelined ones waiting for their turn to decode never keep small requests out
        heavy = self.heavy if len(cmd.body) > SMALL_BODY else _NO_LIMIT
        async with heavy, self.running:
            response = await dispatch(self.ctx, cmd, self.request_timeout)
        self.counts[(cmd.code, response.code)] += 1
        if cmd.is_oneway or writer.is_closing():
            return
        try:
            frame = codec.encode(response)
        except Exception as e:  # the request was read: answer it or close, never leave it hanging
            log.warning("closing connection %s: the answer to opaque %d cannot be encoded: %s", conn.peer, cmd.opaque, e)
            conn.close("answer_failed")
            return
        try:
            writer.write(frame)
            await writer.drain()
        except (ConnectionError, OSError) as e:
            log.debug("answer to opaque %d not delivered: %s", cmd.opaque, e)
