"""A small RocketMQ remoting client for the tests: frames out, answers matched by opaque."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct

from service.remoting import acl, codec
from service.remoting.codec import Command

_opaque = itertools.count(1)


def request(code: int, ext: dict[str, str] | None = None, body: bytes = b"", *, version: int = 479,
            serialize: int = codec.JSON, oneway: bool = False, language: str = "JAVA") -> Command:
    return Command(code=code, language=language, version=version, opaque=next(_opaque),
                   flag=codec.FLAG_ONEWAY if oneway else 0, ext_fields=dict(ext or {}), body=body,
                   serialize_type=serialize)


def signed(cmd: Command, access_key: str, secret_key: str, security_token: str | None = None) -> Command:
    """`cmd` signed as RocketMQ's AclClientRPCHook signs it (the fields added first, then signed)."""
    cmd.ext_fields[acl.ACCESS_KEY] = access_key
    if security_token is not None:
        cmd.ext_fields["SecurityToken"] = security_token
    cmd.ext_fields[acl.SIGNATURE] = acl.signature(secret_key, cmd.ext_fields, cmd.body)
    return cmd


class RemotingClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1", source: str | None = None,
                      tls: ssl.SSLContext | None = None) -> "RemotingClient":
        """`source`: the local address to connect from (127.0.0.x stand for other hosts);
        `tls`: speak TLS with this context (as a client started with -Dtls.enable=true)."""
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None,
                                                       ssl=tls, server_hostname="localhost" if tls else None)
        return cls(reader, writer)

    async def send(self, cmd: Command) -> None:
        self.writer.write(codec.encode(cmd))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read(self, timeout: float = 5) -> Command:
        prefix = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        (length,) = struct.unpack(">i", prefix)
        return codec.decode_payload(await asyncio.wait_for(self.reader.readexactly(length), timeout))

    async def call(self, cmd: Command, timeout: float = 5) -> Command:
        await self.send(cmd)
        answer = await self.read(timeout)
        assert answer.opaque == cmd.opaque and answer.is_response
        assert answer.serialize_type == cmd.serialize_type
        return answer

    async def closed(self, timeout: float = 5) -> bool:
        """True when the server closes the connection (EOF) within the timeout."""
        try:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
        except (ConnectionError, OSError):
            return True
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
