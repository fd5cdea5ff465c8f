"""Address whitelists on the RocketMQ port (RMQ_REMOTING_WHITE_ADDRESSES, and ``from=`` on a
key pair): an unsigned broker (a RocketMQ 4.x broker never signs) from a whitelisted host
registers; from any other host it is refused as RocketMQ's plain ACL refuses it. Each
client binds its socket to its own loopback address, 127.0.0.x standing for a host."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from service.remoting import codes
from tests.builders import registration
from tests.processes import console_script, start
from tests.redis_server import free_port
from tests.remoting.client import RemotingClient, request, signed
from service.worker import REMOTING
from tests.remoting.conftest import Worker
from tests.remoting.frames import identity, register, route
from tests.remoting.test_acl import ADMIN_KEY, ADMIN_REQUESTS, BROKER_KEY, KEYS, REFUSED
from tests.tables import snapshot
from tests.waits import until

INSIDE, OUTSIDE = "127.0.0.2", "127.0.0.3"
NO_KEY = REFUSED + "No accessKey is configured"


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(KEYS + "broker limited limited-secret from=127.0.0.{2,4}\n")
    return path


@pytest.fixture
async def whitelisted(make_worker: Any, tokens: Path) -> Any:
    """A worker with authentication on and a whitelist; connect(source) opens a client from that address."""
    async def make(white: str = INSIDE, reads: str = "open", host: str = "127.0.0.1") -> Any:
        worker: Worker = await make_worker(host=host, auth_tokens_file=str(tokens), auth_reads=reads,
                                           remoting_white_addresses=white)

        async def connect(source: str) -> RemotingClient:
            return await RemotingClient.connect(worker.port, host, source)

        return connect

    return make


async def test_an_unsigned_broker_on_a_whitelisted_host_registers_refreshes_and_unregisters(
        whitelisted: Any, r: redis.Redis) -> None:
    broker = await (await whitelisted())(INSIDE)
    reg = registration(version=7)
    assert (await broker.call(register(reg))).code == codes.SUCCESS
    assert r.exists("{rmq}:broker:broker-a")
    version = orjson.dumps({"counter": 7, "timestamp": 1700000000000})
    answer = await broker.call(request(codes.QUERY_DATA_VERSION, identity(reg), version))
    assert (answer.code, answer.ext_fields) == (codes.SUCCESS, {"changed": "false"})
    assert (await broker.call(request(codes.BROKER_HEARTBEAT, identity(reg)))).code == codes.SUCCESS
    assert (await broker.call(request(codes.UNREGISTER_BROKER, identity(reg)))).code == codes.SUCCESS
    assert not r.exists("{rmq}:broker:broker-a")


async def test_an_unsigned_broker_on_another_host_is_refused_as_rocketmq_refuses_and_nothing_changes(
        whitelisted: Any, r: redis.Redis) -> None:
    broker = await (await whitelisted())(OUTSIDE)
    for cmd in (register(registration()), request(codes.BROKER_HEARTBEAT, identity(registration())),
                request(codes.UNREGISTER_BROKER, identity(registration()))):
        answer = await broker.call(cmd)
        assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, NO_KEY), cmd.code
    assert snapshot(r) == {}


async def test_a_signed_broker_on_another_host_still_registers(whitelisted: Any) -> None:
    broker = await (await whitelisted())(OUTSIDE)
    assert (await broker.call(signed(register(registration()), *BROKER_KEY))).code == codes.SUCCESS


async def test_admin_requests_from_a_whitelisted_host_still_need_a_signed_admin_key(
        whitelisted: Any, r: redis.Redis) -> None:
    connect = await whitelisted()
    broker = await connect(INSIDE)
    assert (await broker.call(register(registration()))).code == codes.SUCCESS
    before = snapshot(r)
    for code, ext in ADMIN_REQUESTS:
        answer = await broker.call(request(code, ext))
        assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, NO_KEY), code
        answer = await broker.call(signed(request(code, ext), *BROKER_KEY))
        assert answer.remark == f"{REFUSED}Need admin permission for request code={code}, but accessKey=bk is not"
    assert snapshot(r) == before
    assert (await broker.call(signed(request(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
                                     *ADMIN_KEY))).code == codes.SUCCESS


async def test_with_signed_reads_a_whitelisted_host_reads_unsigned_and_another_host_does_not(
        whitelisted: Any) -> None:
    connect = await whitelisted(reads="token")
    inside, outside = await connect(INSIDE), await connect(OUTSIDE)
    assert (await inside.call(register(registration()))).code == codes.SUCCESS
    for client, want in ((inside, (codes.SUCCESS, None)), (outside, (codes.SYSTEM_ERROR, NO_KEY))):
        for cmd in (route("TopicTest"), request(codes.GET_BROKER_CLUSTER_INFO)):
            answer = await client.call(cmd)
            assert (answer.code, answer.remark) == want, (client, cmd.code)


# pattern, a host it lets in, a host it keeps out (None: every loopback host is in)
FORMS = [
    ("127.0.0.2", "127.0.0.2", "127.0.0.3"),
    ("127.0.0.5,127.0.0.2", "127.0.0.2", "127.0.0.3"),
    ("127.0.0.{2,5}", "127.0.0.5", "127.0.0.3"),
    ("127.0.1.*", "127.0.1.77", "127.0.0.77"),
    ("127.1.*", "127.1.200.3", "127.0.0.3"),
    ("127.0.0.10-20", "127.0.0.15", "127.0.0.21"),
    ("127.0.1-2.10-20", "127.0.2.10", "127.0.2.9"),
    ("*", "127.0.0.9", None),
    ("*.*.*.*", "127.0.0.9", None),
    ("127.0.0.3 127.0.0.2", "127.0.0.2", "127.0.0.4"),  # two patterns
    ("127.0.0.2/32", "127.0.0.2", "127.0.0.3"),  # CIDR prefixes, beside RocketMQ's forms
    ("127.0.1.0/24", "127.0.1.77", "127.0.0.77"),
    ("127.0.0.0/30", "127.0.0.2", "127.0.0.4"),
]


@pytest.mark.parametrize("white, inside, outside", FORMS, ids=[f[0] for f in FORMS])
async def test_each_pattern_form_lets_in_exactly_its_hosts(whitelisted: Any, r: redis.Redis, white: str,
                                                           inside: str, outside: str | None) -> None:
    connect = await whitelisted(white)
    if outside is not None:
        refused = await (await connect(outside)).call(register(registration()))
        assert (refused.code, refused.remark) == (codes.SYSTEM_ERROR, NO_KEY)
        assert snapshot(r) == {}
    assert (await (await connect(inside)).call(register(registration()))).code == codes.SUCCESS


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")


@needs_ipv6
@pytest.mark.parametrize("white, allowed", [
    ("::1", True), ("0:0:0:0:0:0:0:1", True), ("::0-f", True), ("::{1,2}", True), ("::1,::2", True),
    ("*:*:*:*:*:*:*:*", True), ("::2", False), ("::2-f", False), ("127.0.0.1", False),
    ("::1/128", True), ("::/127", True), ("::2/127", False), ("fd00::/8", False), ("127.0.0.0/8", False),
], ids=lambda v: str(v))
async def test_ipv6_pattern_forms_on_an_ipv6_connection(whitelisted: Any, white: str, allowed: bool) -> None:
    connect = await whitelisted(white, host="::1")
    answer = await (await connect("::1")).call(register(registration()))
    assert (answer.code, answer.remark) == ((codes.SUCCESS, None) if allowed else (codes.SYSTEM_ERROR, NO_KEY))


async def test_a_key_limited_to_addresses_is_accepted_from_them_only(whitelisted: Any, r: redis.Redis) -> None:
    connect = await whitelisted("127.0.0.9")
    limited = ("limited", "limited-secret")
    refused = await (await connect(OUTSIDE)).call(signed(register(registration()), *limited))
    assert (refused.code, refused.remark) == (
        codes.SYSTEM_ERROR,
        f"{REFUSED}Check white remote address failed for accessKey=limited: {OUTSIDE} is not allowed")
    assert snapshot(r) == {}
    assert (await (await connect("127.0.0.4")).call(signed(register(registration()), *limited))).code == codes.SUCCESS
    # from its address the key's signature is still checked (in RocketMQ a match skips it)
    forged = await (await connect("127.0.0.4")).call(signed(register(registration()), "limited", "wrong"))
    assert forged.remark == f"{REFUSED}Check signature failed for accessKey=limited"


@pytest.mark.parametrize("white, line", [
    ("10.0.0.* 10.0.0.1-300",
     "RMQ_REMOTING_WHITE_ADDRESSES='10.0.0.* 10.0.0.1-300': bad address pattern '10.0.0.1-300': "
     "'1-300' is not a range within 0-255"),
    ("127.0.0.1/32 10.0.0.0/40",
     "RMQ_REMOTING_WHITE_ADDRESSES='127.0.0.1/32 10.0.0.0/40': bad address pattern '10.0.0.0/40': "
     "not a CIDR prefix (address/length)"),
], ids=["rocketmq-pattern", "cidr"])
def test_a_worker_given_a_bad_pattern_exits_at_once_with_one_line(tmp_path: Path, white: str, line: str) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(KEYS)
    proc = start([console_script("rmq-registry"), "serve", "--port", str(free_port())],
                 {"RMQ_AUTH_TOKENS_FILE": str(tokens), "RMQ_REMOTING_WHITE_ADDRESSES": white})
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 2
    (only,) = out.decode().strip().splitlines()
    assert only.endswith(f"cannot start: {line}")


# ---------------------------------------------------------------------- refusals in the log
REFUSAL_LOG = "service.remoting.refusals"


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == REFUSAL_LOG]


async def test_an_unsigned_broker_refused_off_the_whitelist_is_logged_with_its_address_broker_and_reason(
        whitelisted: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=REFUSAL_LOG)
    broker = await (await whitelisted())(OUTSIDE)
    await broker.call(register(registration(addr="10.0.0.1:10911", name="broker-a")))
    assert refusal_lines(caplog) == [
        f"refused RocketMQ REGISTER_BROKER from {OUTSIDE}, broker broker-a at 10.0.0.1:10911, unsigned: "
        f"No accessKey is configured ({OUTSIDE} matches no RMQ_REMOTING_WHITE_ADDRESSES pattern)"]


async def test_an_unsigned_admin_request_from_a_whitelisted_host_is_logged_as_an_admin_refusal(
        whitelisted: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=REFUSAL_LOG)
    host = await (await whitelisted())(INSIDE)
    await host.call(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest"}))
    assert refusal_lines(caplog) == [
        f"refused RocketMQ DELETE_TOPIC_IN_NAMESRV from {INSIDE}, unsigned: No accessKey is configured "
        "(an admin request: RMQ_REMOTING_WHITE_ADDRESSES admits broker requests and reads only)"]


async def test_a_key_used_off_its_addresses_is_logged_with_the_key_and_no_secret(
        whitelisted: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=REFUSAL_LOG)
    client = await (await whitelisted("127.0.0.9"))(OUTSIDE)
    await client.call(signed(register(registration()), "limited", "limited-secret"))
    assert refusal_lines(caplog) == [
        f"refused RocketMQ REGISTER_BROKER from {OUTSIDE}, broker broker-a at 10.0.0.1:10911, accessKey limited: "
        f"Check white remote address failed for accessKey=limited: {OUTSIDE} is not allowed"]
    assert "limited-secret" not in caplog.text


async def test_a_refusing_address_gets_one_line_per_window_then_the_count_of_the_others(
        make_worker: Any, tokens: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=REFUSAL_LOG)
    worker: Worker = await make_worker(auth_tokens_file=str(tokens), remoting_white_addresses=INSIDE)
    window = 0.5
    worker.app[REMOTING].ctx.refusals.every = window  # the worker's is 60 s
    outside = await RemotingClient.connect(worker.port, "127.0.0.1", OUTSIDE)
    other = await RemotingClient.connect(worker.port, "127.0.0.1", "127.0.0.4")
    for _ in range(38):
        assert (await outside.call(register(registration()))).code == codes.SYSTEM_ERROR
    assert (await other.call(register(registration()))).code == codes.SYSTEM_ERROR
    assert len(refusal_lines(caplog)) == 2  # one per address so far
    await until(lambda: len(refusal_lines(caplog)) >= 3, 10, "the summary line")
    first, second, summary = refusal_lines(caplog)
    assert first.startswith(f"refused RocketMQ REGISTER_BROKER from {OUTSIDE},")
    assert second.startswith("refused RocketMQ REGISTER_BROKER from 127.0.0.4,")
    assert summary.startswith(f"... and 37 more refusals from {OUTSIDE} in the last {window:g} s, the last: "
                              f"refused RocketMQ REGISTER_BROKER from {OUTSIDE},")
