"""Connection behaviour: oneway, pipelining, errors that keep or close the connection."""

from __future__ import annotations

import os
import signal
import struct
import time

import orjson
import pytest
import redis

from service.remoting import codec, codes
from service.worker import REMOTING
from tests.builders import registration
from tests.redis_server import RedisServer
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import identity, refreshed, register, route
from tests.tables import snapshot
from tests.waits import BOUND_S, until


async def test_oneway_heartbeat_gets_no_reply(rmq: RemotingClient, r: redis.Redis) -> None:
    reg = registration()
    await rmq.call(register(reg))
    r.hset("{rmq}:live:10.0.0.1:10911", "lastUpdateTimestamp", "1")
    await rmq.send(request(codes.BROKER_HEARTBEAT, identity(reg), oneway=True))
    # a oneway request with a bad header is not answered either
    await rmq.send(request(codes.BROKER_HEARTBEAT, {}, oneway=True))
    follow = route("TopicTest")
    answer = await rmq.call(follow)  # the next frame on the wire answers the next request, not the oneway ones
    assert answer.opaque == follow.opaque and answer.code == 0
    await refreshed(r, "{rmq}:live:10.0.0.1:10911")  # answers may overtake the oneway request


async def test_oneway_register_is_applied(rmq: RemotingClient) -> None:
    await rmq.send(register(oneway=True))

    async def routed() -> bool:
        return (await rmq.call(route("TopicTest"))).code == codes.SUCCESS

    await until(routed, BOUND_S, "the oneway registration's topic routed")


@pytest.mark.parametrize("serialize", [codec.JSON, codec.ROCKETMQ])
async def test_unknown_code(rmq: RemotingClient, serialize: int) -> None:
    answer = await rmq.call(request(9999, serialize=serialize))
    assert (answer.code, answer.remark) == (codes.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported")
    assert (await rmq.call(route("X"))).code == codes.TOPIC_NOT_EXIST  # connection still serves


async def test_missing_header(rmq: RemotingClient, r: redis.Redis) -> None:
    answer = await rmq.call(request(codes.GET_ROUTEINFO_BY_TOPIC))
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, "the custom field <topic> is null")
    cmd = register()
    del cmd.ext_fields["brokerAddr"]
    answer = await rmq.call(cmd)
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, "the custom field <brokerAddr> is null")
    assert snapshot(r) == {}


async def test_oversized_frame_closes_only_that_connection(worker: Worker, rmq: RemotingClient, r: redis.Redis) -> None:
    other = await RemotingClient.connect(worker.port)
    # announce one byte more than the 16 MiB limit allows; send nothing else
    await rmq.send_raw(struct.pack(">i", codec.MAX_LENGTH + 1) + b"\x00" * 16)
    assert await rmq.closed()
    assert (await other.call(route("TopicTest"))).code == codes.TOPIC_NOT_EXIST
    assert snapshot(r) == {}
    await other.close()


async def test_frame_at_the_limit_is_read(rmq: RemotingClient) -> None:
    # a frame of exactly 16 MiB (length field included) is accepted and answered
    cmd = request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    header = codec.encode_header(cmd)
    body = b"x" * (codec.MAX_LENGTH - 4 - len(header))
    cmd.body = body
    frame = codec.encode(cmd)
    assert len(frame) == codec.MAX_FRAME
    answer = await rmq.call(cmd, timeout=20)
    assert answer.code == codes.TOPIC_NOT_EXIST


@pytest.mark.parametrize("garbage", [
    struct.pack(">iI", 10, 6) + b"{nope}",                       # JSON header that is no JSON
    struct.pack(">iI", 6, (7 << 24) | 2) + b"{}",                # serialize type 7
    struct.pack(">iI", 8, (1 << 24) | 4) + b"\x00\x01\x00\x00",  # ROCKETMQ header cut short
    struct.pack(">i", 2) + b"ab",                                # length below 4
])
async def test_malformed_frame_closes_the_connection(worker: Worker, rmq: RemotingClient, garbage: bytes,
                                                     r: redis.Redis) -> None:
    await rmq.send_raw(garbage)
    assert await rmq.closed()
    other = await RemotingClient.connect(worker.port)
    assert (await other.call(register())).code == 0
    await other.close()


async def test_pipelined_requests_with_interleaved_opaques(rmq: RemotingClient) -> None:
    await rmq.call(register(registration(topics=[f"T{i}" for i in range(20)])))
    sent = []
    for i in range(200):
        kind = i % 4
        if kind == 0:
            cmd = route(f"T{i % 20}", serialize=codec.ROCKETMQ)
        elif kind == 1:
            cmd = route(f"Missing{i}")
        elif kind == 2:
            cmd = request(codes.PUT_KV_CONFIG, {"namespace": "NS", "key": f"k{i}", "value": str(i)})
        else:
            cmd = request(4242, serialize=codec.ROCKETMQ)
        cmd.opaque = 1_000_000 - i * 7  # any ints, not increasing
        sent.append(cmd)
    await rmq.send_raw(b"".join(codec.encode(c) for c in sent))
    answers = {}
    for _ in sent:
        a = await rmq.read()
        answers[a.opaque] = a
    assert len(answers) == len(sent)
    for cmd in sent:
        a = answers[cmd.opaque]
        assert a.is_response and a.serialize_type == cmd.serialize_type
        expected = {codes.GET_ROUTEINFO_BY_TOPIC: 0 if cmd.ext_fields.get("topic", "").startswith("T") else 17,
                    codes.PUT_KV_CONFIG: 0, 4242: 3}[cmd.code]
        assert a.code == expected


async def test_half_closed_connection_still_gets_its_answers(rmq: RemotingClient) -> None:
    cmds = [route(f"T{i}") for i in range(5)]
    await rmq.send_raw(b"".join(codec.encode(c) for c in cmds))
    rmq.writer.write_eof()
    opaques = {(await rmq.read()).opaque for _ in cmds}
    assert opaques == {c.opaque for c in cmds}
    assert await rmq.closed()


async def test_response_frames_are_ignored(rmq: RemotingClient) -> None:
    stray = request(codes.SUCCESS)
    stray.flag = codec.FLAG_RESPONSE
    await rmq.send(stray)
    assert (await rmq.call(route("T"))).code == codes.TOPIC_NOT_EXIST


@pytest.mark.parametrize("kind", ["refused", "silent"])
async def test_store_unavailable(make_worker, kind: str) -> None:
    # a worker that started on a working Redis (it does not start without one), then:
    own = RedisServer()
    own.start()
    worker: Worker = await make_worker(redis_url=own.url, redis_timeout_ms=300)
    rmq = await RemotingClient.connect(worker.port)
    assert own.proc is not None
    pid = own.proc.pid
    if kind == "refused":  # Redis gone: connections refused
        own.stop()
    else:  # Redis accepts and never answers (stopped until the test lets it go on): every call runs into the timeout
        os.kill(pid, signal.SIGSTOP)
    try:
        for cmd in (route("T"), register(), request(codes.GET_KV_CONFIG, {"namespace": "N", "key": "k"})):
            started = time.monotonic()
            answer = await rmq.call(cmd, timeout=30)
            # the 300 ms Redis timeout, with room for a loaded machine: not a hang
            assert time.monotonic() - started < 10
            assert answer.code == codes.SYSTEM_ERROR
            if cmd.code != codes.REGISTER_BROKER:  # a read: nothing to say of a change
                assert answer.remark == "the route store is unavailable; retry"
            elif kind == "silent":
                # the change went out and no answer came: it may have been applied
                assert "may or may not have been applied; sending it again is safe" in answer.remark
            else:
                assert "store is unavailable; nothing was changed" in answer.remark
    finally:
        if kind == "silent":
            os.kill(pid, signal.SIGCONT)
        await rmq.close()
        own.cleanup()


async def test_stopping_the_app_closes_connections(make_worker, r: redis.Redis) -> None:
    worker: Worker = await make_worker()
    rmq = await RemotingClient.connect(worker.port)
    assert (await rmq.call(register())).code == 0
    await worker.http.close()  # runs the app's cleanup: the TCP server stops first
    assert await rmq.closed()
    assert r.exists("{rmq}:live:10.0.0.1:10911")  # closing is not unregistering
    with pytest.raises(OSError):
        await RemotingClient.connect(worker.port)


async def test_requests_are_counted(worker: Worker, rmq: RemotingClient) -> None:
    await rmq.call(route("T"))
    await rmq.call(request(777))
    assert worker.app[REMOTING].counts[(codes.GET_ROUTEINFO_BY_TOPIC, codes.TOPIC_NOT_EXIST)] == 1
    text = await (await worker.http.get("/metrics")).text()
    assert 'rmq_remoting_requests_total{code="GET_ROUTEINFO_BY_TOPIC",response="17",response_name="TOPIC_NOT_EXIST"} 1.0' \
        in text
    assert 'rmq_remoting_requests_total{code="777",response="3",response_name="REQUEST_CODE_NOT_SUPPORTED"} 1.0' in text
    # known before their first request: exported from 0, so increase() sees that first one
    assert 'rmq_remoting_requests_total{code="REGISTER_BROKER",response="1",response_name="SYSTEM_ERROR"} 0.0' in text
    orjson.dumps(text)
