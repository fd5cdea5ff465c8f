"""Hostile input on the RocketMQ port of a real worker, with a TCP and an HTTP reader
beside each attack: neither waits more than 1 s, the worker's memory grows by at most
200 MB, and the attacker gets a clean answer or a clean close (docs/remoting.md "Limits")."""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib

import orjson
import pytest

from service.remoting import codec, codes
from tests.builders import registration, topic_config
from tests.hostile.canary import tcp_read_route
from tests.hostile.conftest import Target, answer_or_close, closed_within, dribble, frame
from tests.remoting.client import request
from tests.remoting.frames import compress_register_body, register
from tests.waits import until_sync


def header(code: int | str = codes.REGISTER_BROKER, opaque: int | str = 1, ext: dict[str, str] | None = None) -> bytes:
    return orjson.dumps({"code": code, "extFields": ext or {}, "flag": 0, "language": "JAVA",
                         "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": 479})


def broker_fields(compressed: bool) -> dict[str, str]:
    return {"brokerName": "b", "brokerAddr": "127.0.0.1:20911", "clusterName": "c", "haServerAddr": "",
            "brokerId": "0", "compressed": "true" if compressed else "false", "bodyCrc32": "0"}


def send_and_answer(target: Target, data: bytes, timeout: float = 30) -> codec.Command | None:
    with target.connect(timeout) as sock:
        sock.sendall(data)
        return answer_or_close(sock, timeout)


# ---------------------------------------------------------------------- 1. zlib bomb
def _one_huge_part() -> bytes:
    n = 256 * 1024 * 1024
    return struct.pack(">i", n - 4) + b"\0" * n  # ~254 KiB compressed


def _many_long_topic_lines() -> bytes:
    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    out = part(b'{"counter":1,"timestamp":1}') + struct.pack(">i", 300)
    pad = b" " * (1 << 20)
    return out + b"".join(part(b"T%d 1 1 6 SINGLE_TAG" % i + pad) for i in range(300))  # 300 MiB inflated


@pytest.mark.parametrize("inflated", [_one_huge_part, _many_long_topic_lines], ids=["one-part", "many-parts"])
def test_a_zlib_bomb_is_refused_without_inflating_it(target: Target, inflated) -> None:
    comp = zlib.compressobj(9)
    bomb = comp.compress(inflated()) + comp.flush()
    with target.watch() as w:
        answer = send_and_answer(target, frame(header(ext=broker_fields(True)), bomb))
    assert answer is not None and answer.code == codes.SYSTEM_ERROR
    assert (answer.remark or "").startswith("Failed to decode RegisterBrokerBody: compressed RegisterBrokerBody")
    w.assert_unharmed()


# ---------------------------------------------------------------------- 2. the JSON fallback
def test_a_huge_header_is_refused_before_it_is_parsed(target: Target) -> None:
    junk = b"{" + b"," * (16 * 1024 * 1024 - 64)
    with target.watch() as w:
        answer = send_and_answer(target, frame(junk))
    assert answer is None  # the connection is closed, nothing answered
    w.assert_unharmed()
    assert "exceeds the 262144-byte limit" in target.log()


def test_a_huge_body_in_no_json_dialect_is_refused_without_holding_the_loop(target: Target) -> None:
    junk = b"{" + b"," * (16 * 1024 * 1024 - 1024)
    with target.watch() as w:
        answer = send_and_answer(target, frame(header(ext=broker_fields(False)), junk))
    assert answer is not None and answer.code == codes.SYSTEM_ERROR
    assert "RegisterBrokerBody body is not JSON" in (answer.remark or "")
    w.assert_unharmed()


# ---------------------------------------------------------------------- 3. limits before work
def test_too_many_topics_are_refused_before_they_are_read(target: Target) -> None:
    doc = {"topicConfigSerializeWrapper": {"dataVersion": {"timestamp": 1, "counter": 1},
                                           "topicConfigTable": {f"T{i}": topic_config(f"T{i}")
                                                                for i in range(1_000_000)}},
           "filterServerList": []}
    body = compress_register_body(doc, 479)
    with target.watch() as w:
        answer = send_and_answer(target, frame(header(ext=broker_fields(True)), body))
    assert answer is not None and answer.code == codes.SYSTEM_ERROR
    assert "at most 100000 topics per registration" in (answer.remark or "")
    w.assert_unharmed()


# ---------------------------------------------------------------------- 4. answers that tell the truth
def test_a_registration_answered_nothing_changed_changed_nothing(make_target) -> None:
    # registering 100,000 topics takes Redis longer than the default 1 s timeout of a call
    # (on two cores): the answer comes while the script may still run
    # the broker's connection stays open while the route is read: its close would unregister
    # the broker (as a NameServer does on a channel's close), and so would idling past the limit
    target: Target = make_target(RMQ_REMOTING_IDLE_MS=120_000)
    reg = registration(addr="127.0.0.1:30911", name="big", topics=[f"Big{i}" for i in range(100_000)])
    with target.connect(60) as broker:
        broker.sendall(codec.encode(register(reg)))
        answer = answer_or_close(broker, 60)
        assert answer is not None
        time.sleep(3)  # the script, if it ran, has finished
        with target.connect() as sock:
            served = tcp_read_route(sock, "Big99999") == codes.SUCCESS
    if answer.code == codes.SUCCESS:
        assert served
    else:
        assert "nothing was changed" not in (answer.remark or "") or not served, answer.remark
        assert "sending it again is safe" in (answer.remark or ""), answer.remark


# ---------------------------------------------------------------------- 5. malformed fields
@pytest.mark.parametrize("code", ["--5", "\u00b2", "99999999999"])
def test_a_malformed_code_closes_the_connection_without_a_traceback(target: Target, code: str) -> None:
    answer = send_and_answer(target, frame(header(code=code)))
    assert answer is None
    assert "header field code is" in target.log()
    assert "Traceback" not in target.log()


def test_an_opaque_beyond_javas_int_is_refused_not_left_unanswered(target: Target) -> None:
    answer = send_and_answer(target, frame(header(code=codes.GET_ROUTEINFO_BY_TOPIC, opaque="9" * 30,
                                                  ext={"topic": "Nope"})))
    assert answer is None  # closed at once rather than never answered
    assert "Traceback" not in target.log() and "never retrieved" not in target.log()


# ---------------------------------------------------------------------- 6. what a connection may hold
def test_an_idle_connection_is_closed(target: Target) -> None:
    with target.connect() as sock:
        took = closed_within(sock, 30)  # a generous bound: a loaded machine only makes it later
    assert took is not None and took >= 1.5  # RMQ_REMOTING_IDLE_MS=2000, swept every second


def test_a_slowloris_sender_is_closed(target: Target) -> None:
    data = codec.encode(request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}))
    with target.connect() as sock:
        # a byte every 0.5 s never lets the connection idle (RMQ_REMOTING_IDLE_MS=2000), and the
        # whole frame would take over a minute: a close well before that is the frame deadline
        # (RMQ_REMOTING_FRAME_TIMEOUT_MS=3000), however loaded the machine
        started = dribble(sock, data, for_s=30)
        assert closed_within(sock, 10) is not None
    assert len(data) * 0.5 > 60 and time.monotonic() - started < 30


def test_half_sent_frames_cannot_pin_memory(target: Target) -> None:
    size = codec.MAX_FRAME - 4096
    socks: list[socket.socket] = []
    with target.watch() as w:
        for _ in range(16):  # 16 x 16 MiB if each were buffered
            s = target.connect()
            s.setblocking(False)
            s.send(struct.pack(">iI", size - 4, len(header())) + header())
            socks.append(s)

        def fill(s: socket.socket) -> None:
            chunk = b"\0" * (1 << 20)
            s.settimeout(5)
            try:
                for _ in range(15):
                    s.sendall(chunk)
            except OSError:
                pass  # the kernel buffers are full, or the worker closed it

        threads = [threading.Thread(target=fill, args=(s,)) for s in socks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        time.sleep(1)
    closed = sum(closed_within(s, 8) is not None for s in socks)  # RMQ_REMOTING_FRAME_TIMEOUT_MS=3000
    for s in socks:
        s.close()
    w.assert_unharmed()
    assert closed == len(socks)


def test_connections_past_the_cap_are_refused(make_target) -> None:
    target: Target = make_target(RMQ_REMOTING_MAX_CONNECTIONS=20, RMQ_REMOTING_IDLE_MS=60_000)
    socks = [target.connect() for _ in range(30)]
    try:
        # the count and the close are one step in the worker: once all ten are counted, the
        # ten are closed, however long a loaded machine took to accept them
        until_sync(lambda: target.metric("rmq_remoting_connections_refused_total") >= 10, 30,
                   "ten connections refused", poll_s=0.1)
        refused = sum(closed_within(s, 0.5) is not None for s in socks)
        assert refused == 10
        assert target.metric("rmq_remoting_connections_refused_total") == 10
        assert "RMQ_REMOTING_MAX_CONNECTIONS=20" in target.log()
    finally:
        for s in socks:
            s.close()


def test_pipelined_bodies_needing_the_bare_key_fallback_do_not_freeze_the_worker(target: Target) -> None:
    body = b"{" + b"," * (16 * 1024 - 2) + b"}"  # the fallback's worst case, at its size limit
    frames = b"".join(frame(header(opaque=i, ext=broker_fields(False)), body) for i in range(300))
    with target.watch() as w:
        with target.connect(30) as sock:
            sock.sendall(frames)
            answers = read_answers(sock, 300)
    assert [a.code for a in answers] == [codes.SYSTEM_ERROR] * 300
    w.assert_unharmed()


def read_answers(sock: socket.socket, n: int) -> list[codec.Command]:
    buf = bytearray()
    answers: list[codec.Command] = []
    while len(answers) < n:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(answers)} answers"
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + (length := struct.unpack(">i", buf[:4])[0]):
            answers.append(codec.decode_payload(bytes(buf[4:4 + length])))
            del buf[:4 + length]
    return answers
