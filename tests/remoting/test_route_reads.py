"""Cached route reads answered as their bytes arrive (service/remoting/route_reads.py), and
every other frame still taking the stream's path."""

from __future__ import annotations

import asyncio

import pytest

from service.remoting import codec, codes
from service.worker import REMOTING
from tests.builders import registration
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import register, route

TOPICS = [f"T{i}" for i in range(10)]


async def cached(rmq: RemotingClient) -> dict[str, bytes]:
    """Registers TOPICS and reads each once (now cached); their route bodies."""
    assert (await rmq.call(register(registration(topics=TOPICS)))).code == codes.SUCCESS
    return {t: (await rmq.call(route(t))).body for t in TOPICS}


async def answers(rmq: RemotingClient, n: int) -> dict[int, codec.Command]:
    got = {}
    for _ in range(n):
        a = await rmq.read()
        got[a.opaque] = a
    return got


async def test_cached_reads_sent_in_one_write_are_each_answered_with_their_route(rmq: RemotingClient) -> None:
    bodies = await cached(rmq)
    sent = [route(TOPICS[i % 10], serialize=codec.ROCKETMQ if i % 3 == 0 else codec.JSON) for i in range(100)]
    await rmq.send_raw(b"".join(codec.encode(c) for c in sent))
    got = await answers(rmq, len(sent))
    for cmd in sent:
        a = got[cmd.opaque]
        assert (a.code, a.is_response, a.serialize_type) == (codes.SUCCESS, True, cmd.serialize_type)
        assert a.body == bodies[cmd.ext_fields["topic"]]


async def test_a_frame_split_between_writes_is_answered_once_whole(rmq: RemotingClient) -> None:
    bodies = await cached(rmq)
    first, second = route("T1"), route("T2")
    data = codec.encode(first) + codec.encode(second)
    cut = len(codec.encode(first)) + 3  # inside the second frame's length field
    for part in (data[:cut], data[cut:cut + 10], data[cut + 10:]):
        await rmq.send_raw(part)
        await asyncio.sleep(0.05)
    got = await answers(rmq, 2)
    assert got[first.opaque].body == bodies["T1"] and got[second.opaque].body == bodies["T2"]


async def test_frames_after_one_the_cache_cannot_answer_are_answered_by_the_stream(rmq: RemotingClient) -> None:
    await cached(rmq)
    sent = [route("T1"), route("Missing"), request(4242), route("T2"), request(codes.PUT_KV_CONFIG,
            {"namespace": "NS", "key": "k", "value": "v"}), route("T3")]
    await rmq.send_raw(b"".join(codec.encode(c) for c in sent))
    got = await answers(rmq, len(sent))
    assert [got[c.opaque].code for c in sent] == [codes.SUCCESS, codes.TOPIC_NOT_EXIST, codes.REQUEST_CODE_NOT_SUPPORTED,
                                                  codes.SUCCESS, codes.SUCCESS, codes.SUCCESS]


async def test_a_malformed_frame_after_cached_reads_closes_the_connection_once_they_are_answered(
        worker: Worker, rmq: RemotingClient) -> None:
    await cached(rmq)
    sent = [route("T1"), route("T2")]
    await rmq.send_raw(b"".join(codec.encode(c) for c in sent) + b"\x00\x00\x00\x08\x00\x00\x00\x04{{{{")
    assert set(await answers(rmq, 2)) == {c.opaque for c in sent}
    assert await rmq.closed()
    assert worker.app[REMOTING].closed["bad_frame"] == 1


async def test_oneway_route_reads_get_no_answer(rmq: RemotingClient) -> None:
    await cached(rmq)
    quiet, asked = route("T1", oneway=True), route("T2")
    await rmq.send_raw(codec.encode(quiet) + codec.encode(asked))
    assert (await rmq.read()).opaque == asked.opaque


@pytest.mark.slow
async def test_reads_answered_on_arrival_are_counted_and_keep_the_connection_from_idling(
        make_worker, settings) -> None:  # type: ignore[no-untyped-def]
    worker = await make_worker(remoting_idle_ms=1500)
    rmq = await RemotingClient.connect(worker.port)
    try:
        await cached(rmq)
        server = worker.app[REMOTING]
        before = server.counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.SUCCESS)]
        for _ in range(12):  # 3 s of reads, twice the idle limit
            await rmq.send_raw(codec.encode(route("T1")) * 1)
            await rmq.read()
            await asyncio.sleep(0.25)
        assert server.counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.SUCCESS)] - before == 12
        assert (await rmq.call(route("T2"))).code == codes.SUCCESS
    finally:
        await rmq.close()


class RequestDecodes:
    """Counts the request frames the worker decodes (the client decodes its answers too)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.calls, self.real = 0, codec.decode_payload
        mp.setattr(codec, "decode_payload", self)

    def __call__(self, payload: bytes) -> codec.Command:
        cmd = self.real(payload)
        self.calls += not cmd.is_response
        return cmd


async def test_a_cached_topic_not_exist_is_answered_on_arrival(worker: Worker, rmq: RemotingClient) -> None:
    first = await rmq.call(route("Missing"))  # read from Redis, cached as TOPIC_NOT_EXIST
    with pytest.MonkeyPatch.context() as mp:
        decodes = RequestDecodes(mp)
        stream = worker.app[REMOTING]
        dispatched = sum(n for (code, _), n in stream.counts.items() if code == codes.GET_ROUTEINFO_BY_TOPIC)
        again = await rmq.call(route("Missing"))
    assert (again.code, again.remark, again.body) == (first.code, first.remark, first.body)
    assert again.code == codes.TOPIC_NOT_EXIST and decodes.calls == 1  # decoded on arrival, answered there
    assert sum(n for (code, _), n in stream.counts.items() if code == codes.GET_ROUTEINFO_BY_TOPIC) == dispatched + 1


@pytest.mark.parametrize("frame", [route("Uncached"), request(codes.GET_BROKER_CLUSTER_INFO)])
async def test_a_frame_the_cache_does_not_answer_is_decoded_once(worker: Worker, rmq: RemotingClient,
                                                                 frame: codec.Command) -> None:
    await rmq.call(request(codes.GET_BROKER_CLUSTER_INFO))  # the connection's first frame is past
    with pytest.MonkeyPatch.context() as mp:
        decodes = RequestDecodes(mp)
        answer = await rmq.call(frame)
    assert answer.is_response and decodes.calls == 1
