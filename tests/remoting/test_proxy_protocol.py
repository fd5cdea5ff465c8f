"""The PROXY protocol on the RocketMQ port (RMQ_REMOTING_PROXY_PROTOCOL=true): the header's
address is the client's for whitelists and logs, and a connection without one is closed.
Senders: HAProxy itself (``send-proxy``, ``send-proxy-v2``) and hand-made headers."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import shutil
import socket
import struct
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
import redis

from service.remoting import codes, proxy
from tests.builders import registration
from tests.hardening.harness import Worker as ProcessWorker
from tests.redis_server import free_port
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.remoting.frames import register
from tests.remoting.test_acl import KEYS, REFUSED
from tests.remoting.test_whitelist import needs_ipv6
from tests.tables import snapshot
from tests.waits import until

NO_KEY = REFUSED + "No accessKey is configured"
WHITE = "10.1.2.* 127.0.0.2 ::1"


def v1(src: str, sport: int = 40000, dport: int = 9876) -> bytes:
    ipv4 = ipaddress.ip_address(src).version == 4
    family, dst = ("TCP4", "10.0.0.1") if ipv4 else ("TCP6", "fd00::1")
    return f"PROXY {family} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src: str | None, sport: int = 40000, *, command: int = 0x21, tlv: bytes = b"") -> bytes:
    """A v2 header; src None: the LOCAL command (a balancer's health check), no address."""
    if src is None:
        return proxy.V2_SIGNATURE + struct.pack(">BBH", 0x20, 0x00, 0)
    address = ipaddress.ip_address(src)
    block = address.packed + address.packed + struct.pack(">HH", sport, 9876) + tlv
    family = 0x11 if address.version == 4 else 0x21
    return proxy.V2_SIGNATURE + struct.pack(">BBH", command, family, len(block)) + block


# ---------------------------------------------------------------------- the parser
@pytest.mark.parametrize("header, source", [
    (v1("10.1.2.3", 5555), ("10.1.2.3", 5555)),
    (v1("2001:db8::7", 6), ("2001:db8::7", 6)),
    (b"PROXY UNKNOWN\r\n", None),
    (b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", None),
    (v2("10.1.2.3", 5555), ("10.1.2.3", 5555)),
    (v2("2001:db8::7", 6), ("2001:db8::7", 6)),
    (v2("10.1.2.3", 1, tlv=b"\x04\x00\x01\x00"), ("10.1.2.3", 1)),  # a TLV after the addresses
    (v2(None), None),
], ids=["v1-tcp4", "v1-tcp6", "v1-unknown", "v1-unknown-addresses", "v2-ipv4", "v2-ipv6", "v2-tlv", "v2-local"])
async def test_a_valid_header_gives_the_clients_address(header: bytes, source: Any) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(header + b"after")
    assert await proxy.read_header(reader) == source
    assert await reader.read(5) == b"after"  # nothing past the header is taken


@pytest.mark.parametrize("header", [
    b"\x00\x00\x00\x10\x00\x00\x00\x0c{}            ",  # a RocketMQ frame, no header
    b"GET / HTTP/1.1\r\n\r\n",
    b"PROXY TCP4 10.1.2.3 10.0.0.1 5555\r\n",
    b"PROXY TCP4 2001:db8::7 10.0.0.1 5555 9876\r\n",
    b"PROXY TCP4 10.1.2.3 10.0.0.1 70000 9876\r\n",
    b"PROXY TCP4 10.1.2.3 10.0.0.1 05555 9876\r\n",
    b"PROXY UDP4 10.1.2.3 10.0.0.1 5555 9876\r\n",
    b"PROXY TCP4 " + b"1" * 120 + b"\r\n",
    b"PROXY TCP4 10.1.2.\xff 10.0.0.1 5555 9876\r\n",
    v2("10.1.2.3", command=0x22),
    v2("10.1.2.3", command=0x11),
    proxy.V2_SIGNATURE + struct.pack(">BBH", 0x21, 0x31, 216) + b"\x00" * 216,  # a unix socket
    proxy.V2_SIGNATURE + struct.pack(">BBH", 0x21, 0x11, 4) + b"\x00" * 4,  # block too short
], ids=["no-header", "http", "v1-short", "v1-family-mismatch", "v1-port-range", "v1-port-zero-padded",
        "v1-udp", "v1-too-long", "v1-not-ascii", "v2-unknown-command", "v2-version-1", "v2-unix", "v2-short-block"])
async def test_a_missing_or_broken_header_is_refused(header: bytes) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(header)
    reader.feed_eof()
    with pytest.raises((proxy.ProxyHeaderError, asyncio.IncompleteReadError)):
        await proxy.read_header(reader)


# ---------------------------------------------------------------------- on the port
@pytest.fixture
async def proxied(make_worker: Any, tmp_path: Path) -> Worker:
    tokens = tmp_path / "tokens"
    tokens.write_text(KEYS)
    return await make_worker(auth_tokens_file=str(tokens), remoting_white_addresses=WHITE,
                             remoting_proxy_protocol=True)


async def registered_through(worker: Worker, header: bytes, source: str | None = None,
                             pieces: int = 1) -> tuple[int, str | None]:
    """Sends `header` (in `pieces` writes) and an unsigned REGISTER_BROKER: the answer's code and remark."""
    client = await RemotingClient.connect(worker.port, source=source)
    try:
        step = max(1, -(-len(header) // pieces))
        for i in range(0, len(header), step):
            await client.send_raw(header[i:i + step])
            await asyncio.sleep(0.01)
        answer = await client.call(register(registration()))
        return answer.code, answer.remark
    finally:
        await client.close()


@pytest.mark.parametrize("make", [v1, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("inside, outside", [("10.1.2.3", "10.1.3.3"), ("::1", "::2")], ids=["ipv4", "ipv6"])
async def test_the_headers_address_is_the_one_the_whitelist_checks(proxied: Worker, r: redis.Redis, make: Any,
                                                                   inside: str, outside: str) -> None:
    assert await registered_through(proxied, make(outside)) == (codes.SYSTEM_ERROR, NO_KEY)
    assert snapshot(r) == {}
    assert await registered_through(proxied, make(inside)) == (codes.SUCCESS, None)


async def test_the_tcp_peer_is_not_the_client_when_a_header_names_another(proxied: Worker) -> None:
    # 127.0.0.2 is whitelisted, the address the header carries is not
    assert await registered_through(proxied, v1("10.9.9.9"), source="127.0.0.2") == (codes.SYSTEM_ERROR, NO_KEY)


async def test_a_header_without_an_address_leaves_the_connections_own(proxied: Worker) -> None:
    assert await registered_through(proxied, v2(None), source="127.0.0.2") == (codes.SUCCESS, None)
    assert await registered_through(proxied, b"PROXY UNKNOWN\r\n", source="127.0.0.3") == (codes.SYSTEM_ERROR, NO_KEY)


async def test_a_header_in_several_segments_is_read_whole(proxied: Worker) -> None:
    assert await registered_through(proxied, v1("10.1.2.3"), pieces=5) == (codes.SUCCESS, None)
    assert await registered_through(proxied, v2("10.1.2.3"), pieces=7) == (codes.SUCCESS, None)


async def test_a_connection_without_a_header_is_closed_and_changes_nothing(
        proxied: Worker, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    client = await RemotingClient.connect(proxied.port, source="127.0.0.2")
    with caplog.at_level(logging.WARNING, logger="service.remoting.server"):
        await client.send(register(registration()))
        assert await client.closed()
    await client.close()
    assert snapshot(r) == {}
    assert "RMQ_REMOTING_PROXY_PROTOCOL=true): no PROXY protocol header" in caplog.text


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
        proxied: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy, "HEADER_TIMEOUT", 0.2)
    client = await RemotingClient.connect(proxied.port)
    assert await client.closed(timeout=3)
    await client.close()


async def test_logs_name_the_address_the_header_carries(proxied: Worker, caplog: pytest.LogCaptureFixture) -> None:
    client = await RemotingClient.connect(proxied.port)
    with caplog.at_level(logging.WARNING, logger="service.remoting.server"):
        await client.send_raw(v1("10.1.2.3", 4242) + b"\x7f\xff\xff\xff")  # then a frame over the limit
        assert await client.closed()
    await client.close()
    assert "closing connection ('10.1.2.3', 4242)" in caplog.text


# ---------------------------------------------------------------------- behind HAProxy
def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def haproxy(tmp_path: Path, worker_port: int, listen: str, send: str,
                  idle_timeout: str = "30s") -> AsyncIterator[int]:
    """HAProxy in TCP mode on `listen`, forwarding to the worker with `send` (send-proxy,
    send-proxy-v2, or "" for no header), closing connections idle for `idle_timeout`;
    yields its port."""
    binary = shutil.which("haproxy")
    if binary is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy; scripts/test installs it)")
    port = _free_port(listen)
    config = tmp_path / f"haproxy-{send or 'plain'}-{idle_timeout}.cfg"
    config.write_text(f"""global
    maxconn 64
defaults
    mode tcp
    timeout connect 2s
    timeout client {idle_timeout}
    timeout server {idle_timeout}
frontend rocketmq
    bind {"[" + listen + "]" if ":" in listen else listen}:{port}
    default_backend workers
backend workers
    server worker 127.0.0.1:{worker_port} {send}
""")
    proc = await asyncio.create_subprocess_exec(binary, "-db", "-f", str(config),
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    async def listening() -> bool:
        with contextlib.suppress(OSError):
            _, w = await asyncio.open_connection(listen, port)
            w.close()
            return True
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"haproxy exited: {err.decode(errors='replace')}")
        return False

    try:
        await until(listening, 10, f"haproxy listening on {listen}:{port}", poll_s=0.1)
        yield port
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)


async def call_through(port: int, host: str, source: str) -> tuple[int, str | None]:
    client = await RemotingClient.connect(port, host, source)
    try:
        answer = await client.call(register(registration()))
        return answer.code, answer.remark
    finally:
        await client.close()


@pytest.mark.parametrize("send", ["send-proxy", "send-proxy-v2"])
async def test_behind_haproxy_the_whitelist_sees_the_brokers_own_host(
        proxied: Worker, tmp_path: Path, r: redis.Redis, send: str) -> None:
    async with haproxy(tmp_path, proxied.port, "127.0.0.1", send) as port:
        # HAProxy connects to the worker from 127.0.0.1, which is not whitelisted; the brokers' hosts decide
        assert await call_through(port, "127.0.0.1", "127.0.0.3") == (codes.SYSTEM_ERROR, NO_KEY)
        assert snapshot(r) == {}
        assert await call_through(port, "127.0.0.1", "127.0.0.2") == (codes.SUCCESS, None)


@needs_ipv6
async def test_behind_haproxy_an_ipv6_broker_is_checked_by_its_ipv6_address(proxied: Worker, tmp_path: Path) -> None:
    async with haproxy(tmp_path, proxied.port, "::1", "send-proxy-v2") as port:
        assert await call_through(port, "::1", "::1") == (codes.SUCCESS, None)


async def test_without_the_setting_a_header_is_no_header_but_a_broken_frame(make_worker: Any) -> None:
    worker = await make_worker()
    client = await RemotingClient.connect(worker.port)
    await client.send_raw(v1("10.1.2.3"))
    assert await client.closed()
    await client.close()


# ---------------------------------------------------------------------- a worker process
@pytest.fixture
def worker_process(redis_url: str, tmp_path: Path) -> Iterator[Any]:
    """A real worker process, both settings from its environment, on its own RocketMQ port."""
    tokens = tmp_path / "tokens"
    tokens.write_text(KEYS)
    remoting = free_port()
    worker = ProcessWorker(redis_url, RMQ_REMOTING_PORT=remoting, RMQ_REMOTING_HOST="127.0.0.1",
                           RMQ_AUTH_TOKENS_FILE=str(tokens), RMQ_REMOTING_WHITE_ADDRESSES="127.0.0.2",
                           RMQ_REMOTING_PROXY_PROTOCOL="true", RMQ_LOG_LEVEL="INFO")
    worker.remoting_port = remoting
    try:
        yield worker.start()
    finally:
        worker.stop()
        worker.cleanup()


async def test_a_worker_configured_from_its_environment_behind_haproxy(worker_process: Any, tmp_path: Path,
                                                                      r: redis.Redis) -> None:
    async with haproxy(tmp_path, worker_process.remoting_port, "127.0.0.1", "send-proxy-v2") as port:
        assert await call_through(port, "127.0.0.1", "127.0.0.3") == (codes.SYSTEM_ERROR, NO_KEY)
        assert snapshot(r) == {}
        assert await call_through(port, "127.0.0.1", "127.0.0.2") == (codes.SUCCESS, None)
    direct = await RemotingClient.connect(worker_process.remoting_port, source="127.0.0.2")
    await direct.send(register(registration()))
    assert await direct.closed()  # no header: closed, whatever the address
    await direct.close()
    assert "no PROXY protocol header" in worker_process.log()


async def test_a_worker_process_states_its_posture_and_logs_a_refusal_with_the_headers_client(
        worker_process: Any, tmp_path: Path) -> None:
    async with haproxy(tmp_path, worker_process.remoting_port, "127.0.0.1", "send-proxy-v2") as port:
        assert await call_through(port, "127.0.0.1", "127.0.0.3") == (codes.SYSTEM_ERROR, NO_KEY)
    log = worker_process.log(tail=1_000_000)
    assert [line for line in log.splitlines() if "security: " in line][0].endswith(
        f"security: authentication on (RMQ_AUTH_TOKENS_FILE={tmp_path / 'tokens'}: broker: 1 token, 1 key pair / "
        "admin: 1 key pair), reads open to anyone (RMQ_AUTH_READS=open); "
        f"RocketMQ port {worker_process.remoting_port}: whitelist 127.0.0.2 (unsigned broker requests and reads "
        "from them pass), PROXY protocol on (the header's address is the client's, from any sender: let only "
        "the balancers reach the port)")
    refusals = [line for line in log.splitlines() if "refused RocketMQ" in line]
    assert len(refusals) == 1 and refusals[0].endswith(
        "refused RocketMQ REGISTER_BROKER from 127.0.0.3, broker broker-a at 10.0.0.1:10911, unsigned: "
        "No accessKey is configured (127.0.0.3 matches no RMQ_REMOTING_WHITE_ADDRESSES pattern)")
