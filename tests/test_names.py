"""Names as RocketMQ takes them: any non-empty string within the length limits,
escaped in Redis keys so that no two names share a key; and one topic config the registry
cannot store skips that topic, not the registration."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.keys import Keys, decode_name, encode_name
from tests.builders import registration, topic_config
from tests.calls import register, route
from tests.hardening.harness import atomic_violations

K = Keys()

# names a plain [%|a-zA-Z0-9_-] rule refused: separators, braces, the escape character,
# spaces, slashes, non-ASCII, a NUL
AWKWARD = ["a.b", "a:b", "x}:y", "{x}", "a~41", "~", "a b", "a/b", "100%", "é中", "a\x00b", "line\nbreak"]


def test_names_kept_before_keep_their_encoding() -> None:
    for name in ("TopicTest", "%RETRY%group-1", "broker_a|x", "node1.example.com"):
        assert encode_name(name) == name


@pytest.mark.parametrize("name", AWKWARD)
def test_encoded_names_carry_no_separator_brace_or_glob_and_decode_back(name: str) -> None:
    encoded = encode_name(name)
    assert not set(encoded) & set(":{}*?[]\\ ") and decode_name(encoded) == name


def test_a_colon_in_a_topic_or_broker_name_cannot_make_two_pairs_share_a_key() -> None:
    assert K.queue("a:b", "c") != K.queue("a", "b:c")
    assert K.queue("a~3Ab", "c") != K.queue("a:b", "c")


async def test_dotted_broker_name_registers_and_gets_a_route(client: TestClient, consistent: None) -> None:
    await register(client, registration(name="node1.example.com", topics=["T1"]))
    assert (await route(client, "T1"))["brokerDatas"][0]["brokerName"] == "node1.example.com"


async def test_one_unstorable_topic_skips_only_that_topic(client: TestClient, consistent: None) -> None:
    long_topic = "L" * 201
    topics = {t: topic_config(t) for t in ("Valid1", "Valid2", "a.b", long_topic)}
    topics["Wide"] = topic_config("Wide", read=2048, write=2048)
    await register(client, registration(topics=topics))
    for topic in ("Valid1", "Valid2", "a.b", long_topic):
        assert await route(client, topic) is not None, topic
    assert await route(client, "Wide") is None
    metrics = await (await client.get("/metrics")).text()
    assert 'rmq_skipped_topic_configs_total{reason="queue_nums"} 1.0' in metrics


async def test_skipped_topics_are_logged_once_per_registration(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    topics = {f"Wide{i}": topic_config(f"Wide{i}", write=4096) for i in range(8)}
    await register(client, registration(topics={**topics, "Ok": topic_config("Ok")}))
    warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warnings) == 1 and "skipped 8 topic config(s)" in warnings[0] and "(+3 more)" in warnings[0]


async def test_colon_in_topic_and_broker_names_gives_two_routes(client: TestClient, consistent: None) -> None:
    await register(client, registration(name="c", topics=["a:b"]))
    await register(client, registration(name="b:c", addr="10.0.0.2:10911", topics=["a"]))
    assert [q["brokerName"] for q in (await route(client, "a:b"))["queueDatas"]] == ["c"]
    assert [q["brokerName"] for q in (await route(client, "a"))["queueDatas"]] == ["b:c"]


@pytest.mark.parametrize("name", ["x}:y", "{x}", "a{b}c"])
async def test_braces_in_names_register_and_route(client: TestClient, consistent: None, name: str) -> None:
    await register(client, registration(name=name, cluster=name, topics=[name]))
    data = await route(client, name)
    assert data["queueDatas"][0]["brokerName"] == name and data["brokerDatas"][0]["cluster"] == name
    topics = await (await client.get(f"/v1/clusters/{quote(name, safe='')}/topics")).json()
    assert topics["topicList"] == [name]


async def test_python_and_lua_encode_names_alike(client: TestClient, r: redis.Redis, consistent: None) -> None:
    for i, name in enumerate(AWKWARD):
        await register(client, registration(name=name, cluster=name, addr=f"10.0.1.{i}:10911", topics=[name]))
        for key in (K.cluster(name), K.broker(name), K.addrs(name), K.broker_topics(name), K.topic(name),
                    K.queue(name, name)):
            assert r.exists(key), key
    assert atomic_violations(r) == []  # the hardening checker's own Lua copy agrees too


async def test_names_with_awkward_characters_work_in_every_path(client: TestClient, consistent: None) -> None:
    name = "a/b:c d"
    await register(client, registration(name=name, topics=[name]))
    wiped = await (await client.post(f"/v1/brokers/{quote(name, safe='')}/wipe-write-perm")).json()
    assert wiped == {"wipeTopicCount": 1}
    assert (await client.delete(f"/v1/topics/{quote(name, safe='')}")).status == 200
    assert await route(client, name) is None


@pytest.mark.parametrize("key", ["10.0.0.1", "a:b", "a b", "a/b", "x}:y"])
async def test_kv_key_may_be_any_string_url_encoded(client: TestClient, r: redis.Redis, key: str) -> None:
    path = f"/v1/kv/PROJECT_CONFIG/{quote(key, safe='')}"
    assert (await client.put(path, json={"value": "project-a"})).status == 200
    assert await (await client.get(path)).json() == {"value": "project-a"}
    assert r.hget(K.kv("PROJECT_CONFIG"), key) == "project-a"
    table = await (await client.get("/v1/kv/PROJECT_CONFIG")).json()
    assert table == {"table": {key: "project-a"}}
    assert (await client.delete(path)).status == 200
    assert (await client.get(path)).status == 404


async def test_kv_namespace_may_be_any_string(client: TestClient) -> None:
    path = f"/v1/kv/{quote('ns:{1}', safe='')}/k"
    assert (await client.put(path, json={"value": "v"})).status == 200
    assert await (await client.get(path)).json() == {"value": "v"}
