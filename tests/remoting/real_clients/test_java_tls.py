"""RocketMQ's own Java remoting client reads a route over the RocketMQ port: with
-Dtls.enable=true (TLS, a self-signed certificate) and without (plain), both against the
default mode, permissive, as against Java's NameServer; and TLS against enforcing.

The client is java/RouteRead.java, run from source by Java 11+ against the jars of a
RocketMQ 4.9.8 build laid out as DIR/lib/*.jar (its remoting and common modules hold the
client's NettyRemotingClient and route classes): RMQ_BENCH_JAVA_NAMESRV_HOME, the build
bench/build_java_namesrv.py makes (bench/README.md). Skipped without one. No broker is
started: none is in the suite (a broker started with -Dtls.enable=true uses the same
client class for its registrations)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from service.remoting import codes
from tests.builders import registration
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.remoting.frames import register
from tests.tls_certs import insecure_client

JAVA_HOME_ENV = "RMQ_BENCH_JAVA_NAMESRV_HOME"
SOURCE = Path(__file__).parent / "java" / "RouteRead.java"


def rocketmq_jars() -> str:
    java = shutil.which("java")
    if java is None:
        pytest.skip("java is not installed")
    home = os.environ.get(JAVA_HOME_ENV)
    if not home or not list(Path(home, "lib").glob("rocketmq-remoting-*.jar")):
        pytest.skip(f"no RocketMQ Java build: set {JAVA_HOME_ENV} to one laid out as DIR/lib/*.jar "
                    "(python bench/build_java_namesrv.py, bench/README.md)")
    return str(Path(home, "lib")) + "/*"


async def java_route(port: int, topic: str, *, tls: bool, timeout: float = 60) -> str:
    """RouteRead.java's answer line ("ROUTE <names>" / "CODE <code> <remark>"); raises on a failure."""
    proc = await asyncio.create_subprocess_exec(
        "java", f"-Dtls.enable={'true' if tls else 'false'}", "-cp", rocketmq_jars(), str(SOURCE),
        f"127.0.0.1:{port}", topic, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the Java client did not finish within {timeout} s") from None
    lines = [line for line in out.decode().splitlines() if line.startswith(("ROUTE", "CODE"))]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}: {err.decode()[-2000:]}"
    return lines[-1]


@contextlib.asynccontextmanager
async def registered(worker: Worker, topic: str, tls: ssl.SSLContext | None = None) -> AsyncIterator[None]:
    """A broker with `topic`, registered over a connection kept open (its close would remove it)."""
    client = await RemotingClient.connect(worker.port, tls=tls)
    try:
        assert (await client.call(register(registration(name="broker-tls", topics=[topic])))).code == codes.SUCCESS
        yield
    finally:
        await client.close()


async def test_a_java_client_with_tls_enabled_reads_a_route_in_permissive_mode(worker: Worker) -> None:
    rocketmq_jars()
    async with registered(worker, "TopicTls"):
        assert await java_route(worker.port, "TopicTls", tls=True) == "ROUTE broker-tls"


async def test_a_plain_java_client_reads_a_route_in_permissive_mode(worker: Worker) -> None:
    rocketmq_jars()
    async with registered(worker, "TopicPlain"):
        assert await java_route(worker.port, "TopicPlain", tls=False) == "ROUTE broker-tls"


async def test_a_java_client_with_tls_enabled_reads_a_route_in_enforcing_mode(make_worker: Any) -> None:
    rocketmq_jars()
    worker = await make_worker(remoting_tls_mode="enforcing")
    async with registered(worker, "TopicTls", insecure_client()):
        assert await java_route(worker.port, "TopicTls", tls=True) == "ROUTE broker-tls"


async def test_a_plain_java_client_is_refused_in_enforcing_mode(make_worker: Any) -> None:
    rocketmq_jars()
    worker = await make_worker(remoting_tls_mode="enforcing")
    async with registered(worker, "TopicPlain", insecure_client()):
        with pytest.raises(AssertionError, match="RemotingSendRequestException|RemotingTimeoutException|closed"):
            await java_route(worker.port, "TopicPlain", tls=False)
