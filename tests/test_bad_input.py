"""Bad input answers 400/413 with the JSON error body and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import redis
from aiohttp.test_utils import TestClient

from service.keys import Keys
from tests.builders import identity, registration, topic_config
from tests.calls import register, route
from tests.tables import snapshot


def with_topic(**fields: Any) -> dict[str, Any]:
    return registration(topics={"T1": {**topic_config("T1"), **fields}})


def without(field: str) -> dict[str, Any]:
    body = registration()
    del body[field]
    return body


BAD_REGISTRATIONS = {
    "missing clusterName": without("clusterName"),
    "missing brokerAddr": without("brokerAddr"),
    "missing topic wrapper": without("topicConfigSerializeWrapper"),
    "brokerId as string": {**registration(), "brokerId": "0"},
    "brokerId as bool": {**registration(), "brokerId": False},
    "negative brokerId": {**registration(), "brokerId": -1},
    "empty cluster name": {**registration(), "clusterName": ""},
    "broker name too long": {**registration(), "brokerName": "b" * 256},
    "broker name not a string": {**registration(), "brokerName": 7},
    "address without port": {**registration(), "brokerAddr": "10.0.0.1"},
    "address port zero": {**registration(), "brokerAddr": "10.0.0.1:0"},
    "address port too big": {**registration(), "brokerAddr": "10.0.0.1:70000"},
    "topic table not an object": {**registration(), "topicConfigSerializeWrapper": {
        "topicConfigTable": [], "dataVersion": {"timestamp": 1, "counter": 1}}},
    "timeout too small": {**registration(), "heartbeatTimeoutMillis": 1},
    "filter server not an address": {**registration(), "filterServerList": ["nope"]},
    "dataVersion missing counter": {**registration(), "topicConfigSerializeWrapper": {
        "topicConfigTable": {}, "dataVersion": {"timestamp": 1}}},
}


# One topic config the registry cannot store: that topic is skipped, the rest registers.
SKIPPED_TOPICS = {
    "empty topic name": ("", {}, "name"),
    "topic name too long": ("T" * 256, {}, "name"),
    "topicName differs from key": ("T1", {"topicName": "T2"}, "topic_name"),
    "negative queue count": ("T1", {"readQueueNums": -1}, "queue_nums"),
    "huge queue count": ("T1", {"writeQueueNums": 1025}, "queue_nums"),
    "queue count as float": ("T1", {"writeQueueNums": 4.0}, "queue_nums"),
    "perm 8": ("T1", {"perm": 8}, "perm"),
    "perm as string": ("T1", {"perm": "6"}, "perm"),
    "sysFlag negative": ("T1", {"topicSysFlag": -1}, "invalid"),
    "config not an object": ("T1", None, "invalid"),
}


@pytest.fixture
async def seeded(client: TestClient, r: redis.Redis) -> dict[str, Any]:
    await register(client, registration(addr="10.0.0.1:10911", topics=["T1"]))
    await client.put("/v1/kv/ns/k", json={"value": "v"})
    return snapshot(r)


@pytest.mark.parametrize("body", BAD_REGISTRATIONS.values(), ids=BAD_REGISTRATIONS.keys())
async def test_invalid_registration_is_rejected_and_changes_nothing(client: TestClient, r: redis.Redis, seeded: dict, body: dict) -> None:
    resp = await client.post("/v1/brokers/register", json=body)
    assert resp.status == 400
    error = await resp.json()
    assert error["error"] == "INVALID_REQUEST" and error["message"]
    assert snapshot(r) == seeded


@pytest.mark.parametrize("raw", [b"{", b"not json", b"[1, 2]", b'"text"', b"", b'{"a": NaN'])
async def test_malformed_json_is_rejected(client: TestClient, r: redis.Redis, seeded: dict, raw: bytes) -> None:
    resp = await client.post("/v1/brokers/register", data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert (await resp.json())["error"] == "INVALID_REQUEST"
    assert snapshot(r) == seeded


async def test_body_over_the_limit_is_payload_too_large(make_client, r: redis.Redis) -> None:
    client = await make_client(max_body_bytes=2048)
    before = snapshot(r)
    body = registration(topics=[f"Topic{i}" for i in range(100)])
    resp = await client.post("/v1/brokers/register", json=body)
    assert resp.status == 413
    assert (await resp.json())["error"] == "PAYLOAD_TOO_LARGE"
    assert snapshot(r) == before


async def test_too_many_topics_in_one_registration_is_rejected(make_client, r: redis.Redis) -> None:
    client = await make_client(max_topics_per_registration=5)
    resp = await client.post("/v1/brokers/register", json=registration(topics=[f"T{i}" for i in range(6)]))
    assert resp.status == 400
    assert snapshot(r) == {}


@pytest.mark.parametrize("topic,fields,reason", SKIPPED_TOPICS.values(), ids=SKIPPED_TOPICS.keys())
async def test_a_topic_config_that_cannot_be_stored_is_skipped_and_counted(client: TestClient, consistent: None,
                                                                         topic: str, fields: dict | None, reason: str) -> None:
    config = None if fields is None else {**topic_config(topic), **fields}
    body = registration(topics={topic: config, "Good": topic_config("Good")})  # type: ignore[dict-item]
    await register(client, body)
    assert (await (await client.get("/v1/topics")).json())["topicList"] == ["Good"]
    assert await route(client, "Good") is not None
    assert f'rmq_skipped_topic_configs_total{{reason="{reason}"}} 1.0' in await (await client.get("/metrics")).text()


@pytest.mark.parametrize("topic,fields,reason", SKIPPED_TOPICS.values(), ids=SKIPPED_TOPICS.keys())
async def test_the_registration_answer_names_each_skipped_topic_and_why(client: TestClient, topic: str,
                                                                       fields: dict | None, reason: str) -> None:
    config = None if fields is None else {**topic_config(topic), **fields}
    answer = await register(client, registration(topics={topic: config, "Good": topic_config("Good")}))  # type: ignore[dict-item]
    (skipped,) = answer["skippedTopics"]
    assert (skipped["topic"], skipped["reason"], answer["skippedTopicCount"]) == (topic, reason, 1)
    assert skipped["message"]
    schema = (await (await client.get("/v1/openapi.json")).json())["components"]["schemas"]["RegisterResult"]
    jsonschema.validate(answer, schema)  # the field is in the HTTP contract


async def test_the_answer_lists_at_most_a_thousand_skipped_topics_and_counts_them_all(client: TestClient) -> None:
    topics = {f"W{i}": topic_config(f"W{i}", write=4096) for i in range(1001)}
    answer = await register(client, registration(topics={**topics, "Good": topic_config("Good")}))
    assert (len(answer["skippedTopics"]), answer["skippedTopicCount"]) == (1000, 1001)


async def test_a_registration_that_skipped_nothing_has_no_skipped_fields(client: TestClient) -> None:
    answer = await register(client, registration(topics=["Good"]))
    assert "skippedTopics" not in answer and "skippedTopicCount" not in answer


async def test_queue_count_limit_is_configurable(make_client) -> None:
    client = await make_client(max_queue_nums=8)
    await register(client, registration(topics={"T8": topic_config("T8", write=8), "T9": topic_config("T9", write=9)}))
    assert await route(client, "T8") is not None and await route(client, "T9") is None


async def test_kv_value_over_64_kib_is_rejected(client: TestClient, r: redis.Redis, seeded: dict) -> None:
    resp = await client.put("/v1/kv/ns/k", json={"value": "é" * 32769})  # 65,538 bytes as UTF-8
    assert resp.status == 400 and "65536 bytes" in (await resp.json())["message"]
    assert snapshot(r) == seeded
    assert (await client.put("/v1/kv/ns/k", json={"value": "v" * 65536})).status == 200


def stored_content(r: redis.Redis) -> dict[str, Any]:
    """The tables less what depends on the body's bytes (its digest) or the clock (the
    changelog's times)."""
    keys = Keys()
    tables = snapshot(r, keys)
    del tables[keys.body_digests]
    for key, row in tables.items():
        if key.startswith(f"{keys.tag}:member:"):
            row.pop("bodyDigest")
    tables[keys.changelog] = [json.loads(record)[:1] + json.loads(record)[2:] for record in tables[keys.changelog]]
    return tables


async def test_unknown_fields_are_ignored(client: TestClient, r: redis.Redis) -> None:
    """A registration with fields the registry does not know answers and stores what the
    same registration without them does."""
    plain = registration(topics={"T1": topic_config("T1")})
    extended = registration(topics={"T1": {**topic_config("T1"), "topicFilterType": "SINGLE_TAG", "attributes": {}}})
    extended["somethingNew"] = 1
    answer = await register(client, extended)
    tables = stored_content(r)
    assert "SINGLE_TAG" not in str(tables) and "somethingNew" not in str(tables)
    r.flushall()
    assert await register(client, plain) == answer
    assert stored_content(r) == tables
    assert (await route(client, "T1"))["queueDatas"] == [  # type: ignore[index]
        {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}]


@pytest.mark.parametrize("path", ["/v1/routes/" + "T" * 256, "/v1/clusters/" + "c" * 256 + "/topics",
                                  "/v1/kv/" + "n" * 256, "/v1/kv/ns/" + "k" * 256])
async def test_bad_names_in_paths_are_rejected(client: TestClient, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 400
    assert (await resp.json())["error"] == "INVALID_REQUEST"


async def test_bad_cluster_name_on_topic_delete_changes_nothing(client: TestClient, r: redis.Redis, seeded: dict) -> None:
    resp = await client.delete("/v1/topics/T1?clusterName=" + "c" * 256)
    assert resp.status == 400
    assert snapshot(r) == seeded


async def test_kv_put_without_a_string_value_is_rejected(client: TestClient, r: redis.Redis, seeded: dict) -> None:
    for body in ({}, {"value": 5}, {"value": None}):
        resp = await client.put("/v1/kv/ns/k", json=body)
        assert resp.status == 400
    assert snapshot(r) == seeded


async def test_heartbeat_with_bad_identity_is_rejected(client: TestClient) -> None:
    body = {**identity(registration()), "brokerAddr": "no-port"}
    assert (await client.post("/v1/brokers/heartbeat", json=body)).status == 400


async def test_unknown_endpoint_answers_json_not_found(client: TestClient) -> None:
    resp = await client.get("/v1/nothing-here")
    assert resp.status == 404 and (await resp.json())["error"] == "NOT_FOUND"


async def test_wrong_method_answers_json_405(client: TestClient) -> None:
    resp = await client.get("/v1/brokers/register")
    assert resp.status == 405 and (await resp.json())["error"] == "METHOD_NOT_ALLOWED"


async def test_json_nested_too_deep_is_rejected(client: TestClient, r: redis.Redis, seeded: dict) -> None:
    deep = b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    resp = await client.post("/v1/brokers/register", data=deep, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert snapshot(r) == seeded


@pytest.mark.parametrize("path,status", [("/v1/routes/a{b}", 404), ("/v1/kv/ns/{k}", 404), ("/v1/clusters/{c}/topics", 200)])
async def test_braces_in_names_reach_their_handler(client: TestClient, path: str, status: int) -> None:
    assert (await client.get(path)).status == status


@pytest.mark.parametrize("field,value", [("haServerAddr", "10.0.0.1:0"), ("haServerAddr", "10.0.0.1:65536"),
                                         ("filterServerList", ["10.0.0.1:99999"])])
async def test_every_address_port_is_range_checked(client: TestClient, r: redis.Redis, field: str, value) -> None:
    resp = await client.post("/v1/brokers/register", json={**registration(), field: value})
    assert resp.status == 400
    assert snapshot(r) == {}
