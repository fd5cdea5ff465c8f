"""TLS on the RocketMQ port, as RocketMQ's NameServer does it (``tls.server.mode``).

RocketMQ's NettyRemotingServer looks at the first byte of each connection (its
TlsModeHandler): 0x16, the first byte of a TLS handshake record, means TLS; anything else
is a plain RocketMQ frame. ``RMQ_REMOTING_TLS_MODE`` takes Java's three modes:

- ``disabled``: plain only, served by an asyncio server; a connection whose first bytes
  are a TLS handshake record's is closed, said and counted as such (``tls_disabled``,
  service/remoting/server.py);
- ``permissive`` (the default, as in Java): the first byte decides, TLS or plain;
- ``enforcing``: TLS only; a plain connection is closed before anything is read from it.

The certificate is ``RMQ_REMOTING_TLS_CERT`` with its key ``RMQ_REMOTING_TLS_KEY`` (PEM);
without them the worker makes a self-signed one at start, as Java's NameServer does by
default (its ``tls.test.mode.enable``), with ``cryptography`` (Python's ``ssl`` can load a
certificate but not make one). ``RMQ_REMOTING_TLS_CLIENT_CA`` (PEM) asks every TLS
client for a certificate signed by it (Java's ``tls.server.need.client.auth=require``).

How: in modes permissive and enforcing the port's connections are accepted by Listener
(``loop.sock_accept``), not by an asyncio server, whose transports read at once: no byte
leaves the kernel before the decision. The PROXY protocol header, when configured, comes
first, before TLS (a TCP balancer sends it in clear), read with exact-length reads; the
first byte after it is peeked (MSG_PEEK leaves it in the kernel); then
``loop.connect_accepted_socket`` hands the socket to the server's protocol, with
``ssl=`` (the handshake, bounded by RMQ_REMOTING_FRAME_TIMEOUT_MS) or without. Only
asyncio's public API is used. The connection cap counts these connections from their
accept, and one that sends no byte within RMQ_REMOTING_IDLE_MS is closed as idle.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import os
import socket
import ssl
import tempfile
from collections import Counter
from typing import Callable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from service.config import StartupError
from service.remoting import proxy

log = logging.getLogger(__name__)

HANDSHAKE = 0x16  # a TLS record of type handshake: what every TLS client sends first
# the self-signed certificate's lifetime; a worker makes a new one at every start
SELF_SIGNED_DAYS = 3650


class Refused(Exception):
    """The connection is closed before any frame: ``reason`` is its count's name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def server_context(cert: str | None, key: str | None, client_ca: str | None = None) -> ssl.SSLContext:
    """The server's SSLContext: the given certificate and key (PEM files), or a self-signed
    pair made now. Raises ssl.SSLError / OSError for files that do not load."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if cert is None:
        with tempfile.TemporaryDirectory(prefix="rmq-tls-") as folder:
            cert_file, key_file = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            for path, pem in zip((cert_file, key_file), _self_signed()):
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                    f.write(pem)
            context.load_cert_chain(cert_file, key_file)  # held in memory; the files go
    else:
        context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@functools.lru_cache(maxsize=1)
def _self_signed() -> tuple[bytes, bytes]:
    """A self-signed P-256 certificate and its key (PEM), made once a process; for
    "localhost", as Netty's SelfSignedCertificate that Java's NameServer uses (a RocketMQ
    client checks no server certificate unless ``tls.client.authServer=true``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
            # what openssl req -x509 adds: a CA that signs itself, its key named
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


class _SocketReader:
    """``readexactly`` over a non-blocking socket: never reads past what it is asked for,
    so the bytes after a PROXY header stay in the kernel for the TLS handshake."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock

    async def readexactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = await self.loop.sock_recv(self.sock, n - len(data))
            if not chunk:
                raise asyncio.IncompleteReadError(data, n)
            data += chunk
        return data


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The next byte on `sock`, left there; None when the peer closed first."""
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable = loop.create_future()
            loop.add_reader(sock.fileno(), functools.partial(_set, readable))
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data[0] if data else None


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# (client address from a PROXY header, or None) -> the connection's protocol
ProtocolFactory = Callable[[tuple[str, int] | None], asyncio.BaseProtocol]


class Listener:
    """The RocketMQ port in modes permissive and enforcing: it accepts connections itself,
    so that each one's first byte is looked at before any transport reads from it (an
    asyncio server's transport starts reading at once, and uvloop's cannot be paused
    before its first read). Then the PROXY header (when configured), then TLS or plain as
    the mode and the first byte say, and ``loop.connect_accepted_socket`` hands the socket,
    with the TLS handshake when there is one, to the protocol the server makes."""

    def __init__(self, mode: str, context: ssl.SSLContext, factory: ProtocolFactory, *,
                 proxy_protocol: bool, first_byte_s: float, handshake_s: float, admit: Callable[[int], bool],
                 refused: Counter[str], closed: Counter[str]) -> None:
        if mode not in ("permissive", "enforcing"):
            raise ValueError(f"no listener of ours in mode {mode!r}")
        self.mode = mode
        self.context = context
        self.factory = factory
        self.proxy_protocol = proxy_protocol
        self.first_byte_s = first_byte_s
        self.handshake_s = handshake_s
        # the server's connection cap, told how many are accepted and not yet handed on
        self.admit = admit
        self.refused = refused  # the server's counts, by reason
        self.closed = closed
        self.sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, backlog: int = 100) -> int:
        """Listens on every address `host` names (as asyncio.create_server would); the port."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address[0], port, *address[2:]))  # port 0: the others on the first's
                port = sock.getsockname()[1]
                sock.listen(backlog)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        for sock in self.sockets:
            self._tasks.add(asyncio.create_task(self._accept(sock)))
        return port

    def close(self) -> None:
        for task in (*self._tasks, *self._pending):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        tasks = [*self._tasks, *self._pending]
        if tasks:
            await asyncio.wait(tasks, timeout=2)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as e:  # out of descriptors, say: try again in a moment
                log.warning("RocketMQ port: cannot accept a connection: %s", e)
                await asyncio.sleep(0.1)
                continue
            if not self.admit(len(self._pending)):
                sock.close()
                continue
            task = asyncio.create_task(self._open(sock, address))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _open(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        try:
            sock.setblocking(False)
            source = None
            if self.proxy_protocol:  # sent in clear by the balancer, before TLS
                source = await proxy.client_address(_SocketReader(loop, sock), peer)  # type: ignore[arg-type]
            try:
                first = await asyncio.wait_for(_peek(loop, sock), self.first_byte_s)
            except asyncio.TimeoutError:
                raise Refused("idle", f"no byte within {self.first_byte_s:.0f} s") from None
            if first is None:  # closed before a byte: nothing to serve
                sock.close()
                return
            context = self.context if first == HANDSHAKE else None
            if context is None and self.mode == "enforcing":
                raise Refused("tls_required", "a plain connection (RMQ_REMOTING_TLS_MODE=enforcing)")
            try:
                await loop.connect_accepted_socket(
                    lambda: self.factory(source), sock, ssl=context,
                    ssl_handshake_timeout=self.handshake_s if context else None)
            except OSError as e:  # ssl.SSLError, a reset, the handshake's timeout
                if context is None:
                    raise
                raise Refused("tls_handshake", f"TLS handshake failed: {_reason(e)}") from None
        except proxy.ProxyHeaderError as e:  # said (and counted) before the close the client sees
            log.warning("closing connection %s (RMQ_REMOTING_PROXY_PROTOCOL=true): %s", peer, e)
            sock.close()
        except Refused as e:  # refused as it opened; or idle before its first byte
            (self.closed if e.reason == "idle" else self.refused)[e.reason] += 1
            log.info("closing connection %s: %s", peer, e)
            sock.close()
        except OSError as e:  # reset by the client before it was served
            log.debug("connection %s lost before its first frame: %s", peer, e)
            sock.close()
        except BaseException:
            sock.close()
            raise


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or str(e)
    if isinstance(e, TimeoutError):
        return "not done in time"
    return str(e) or type(e).__name__


def context_for(mode: str, cert: str | None, key: str | None, client_ca: str | None) -> ssl.SSLContext:
    """The server's SSLContext for the settings (mode not disabled); without a configured
    certificate, a self-signed one."""
    try:
        context = server_context(cert, key, client_ca)
    except (ssl.SSLError, OSError) as e:  # checked at start (config.py); changed since
        raise StartupError(f"RMQ_REMOTING_TLS_CERT={cert}: cannot load it with its key: {_reason(e)}") from None
    log.info("RocketMQ port: TLS mode %s, %s certificate", mode, "a configured" if cert else "a self-signed")
    return context
