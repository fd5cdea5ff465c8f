"""A broker's whole life at the first sizes past the limits its scripts meet, through each
front: one QueueData past the removal rule (lua/_groups.lua LEAVE_NOW_MAX: the group is
hidden at once and collected after), one topic past the staging threshold
(Registry.STAGE_MIN), one past a variadic slice (lua/_basics.lua SLICE: 4,000 values a call) and one
past Lua's unpack limit (8,000 values: LUAI_MAXCSTACK). First registration (staged),
unchanged, changed (every topic), a slave, write permission wiped and added, topic deletion,
both members leaving, through HTTP and through RocketMQ's protocol (split in parts of 800 as
a 5.x broker with enableSplitRegistration sends it, and whole as a 4.x broker does); every
read answers what was registered and the tables stay consistent (tests/tables.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Awaitable, Callable, Protocol

import orjson
import pytest
from aiohttp.test_utils import TestClient

from service.http.app_keys import REGISTRY
from service.keys import Keys
from service.models import MAX_FILTER_SERVERS
from service.registry import Registry
from service.remoting import codes
from service.remoting.codec import MAX_FRAME
from service.remoting.server import SMALL_FRAME
from service.store import load_sources
from tests import waits
from tests.lua_source import constant
from tests.builders import identity, registration, topic_config
from tests.remoting import broker5
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import register, route
from tests.remoting.test_split_bodies import registration_round, split, unchanged_count

pytestmark = pytest.mark.usefixtures("consistent")

SLICE = constant("SLICE", "_basics")  # values a variadic call takes at once
UNPACK = 8_000   # Lua's unpack (LUAI_MAXCSTACK): the most values one call may spread
LEAVE_NOW_MAX = constant("LEAVE_NOW_MAX", "_groups")
MAX_BODY_DIGESTS = constant("MAX_BODY_DIGESTS", "_groups")
SIZES = [LEAVE_NOW_MAX + 1, Registry.STAGE_MIN + 1, SLICE + 1, UNPACK + 1]


class Front(Protocol):
    async def register(self, reg: dict[str, Any]) -> None: ...
    async def unregister(self, reg: dict[str, Any]) -> None: ...
    async def write_perm(self, name: str, mode: str) -> int: ...
    async def delete_topic(self, topic: str) -> None: ...
    async def route(self, topic: str) -> dict[str, Any] | None: ...
    async def topics(self) -> list[str]: ...


class Http:
    def __init__(self, http: TestClient) -> None:
        self.http = http

    async def ok(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.http.request(method, path, **kw)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def register(self, reg: dict[str, Any]) -> None:
        await self.ok("POST", "/v1/brokers/register", json=reg)

    async def unregister(self, reg: dict[str, Any]) -> None:
        await self.ok("POST", "/v1/brokers/unregister", json=identity(reg))

    async def write_perm(self, name: str, mode: str) -> int:
        return (await self.ok("POST", f"/v1/brokers/{name}/{mode}-write-perm"))[f"{mode}TopicCount"]

    async def delete_topic(self, topic: str) -> None:
        await self.ok("DELETE", f"/v1/topics/{topic}")

    async def route(self, topic: str) -> dict[str, Any] | None:
        resp = await self.http.get(f"/v1/routes/{topic}")
        if resp.status == 404:
            return None
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def topics(self) -> list[str]:
        return (await self.ok("GET", "/v1/topics"))["topicList"]


class Tcp:
    """RocketMQ's protocol; `parts`: register as a 5.x broker splitting its table in parts
    of 800 topics (else whole, as 4.x does)."""

    def __init__(self, rmq: RemotingClient, parts: bool) -> None:
        self.rmq, self.parts, self.counter = rmq, parts, itertools.count(1)

    async def ok(self, cmd: Any) -> Any:
        answer = await self.rmq.call(cmd, timeout=120)
        assert answer.code == codes.SUCCESS, answer.remark
        return answer

    async def register(self, reg: dict[str, Any]) -> None:
        if not self.parts:
            await self.ok(register(reg))
            return
        table = reg["topicConfigSerializeWrapper"]["topicConfigTable"]
        for topics, mappings in split(table):
            body = broker5.plain_body(topics, mappings, counter=next(self.counter))
            await self.ok(broker5.register(body, addr=reg["brokerAddr"], name=reg["brokerName"],
                                           broker_id=reg["brokerId"], cluster=reg["clusterName"]))

    async def unregister(self, reg: dict[str, Any]) -> None:
        ids = {k: str(v) for k, v in identity(reg).items()}
        await self.ok(request(codes.UNREGISTER_BROKER, ids))

    async def write_perm(self, name: str, mode: str) -> int:
        code = codes.WIPE_WRITE_PERM_OF_BROKER if mode == "wipe" else codes.ADD_WRITE_PERM_OF_BROKER
        return int((await self.ok(request(code, {"brokerName": name}))).ext_fields[f"{mode}TopicCount"])

    async def delete_topic(self, topic: str) -> None:
        await self.ok(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))

    async def route(self, topic: str) -> dict[str, Any] | None:
        answer = await self.rmq.call(route(topic), timeout=60)
        if answer.code == codes.TOPIC_NOT_EXIST:
            return None
        assert answer.code == codes.SUCCESS, answer.remark
        return orjson.loads(answer.body)

    async def topics(self) -> list[str]:
        answer = await self.ok(request(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return orjson.loads(answer.body)["topicList"]


@pytest.fixture(params=["http", "tcp-whole", "tcp-split"])
def front(request: pytest.FixtureRequest, worker: Worker, rmq: RemotingClient) -> Front:
    if request.param == "http":
        return Http(worker.http)
    return Tcp(rmq, parts=request.param == "tcp-split")


def sample(names: list[str]) -> list[str]:
    """The first and last topics and one of each slice boundary's neighbours."""
    picks = {0, len(names) - 1, SLICE - 1, SLICE, min(UNPACK, len(names) - 1)}
    return [names[i] for i in sorted(picks) if i < len(names)]


async def collected(front: Front) -> None:
    """A departed group is hidden from route reads at once; past LEAVE_NOW_MAX its QueueData
    are collected after, in slices, and its topics leave the lists then."""
    async def listed_none() -> bool:
        return await front.topics() == []

    await waits.until(listed_none, waits.BOUND_S, "every topic collected from the list")


@pytest.mark.parametrize("n", SIZES)
async def test_a_broker_lives_and_leaves_whole_one_topic_past_each_script_limit(front: Front, n: int) -> None:
    names = [f"T{i:05d}" for i in range(n)]
    master = registration(topics=names, version=1)
    slave = registration(addr="10.0.0.2:10911", broker_id=1, topics=names, version=1)

    await front.register(master)  # first: staged in slices
    await front.register(master)  # unchanged
    assert await front.topics() == names
    changed = registration(topics={t: topic_config(t, perm=4) for t in names}, version=2)
    await front.register(changed)  # every topic changed
    for topic in sample(names):
        got = await front.route(topic)
        assert got is not None and [q["perm"] for q in got["queueDatas"]] == [4], topic

    await front.register(slave)
    got = await front.route(names[-1])
    assert got is not None and got["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}

    assert await front.write_perm("broker-a", "add") == n
    assert await front.write_perm("broker-a", "wipe") == n
    await front.delete_topic(names[0])
    assert await front.route(names[0]) is None

    await front.unregister(master)
    await front.unregister(slave)
    for topic in sample(names):
        assert await front.route(topic) is None, topic
    await collected(front)


@pytest.mark.parametrize("kind", ["http", "tcp-whole"])
async def test_the_most_filter_servers_a_broker_may_name_are_in_its_route_and_one_more_is_refused(
        kind: str, worker: Worker, rmq: RemotingClient) -> None:
    front = Http(worker.http) if kind == "http" else Tcp(rmq, parts=False)
    servers = [f"10.1.{i // 250}.{i % 250}:7000" for i in range(MAX_FILTER_SERVERS + 1)]
    await front.register(registration(topics=["T"], filters=servers[:MAX_FILTER_SERVERS]))
    got = await front.route("T")
    assert got is not None and got["filterServerTable"] == {"10.0.0.1:10911": servers[:MAX_FILTER_SERVERS]}
    too_many = registration(topics=["T"], filters=servers, version=2)
    if kind == "http":
        resp = await worker.http.post("/v1/brokers/register", json=too_many)
        assert resp.status == 400 and "filterServerList" in await resp.text()
    else:
        answer = await rmq.call(register(too_many))
        assert answer.code != codes.SUCCESS and "filterServerList" in (answer.remark or "")
    got = await front.route("T")  # nothing changed
    assert got is not None and got["filterServerTable"] == {"10.0.0.1:10911": servers[:MAX_FILTER_SERVERS]}


@pytest.mark.parametrize("n", [LEAVE_NOW_MAX + 1, UNPACK + 1])
@pytest.mark.parametrize("cause", ["connection closed", "expired"])
async def test_a_big_group_that_departs_by_close_or_expiry_leaves_nothing_behind(
        make_worker: Callable[..., Awaitable[Worker]], n: int, cause: str) -> None:
    worker = await make_worker(scan_interval_ms=100)
    client = await RemotingClient.connect(worker.port)
    names = [f"T{i:05d}" for i in range(n)]
    timeout = 1_000 if cause == "expired" else None
    answer = await client.call(register(registration(topics=names, timeout_ms=timeout)), timeout=120)
    assert answer.code == codes.SUCCESS, answer.remark
    if cause == "connection closed":
        await client.close()

    async def departed() -> bool:
        listed = (await (await worker.http.get("/v1/departures")).json())["departures"]
        return [d["cause"] for d in listed] == [cause]

    await waits.until(departed, waits.BOUND_S, f"the departure recorded as {cause}")
    http = Http(worker.http)
    for topic in sample(names):
        assert await http.route(topic) is None, topic
    await collected(http)
    if cause == "expired":
        await client.close()


async def test_a_kv_namespace_past_lua_unpacks_limit_is_listed_and_answered_to_registrations_whole(
        worker: Worker, rmq: RemotingClient, r: Any) -> None:
    # seeded through the KV script itself, one call an entry (the reads are what is tested)
    put = r.register_script(load_sources()["kv_put"])
    table = {f"Topic{i:05d}": f"broker-a:{i % 16 + 1}" for i in range(UNPACK + 1)}
    for key, value in table.items():
        put(keys=[Keys().version], args=["ORDER_TOPIC_CONFIG", key, value])
    answer = await rmq.call(request(codes.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}))
    assert answer.code == codes.SUCCESS and orjson.loads(answer.body) == {"table": table}
    resp = await worker.http.get("/v1/kv/ORDER_TOPIC_CONFIG")
    assert resp.status == 200 and await resp.json() == {"table": table}
    # every registration's answer carries the namespace (a broker's order topic configs)
    answer = await rmq.call(register())
    assert answer.code == codes.SUCCESS and orjson.loads(answer.body) == {"table": table}
    resp = await worker.http.post("/v1/brokers/register", json=registration())
    assert resp.status == 200 and (await resp.json())["kvTable"] == table


async def test_frames_one_byte_past_the_frame_buffer_together_are_both_answered(
        make_worker: Callable[..., Awaitable[Worker]]) -> None:
    # the smallest buffer a worker takes holds the largest frame; one more frame over the
    # small-frame size waits for its room (server.py) instead of failing
    worker = await make_worker(remoting_frame_buffer_bytes=MAX_FRAME)
    unknown = 9_999  # any request code: the frame is read whole before it is looked at
    big, small = request(unknown, body=b"x" * (MAX_FRAME - 1024)), request(unknown, body=b"y" * (SMALL_FRAME + 1))
    clients = [await RemotingClient.connect(worker.port) for _ in range(2)]
    answers = await asyncio.gather(clients[0].call(big, timeout=60), clients[1].call(small, timeout=60))
    assert [a.code for a in answers] == [codes.REQUEST_CODE_NOT_SUPPORTED] * 2
    for c in clients:
        await c.close()


async def test_one_registration_past_those_in_flight_waits_for_a_turn_on_either_front(worker: Worker) -> None:
    # each a new group's staged registration: several scripts, its turn held throughout
    n = Registry.REGISTRATIONS_IN_FLIGHT + 1
    bodies = [registration(addr=f"10.0.2.{g}:10911", name=f"broker-{g}", topics=[f"G{g}.T{i}" for i in range(600)])
              for g in range(n)]
    http = Http(worker.http)
    clients = [await RemotingClient.connect(worker.port) for _ in bodies[::2]]  # one call at a time each
    fronts = [http if g % 2 else Tcp(clients[g // 2], parts=False) for g in range(n)]
    await asyncio.gather(*(front.register(body) for front, body in zip(fronts, bodies)))
    assert worker.app[REGISTRY].busy == 0
    assert len(await http.topics()) == n * 600
    for c in clients:
        await c.close()


async def test_a_split_broker_one_part_past_the_digests_kept_takes_the_unchanged_path_for_the_rest(
        worker: Worker, rmq: RemotingClient) -> None:
    # splitRegistrationSize is a broker setting: parts of 2 topics make MAX_BODY_DIGESTS + 1 parts
    # as 103,200 topics in parts of 800 would; a cyclic round past what an LRU keeps would miss
    # every time (a part of 1 topic first would be refused, as RocketMQ 5.3 does)
    names = [f"T{i:03d}" for i in range(2 * (MAX_BODY_DIGESTS + 1))]
    parts = [({n: broker5.topic_config(n) for n in names[i:i + 2]}, {}) for i in range(0, len(names), 2)]
    counter = itertools.count(1)
    for _ in range(2):
        await registration_round(rmq, parts, counter)
    before = await unchanged_count(worker)
    await registration_round(rmq, parts, counter)
    assert await unchanged_count(worker) - before >= MAX_BODY_DIGESTS
    assert await Tcp(rmq, parts=False).topics() == names
