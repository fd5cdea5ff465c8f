"""REDIS_URL=rediss://: a worker serves through a redis-server that speaks TLS only on the
port it is given (Debian's redis-server 7.0 is built with TLS), the URL's query giving
redis-py's TLS options (ssl_ca_certs, ssl_cert_reqs, ssl_certfile, ssl_keyfile) as its
own URL parser reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.config import StartupError
from service.worker import create_app
from tests.builders import registration
from tests.calls import register, route
from tests.redis_server import RedisServer, free_port
from tests.settings_env import settings_from
from tests.tls_certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("redis-certs"))


@pytest.fixture
def tls_redis(certs: Certs) -> Iterator[tuple[RedisServer, int]]:
    """A redis-server with a TLS port that asks clients for a certificate the CA signed (the
    plain port, on 127.0.0.1, is the suite's readiness check and the tests' look inside)."""
    tls_port = free_port()
    server = RedisServer(None, "--tls-port", str(tls_port), "--tls-cert-file", str(certs.server),
                         "--tls-key-file", str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
                         "--tls-auth-clients", "optional")
    try:
        server.start()
    except RuntimeError as e:  # a build without TLS refuses the options
        pytest.skip(f"this redis-server has no TLS: {e}")
    yield server, tls_port
    server.cleanup()


def rediss(port: int, **query: str) -> str:
    return f"rediss://127.0.0.1:{port}/0?{urlencode(query)}"


async def serves(aiohttp_client: Any, url: str) -> TestClient:
    client = await aiohttp_client(create_app(settings_from({"REDIS_URL": url, "RMQ_REMOTING_PORT": "0"})))
    await register(client, registration(topics=["TopicTls"]))
    assert await route(client, "TopicTls") is not None
    return client


async def test_a_worker_serves_through_rediss_checking_the_servers_certificate(
        aiohttp_client: Any, tls_redis: tuple[RedisServer, int], certs: Certs) -> None:
    server, tls_port = tls_redis
    await serves(aiohttp_client, rediss(tls_port, ssl_ca_certs=str(certs.ca), ssl_cert_reqs="required"))
    plain = redis.Redis(port=server.port)
    assert any(b"TopicTls" in key for key in plain.scan_iter(count=1000))  # written through the TLS port


async def test_a_worker_shows_its_own_certificate_through_rediss(
        aiohttp_client: Any, tls_redis: tuple[RedisServer, int], certs: Certs) -> None:
    _, tls_port = tls_redis
    await serves(aiohttp_client, rediss(tls_port, ssl_ca_certs=str(certs.ca), ssl_cert_reqs="required",
                                        ssl_certfile=str(certs.client), ssl_keyfile=str(certs.client_key)))


async def test_a_worker_refuses_to_start_on_a_redis_whose_certificate_its_ca_did_not_sign(
        aiohttp_client: Any, tls_redis: tuple[RedisServer, int], tmp_path: Path) -> None:
    _, tls_port = tls_redis
    other = make_certs(tmp_path / "other")
    url = rediss(tls_port, ssl_ca_certs=str(other.ca), ssl_cert_reqs="required")
    app = create_app(settings_from({"REDIS_URL": url, "RMQ_REMOTING_PORT": "0", "RMQ_REDIS_START_TIMEOUT_MS": "500"}))
    with pytest.raises(StartupError, match="Redis unreachable at start .*CERTIFICATE_VERIFY_FAILED"):
        await aiohttp_client(app)
