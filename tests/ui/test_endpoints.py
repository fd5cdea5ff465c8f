"""The dashboard's own HTTP surface, without a browser: the page, its assets and its two reads."""

from __future__ import annotations

import asyncio
import gzip
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.worker import create_app
from service.config import Settings
from service.http.app_keys import CACHE
from service.http.ui import add_ui_routes
from tests import waits
from tests.builders import registration, topic_config

QUIET_SCAN_MS = 3_600_000


async def make(aiohttp_client: Any, redis_url: str, **overrides: Any) -> TestClient:
    app = create_app(Settings(redis_url=redis_url, scan_interval_ms=QUIET_SCAN_MS).with_overrides(**overrides))
    add_ui_routes(app)
    add_ui_routes(app)  # a second call changes nothing
    return await aiohttp_client(app)


async def register(client: TestClient, body: dict[str, Any], token: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    resp = await client.post("/v1/brokers/register", json=body, headers=headers)
    assert resp.status == 200, await resp.text()


async def test_the_page_and_its_assets_are_served_with_a_strict_policy(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    page = await client.get("/")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    html = await page.text()
    assert '<script src="/ui/app.js" defer></script>' in html and "/ui/style.css" in html
    for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css"), ("index.html", "text/html")):
        resp = await client.get(f"/ui/{name}")
        assert resp.status == 200 and resp.headers["Content-Type"].startswith(ctype), name
        again = await client.get(f"/ui/{name}", headers={"If-None-Match": resp.headers["ETag"]})
        assert again.status == 304
    for missing in ("/ui/nope.js", "/ui/..%2Fui.py", "/ui/..%2F..%2Fpyproject.toml"):
        resp = await client.get(missing)
        assert resp.status == 404 and (await resp.json())["error"] == "NOT_FOUND"
    # nothing third-party: every file of the page is ours and small
    static = Path(__file__).resolve().parents[2] / "service" / "http" / "ui_static"
    assert sorted(p.name for p in static.iterdir()) == ["app.js", "index.html", "style.css"]
    assert all(p.stat().st_size < 64_000 for p in static.iterdir())


async def test_live_brokers_report_age_against_timeout_and_an_expired_live_row(
        aiohttp_client: Any, redis_url: str, r: redis.Redis) -> None:
    client = await make(aiohttp_client, redis_url)
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", broker_id=0, cluster="C1", timeout_ms=30_000))
    await register(client, registration(addr="10.0.0.2:10911", name="broker-a", broker_id=1, cluster="C1", ha="10.0.0.2:20912"))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b", broker_id=1, cluster="C2", timeout_ms=5_000))
    resp = await client.get("/v1/brokers/live")
    assert resp.status == 200
    body = await resp.json()
    now = body["now"]
    assert abs(now - int(r.time()[0]) * 1000) < 5_000
    rows = {b["brokerAddr"]: b for b in body["brokers"]}
    assert [b["brokerAddr"] for b in body["brokers"]] == ["10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911"]
    a0 = rows["10.0.0.1:10911"]
    assert {k: a0[k] for k in ("cluster", "brokerName", "brokerId", "haServerAddr", "heartbeatTimeoutMillis", "alive")} == \
        {"cluster": "C1", "brokerName": "broker-a", "brokerId": 0, "haServerAddr": "10.0.0.1:10912",
         "heartbeatTimeoutMillis": 30_000, "alive": True}
    assert a0["ageMs"] == now - a0["lastUpdateTimestamp"] and 0 <= a0["ageMs"] < 5_000
    assert a0["deadline"] == a0["lastUpdateTimestamp"] + 30_000
    assert a0["dataVersion"] == {"timestamp": 1700000000000, "counter": 1}
    assert rows["10.0.0.2:10911"]["haServerAddr"] == "10.0.0.2:20912"
    assert rows["10.0.0.2:10911"]["heartbeatTimeoutMillis"] == 120_000  # the default
    assert rows["10.0.1.1:10911"]["cluster"] == "C2"

    # the ETag ignores the passing of time: a poller gets 304 until something changes
    etag = resp.headers["ETag"]
    await asyncio.sleep(0.05)
    same = await client.get("/v1/brokers/live", headers={"If-None-Match": etag})
    assert same.status == 304 and same.headers["ETag"] == etag

    # the live row ran out (TTL) and the scanner has not removed the member yet
    r.delete("{rmq}:live:10.0.1.1:10911")
    changed = await client.get("/v1/brokers/live", headers={"If-None-Match": etag})
    assert changed.status == 200 and changed.headers["ETag"] != etag
    b = {x["brokerAddr"]: x for x in (await changed.json())["brokers"]}["10.0.1.1:10911"]
    assert b["alive"] is False and b["lastUpdateTimestamp"] is None and b["ageMs"] is None
    assert b["heartbeatTimeoutMillis"] is None and b["haServerAddr"] is None
    assert b["brokerName"] == "broker-b" and b["brokerId"] == 1 and b["deadline"] is not None


async def test_live_brokers_say_whether_a_group_runs_with_acting_master_and_its_zone(
        aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    # a 5.x broker's table holds more than one topic (one alone is refused from a new id: apache/rocketmq#4522)
    await register(client, {**registration(addr="10.0.0.1:10911", name="broker-a", topics=["TopicTest", "broker-a"]),
                            "enableActingMaster": True, "zoneName": "zone-b"})
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b"))
    rows = {b["brokerName"]: b for b in (await (await client.get("/v1/brokers/live")).json())["brokers"]}
    assert (rows["broker-a"]["enableActingMaster"], rows["broker-a"]["zoneName"]) == (True, "zone-b")
    assert (rows["broker-b"]["enableActingMaster"], rows["broker-b"]["zoneName"]) == (False, None)


async def test_topic_summary_has_every_topics_queues_and_order_config(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    assert await (await client.get("/v1/topics/summary")).json() == {
        "topics": [], "nextCursor": None, "total": 0, "orderTopics": 0}
    await register(client, registration(addr="10.0.0.1:10911", name="broker-b", topics={
        "T1": topic_config("T1", read=8, write=4, perm=6), "T2": topic_config("T2", perm=4, sys_flag=1)}))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-a", topics={
        "T1": topic_config("T1", read=2, write=2)}))
    await register(client, registration(addr="10.0.1.2:10911", name="broker-a", broker_id=1, topics=["FromSlave"]))
    assert (await client.put("/v1/kv/ORDER_TOPIC_CONFIG/T1", json={"value": "broker-a:2;broker-b:4"})).status == 200
    resp = await client.get("/v1/topics/summary")
    assert resp.status == 200
    assert await resp.json() == {"topics": [
        {"topic": "T1", "orderTopicConf": "broker-a:2;broker-b:4", "queueDatas": [  # the route's order
            {"brokerName": "broker-b", "readQueueNums": 8, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0},
            {"brokerName": "broker-a", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0}]},
        {"topic": "T2", "orderTopicConf": None, "queueDatas": [
            {"brokerName": "broker-b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 4, "topicSysFlag": 1}]},
    ], "nextCursor": None, "total": 2, "orderTopics": 1}
    # the same queueDatas a producer gets from the route
    route = await (await client.get("/v1/routes/T1")).json()
    assert route["queueDatas"] == (await resp.json())["topics"][0]["queueDatas"]

    etag = resp.headers["ETag"]
    assert (await client.get("/v1/topics/summary", headers={"If-None-Match": etag})).status == 304
    await register(client, registration(addr="10.0.1.1:10911", name="broker-a", version=2, topics={
        "T1": topic_config("T1", read=2, write=6)}))
    async def changed_summary() -> Any:
        resp = await client.get("/v1/topics/summary", headers={"If-None-Match": etag})
        return resp if resp.status == 200 else None

    # a read begun past twice the cache's staleness bound (1 s) must see the change
    changed = await waits.until(changed_summary, 2.0, "the summary changed after a registration (not 304)")
    queues = {q["brokerName"]: q for q in (await changed.json())["topics"][0]["queueDatas"]}
    assert queues["broker-a"]["writeQueueNums"] == 6


async def test_reads_follow_the_read_rule_and_the_page_stays_open(
        aiohttp_client: Any, redis_url: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin a-token\nbroker b-token\n")
    client = await make(aiohttp_client, redis_url, auth_tokens_file=str(tokens), auth_reads="token")
    for path in ("/", "/ui/app.js", "/ui/style.css"):
        assert (await client.get(path)).status == 200, path
    for path in ("/v1/brokers/live", "/v1/topics/summary", "/v1/departures"):
        resp = await client.get(path)
        assert resp.status == 401 and (await resp.json())["error"] == "UNAUTHENTICATED"
        assert (await client.get(path, headers={"Authorization": "Bearer nope"})).status == 401
        for token in ("a-token", "b-token"):  # any valid token reads
            assert (await client.get(path, headers={"Authorization": f"Bearer {token}"})).status == 200
        # GET only: no implicit HEAD that would slip past the role table
        assert (await client.head(path)).status in (401, 405)

    open_reads = await make(aiohttp_client, redis_url, auth_tokens_file=str(tokens), auth_reads="open")
    assert (await open_reads.get("/v1/brokers/live")).status == 200


async def test_reads_answer_503_when_redis_is_unreachable(aiohttp_client: Any) -> None:
    from tests.redis_server import RedisServer

    own = RedisServer()
    own.start()
    try:
        client = await make(aiohttp_client, own.url, redis_timeout_ms=200)
        own.stop()  # lost after the worker started (it does not start without it)
        for path in ("/v1/brokers/live", "/v1/topics/summary"):
            resp = await client.get(path)
            assert resp.status == 503 and (await resp.json())["error"] == "STORE_UNAVAILABLE"
        assert (await client.get("/")).status == 200
    finally:
        own.cleanup()


async def test_topic_summary_pages_every_topic_once_in_name_order(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    names = [f"P{i:03d}" for i in range(57)]
    await register(client, registration(topics=names))
    seen, cursor, pages = [], "", 0
    while True:
        query = {"limit": "10"} | ({"cursor": cursor} if cursor else {})
        body = await (await client.get("/v1/topics/summary", params=query)).json()
        assert len(body["topics"]) <= 10 and body["total"] == 57
        seen += [t["topic"] for t in body["topics"]]
        pages += 1
        if body["nextCursor"] is None:
            break
        cursor = body["nextCursor"]
    assert seen == names and pages == 6


async def test_topic_summary_finds_topics_by_prefix_and_order_topics(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    await register(client, registration(topics=["Apple", "Apricot", "Banana", "Avocado"]))
    await client.put("/v1/kv/ORDER_TOPIC_CONFIG/Banana", json={"value": "broker-a:4"})
    found = await (await client.get("/v1/topics/summary", params={"q": "Ap"})).json()
    assert [t["topic"] for t in found["topics"]] == ["Apple", "Apricot"] and found["total"] == 4
    page = await (await client.get("/v1/topics/summary", params={"q": "A", "limit": "2"})).json()
    rest = await (await client.get("/v1/topics/summary", params={"q": "A", "cursor": page["nextCursor"]})).json()
    assert [t["topic"] for t in page["topics"] + rest["topics"]] == ["Apple", "Apricot", "Avocado"]
    order = await (await client.get("/v1/topics/summary", params={"order": "1"})).json()
    assert [t["topic"] for t in order["topics"]] == ["Banana"] and order["orderTopics"] == 1


@pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "abc"}, {"limit": "100000"}, {"cursor": "x" * 2000}])
async def test_summary_pages_refuse_a_bad_limit_or_cursor(aiohttp_client: Any, redis_url: str, query: dict) -> None:
    client = await make(aiohttp_client, redis_url)
    for path in ("/v1/topics/summary", "/v1/brokers/live"):
        resp = await client.get(path, params=query)
        assert resp.status == 400 and (await resp.json())["error"] == "INVALID_REQUEST"


async def test_live_brokers_page_by_broker_group(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    for g in range(5):
        for i in (0, 1):
            await register(client, registration(addr=f"10.0.{g}.{i + 1}:10911", name=f"g{g}", broker_id=i, topics=[]))
    seen, cursor = [], ""
    while True:
        body = await (await client.get("/v1/brokers/live", params={"limit": "2"} | ({"cursor": cursor} if cursor else {}))).json()
        assert len({b["brokerName"] for b in body["brokers"]}) <= 2
        seen += [b["brokerAddr"] for b in body["brokers"]]
        if body["nextCursor"] is None:
            break
        cursor = body["nextCursor"]
    assert seen == [f"10.0.{g}.{i + 1}:10911" for g in range(5) for i in (0, 1)]
    bad = await client.get("/v1/brokers/live", params={"cursor": "not json"})
    assert bad.status == 400


async def test_topic_summary_filters_by_cluster_and_leaves_system_topics_out(aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    # what a real broker registers besides its own topics: TopicValidator's set, a consumer
    # group's retry and dead-letter topics, its cluster's and its own name
    system = ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_x", "%RETRY%cg", "%DLQ%cg"]
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", cluster="C1",
                                        topics=["Orders", "Shared", "C1", "broker-a"] + system))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b", cluster="C2",
                                        topics=["Payments", "Shared", "C2", "broker-b"] + system))

    async def names(**params: str) -> tuple[list[str], dict[str, Any]]:
        resp = await client.get("/v1/topics/summary", params=params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        return [t["topic"] for t in body["topics"]], body

    everything, body = await names()
    assert len(everything) == 13 and body["total"] == 13
    plain, body = await names(system="0")
    assert plain == ["Orders", "Payments", "Shared"]
    assert body["examined"] == 13 and body["skipped"] == 10 and body["total"] == 13
    in_c1, _ = await names(system="0", cluster="C1")
    assert in_c1 == ["Orders", "Shared"]
    with_system, _ = await names(cluster="C2")
    assert "Payments" in with_system and "Orders" not in with_system and "TBW102" in with_system
    nowhere, body = await names(cluster="NoSuchCluster")
    assert nowhere == [] and body["nextCursor"] is None
    bad = await client.get("/v1/topics/summary", params={"system": "maybe"})
    assert bad.status == 400 and "system" in (await bad.json())["message"]


async def test_a_filtered_page_stops_after_a_bounded_read_and_goes_on_from_there(
        aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    from service.http.ui import FILTER_PAGES

    # 3 pages of 2 topics per request at most: the one topic of C2 lies past them
    many = [f"A{i:02d}" for i in range(2 * FILTER_PAGES + 3)]
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", cluster="C1", topics=many))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-b", cluster="C2", topics=["Z-late"]))
    first = await (await client.get("/v1/topics/summary", params={"cluster": "C2", "limit": "2"})).json()
    assert first["topics"] == [] and first["examined"] == 2 * FILTER_PAGES
    assert first["nextCursor"] == many[2 * FILTER_PAGES - 1]
    rest = await (await client.get("/v1/topics/summary", params={
        "cluster": "C2", "limit": "2", "cursor": first["nextCursor"]})).json()
    assert [t["topic"] for t in rest["topics"]] == ["Z-late"] and rest["nextCursor"] is None


async def test_write_queues_sum_every_topic_per_group_a_bounded_slice_per_request(
        aiohttp_client: Any, redis_url: str) -> None:
    from service.http import ui

    client = await make(aiohttp_client, redis_url)
    client.app[ui._TALLY].budget = 1  # one group per request
    await register(client, registration(addr="10.0.0.1:10911", name="broker-a", cluster="C1", topics={
        f"T{i}": topic_config(f"T{i}", write=8) for i in range(6)}))
    await register(client, registration(addr="10.0.0.2:10911", name="broker-b", cluster="C1", topics={
        "T0": topic_config("T0", write=4), "RO": topic_config("RO", write=16, perm=4)}))
    await register(client, registration(addr="10.0.1.1:10911", name="broker-c", broker_id=1, cluster="C2", topics=[]))
    progress = []
    for _ in range(10):
        body = await (await client.get("/v1/brokers/write-queues")).json()
        if body["tally"] is not None:
            break
        progress.append(body["pass"])
    assert progress and progress[0] == {"read": 1, "of": 3}  # several requests, one group each
    rows = {r["brokerName"]: r for r in body["tally"]["groups"]}
    assert {n: (r["cluster"], r["topics"], r["writeQueues"]) for n, r in rows.items()} == {
        "broker-a": ("C1", 6, 48), "broker-b": ("C1", 2, 4), "broker-c": ("C2", 0, 0)}
    # nothing changed: the next request reads nothing and answers 304
    resp = await client.get("/v1/brokers/write-queues")
    again = await client.get("/v1/brokers/write-queues", headers={"If-None-Match": resp.headers["ETag"]})
    assert again.status == 304


async def test_the_page_and_the_reads_are_gzipped_for_a_client_that_accepts_it(
        aiohttp_client: Any, redis_url: str) -> None:
    client = await make(aiohttp_client, redis_url)
    for g in range(12):  # bodies over the 1 KiB below which nothing is compressed
        await register(client, registration(addr=f"10.0.{g}.1:10911", name=f"broker-{g}",
                                            topics=[f"Topic-{i:03d}" for i in range(20)]))
    for path in ("/", "/ui/app.js", "/ui/style.css", "/v1/cluster", "/v1/brokers/live", "/v1/topics/summary"):
        resp = await client.get(path, headers={"Accept-Encoding": "gzip, deflate, br"}, auto_decompress=False)
        raw = await resp.read()
        assert resp.headers.get("Content-Encoding") == "gzip", path
        assert "Accept-Encoding" in resp.headers.get("Vary", ""), path
        plain = await client.get(path, headers={"Accept-Encoding": "identity"})
        body = await plain.read()
        assert "Content-Encoding" not in plain.headers, path
        unzipped = gzip.decompress(raw)
        if path == "/v1/brokers/live":  # its clock moved between the two reads
            unzipped, body = (re.sub(rb'"(now|ageMs)":\d+', b"", b) for b in (unzipped, body))
        assert unzipped == body and len(raw) < len(body) / 2, path


async def test_a_503_of_a_dashboard_read_says_when_the_worker_last_reached_redis(aiohttp_client: Any) -> None:
    from tests.redis_server import RedisServer

    own = RedisServer()
    own.start()
    try:
        client = await make(aiohttp_client, own.url, redis_timeout_ms=200, version_poll_ms=100)
        cache = client.app[CACHE]
        await waits.until(lambda: cache.confirmed_at != float("-inf"), 10, "the cache's poller reaching Redis")
        reached_before = time.time() * 1000
        own.stop()
        paths = ("/v1/brokers/live", "/v1/topics/summary", "/v1/cluster", "/v1/brokers/write-queues")

        async def refused() -> bool:
            return all([(await client.get(path)).status == 503 for path in paths])

        await waits.until(refused, 10, "the reads refused once Redis stopped")
        for path in paths:
            resp = await client.get(path)
            assert resp.status == 503, path
            reached = int(resp.headers["X-Registry-Last-Reached"])
            assert reached_before - 2_000 <= reached <= reached_before + 300, (path, reached, reached_before)
    finally:
        own.cleanup()
