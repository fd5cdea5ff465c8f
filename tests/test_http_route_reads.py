"""Route reads over raw sockets against a real server as service.worker serves it
(service.http.connections: aiohttp behind the head deadline): cached answers byte for byte
as fresh ones, pipelining, keep-alive, the head deadline. Tests that a read was answered
from the cache check the cache's hit counter, so that they fail when it was not (or was
where it must not be)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path
from typing import AsyncIterator

import pytest
from service.cache.answers import Stats
from service.config import Settings
from service.http.connections import HttpServer
from service.http.app_keys import CACHE
from service.worker import create_app
from tests.builders import registration
from tests.waits import BOUND_S, until

TOPICS = ["T1", "T2", "T3", "%RETRY%g"]
REG = registration(topics=TOPICS)


class Server:
    """A worker's HTTP front on a free port, as service.worker serves it."""

    def __init__(self, settings: Settings, **runner: float) -> None:
        self.app = create_app(settings)
        self.runner = HttpServer(self.app, access_log=None, header_timeout_s=runner.pop("header_timeout_s", 10),
                                 **runner)
        self.port = 0

    async def start(self) -> "Server":
        await self.runner.setup()
        await self.runner.listen("127.0.0.1", 0)
        self.port = self.runner.port
        return self

    @property
    def reads(self) -> Stats:
        """The cache's counters: ``hits`` counts the reads it answered."""
        return self.app[CACHE].stats

    async def connect(self) -> "Conn":
        return Conn(*await asyncio.open_connection("127.0.0.1", self.port))

    async def call(self, request: bytes) -> bytes:
        conn = await self.connect()
        try:
            conn.send(request)
            return await conn.answer()
        finally:
            conn.close()


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self, timeout: float = 5) -> bytes:
        """One whole answer (its head and its Content-Length's worth of body)."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout)
        m = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
        body = await asyncio.wait_for(self.reader.readexactly(int(m.group(1))), timeout) if m else b""
        return head + body

    async def closed(self, timeout: float = 5) -> bool:
        return await asyncio.wait_for(self.reader.read(), timeout) == b""

    def close(self) -> None:
        self.writer.close()


def get(topic: str = "T1", *headers: str, target: str | None = None) -> bytes:
    lines = [f"GET {target or '/v1/routes/' + topic} HTTP/1.1", "Host: registry", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: registry\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def undated(answer: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*", b"", answer)


def status(answer: bytes) -> int:
    return int(answer[9:12])


def header(answer: bytes, name: str) -> str | None:
    m = re.search(rb"\r\n" + name.encode() + rb": ([^\r]*)", answer)
    return m.group(1).decode() if m else None


async def warm(server: Server, *topics: str) -> None:
    """Reads each topic once, so that the server's cache holds its route."""
    for topic in topics or TOPICS:
        await server.call(get(quote(topic)))


def quote(topic: str) -> str:
    return topic.replace("%", "%25")


@contextlib.asynccontextmanager
async def serving(settings: Settings, **runner: float) -> AsyncIterator[Server]:
    """A Server (`runner`: its runner's timeouts) with REG registered."""
    server = await Server(settings, **runner).start()
    try:
        assert status(await server.call(post("/v1/brokers/register", json.dumps(REG).encode()))) == 200
        yield server
    finally:
        await server.runner.cleanup()


@pytest.fixture
async def fast(settings: Settings) -> AsyncIterator[Server]:
    async with serving(settings) as server:
        yield server


async def fresh_then_cached(server: Server, request: bytes) -> tuple[bytes, bytes]:
    """The answers to `request` sent twice: read from Redis first, then from the cache."""
    hits, misses = server.reads.hits, server.reads.misses
    fresh = await server.call(request)
    assert (server.reads.hits, server.reads.misses) == (hits, misses + 1)
    cached = await server.call(request)
    assert server.reads.hits == hits + 1
    return fresh, cached


async def test_a_cached_read_is_answered_as_a_fresh_read_is(fast: Server) -> None:
    fresh, cached = await fresh_then_cached(fast, get("T1", "X-Request-Id: req-1", "Accept: */*"))
    assert status(cached) == 200 and undated(cached) == undated(fresh)
    assert header(cached, "Date") is not None


async def test_a_matching_if_none_match_is_answered_304_from_the_cache(fast: Server) -> None:
    etag = header(await fast.call(get("T2")), "ETag")
    before = fast.reads.hits
    answer = await fast.call(get("T2", f"If-None-Match: W/{etag}, \"other\"", "X-Request-Id: req-2"))
    assert fast.reads.hits == before + 1
    assert status(answer) == 304 and header(answer, "ETag") == etag and header(answer, "X-Request-Id") == "req-2"
    assert header(answer, "Cache-Control") == "no-cache" and answer.endswith(b"\r\n\r\n")


async def test_a_cached_missing_topic_is_answered_as_a_fresh_one_is(fast: Server) -> None:
    fresh, cached = await fresh_then_cached(fast, get("Nope", "X-Request-Id: req-3"))
    assert status(cached) == 404 and undated(cached) == undated(fresh)


async def test_a_percent_encoded_topic_is_answered_from_the_cache_as_fresh(fast: Server) -> None:
    fresh, cached = await fresh_then_cached(fast, get(quote("%RETRY%g"), "X-Request-Id: req-4"))
    assert status(cached) == 200 and undated(cached) == undated(fresh)


async def test_pipelined_reads_in_one_write_are_answered_in_order(fast: Server) -> None:
    await warm(fast)
    before = fast.reads.hits
    conn = await fast.connect()
    conn.send(b"".join(get(t, f"X-Request-Id: p-{i}") for i, t in enumerate(["T1", "T2", "T3", "T1"])))
    answers = [await conn.answer() for _ in range(4)]
    conn.close()
    assert [header(a, "X-Request-Id") for a in answers] == ["p-0", "p-1", "p-2", "p-3"]
    assert [json.loads(a.split(b"\r\n\r\n", 1)[1])["queueDatas"][0]["brokerName"] for a in answers] == ["broker-a"] * 4
    assert fast.reads.hits == before + 4


async def test_a_read_behind_a_long_poll_is_answered_after_it(fast: Server) -> None:
    await warm(fast, "T1")
    etag = header(await fast.call(get("T1")), "ETag")
    conn = await fast.connect()
    conn.send(get(target=f"/v1/routes/T1?watch={etag.strip(chr(34))}&timeout=500ms"))
    await until(lambda: fast.app[CACHE].watchers == 1, BOUND_S, "the watch waiting")
    conn.send(get("T1", "X-Request-Id: behind"))
    first, second = await conn.answer(), await conn.answer()
    conn.close()
    assert status(first) == 304 and header(first, "X-Request-Id") != "behind"
    assert status(second) == 200 and header(second, "X-Request-Id") == "behind"


async def test_reads_after_a_long_poll_on_the_same_connection_are_answered_from_the_cache(fast: Server) -> None:
    await warm(fast, "T1")
    etag = header(await fast.call(get("T1")), "ETag")
    conn = await fast.connect()
    conn.send(get(target=f"/v1/routes/T1?watch={etag.strip(chr(34))}&timeout=100ms"))
    assert status(await conn.answer()) == 304
    before = fast.reads.hits
    conn.send(get("T1"))
    assert status(await conn.answer()) == 200
    conn.close()
    assert fast.reads.hits == before + 1


async def test_a_read_behind_a_post_with_a_body_is_answered_after_it(fast: Server) -> None:
    await warm(fast, "T1")
    conn = await fast.connect()
    conn.send(post("/v1/brokers/register", json.dumps(REG).encode()) + get("T1", "X-Request-Id: after-post"))
    first, second = await conn.answer(), await conn.answer()
    conn.close()
    assert status(first) == 200 and "brokerAddr" not in header(first, "X-Request-Id")  # type: ignore[operator]
    assert b"masterAddr" in first.split(b"\r\n\r\n", 1)[1]  # the registration's answer
    assert status(second) == 200 and header(second, "X-Request-Id") == "after-post"


async def test_a_body_that_looks_like_a_read_is_not_answered_as_one(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    read = get("T1")
    conn.send(post("/v1/brokers/heartbeat", read)[:-len(read)])  # the head, announcing the body
    # time for the server to read the head alone (no event tells it has, short of its
    # protocol's internals); were both parts read at once, the test would still hold
    await asyncio.sleep(0.1)
    conn.send(read)  # the body: a route read's bytes
    answer = await conn.answer()
    assert status(answer) == 400  # the body is not JSON
    conn.close()
    assert fast.reads.hits == before


async def test_a_read_split_across_two_writes_is_answered(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    request = get("T1", "X-Request-Id: split")
    conn.send(request[:20])
    await asyncio.sleep(0.1)  # time for the server to read the first part alone (as above)
    conn.send(request[20:])
    answer = await conn.answer()
    conn.close()
    assert status(answer) == 200 and header(answer, "X-Request-Id") == "split"
    assert fast.reads.hits == before + 1


async def test_connection_close_is_honoured(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    conn.send(get("T1", "Connection: close"))
    answer = await conn.answer()
    assert status(answer) == 200 and header(answer, "Connection") == "close"
    assert await conn.closed()
    conn.close()
    assert fast.reads.hits == before + 1


async def test_pipelined_cached_reads_are_counted_in_the_metrics(fast: Server) -> None:
    def count(metrics: bytes, name: str) -> float:
        m = re.search(rb"\n" + re.escape(name.encode()) + rb" ([0-9.e+]+)", metrics)
        return float(m.group(1)) if m else 0.0

    await warm(fast, "T1")
    served = 'rmq_http_requests_total{method="GET",route="/v1/routes/{topic}",status="200"}'
    latencies = 'rmq_http_request_seconds_count{route="/v1/routes/{topic}"}'
    metrics = await fast.call(get(target="/metrics"))
    before = fast.reads.hits
    conn = await fast.connect()
    conn.send(get("T1") * 5)
    for _ in range(5):
        await conn.answer()
    conn.close()
    after = await fast.call(get(target="/metrics"))
    assert fast.reads.hits == before + 5
    assert count(after, served) == count(metrics, served) + 5
    assert count(after, latencies) == count(metrics, latencies) + 5


async def test_a_request_id_is_made_when_the_caller_sends_none(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    conn.send(get("T1") * 2)
    ids = [header(await conn.answer(), "X-Request-Id") for _ in range(2)]
    conn.close()
    assert fast.reads.hits == before + 2
    assert all(i and re.fullmatch(r"[0-9a-f]{6}-[0-9a-f]+", i) for i in ids) and ids[0] != ids[1]


async def test_reads_needing_a_token_are_not_answered_without_one(settings: Settings, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("broker b-token\nadmin a-token\n")
    server = await Server(settings.with_overrides(auth_tokens_file=str(tokens), auth_reads="token")).start()
    try:
        assert status(await server.call(post("/v1/brokers/register", json.dumps(REG).encode())
                                        .replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer b-token\r\n\r\n", 1))) == 200
        assert status(await server.call(get("T1", "Authorization: Bearer a-token"))) == 200  # now cached
        assert status(await server.call(get("T1"))) == 401
    finally:
        await server.runner.cleanup()


async def test_a_connection_reading_more_often_than_the_keepalive_timeout_is_not_closed(settings: Settings) -> None:
    async with serving(settings, keepalive_timeout=0.5) as server:
        await warm(server, "T1")
        before = server.reads.hits
        conn = await server.connect()
        for _ in range(6):  # 1.2 s of reads, 0.2 s apart: never idle for the keep-alive timeout
            conn.send(get("T1"))
            assert status(await conn.answer()) == 200
            await asyncio.sleep(0.2)
        conn.close()
        assert server.reads.hits == before + 6


async def test_a_head_begun_after_an_answered_read_has_the_header_deadline(settings: Settings) -> None:
    async with serving(settings, header_timeout_s=0.3) as server:
        await warm(server, "T1")
        before = server.reads.hits
        conn = await server.connect()
        conn.send(get("T1"))  # answered: no head begun, no deadline
        assert status(await conn.answer()) == 200
        await asyncio.sleep(0.5)  # time must pass: idle past the 0.3 s head deadline, which is not running
        conn.send(b"GET /v1/ro")  # a head begun, never finished
        assert await conn.closed(timeout=3)
        conn.close()
        assert server.reads.hits == before + 1


async def test_the_unfinished_head_aiohttp_holds_is_not_taken_for_a_new_request(fast: Server) -> None:
    await warm(fast, "T1", "Nope")
    conn = await fast.connect()
    # a header value outside printable ASCII, then the start of the next request's head
    conn.send(get("T1", "User-Agent: cafe").replace(b"cafe", b"caf\xe9") + b"GET /v1/routes/Nope HTTP/1.1\r\nX-Note: ")
    assert status(await conn.answer()) == 200
    conn.send(get("T1"))  # the rest of X-Note's line, then the head's end
    answer = await conn.answer()
    conn.close()
    assert status(answer) == 404


async def test_a_cached_read_behind_an_uncached_one_is_answered_after_it(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    conn.send(get("T3", "X-Request-Id: uncached") + get("T1", "X-Request-Id: cached"))
    first, second = await conn.answer(), await conn.answer()
    conn.close()
    assert [header(first, "X-Request-Id"), header(second, "X-Request-Id")] == ["uncached", "cached"]
    assert fast.reads.hits == before + 1  # T1; T3 was a miss


async def test_more_pipelined_requests_than_aiohttp_queues_are_all_answered(fast: Server) -> None:
    await warm(fast, "T1")
    before = fast.reads.hits
    conn = await fast.connect()
    # aiohttp parses 32 at a time, then pauses, and re-reads the rest as its queue drains
    conn.send(get(target="/healthz") * 100 + get("T1"))
    answers = [await conn.answer() for _ in range(101)]
    conn.close()
    assert [status(a) for a in answers] == [200] * 101 and b"queueDatas" in answers[-1]
    assert fast.reads.hits == before + 1
