"""The TCP server: asyncio streams, many frames per connection, answers matched by opaque.

Each connection reads frames in a loop and runs each request as its own task (at most
``max_in_flight`` at once per connection, then reading pauses; at most ``max_running``
handlers at once over the server), so a client may pipeline
requests and receive answers in any order, as with RocketMQ's Netty server. A request's
failure is answered (SYSTEM_ERROR) and the connection goes on; a frame that cannot be
decoded, or is above the 16 MiB limit, closes that connection only, as NettyDecoder does.
"""

from __future__ import annotations

import asyncio
import logging
import itertools
import socket
import uuid
from collections import Counter
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from service.remoting import codec, codes, proxy
from service.remoting.handlers import CHANNEL, Channel, Context, dispatch

log = logging.getLogger(__name__)


class RequestCounts(Collector):
    """``rmq_remoting_requests_total{code,response}``, from the server's plain counts: a
    labelled Prometheus counter costs a lock and a label lookup per request."""

    def __init__(self, server: "RemotingServer") -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("rmq_remoting_requests", "RocketMQ remoting requests by request and response code",
                                     labels=["code", "response"])
        for (code, response), n in sorted(self.server.counts.items()):
            family.add_metric([codes.NAMES.get(code, str(code)), str(response)], n)
        yield family


# A connection whose peer reads its answers slower than it sends requests is paused once
# this much is waiting to be written.
WRITE_BUFFER_LIMIT = 1 << 20


class RemotingServer:
    def __init__(self, ctx: Context, host: str, port: int, *, max_in_flight: int = 256, max_running: int = 64,
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
        settings = ctx.settings
        # route reads need no credentials: the cached answer may be sent straight away
        self.open_reads = settings.auth_tokens_file is None or settings.auth_reads == "open"
        self.proxy_protocol = settings.remoting_proxy_protocol
        self.counts: Counter[tuple[int, int]] = Counter()  # (request code, response code) -> n
        self.server: asyncio.Server | None = None
        self._bound: int | None = None
        self.connections: set[asyncio.Task[None]] = set()
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
        self.server = await asyncio.start_server(self._connection, self.host, self.port, reuse_address=True)
        self._bound = self.ctx.listen_port = self.server.sockets[0].getsockname()[1]
        log.info("RocketMQ remoting endpoint on %s:%d", self.host, self.bound_port)

    async def stop(self) -> None:
        """Stops listening and closes every connection (no broker is destroyed by it)."""
        if self.server is not None:
            self.server.close()
        while pending := [t for t in self.connections if not t.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=0.1)
        if self.server is not None:
            await self.server.wait_closed()

    # ------------------------------------------------------------------ connections
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        in_flight: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(self.max_in_flight)
        channel = Channel(f"{self._server_id}/{next(self._sequence)}", peer=peer[0] if peer else "")
        CHANNEL.set(channel)  # this connection's request tasks inherit it
        closed_by_peer = True
        try:
            if self.proxy_protocol:  # the balancer's header names the client: it is the peer from now on
                peer = await proxy.client_address(reader, peer)
                channel.peer = peer[0]
            while True:
                try:
                    prefix = await reader.readexactly(4)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        log.info("connection %s closed inside a frame", peer)
                    break
                length = codec.frame_length(prefix)
                cmd = codec.decode_payload(await reader.readexactly(length))
                if cmd.is_response:
                    log.debug("ignoring a response frame from %s (we send no requests)", peer)
                    continue
                if cmd.code == codes.GET_ROUTEINFO_BY_TOPIC and not cmd.is_oneway:
                    # a cached route is answered here and now: no task, no handler chain
                    frame = self._cached_route(cmd)
                    if frame is not None:
                        writer.write(frame)
                        self.counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.SUCCESS)] += 1
                        if writer.transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                            await writer.drain()
                        continue
                await slots.acquire()
                t = asyncio.create_task(self._request(cmd, writer))
                in_flight.add(t)
                t.add_done_callback(lambda done: (in_flight.discard(done), slots.release()))
            # the peer has finished sending: let the answers it waits for go out first
            if in_flight:
                await asyncio.wait(set(in_flight), timeout=self.request_timeout + 1)
        except codec.FrameError as e:
            log.warning("closing connection %s: %s", peer, e)
        except proxy.ProxyHeaderError as e:
            log.warning("closing connection %s (RMQ_REMOTING_PROXY_PROTOCOL=true): %s", peer, e)
        except asyncio.IncompleteReadError:
            log.info("connection %s closed inside a frame", peer)
        except (ConnectionError, OSError) as e:
            log.debug("connection %s lost: %s", peer, e)
        except asyncio.CancelledError:
            closed_by_peer = False  # server stopping: close without touching any broker's routes
        finally:
            for t in in_flight:
                t.cancel()
            if closed_by_peer and channel.brokers:
                await self._channel_closed(channel)
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 1)
            except (ConnectionError, OSError, asyncio.TimeoutError, asyncio.CancelledError):
                pass
            self.connections.discard(task)

    async def _channel_closed(self, channel: Channel) -> None:
        """As RocketMQ does when a broker's connection closes: its routes go at once, unless
        the broker has since registered or refreshed through another connection or HTTP."""
        for addr in channel.brokers:
            try:
                if await self.ctx.registry.channel_closed(addr, channel.id):
                    log.info("broker %s removed: its connection %s closed", addr, channel.id)
            except Exception as e:  # the TTL and the scanner still remove it in time
                log.warning("could not act on the close of %s for %s: %s", channel.id, addr, e)

    def _cached_route(self, cmd: codec.Command) -> bytes | None:
        """The whole answer frame to a route request the cache can answer as it is (as
        handlers.get_route would answer it), or None to take the usual way."""
        if not self.open_reads:
            return None
        topic = cmd.ext_fields.get("topic")
        if topic is None:
            return None
        standard = cmd.version >= codes.V4_9_4 or cmd.ext_fields.get("acceptStandardJsonOnly", "").strip().lower() == "true"
        answer = self.ctx.cache.lookup_route("tcp-std" if standard else "tcp", topic)
        if answer is None or answer.status != 200:
            return None
        return codec.success_frame(cmd.opaque, cmd.serialize_type, answer.body, codes.V5_3_3)

    async def _request(self, cmd: codec.Command, writer: asyncio.StreamWriter) -> None:
        async with self.running:
            response = await dispatch(self.ctx, cmd, self.request_timeout)
        self.counts[(cmd.code, response.code)] += 1
        if cmd.is_oneway or writer.is_closing():
            return
        try:
            writer.write(codec.encode(response))
            await writer.drain()
        except (ConnectionError, OSError) as e:
            log.debug("answer to opaque %d not delivered: %s", cmd.opaque, e)
