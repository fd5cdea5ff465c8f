"""RocketMQ's ACL on the remoting port: with authentication on, requests must carry a
valid signature from a key pair of the tokens file, with a role that allows them."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest
import redis

from service.remoting import acl, codes
from service.remoting.codec import Command
from tests.builders import registration
from tests.remoting.client import RemotingClient, request
from tests.remoting.conftest import Worker
from tests.remoting.frames import register, route

KEYS = "broker bk broker-secret\nadmin ak admin-secret\nbroker bearer-token-for-http\n"


def signed(cmd: Command, access_key: str, secret_key: str) -> Command:
    cmd.ext_fields[acl.ACCESS_KEY] = access_key
    cmd.ext_fields[acl.SIGNATURE] = acl.signature(secret_key, cmd.ext_fields, cmd.body)
    return cmd


def test_the_signature_is_hmac_sha1_of_the_sorted_field_values_then_the_body() -> None:
    fields = {"topic": "TopicTest", "AccessKey": "rocketmq2", "Signature": "ignored", "OnsChannel": "ALIYUN"}
    content = b"rocketmq2" + b"ALIYUN" + b"TopicTest" + b"{body}"  # AccessKey < OnsChannel < topic
    want = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert acl.signature("12345678", fields, b"{body}") == want


@pytest.fixture
async def secured(make_worker: Any, tmp_path: Path) -> Any:
    path = tmp_path / "tokens"
    path.write_text(KEYS)

    async def make(reads: str = "open") -> RemotingClient:
        worker: Worker = await make_worker(auth_tokens_file=str(path), auth_reads=reads)
        return await RemotingClient.connect(worker.port)

    return make


async def test_a_broker_key_pair_registers_a_broker(secured: Any, r: redis.Redis) -> None:
    rmq = await secured()
    answer = await rmq.call(signed(register(registration()), "bk", "broker-secret"))
    assert answer.code == codes.SUCCESS
    assert r.exists("{rmq}:broker:broker-a")


@pytest.mark.parametrize("sign, remark", [
    (None, "No accessKey is configured"),
    (("bk", "wrong-secret"), "Check signature failed for accessKey=bk"),
    (("nobody", "x"), "No acl config for nobody"),
])
async def test_an_unsigned_or_badly_signed_request_is_refused_and_changes_nothing(
        secured: Any, r: redis.Redis, sign: tuple[str, str] | None, remark: str) -> None:
    rmq = await secured()
    cmd = register(registration())
    answer = await rmq.call(signed(cmd, *sign) if sign else cmd)
    assert answer.code == codes.SYSTEM_ERROR and answer.remark.startswith(remark)
    assert not r.exists("{rmq}:broker:broker-a")


async def test_a_role_that_does_not_allow_the_request_is_refused(secured: Any, r: redis.Redis) -> None:
    rmq = await secured()
    assert (await rmq.call(signed(register(registration()), "bk", "broker-secret"))).code == codes.SUCCESS
    delete = request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest"})
    answer = await rmq.call(signed(delete, "bk", "broker-secret"))
    assert answer.code == codes.SYSTEM_ERROR and answer.remark.startswith("No permission: accessKey=bk (broker)")
    assert r.exists("{rmq}:queue:TopicTest:broker-a")
    allowed = await rmq.call(signed(request(codes.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest"}), "ak", "admin-secret"))
    assert allowed.code == codes.SUCCESS and not r.exists("{rmq}:queue:TopicTest:broker-a")


async def test_reads_are_open_or_signed_as_rmq_auth_reads_says(secured: Any) -> None:
    writer = await secured()
    assert (await writer.call(signed(register(registration()), "bk", "broker-secret"))).code == codes.SUCCESS
    assert (await writer.call(route("TopicTest"))).code == codes.SUCCESS  # open reads
    strict = await secured(reads="token")
    refused = await strict.call(route("TopicTest"))
    assert refused.code == codes.SYSTEM_ERROR and refused.remark.startswith("No accessKey is configured")
    assert (await strict.call(signed(route("TopicTest"), "bk", "broker-secret"))).code == codes.SUCCESS
