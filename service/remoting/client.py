"""A RocketMQ remoting client: one connection to a NameServer, requests pipelined on it
(at most ``in_flight`` at once) and answers matched by opaque. What `rmq-registry compare`
reads two NameServers with; it speaks as a 5.3.3 Java client does (JSON headers, request
version 479, so routes come back in standard JSON), signing each request when given an
access key (RocketMQ's AclClientRPCHook), over TLS when given a client context."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from service.remoting import acl, codec, codes
from service.remoting.codec import Command


class ClientError(Exception):
    """The NameServer could not be reached, or answered something that is no answer."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str


def parse_address(addr: str) -> tuple[str, int]:
    """host:port (a NameServer address as brokers are given it); ValueError otherwise."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"{addr!r} is not host:port")
    return host.strip("[]"), int(port)


class NameServerClient:
    def __init__(self, addr: str, in_flight: int = 64, timeout_s: float = 10.0,
                 credentials: Credentials | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.addr = addr
        self.timeout_s = timeout_s
        self.credentials = credentials
        self.tls = tls
        self._answered = False
        self._slots = asyncio.Semaphore(in_flight)
        self._opaque = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Command]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "NameServerClient":
        host, port = parse_address(self.addr)
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=self.tls), self.timeout_s)
        except ssl.SSLError as e:  # before OSError, its base: the handshake, not the connection
            raise ClientError(f"{self.addr}: TLS handshake failed: {e}") from None
        except (OSError, asyncio.TimeoutError) as e:
            raise ClientError(f"{self.addr}: cannot connect: {e or 'timed out'}") from None
        self._reading = asyncio.create_task(self._read_answers())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._reading is not None:
            self._reading.cancel()
        if self._writer is not None:
            self._writer.close()

    async def _read_answers(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (length,) = struct.unpack(">i", await self._reader.readexactly(4))
                if not 0 < length <= codec.MAX_FRAME:
                    raise ClientError(f"{self.addr}: a frame of {length} bytes")
                answer = codec.decode_payload(await self._reader.readexactly(length))
                self._answered = True
                waiter = self._waiting.pop(answer.opaque, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(answer)
        except (OSError, asyncio.IncompleteReadError, codec.FrameError, ClientError) as e:
            error = e if isinstance(e, ClientError) else ClientError(f"{self.addr}: connection lost: {e}{self._hint()}")
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(error)
            self._waiting.clear()

    def _hint(self) -> str:
        # a NameServer taking TLS only (tls.server.mode=enforcing) closes a plain connection unanswered
        if self.tls is None and not self._answered:
            return " (closed before any answer: does it take TLS only?)"
        return ""

    async def call(self, code: int, ext: dict[str, str] | None = None) -> Command:
        """The answer to one request (whatever its code)."""
        if self._writer is None:
            raise ClientError(f"{self.addr}: not connected")
        async with self._slots:
            cmd = Command(code=code, version=codes.V5_3_3, opaque=next(self._opaque), ext_fields=dict(ext or {}))
            if self.credentials is not None:
                cmd.ext_fields[acl.ACCESS_KEY] = self.credentials.access_key
                cmd.ext_fields[acl.SIGNATURE] = acl.signature(self.credentials.secret_key, cmd.ext_fields, cmd.body)
            waiter: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
            self._waiting[cmd.opaque] = waiter
            try:
                self._writer.write(codec.encode(cmd))
                await self._writer.drain()
                return await asyncio.wait_for(waiter, self.timeout_s)
            except asyncio.TimeoutError:
                raise ClientError(f"{self.addr}: no answer to request code {code} within {self.timeout_s:.0f} s") from None
            except OSError as e:
                raise ClientError(f"{self.addr}: {e}") from None
            finally:
                self._waiting.pop(cmd.opaque, None)

    async def document(self, code: int, ext: dict[str, str] | None = None, what: str = "",
                       absent: int | None = None) -> Any:
        """The JSON body of a successful answer (either dialect); None when the answer is
        the code `absent`. `what` names the request in errors (default: its code)."""
        what = what or f"request code {code}"
        answer = await self.call(code, ext)
        if absent is not None and answer.code == absent:
            return None
        if answer.code != codes.SUCCESS:
            raise ClientError(f"{self.addr}: {what} answered {answer.code}: {answer.remark}")
        try:
            return codec.loads(answer.body)
        except ValueError as e:
            raise ClientError(f"{self.addr}: {what} answered no JSON: {e}") from None

    async def cluster_info(self) -> dict[str, Any]:
        return await self.document(codes.GET_BROKER_CLUSTER_INFO)

    async def topics(self) -> list[str]:
        return list((await self.document(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).get("topicList") or [])

    async def route(self, topic: str, zone: str | None = None) -> dict[str, Any] | None:
        """The topic's route, in `zone`'s zone mode when given (as a client started with
        -Drocketmq.zone.mode=true -Drocketmq.zone=<zone> asks); None for TOPIC_NOT_EXIST."""
        ext = {"topic": topic} if zone is None else {"topic": topic, "__ZONE_MODE": "true", "__ZONE_NAME": zone}
        return await self.document(codes.GET_ROUTEINFO_BY_TOPIC, ext, f"route of {topic!r}",
                                   absent=codes.TOPIC_NOT_EXIST)
