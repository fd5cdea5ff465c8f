"""The PROXY protocol header (HAProxy's, versions 1 and 2) a TCP load balancer puts at the
start of each connection it opens, carrying the client's own address.

With RMQ_REMOTING_PROXY_PROTOCOL=true every connection to the RocketMQ port must start
with one; the address it carries is the connection's for whitelists and logs. A
connection without a valid header within HEADER_TIMEOUT is closed before any frame is
read. A header that carries no address (v2 LOCAL, a balancer's own health check; v1
UNKNOWN) leaves the connection's own address in place, as the specification says.

Written here rather than taken from PyPI: the one asyncio package for it is little used
and drives its own server; this is a read of at most 107 bytes (v1) or 16 + length (v2).
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from typing import Protocol

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest v1 line, CRLF included
HEADER_TIMEOUT = 5.0  # seconds for a balancer to send its header, which it sends at once

_V2_PROXY, _V2_LOCAL = 0x21, 0x20  # version 2 with the PROXY or the LOCAL command
_V2_FAMILIES = {0x11: (4, 12), 0x12: (4, 12), 0x21: (16, 36), 0x22: (16, 36)}  # TCP/UDP over IPv4/IPv6


class ProxyHeaderError(ValueError):
    pass


class ExactReader(Protocol):
    """What the header is read from: a StreamReader, or the server's counting view of one."""

    async def readexactly(self, n: int) -> bytes: ...


Source = tuple[str, int] | None  # the client's (address, port); None: keep the connection's own


async def read_header(reader: ExactReader) -> Source:
    """Reads the header off `reader`; raises ProxyHeaderError (or IncompleteReadError) when
    there is none or it is broken."""
    head = await reader.readexactly(len(V2_SIGNATURE))
    if head == V2_SIGNATURE:
        return await _v2(reader)
    if head.startswith(V1_PREFIX):
        return await _v1(reader, head)
    raise ProxyHeaderError("no PROXY protocol header")


async def _v1(reader: ExactReader, line: bytes) -> Source:
    while not line.endswith(b"\r\n"):
        if len(line) >= V1_MAX:
            raise ProxyHeaderError(f"PROXY v1 line longer than {V1_MAX} bytes")
        line += await reader.readexactly(1)
    return parse_v1(line)


def parse_v1(line: bytes) -> Source:
    """``PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\\r\\n`` or ``PROXY UNKNOWN ...\\r\\n``."""
    try:
        fields = line[:-2].decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY v1 line is not ASCII") from None
    if len(fields) >= 2 and fields[1] == "UNKNOWN":
        return None
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"bad PROXY v1 line {line[:V1_MAX]!r}")
    _, family, src, dst, sport, dport = fields
    want = 4 if family == "TCP4" else 6
    try:
        addresses = [ipaddress.ip_address(a) for a in (src, dst)]
        ports = [int(p) for p in (sport, dport)]
    except ValueError:
        raise ProxyHeaderError(f"bad PROXY v1 address or port in {line!r}") from None
    if any(a.version != want for a in addresses) or not all(0 <= p <= 65535 and str(p) == s
                                                            for p, s in zip(ports, (sport, dport))):
        raise ProxyHeaderError(f"bad PROXY v1 address or port in {line!r}")
    return str(addresses[0]), ports[0]


async def _v2(reader: ExactReader) -> Source:
    command, family, length = struct.unpack(">BBH", await reader.readexactly(4))
    return parse_v2(command, family, await reader.readexactly(length))


def parse_v2(command: int, family: int, block: bytes) -> Source:
    """The address block after the 16 fixed bytes; TLVs after the addresses are ignored."""
    if command == _V2_LOCAL:
        return None
    if command != _V2_PROXY:
        raise ProxyHeaderError(f"PROXY v2 version/command byte {command:#04x} is neither PROXY nor LOCAL")
    if family == 0x00:  # UNSPEC: the balancer does not know; keep the connection's address
        return None
    if family not in _V2_FAMILIES:
        raise ProxyHeaderError(f"PROXY v2 address family {family:#04x} is not IPv4 or IPv6")
    size, needed = _V2_FAMILIES[family]
    if len(block) < needed:
        raise ProxyHeaderError(f"PROXY v2 address block of {len(block)} bytes, {needed} needed")
    source = ipaddress.ip_address(block[:size])
    (port,) = struct.unpack(">H", block[2 * size:2 * size + 2])
    return str(source), port


async def client_address(reader: ExactReader, peer: tuple[str, int]) -> tuple[str, int]:
    """The connection's client address: the header's, or `peer` when the header carries none.
    Raises ProxyHeaderError for a missing, late or broken header."""
    try:
        source = await asyncio.wait_for(read_header(reader), HEADER_TIMEOUT)
    except asyncio.IncompleteReadError:
        raise ProxyHeaderError("closed before a whole PROXY protocol header") from None
    except asyncio.TimeoutError:
        raise ProxyHeaderError(f"no PROXY protocol header within {HEADER_TIMEOUT:g} s") from None
    return peer if source is None else source
