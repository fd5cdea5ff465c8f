"""RocketMQ's own Java remoting client reads a route over the RocketMQ port: with
-Dtls.enable=true (TLS, a self-signed certificate) and without (plain), both against the
default mode, permissive, as against Java's NameServer; and TLS against enforcing. And a
real RocketMQ 4.9.8 broker started with -Dtls.enable=true registers over TLS.

The client is java/RouteRead.java, run from source by Java 11+ against the jars of a
RocketMQ 4.9.8 laid out as DIR/lib/*.jar (its remoting and common modules hold the
client's NettyRemotingClient and route classes): RMQ_BENCH_JAVA_NAMESRV_HOME or
RMQ_JAVA_ROCKETMQ_HOME. The broker needs RMQ_JAVA_ROCKETMQ_HOME: a whole RocketMQ 4.9.8
(DIR/lib/*.jar with the broker's, DIR/conf/). Both are Apache's binary distribution,
unpacked. Each test is skipped without what it needs; CI has neither."""

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
from service.worker import REMOTING
from tests.builders import registration
from tests.remoting.client import RemotingClient
from tests.remoting.conftest import Worker
from tests.redis_server import free_port
from tests.remoting.frames import register
from tests.remoting.real_clients.helpers import run_process
from tests.tls_certs import insecure_client
from tests.waits import until

JAVA_HOME_ENV = "RMQ_BENCH_JAVA_NAMESRV_HOME"
ROCKETMQ_HOME_ENV = "RMQ_JAVA_ROCKETMQ_HOME"
SOURCE = Path(__file__).parent / "java" / "RouteRead.java"
# runbroker.sh's module openings for a JDK 9+, with a small heap (the machine is shared)
BROKER_JVM = ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=512m",
              "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"]


def rocketmq_home(*envs: str, jar: str = "rocketmq-remoting-*.jar") -> Path:
    """The first of `envs` naming a RocketMQ Java distribution with `jar` in its lib/; else skip."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    for env in envs:
        home = os.environ.get(env)
        if home and list(Path(home, "lib").glob(jar)):
            return Path(home)
    pytest.skip(f"no RocketMQ Java distribution with lib/{jar}: set {' or '.join(envs)} (unpack rocketmq-all-4.9.8-bin-release.zip "
                "from https://rocketmq.apache.org/download)")


def rocketmq_jars() -> str:
    return str(rocketmq_home(JAVA_HOME_ENV, ROCKETMQ_HOME_ENV) / "lib") + "/*"


async def java_route(port: int, topic: str, *, tls: bool, timeout: float = 60) -> str:
    """RouteRead.java's answer line ("ROUTE <names>" / "CODE <code> <remark>"); raises on a failure."""
    code, out, err = await run_process("java", f"-Dtls.enable={'true' if tls else 'false'}", "-cp", rocketmq_jars(),
                                       str(SOURCE), f"127.0.0.1:{port}", topic, timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith(("ROUTE", "CODE"))]
    assert code == 0 and lines, f"exit {code}: {err[-2000:]}"
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


async def test_a_broker_with_tls_enabled_registers_over_tls_in_permissive_mode(worker: Worker, tmp_path: Path) -> None:
    home = rocketmq_home(ROCKETMQ_HOME_ENV, jar="rocketmq-broker-*.jar")
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerClusterName=TlsCluster\nbrokerName=broker-tls\nbrokerId=0\n"
                    f"namesrvAddr=127.0.0.1:{worker.port}\nlistenPort={free_port()}\nbrokerIP1=127.0.0.1\n"
                    f"storePathRootDir={store}\nstorePathCommitLog={store / 'commitlog'}\n")
    proc = await asyncio.create_subprocess_exec(
        "java", *BROKER_JVM, "-Dtls.enable=true", f"-Duser.home={tmp_path}", f"-Drocketmq.home.dir={home}",
        "-cp", f"{home / 'conf'}:{home / 'lib'}/*", "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf),
        env={**os.environ, "ROCKETMQ_HOME": str(home)}, cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def registered() -> Any:
            resp = await worker.http.get("/v1/routes/broker-tls")  # the topic each broker makes of its name
            return await resp.json() if resp.status == 200 else None

        # a broker registers once it has started: seconds on a busy machine
        route = await until(registered, 60, "the broker registered over TLS", poll_s=0.5)
        assert route["brokerDatas"][0]["cluster"] == "TlsCluster"
        served = worker.app[REMOTING].served
        assert served["tls"] >= 1 and served["plain"] == 0
    finally:
        proc.kill()
        await proc.wait()
