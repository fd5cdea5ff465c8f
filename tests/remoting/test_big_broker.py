"""A master with 10,000 topics registers over RocketMQ's protocol with a real worker
process: as a 4.9.8 broker sends it (plain fastjson JSON of RegisterBrokerBody) and as a
5.x broker with compressedRegister sends it (the zlib form). Its first registration (staged
in slices: a new group), an unchanged one (the fast path) and a changed one (one topic
created, new dataVersion: sent as a difference) leave the route answers the broker's
topic configs say. Correctness only: the timings are bench/tcp_registration.py's."""

from __future__ import annotations

import random
import urllib.request
from typing import Any, AsyncIterator, Iterator

import orjson
import pytest

from service.remoting import codec, codes
from tests.processes import console_script, start, wait_http
from tests.redis_server import free_port
from tests.remoting.client import RemotingClient, request
from tests.remoting.frames import register, route

V4_9_8 = 409  # MQVersion.Version.V4_9_8.ordinal()
N = 10_000


def broker_topics(n: int) -> dict[str, dict[str, Any]]:
    """A broker's TopicConfig table as 4.9.8 serializes it: its own system topics, retry and
    DLQ topics of consumer groups, business topics with various queue counts and perms."""
    names = ["TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "RMQ_SYS_TRACE_TOPIC",
             "DefaultCluster", "broker-big", "DefaultCluster_REPLY_TOPIC"]
    names += [f"%RETRY%group-{i}" for i in range(500)] + [f"%DLQ%group-{i}" for i in range(100)]
    names += [f"orders.eu-west.{i:05d}" for i in range(n - len(names))]
    rng = random.Random(7)
    table = {}
    for name in names:
        queues = rng.choice((1, 4, 8, 16))
        table[name] = {"order": False, "perm": rng.choice((2, 4, 6)), "readQueueNums": queues,
                       "topicFilterType": "SINGLE_TAG", "topicName": name,
                       "topicSysFlag": 1 if name.startswith("%RETRY%") else 0, "writeQueueNums": queues}
    return table


def registration(table: dict[str, dict[str, Any]], counter: int) -> dict[str, Any]:
    return {"clusterName": "DefaultCluster", "brokerAddr": "10.0.0.7:10911", "brokerName": "broker-big",
            "brokerId": 0, "haServerAddr": "10.0.0.7:10912",
            "topicConfigSerializeWrapper": {"topicConfigTable": table,
                                            "dataVersion": {"counter": counter, "timestamp": 1700000000000 + counter}},
            "filterServerList": []}


@pytest.fixture
def worker(redis_url: str) -> Iterator[tuple[int, int]]:
    """A worker process: its HTTP and RocketMQ ports."""
    http, port = free_port(), free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(http)],
                 env={"REDIS_URL": redis_url, "RMQ_REMOTING_PORT": str(port), "RMQ_REMOTING_HOST": "127.0.0.1"})
    try:
        wait_http(f"http://127.0.0.1:{http}/readyz", limit_s=60)  # a loaded machine starts it slowly
        yield http, port
    finally:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture
async def client(worker: tuple[int, int]) -> AsyncIterator[RemotingClient]:
    c = await RemotingClient.connect(worker[1])
    yield c
    await c.close()


async def routes_match(client: RemotingClient, table: dict[str, dict[str, Any]], topics: list[str]) -> None:
    for topic in topics:
        answer = await client.call(route(topic), timeout=10)
        assert answer.code == codes.SUCCESS, (topic, answer.remark)
        doc = codec.loads(answer.body)
        c = table[topic]
        assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"], q["topicSysFlag"])
                for q in doc["queueDatas"]] == \
            [("broker-big", c["readQueueNums"], c["writeQueueNums"], c["perm"], c["topicSysFlag"])]
        assert [(b["brokerName"], b["brokerAddrs"]) for b in doc["brokerDatas"]] == [("broker-big", {"0": "10.0.0.7:10911"})]


async def all_topics(client: RemotingClient) -> set[str]:
    answer = await client.call(request(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), timeout=10)
    assert answer.code == codes.SUCCESS
    return set(orjson.loads(answer.body)["topicList"])


def sample(table: dict[str, Any]) -> list[str]:
    names = list(table)
    return names[:10] + random.Random(3).sample(names, 200) + names[-10:]


FORMS = {
    "4.9.8 plain JSON": {"version": V4_9_8},
    "5.x compressed": {"version": codes.V5_3_3, "compressed": True},
}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
async def test_ten_thousand_topics_register_first_unchanged_and_changed(client: RemotingClient, worker: tuple[int, int],
                                                                       form: dict[str, Any]) -> None:
    table = broker_topics(N)
    if form.get("compressed"):  # that form carries neither topicSysFlag nor order: RocketMQ drops them
        table = {k: {**v, "topicSysFlag": 0} for k, v in table.items()}
    first = register(registration(table, 1), **form)
    answer = await client.call(first, timeout=60)
    assert answer.code == codes.SUCCESS, answer.remark
    assert await all_topics(client) == set(table)
    await routes_match(client, table, sample(table))

    again = await client.call(register(registration(table, 1), **form), timeout=60)
    assert again.code == codes.SUCCESS, again.remark

    created = {**table, "orders.new": {**table["orders.eu-west.00001"], "topicName": "orders.new", "writeQueueNums": 2,
                                       "readQueueNums": 2}}
    created["TBW102"] = {**created["TBW102"], "perm": 7 if created["TBW102"]["perm"] != 7 else 6}
    changed = await client.call(register(registration(created, 2), **form), timeout=60)
    assert changed.code == codes.SUCCESS, changed.remark
    assert await all_topics(client) == set(created)
    await routes_match(client, created, ["orders.new", "TBW102"] + sample(created))
    # the first was staged (a new group), the same one again took the unchanged path, the
    # changed one went in one script
    with urllib.request.urlopen(f"http://127.0.0.1:{worker[0]}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert 'rmq_full_registrations_total{path="staged"} 1.0' in metrics
    assert 'rmq_full_registrations_total{path="full"} 1.0' in metrics
