"""Health, readiness, metrics, the OpenAPI document, configuration, the embedded store."""

from __future__ import annotations


import pytest
from aiohttp.test_utils import TestClient

import service

from service.http.app_keys import CACHE
from service.worker import create_app
from service.config import ENV, Settings, StartupError
from service.http.openapi import OPERATIONS
from tests.builders import registration
from tests.calls import register, route
from tests.settings_env import settings_from
from tests.waits import until


async def test_healthz_answers_ok_and_the_release(client: TestClient) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200 and await resp.json() == {"status": "ok", "version": service.__version__}


async def test_readyz_answers_ready_with_redis_up(client: TestClient) -> None:
    resp = await client.get("/readyz")
    assert resp.status == 200 and await resp.json() == {"status": "ready", "redis": "ok", "writes": "ok"}


async def test_readyz_without_redis_answers_the_workers_own_readiness_in_the_same_shape(client: TestClient) -> None:
    resp = await client.get("/readyz?exclude=redis")
    assert resp.status == 200 and await resp.json() == await (await client.get("/readyz")).json()


async def test_readyz_while_draining_answers_503_in_the_same_shape(client: TestClient) -> None:
    from service.http.app_keys import NODE

    ready = await (await client.get("/readyz")).json()
    client.app[NODE].begin_stopping()
    for path in ("/readyz", "/readyz?exclude=redis"):
        resp = await client.get(path)
        body = await resp.json()
        assert resp.status == 503 and body["status"] == "not ready" and body["message"] == "shutting down"
        assert set(body) == set(ready) | {"error", "message"}


async def test_readyz_refuses_to_exclude_an_unknown_check(client: TestClient) -> None:
    resp = await client.get("/readyz?exclude=disk")
    assert resp.status == 400 and (await resp.json())["error"] == "INVALID_REQUEST"


async def test_metrics_count_requests_by_route_and_status(client: TestClient) -> None:
    await client.get("/v1/routes/Nope")
    text = await (await client.get("/metrics")).text()
    assert 'rmq_http_requests_total{method="GET",route="/v1/routes/{topic}",status="404"} 1.0' in text
    assert "rmq_scanner_passes_total" in text


async def test_openapi_document_lists_every_route_the_app_serves(client: TestClient) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    served = {(r.method, r.resource.canonical) for r in client.app.router.routes() if r.method != "HEAD"}
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert served - {("GET", "/v1/openapi.json")} == documented


async def test_openapi_request_schemas_carry_the_validation_rules(client: TestClient) -> None:
    doc = await (await client.get("/v1/openapi.json")).json()
    register_schema = doc["components"]["schemas"]["RegisterRequest"]
    assert set(register_schema["required"]) >= {"clusterName", "brokerAddr", "brokerName", "brokerId", "topicConfigSerializeWrapper"}
    assert doc["components"]["schemas"]["TopicConfig"]["properties"]["perm"]["maximum"] == 7
    assert len(OPERATIONS) + 3 == sum(len(ops) for ops in doc["paths"].values())


def test_settings_come_from_the_environment() -> None:
    s = settings_from({"REDIS_URL": "redis://h:1/2", "RMQ_PORT": "9000", "RMQ_SCAN_INTERVAL_MS": "250",
                  "RMQ_ORDER_MESSAGE_ENABLE": "true", "RMQ_KEY_PREFIX": "x"})
    assert (s.redis_url, s.port, s.scan_interval_ms, s.order_message_enable, s.key_prefix) == (
        "redis://h:1/2", 9000, 250, True, "x")


def test_defaults_match_the_contract() -> None:
    s = settings_from({})
    assert s.embedded and (s.host, s.port, s.key_prefix, s.broker_timeout_ms, s.scan_interval_ms,
                           s.redis_timeout_ms, s.max_body_bytes, s.order_message_enable) == (
        "0.0.0.0", 8080, "rmq", 120_000, 5_000, 1_000, 4_194_304, False)


@pytest.mark.parametrize("var,value", [("RMQ_PORT", "eighty"), ("RMQ_ORDER_MESSAGE_ENABLE", "maybe"), ("RMQ_AUTH_READS", "x"),
                                       ("RMQ_REMOTING_FRAME_BUFFER_BYTES", "1000"), ("RMQ_REMOTING_IDLE_MS", "0"),
                                       ("RMQ_MAX_WATCHES", "-1")])
def test_bad_setting_stops_with_a_clear_message(var: str, value: str) -> None:
    with pytest.raises(StartupError, match=var):
        settings_from({var: value})


def test_every_documented_variable_is_read() -> None:
    for var in ("REDIS_URL", "RMQ_HOST", "RMQ_PORT", "RMQ_KEY_PREFIX", "RMQ_BROKER_TIMEOUT_MS", "RMQ_SCAN_INTERVAL_MS",
                "RMQ_REDIS_TIMEOUT_MS", "RMQ_MAX_BODY_BYTES", "RMQ_ORDER_MESSAGE_ENABLE", "RMQ_AUTH_TOKENS_FILE", "RMQ_AUTH_READS"):
        assert var in ENV


async def test_key_prefix_separates_registries_on_one_redis(make_client) -> None:
    a, b = await make_client(key_prefix="one"), await make_client(key_prefix="two")
    await register(a, registration())
    assert await route(a, "TopicTest") is not None
    assert await route(b, "TopicTest") is None


async def test_embedded_store_serves_registration_and_expiry(aiohttp_client) -> None:
    # the quick start's store (fakeredis with Lua); the same scripts as on a real Redis
    client = await aiohttp_client(create_app(Settings(scan_interval_ms=100)))
    await register(client, registration(timeout_ms=300))
    assert await route(client, "TopicTest") is not None

    async def gone() -> bool:
        return await route(client, "TopicTest") is None

    await until(gone, 10, "the expired broker's route gone")  # 0.4 s in; room for a loaded machine


async def test_metrics_show_changes_gauges_and_redis_errors(client: TestClient) -> None:
    from service.http.app_keys import SCANNER

    await register(client, registration(topics=["T1", "T2"]))
    await client.post("/v1/brokers/heartbeat", json={k: registration()[k] for k in
                                                     ("clusterName", "brokerAddr", "brokerName", "brokerId")})
    await client.app[SCANNER].observe_tables()
    text = await (await client.get("/metrics")).text()
    assert 'rmq_table_changes_total{script="register"} 1.0' in text
    assert 'rmq_table_changes_total{script="heartbeat"} 1.0' in text
    assert "rmq_live_brokers 1.0" in text and "rmq_topics 2.0" in text
    assert "rmq_scanner_lag_ms 0.0" in text
    assert "rmq_redis_errors_total 0.0" in text


async def test_request_id_is_echoed_or_made(client: TestClient) -> None:
    given = await client.get("/healthz", headers={"X-Request-Id": "abc-123"})
    assert given.headers["X-Request-Id"] == "abc-123"
    made = [(await client.get("/healthz")).headers["X-Request-Id"] for _ in range(2)]
    assert made[0] != made[1] and all(made)


async def test_cached_route_reads_run_through_no_aiohttp_middleware(client: TestClient) -> None:
    # service.http.observe wraps each handler instead: any middleware costs every request a layer
    assert not client.app.middlewares
    await register(client, registration(topics=["T1"]))
    await client.app[CACHE].poll_once()  # a confirmed version, so the second read is a cache hit
    first, hit = [await client.get("/v1/routes/T1") for _ in range(2)]
    assert client.app[CACHE].stats.hits >= 1
    for resp in (first, hit):
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
        assert resp.headers["ETag"] == first.headers["ETag"] and resp.headers["Cache-Control"] == "no-cache"
        assert resp.headers["X-Request-Id"]
    assert (await hit.read()) == (await first.read())
    not_modified = await client.get("/v1/routes/T1", headers={"If-None-Match": first.headers["ETag"]})
    assert not_modified.status == 304 and not_modified.headers["X-Request-Id"]
    assert "Content-Type" not in not_modified.headers


async def test_unmatched_requests_answer_json_with_an_id_and_are_counted(client: TestClient) -> None:
    missing = await client.get("/v1/nothing-here", headers={"X-Request-Id": "r-404"})
    assert missing.status == 404 and missing.headers["X-Request-Id"] == "r-404"
    assert await missing.json() == {"error": "NOT_FOUND", "message": "no such endpoint: GET /v1/nothing-here"}
    wrong = await client.delete("/v1/cluster")
    assert wrong.status == 405 and wrong.headers["Allow"] == "GET" and wrong.headers["X-Request-Id"]
    assert (await wrong.json())["error"] == "METHOD_NOT_ALLOWED"
    text = await (await client.get("/metrics")).text()
    assert 'rmq_http_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert 'rmq_http_requests_total{method="DELETE",route="unmatched",status="405"} 1.0' in text
    assert 'rmq_http_request_seconds_count{route="unmatched"} 2.0' in text
    # routes no request reached have no series yet
    assert 'route="/v1/kv/{namespace}"' not in text


def test_json_log_lines_carry_the_request_id(capsys) -> None:
    import json
    import logging

    from service import logs

    logs.setup("INFO", "json")
    token = logs.REQUEST_ID.set("req-7")
    try:
        logging.getLogger("service.test").warning("something happened")
    finally:
        logs.REQUEST_ID.reset(token)
        logs.setup("WARNING", "text")
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "something happened" and line["requestId"] == "req-7" and line["level"] == "WARNING"
