"""RocketMQ's ACL on the remoting port: with authentication on, requests must carry a
valid signature from a key pair of the tokens file, with a role that allows them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from service.remoting import acl, codes
from service.remoting.codec import Command
from tests.builders import registration
from tests.remoting.client import RemotingClient, request, signed
from tests.remoting.conftest import Worker
from tests.remoting.frames import identity, register, route
from tests.tables import snapshot
from tests.waits import BOUND_S, until

KEYS = "broker bk broker-secret\nadmin ak admin-secret\nbroker bearer-token-for-http\n"
BROKER_KEY, ADMIN_KEY = ("bk", "broker-secret"), ("ak", "admin-secret")
REFUSED = "org.apache.rocketmq.acl.common.AclException: "  # e.toString() of RocketMQ's AclException


# ---------------------------------------------------------------------- the signature
def test_rocketmq_own_signature_vector() -> None:
    # RocketMQ's AclSignerTest.calSignatureTest: calSignature("RocketMQ", "12345678")
    assert acl.signature("12345678", {}, b"RocketMQ") == "IUc8rrO/0gDch8CjObLQsW2rsiA="
    assert acl.signature("12345678", {"topic": "RocketMQ", "Signature": "any"}, b"") == "IUc8rrO/0gDch8CjObLQsW2rsiA="


def test_the_signature_is_hmac_sha1_of_the_sorted_field_values_then_the_body() -> None:
    fields = {"topic": "TopicTest", "AccessKey": "rocketmq2", "Signature": "ignored", "OnsChannel": "ALIYUN",
              "SecurityToken": "tok"}
    # AccessKey < OnsChannel < SecurityToken < topic (upper case sorts first); Signature left out
    content = b"rocketmq2" + b"ALIYUN" + b"tok" + b"TopicTest" + b"{body}"
    want = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert acl.signature("12345678", fields, b"{body}") == want


def test_the_signature_takes_utf8_values_in_java_string_order() -> None:
    # values as UTF-8; names in UTF-16 code unit order (Java's TreeMap), not code point order
    fields = {"\uffff": "b", "\U00010000": "a", "k": "\u00e9"}
    content = "\u00e9ab".encode("utf-8")
    want = base64.b64encode(hmac.new(b"s", content, hashlib.sha1).digest()).decode()
    assert acl.signature("s", fields, b"") == want


# ---------------------------------------------------------------------- on the port
@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(KEYS)
    return path


@pytest.fixture
async def secured(make_worker: Any, tokens: Path) -> Any:
    async def make(reads: str = "open", tokens_file: Path = tokens) -> RemotingClient:
        worker: Worker = await make_worker(auth_tokens_file=str(tokens_file), auth_reads=reads)
        return await RemotingClient.connect(worker.port)

    return make


@pytest.mark.parametrize("key", [BROKER_KEY, ADMIN_KEY], ids=["broker", "admin"])
async def test_a_broker_or_admin_key_pair_does_a_brokers_requests(secured: Any, r: redis.Redis,
                                                                  key: tuple[str, str]) -> None:
    rmq = await secured()
    reg = registration(version=7)
    assert (await rmq.call(signed(register(reg), *key))).code == codes.SUCCESS
    assert r.exists("{rmq}:broker:broker-a")
    version = orjson.dumps({"counter": 7, "timestamp": 1700000000000})
    answer = await rmq.call(signed(request(codes.QUERY_DATA_VERSION, identity(reg), version), *key))
    assert answer.code == codes.SUCCESS and answer.ext_fields == {"changed": "false"}
    assert (await rmq.call(signed(request(codes.BROKER_HEARTBEAT, identity(reg)), *key))).code == codes.SUCCESS
    assert (await rmq.call(signed(request(codes.UNREGISTER_BROKER, identity(reg)), *key))).code == codes.SUCCESS
    assert not r.exists("{rmq}:broker:broker-a")


def tampered_field(cmd: Command) -> Command:
    cmd.ext_fields["brokerName"] = "broker-b"
    return cmd


def tampered_body(cmd: Command) -> Command:
    cmd.body = cmd.body.replace(b"TopicTest", b"TopicTesu")
    return cmd


def no_access_key(cmd: Command) -> Command:
    del cmd.ext_fields[acl.ACCESS_KEY]
    return cmd


def no_signature(cmd: Command) -> Command:
    del cmd.ext_fields[acl.SIGNATURE]
    return cmd


@pytest.mark.parametrize("key, change, remark", [
    (None, None, "No accessKey is configured"),
    (("bk", "wrong-secret"), None, "Check signature failed for accessKey=bk"),
    (("nobody", "x"), None, "No acl config for nobody"),
    (BROKER_KEY, no_access_key, "No accessKey is configured"),
    (BROKER_KEY, no_signature, "Check signature failed for accessKey=bk"),
    (BROKER_KEY, tampered_field, "Check signature failed for accessKey=bk"),
    (BROKER_KEY, tampered_body, "Check signature failed for accessKey=bk"),
    (("bearer-token-for-http", "x"), None, "No acl config for bearer-token-for-http"),  # tokens are no keys
], ids=["unsigned", "wrong-secret", "unknown-key", "no-access-key", "no-signature", "field-changed",
        "body-changed", "bearer-token"])
async def test_an_unsigned_or_badly_signed_request_is_refused_and_changes_nothing(
        secured: Any, r: redis.Redis, key: tuple[str, str] | None, change: Any, remark: str) -> None:
    rmq = await secured()
    cmd = register(registration())
    cmd = signed(cmd, *key) if key else cmd
    answer = await rmq.call(change(cmd) if change else cmd)
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, REFUSED + remark)
    assert snapshot(r) == {}


async def test_a_badly_signed_request_is_logged_with_the_address_the_access_key_and_the_reason(
        secured: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="service.remoting.refusals")
    rmq = await secured()
    await rmq.call(signed(request(codes.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}),
                          "ak", "wrong-secret"))
    assert [r.getMessage() for r in caplog.records if r.name == "service.remoting.refusals"] == [
        "refused RocketMQ PUT_KV_CONFIG from 127.0.0.1, accessKey ak: Check signature failed for accessKey=ak"]


async def test_an_admin_request_with_a_broker_key_is_logged_as_needing_admin(
        secured: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="service.remoting.refusals")
    rmq = await secured()
    await rmq.call(signed(request(codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}), *BROKER_KEY))
    assert [r.getMessage() for r in caplog.records if r.name == "service.remoting.refusals"] == [
        "refused RocketMQ WIPE_WRITE_PERM_OF_BROKER from 127.0.0.1, broker broker-a, accessKey bk: "
        f"Need admin permission for request code={codes.WIPE_WRITE_PERM_OF_BROKER}, but accessKey=bk is not"]


async def test_a_refusal_line_shows_a_forged_access_key_on_one_line(secured: Any,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="service.remoting.refusals")
    rmq = await secured()
    await rmq.call(signed(register(registration()), "x\nWARNING forged", "s"))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "service.remoting.refusals"]
    assert "\n" not in line and line.endswith("accessKey x?WARNING forged: No acl config for x?WARNING forged")


ADMIN_REQUESTS = [
    (codes.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}),
    (codes.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}),
    (codes.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"}),
    (codes.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
    (codes.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
    (codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest"}),
    (codes.GET_NAMESRV_CONFIG, {}),
]


async def test_a_broker_key_is_refused_what_needs_admin_and_nothing_changes(secured: Any, r: redis.Redis) -> None:
    rmq = await secured()
    assert (await rmq.call(signed(register(registration()), *BROKER_KEY))).code == codes.SUCCESS
    assert (await rmq.call(signed(request(codes.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}),
                                  *ADMIN_KEY))).code == codes.SUCCESS
    before = snapshot(r)
    for code, ext in ADMIN_REQUESTS:
        answer = await rmq.call(signed(request(code, ext), *BROKER_KEY))
        assert (answer.code, answer.remark) == (
            codes.SYSTEM_ERROR, f"{REFUSED}Need admin permission for request code={code}, but accessKey=bk is not")
    assert snapshot(r) == before
    for code, ext in ADMIN_REQUESTS:  # the admin key may
        assert (await rmq.call(signed(request(code, ext), *ADMIN_KEY))).code == codes.SUCCESS, code
    assert not r.exists("{rmq}:queue:TopicTest:broker-a")


async def test_a_refused_oneway_request_is_dropped_silently(secured: Any, r: redis.Redis) -> None:
    rmq = await secured()
    reg = registration()
    assert (await rmq.call(signed(register(reg), *BROKER_KEY))).code == codes.SUCCESS
    before = snapshot(r)
    await rmq.send(request(codes.UNREGISTER_BROKER, identity(reg), oneway=True))
    await rmq.send(signed(request(codes.UNREGISTER_BROKER, identity(reg), oneway=True), "bk", "wrong-secret"))
    # no answer to either: the next answer read is this call's (RemotingClient.call checks the opaque)
    assert (await rmq.call(signed(route("TopicTest"), *BROKER_KEY))).code == codes.SUCCESS
    assert snapshot(r) == before


async def test_reads_are_open_or_signed_as_rmq_auth_reads_says(secured: Any) -> None:
    writer = await secured()
    assert (await writer.call(signed(register(registration()), *BROKER_KEY))).code == codes.SUCCESS
    reads = [route("TopicTest"), request(codes.GET_BROKER_CLUSTER_INFO), request(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
             request(codes.GET_BROKER_MEMBER_GROUP, {"clusterName": "DefaultCluster", "brokerName": "broker-a"})]
    for cmd in reads:  # open reads
        assert (await writer.call(cmd)).code == codes.SUCCESS, cmd.code
    strict = await secured(reads="token")
    for cmd in reads:
        refused = await strict.call(cmd)
        assert (refused.code, refused.remark) == (codes.SYSTEM_ERROR, REFUSED + "No accessKey is configured")
        for key in (BROKER_KEY, ADMIN_KEY):  # any role reads
            cmd.ext_fields.pop(acl.SIGNATURE, None)
            assert (await strict.call(signed(cmd, *key))).code == codes.SUCCESS, (cmd.code, key)
    wrong = await strict.call(signed(route("TopicTest"), "bk", "wrong-secret"))
    assert wrong.remark == REFUSED + "Check signature failed for accessKey=bk"
    # a route answered (and cached) for a signed request is no answer for an unsigned one
    assert (await strict.call(route("TopicTest"))).code == codes.SYSTEM_ERROR


async def test_a_tokens_file_gone_unreadable_refuses_every_signed_request(secured: Any, tokens: Path, tmp_path: Path,
                                                                          r: redis.Redis) -> None:
    # (at start, an unreadable file stops the worker: tests/test_startup_failures.py)
    going = tmp_path / "going"
    going.write_bytes(tokens.read_bytes())
    rmq = await secured(tokens_file=going)
    going.unlink()
    await asyncio.sleep(1.1)  # the file is looked at once a second at most
    answer = await rmq.call(signed(register(registration()), *ADMIN_KEY))
    assert (answer.code, answer.remark) == (codes.SYSTEM_ERROR, REFUSED + "No acl config for ak")
    assert snapshot(r) == {}
    assert (await rmq.call(route("TopicTest"))).code == codes.TOPIC_NOT_EXIST  # open reads still answered


# ---------------------------------------------------------------------- rotating key pairs (docs/deploy.md)
async def answer_code(rmq: RemotingClient, key: tuple[str, str]) -> tuple[int, str]:
    answer = await rmq.call(signed(request(codes.BROKER_HEARTBEAT, identity(registration())), *key))
    return answer.code, answer.remark or ""


async def test_a_key_pair_rotates_without_a_refusal_through_a_new_access_key(secured: Any, tokens: Path) -> None:
    """docs/deploy.md's steps: the new pair beside the old (both accepted), then the old line
    removed (only the old refused), on one worker that never restarts."""
    rmq = await secured()
    assert (await rmq.call(signed(register(registration()), *BROKER_KEY))).code == codes.SUCCESS
    tokens.write_text(KEYS + "broker bk2 broker-secret-2\n")
    assert await until(lambda: _accepted(rmq, ("bk2", "broker-secret-2")), BOUND_S, "the new pair accepted")
    assert (await answer_code(rmq, BROKER_KEY))[0] == codes.SUCCESS  # the old one still is
    tokens.write_text(KEYS.replace("broker bk broker-secret\n", "") + "broker bk2 broker-secret-2\n")
    assert await until(lambda: _refused(rmq, BROKER_KEY), BOUND_S, "the old pair refused")
    assert await answer_code(rmq, BROKER_KEY) == (codes.SYSTEM_ERROR, REFUSED + "No acl config for bk")
    assert (await answer_code(rmq, ("bk2", "broker-secret-2")))[0] == codes.SUCCESS


async def test_a_secret_key_changed_in_place_refuses_the_old_secret_at_once(secured: Any, tokens: Path) -> None:
    """One secret key per access key: a second line with the same access key replaces the
    first (the last wins), so rotating in place leaves no window where both sign."""
    rmq = await secured()
    assert (await rmq.call(signed(register(registration()), *BROKER_KEY))).code == codes.SUCCESS
    tokens.write_text(KEYS + "broker bk broker-secret-2\n")
    assert await until(lambda: _accepted(rmq, ("bk", "broker-secret-2")), BOUND_S, "the new secret accepted")
    refused = (codes.SYSTEM_ERROR, REFUSED + "Check signature failed for accessKey=bk")
    assert await answer_code(rmq, BROKER_KEY) == refused


async def _accepted(rmq: RemotingClient, key: tuple[str, str]) -> bool:
    return (await answer_code(rmq, key))[0] == codes.SUCCESS


async def _refused(rmq: RemotingClient, key: tuple[str, str]) -> bool:
    return (await answer_code(rmq, key))[0] == codes.SYSTEM_ERROR
