"""TLS on the RocketMQ port, in RocketMQ's three modes (RMQ_REMOTING_TLS_MODE, Java's
tls.server.mode): permissive (the default: the first byte decides), enforcing (TLS only),
disabled (plain only); a configured certificate or a self-signed one; the PROXY header
before TLS; bad TLS settings refused in one line."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings, StartupError
from service.remoting import codes, tls
from service.worker import REMOTING
from tests.builders import registration
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.remoting.frames import register, route
from tests.remoting.test_proxy_protocol import v1, v2
from tests.settings_env import settings_from
from tests.tls_certs import Certs, insecure_client, make_certs
from tests.waits import BOUND_S, until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


async def read_route(worker: Worker, tls_context: ssl.SSLContext | None, topic: str = "T1") -> bytes:
    """Registers a broker with `topic` and reads its route over one connection; the route body."""
    client = await RemotingClient.connect(worker.port, tls=tls_context)
    try:
        assert (await client.call(register(registration(topics=[topic])))).code == codes.SUCCESS
        answer = await client.call(route(topic))
        assert answer.code == codes.SUCCESS, answer.remark
        return answer.body
    finally:
        await client.close()


async def refused(port: int, tls_context: ssl.SSLContext | None) -> bool:
    """True when the server ends the connection before answering a route read."""
    try:
        client = await RemotingClient.connect(port, tls=tls_context)
    except (ssl.SSLError, ConnectionError):
        return True  # refused within the handshake
    try:
        await client.send(route("T1"))
        return await client.closed()
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        await client.close()


# ---------------------------------------------------------------------- permissive
async def test_permissive_is_the_default_of_the_settings_and_the_environment() -> None:
    assert Settings().remoting_tls_mode == "permissive"
    assert settings_from({}).remoting_tls_mode == "permissive"


async def test_permissive_serves_a_tls_client_with_a_self_signed_certificate(worker: Worker) -> None:
    client = await RemotingClient.connect(worker.port, tls=insecure_client())
    try:
        assert client.writer.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
        assert (await client.call(register(registration(topics=["T1"])))).code == codes.SUCCESS
        assert (await client.call(route("T1"))).code == codes.SUCCESS
    finally:
        await client.close()


async def test_permissive_serves_plain_and_tls_clients_the_same_route(worker: Worker) -> None:
    assert await read_route(worker, None) == await read_route(worker, insecure_client())


async def test_connections_served_are_counted_by_transport_in_the_metrics(worker: Worker) -> None:
    await read_route(worker, None)
    await read_route(worker, insecure_client())
    await read_route(worker, insecure_client())
    metrics = await (await worker.http.get("/metrics")).text()
    assert 'rmq_remoting_connections_served_total{transport="plain"} 1.0' in metrics
    assert 'rmq_remoting_connections_served_total{transport="tls"} 2.0' in metrics


async def test_a_cached_route_read_over_tls_is_answered_encrypted(worker: Worker) -> None:
    """The cached answers written as the bytes arrive (route_reads.py) go through TLS too."""
    client = await RemotingClient.connect(worker.port, tls=insecure_client())
    try:
        assert (await client.call(register(registration(topics=["T1"])))).code == codes.SUCCESS
        answers = [await client.call(route("T1")) for _ in range(5)]  # the first fills the cache
        assert {a.code for a in answers} == {codes.SUCCESS} and len({a.body for a in answers}) == 1
    finally:
        await client.close()


async def test_a_configured_certificate_is_the_one_served(make_worker: Any, certs: Certs) -> None:
    worker = await make_worker(remoting_tls_cert=str(certs.server), remoting_tls_key=str(certs.server_key))
    # the client checks the certificate against the CA and the name localhost
    assert await read_route(worker, certs.client_context())


async def test_a_broken_handshake_is_closed_and_counted(worker: Worker) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", worker.port)
    writer.write(b"\x16\x03\x01\x00\x05hello")  # a handshake record of nonsense
    await writer.drain()
    await asyncio.wait_for(reader.read(), 5)  # an alert perhaps, then the close
    assert reader.at_eof()
    await until(lambda: worker.app[REMOTING].refused["tls_handshake"], BOUND_S, "the broken handshake counted")
    assert worker.app[REMOTING].refused["tls_handshake"] == 1
    writer.close()


async def test_a_connection_that_sends_no_byte_is_closed_as_idle(make_worker: Any) -> None:
    worker = await make_worker(remoting_idle_ms=300)
    reader, writer = await asyncio.open_connection("127.0.0.1", worker.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert worker.app[REMOTING].closed["idle"] == 1


async def test_connections_before_their_first_byte_count_against_the_cap(make_worker: Any) -> None:
    worker = await make_worker(remoting_max_connections=2)
    silent = [await asyncio.open_connection("127.0.0.1", worker.port) for _ in range(2)]
    await asyncio.sleep(0.2)  # both accepted
    reader, writer = await asyncio.open_connection("127.0.0.1", worker.port)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert worker.app[REMOTING].refused["too_many_connections"] == 1
    for _, w in [*silent, (reader, writer)]:
        w.close()


async def test_every_address_of_the_host_listens_on_one_port() -> None:
    listener = tls.Listener("permissive", tls.server_context(None, None), lambda source: asyncio.Protocol(), proxy_protocol=False,
                            first_byte_s=1, handshake_s=1, admit=lambda pending: True, refused=Counter(),
                            closed=Counter())
    port = await listener.start("", 0)  # every interface: 0.0.0.0 and :: (for well under a second)
    try:
        assert {s.getsockname()[1] for s in listener.sockets} == {port}
    finally:
        listener.close()
        await listener.wait_closed()


async def test_a_connection_reset_before_its_first_byte_is_one_debug_line(
        worker: Worker, caplog: pytest.LogCaptureFixture) -> None:
    sock = socket.create_connection(("127.0.0.1", worker.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with caplog.at_level(logging.DEBUG, logger="service.remoting.tls"):
        await asyncio.sleep(0.2)  # accepted, its first byte awaited
        sock.close()  # a reset, no byte sent
        await asyncio.sleep(0.3)
    lines = [r for r in caplog.records if r.name == "service.remoting.tls"]
    assert [(r.levelno, "lost before its first frame" in r.getMessage()) for r in lines] == [(logging.DEBUG, True)]


# ---------------------------------------------------------------------- enforcing, disabled
async def test_enforcing_refuses_a_plain_client_before_reading_a_frame(make_worker: Any) -> None:
    worker = await make_worker(remoting_tls_mode="enforcing")
    assert await refused(worker.port, None)
    await until(lambda: worker.app[REMOTING].refused["tls_required"], BOUND_S, "the plain connection counted")
    assert worker.app[REMOTING].refused["tls_required"] == 1
    metrics = await (await worker.http.get("/metrics")).text()
    assert 'rmq_remoting_connections_refused_total{reason="tls_required"} 1.0' in metrics


async def test_enforcing_serves_a_tls_client(make_worker: Any) -> None:
    worker = await make_worker(remoting_tls_mode="enforcing")
    assert await read_route(worker, insecure_client())


async def test_disabled_refuses_a_tls_client(make_worker: Any) -> None:
    worker = await make_worker(remoting_tls_mode="disabled")
    assert await refused(worker.port, insecure_client())


async def test_disabled_tells_a_tls_attempt_as_one_in_one_line_and_counts_it(
        make_worker: Any, caplog: pytest.LogCaptureFixture) -> None:
    worker = await make_worker(remoting_tls_mode="disabled")
    with caplog.at_level(logging.INFO, logger="service.remoting"):
        assert await refused(worker.port, insecure_client())
        lines = await until(lambda: [r.getMessage() for r in caplog.records if r.name.startswith("service.remoting")
                                     and "closing connection" in r.getMessage()], BOUND_S, "the closing line")
    [line] = lines
    assert "a TLS handshake" in line and "RMQ_REMOTING_TLS_MODE=disabled" in line and "exceeds" not in line
    assert worker.app[REMOTING].refused["tls_disabled"] == 1 and worker.app[REMOTING].closed["bad_frame"] == 0


async def test_disabled_serves_a_plain_client(make_worker: Any) -> None:
    worker = await make_worker(remoting_tls_mode="disabled")
    assert await read_route(worker, None)


async def test_a_client_ca_refuses_a_tls_client_without_a_certificate(make_worker: Any, certs: Certs) -> None:
    worker = await make_worker(remoting_tls_mode="enforcing", remoting_tls_cert=str(certs.server),
                               remoting_tls_key=str(certs.server_key), remoting_tls_client_ca=str(certs.ca))
    assert await refused(worker.port, certs.client_context())


async def test_a_client_ca_serves_a_client_with_a_certificate_it_signed(make_worker: Any, certs: Certs) -> None:
    worker = await make_worker(remoting_tls_mode="enforcing", remoting_tls_cert=str(certs.server),
                               remoting_tls_key=str(certs.server_key), remoting_tls_client_ca=str(certs.ca))
    assert await read_route(worker, certs.client_context(own_certificate=True))


# ---------------------------------------------------------------------- the PROXY header, then TLS
@pytest.mark.parametrize("header", [v1("10.1.2.3"), v2("10.1.2.3"), v2(None)], ids=["v1", "v2", "v2-local"])
async def test_the_proxy_header_comes_in_clear_before_the_tls_handshake(make_worker: Any, header: bytes) -> None:
    worker = await make_worker(remoting_proxy_protocol=True, remoting_tls_mode="enforcing")
    reader, writer = await asyncio.open_connection("127.0.0.1", worker.port)
    writer.write(header)
    await writer.drain()
    await writer.start_tls(insecure_client(), server_hostname="localhost")
    client = RemotingClient(reader, writer)
    try:
        assert (await client.call(register(registration(topics=["T1"])))).code == codes.SUCCESS
    finally:
        await client.close()


async def test_tls_without_the_proxy_header_is_closed(make_worker: Any) -> None:
    worker = await make_worker(remoting_proxy_protocol=True)
    assert await refused(worker.port, insecure_client())


# ---------------------------------------------------------------------- settings
@pytest.mark.parametrize("env, line", [
    ({"RMQ_REMOTING_TLS_MODE": "strict"},
     "RMQ_REMOTING_TLS_MODE=strict: must be one of disabled, permissive, enforcing"),
    ({"RMQ_REMOTING_TLS_CERT": "/etc/tls/tls.crt"},
     "RMQ_REMOTING_TLS_CERT and RMQ_REMOTING_TLS_KEY go together: set both, or neither for a self-signed certificate"),
    ({"RMQ_REMOTING_TLS_CERT": "/nonexistent/tls.crt", "RMQ_REMOTING_TLS_KEY": "/nonexistent/tls.key"},
     "RMQ_REMOTING_TLS_CERT=/nonexistent/tls.crt, RMQ_REMOTING_TLS_KEY=/nonexistent/tls.key: cannot load them "
     "(No such file or directory)"),
], ids=["unknown-mode", "cert-without-key", "missing-files"])
def test_a_bad_tls_setting_is_one_line(env: dict[str, str], line: str) -> None:
    """The line the worker prints before it exits with status 2 (service/cli.py;
    tests/test_startup_failures.py checks the exit of a real process)."""
    with pytest.raises(StartupError) as refused:
        settings_from(env)
    assert str(refused.value) == line


def test_a_key_that_is_not_the_certificates_is_refused(certs: Certs) -> None:
    with pytest.raises(StartupError) as refused:
        settings_from({"RMQ_REMOTING_TLS_CERT": str(certs.server), "RMQ_REMOTING_TLS_KEY": str(certs.client_key)})
    assert str(refused.value).startswith(f"RMQ_REMOTING_TLS_CERT={certs.server}, RMQ_REMOTING_TLS_KEY={certs.client_key}: "
                                         "cannot load them (KEY_VALUES_MISMATCH)")
    assert "\n" not in str(refused.value)


def test_a_client_ca_that_is_no_certificate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(StartupError) as refused:
        settings_from({"RMQ_REMOTING_TLS_CLIENT_CA": str(tmp_path / "ca.pem")})
    assert str(refused.value).startswith(f"RMQ_REMOTING_TLS_CLIENT_CA={tmp_path / 'ca.pem'}: cannot load it (")


async def test_the_self_signed_certificate_is_for_localhost_and_signs_itself(worker: Worker) -> None:
    first = await RemotingClient.connect(worker.port, tls=insecure_client())
    der = first.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    await first.close()
    trusting = ssl.create_default_context(cadata=der)  # the certificate as its own CA, name checked
    assert await read_route(worker, trusting)


async def test_connections_refused_over_the_cap_in_a_burst_are_one_warning_line(
        make_worker: Any, caplog: pytest.LogCaptureFixture) -> None:
    worker = await make_worker(remoting_max_connections=1)
    held = await RemotingClient.connect(worker.port)
    assert (await held.call(route("T1"))).code == codes.TOPIC_NOT_EXIST  # open, and served
    with caplog.at_level(logging.WARNING, logger="service.remoting.server"):
        for _ in range(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", worker.port)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
    assert worker.app[REMOTING].refused["too_many_connections"] == 5
    assert [r.getMessage() for r in caplog.records if r.name == "service.remoting.server"] == [
        "refusing RocketMQ connections: 1 open, RMQ_REMOTING_MAX_CONNECTIONS=1"]
    await held.close()
