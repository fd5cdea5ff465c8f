"""Hostile input on the HTTP port of a real worker, with a TCP and an HTTP reader beside
each attack (README "Limits of one client")."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time

import aiohttp

from tests.builders import registration
from tests.hostile.conftest import CANARY_TOPIC, Target, closed_within, dribble
from tests.waits import until_sync


def status_of(sock: socket.socket, timeout: float = 5) -> int | None:
    """The status code of the next answer, or None when closed without one."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                return None
            data += chunk
    except (socket.timeout, ConnectionResetError):
        return None
    return int(data.split(b" ", 2)[1])


# ---------------------------------------------------------------------- 7. bursts and watches
def test_the_listen_queue_is_sized_for_bursts(target: Target) -> None:
    out = subprocess.run(["ss", "-ltnH", f"sport = :{target.worker.port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[2]) == 1024  # LISTEN's Send-Q is the backlog: RMQ_HTTP_BACKLOG's default


def test_a_burst_of_watches_does_not_stall_new_clients(target: Target) -> None:
    async def burst() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{target.url}/v1/routes/{CANARY_TOPIC}") as resp:
                etag = resp.headers["ETag"]
        request = (f"GET /v1/routes/{CANARY_TOPIC}?watch={etag}&timeout=10s HTTP/1.1\r\nHost: x\r\n\r\n").encode()
        writers = []

        async def one() -> None:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", target.worker.port)
            except OSError:
                return
            writer.write(request)
            writers.append(writer)

        tasks = []
        for _ in range(100):  # 1,000 watches at about 1,000 a second
            tasks += [asyncio.create_task(one()) for _ in range(10)]
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        await asyncio.sleep(1)
        for writer in writers:
            writer.close()

    with target.watch() as w:
        asyncio.run(burst())
    w.assert_unharmed()


def test_watches_of_clients_that_hung_up_are_let_go(target: Target) -> None:
    async def hang_up() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{target.url}/v1/routes/{CANARY_TOPIC}") as resp:
                etag = resp.headers["ETag"]
            for _ in range(20):
                try:
                    await session.get(f"{target.url}/v1/routes/{CANARY_TOPIC}?watch={etag}&timeout=60s", timeout=0.5)
                except asyncio.TimeoutError:
                    pass

    asyncio.run(hang_up())
    # not held for the 60 s they asked for
    until_sync(lambda: target.metric("rmq_cache_watchers") == 0, 5, "every watch let go", poll_s=0.2)


def test_watches_past_the_cap_are_answered_at_once(target: Target) -> None:
    # watches of the attacks before have been let go
    until_sync(lambda: target.metric("rmq_cache_watchers") == 0, 5, "every watch let go", poll_s=0.2)

    async def watches() -> list[int]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{target.url}/v1/routes/{CANARY_TOPIC}") as resp:
                etag = resp.headers["ETag"]
            url = f"{target.url}/v1/routes/{CANARY_TOPIC}?watch={etag}&timeout=6s"
            started = time.monotonic()

            async def one() -> tuple[int, float]:
                async with session.get(url) as resp:
                    return resp.status, time.monotonic() - started

            return await asyncio.gather(*(one() for _ in range(60)))  # RMQ_MAX_WATCHES=50

    with target.watch() as w:
        results = asyncio.run(watches())
    refused = [took for status, took in results if status == 503]
    waited = [took for status, took in results if status == 304]
    # the 10 past the cap are refused at once: before any admitted watch has timed out,
    # measured in the same run rather than against a clock a loaded machine stretches
    assert len(refused) == 10 and len(waited) == 50
    assert max(refused) < min(waited)
    w.assert_unharmed()


# ---------------------------------------------------------------------- 8. one line, not a traceback
def test_an_over_long_header_line_is_logged_in_one_line(target: Target) -> None:
    with target.http_connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 65536 + b"\r\n\r\n")
        assert status_of(sock) in (400, 431, None)
    time.sleep(0.5)
    assert "Traceback" not in target.log()
    assert "malformed HTTP request (Error handling request from 127.0.0.1)" in target.log()


def test_too_many_headers_are_logged_in_one_line(target: Target) -> None:
    with target.http_connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(10_000))
                     + b"\r\n")
        assert status_of(sock) in (400, 431, None)
    time.sleep(0.5)
    assert "Traceback" not in target.log()


def test_a_client_hanging_up_mid_body_is_no_error(target: Target) -> None:
    body = json.dumps(registration(addr="127.0.0.1:40911", name="hangup")).encode()
    errors_before = target.metric('rmq_http_requests_total{method="POST",route="/v1/brokers/register",status="500"}')
    with target.http_connect() as sock:
        sock.sendall(b"POST /v1/brokers/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:len(body) // 2])
        time.sleep(0.3)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # RST on close
    time.sleep(0.5)
    assert "Traceback" not in target.log() and "unhandled error" not in target.log()
    assert target.metric('rmq_http_requests_total{method="POST",route="/v1/brokers/register",status="500"}') \
        == errors_before


# ---------------------------------------------------------------------- 9. read deadlines
def test_a_slowloris_header_sender_is_closed(target: Target) -> None:
    with target.http_connect() as sock:
        # the head would take 70 s at two bytes a second: a close well before that is the
        # header deadline (RMQ_HTTP_HEADER_TIMEOUT_MS=2000), however loaded the machine
        started = dribble(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100, for_s=30)
        assert closed_within(sock, 10) is not None
    assert time.monotonic() - started < 30


def test_a_slow_body_is_cut_off(target: Target) -> None:
    with target.http_connect() as sock:
        sock.sendall(b"POST /v1/brokers/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 3000000\r\n\r\n{")
        started = time.monotonic()
        # the body never comes, so a 408 can only be the deadline (RMQ_HTTP_BODY_TIMEOUT_MS=2000);
        # the bound is generous: a loaded machine answers late, not otherwise
        assert status_of(sock, timeout=30) == 408
        assert time.monotonic() - started < 30


def test_a_content_length_over_the_limit_is_refused_before_the_body(target: Target) -> None:
    with target.http_connect() as sock:
        sock.sendall(b"POST /v1/brokers/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 5000000\r\n\r\n")
        # no body is sent: waiting for one would end in the body deadline's 408, so a 413 is
        # the refusal before the body, however long a loaded machine took to send it
        assert status_of(sock, timeout=30) == 413
