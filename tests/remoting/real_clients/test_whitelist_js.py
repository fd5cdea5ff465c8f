"""A real unsigned client on a whitelisted host and on another: ali-ons (a JavaScript
RocketMQ remoting client) sends REGISTER_BROKER without AccessKey, as a RocketMQ 4.x broker
does, from its own loopback address (RMQ_JS_LOCAL_ADDRESS in tests/remoting/js/lib.js)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from tests.builders import registration
from tests.remoting.conftest import Worker
from tests.remoting.real_clients.helpers import JsSession, need_node
from tests.remoting.real_clients.js_frames import register_request
from tests.remoting.test_acl import KEYS, REFUSED
from tests.remoting.test_proxy_protocol import haproxy
from tests.tables import snapshot


@pytest.fixture(autouse=True)
def _node() -> None:
    need_node()


@pytest.fixture
async def worker(make_worker: Any, tmp_path: Path) -> Worker:
    tokens = tmp_path / "tokens"
    tokens.write_text(KEYS)
    return await make_worker(auth_tokens_file=str(tokens), remoting_white_addresses="127.0.0.{2,4}")


async def register_from(worker: Worker, source: str, port: int | None = None) -> dict[str, Any]:
    """ali-ons's unsigned REGISTER_BROKER from `source`, to the worker or to `port` (a balancer)."""
    session = await JsSession.start(port or worker.port, env={"RMQ_JS_LOCAL_ADDRESS": source})
    try:
        answer = await session.call(*register_request(registration(topics=["WhiteTopic"])))
        route = await session.route("WhiteTopic") if answer["code"] == 0 else None
        return {"code": answer["code"], "remark": answer["remark"], "route": route}
    finally:
        await session.exit()


async def test_an_unsigned_broker_on_a_whitelisted_host_registers(worker: Worker) -> None:
    answer = await register_from(worker, "127.0.0.4")
    assert (answer["code"], answer["remark"]) == (0, None)
    assert [b["brokerName"] for b in answer["route"]["brokerDatas"]] == ["broker-a"]


async def test_an_unsigned_broker_on_another_host_is_refused_and_nothing_changes(worker: Worker,
                                                                                 r: redis.Redis) -> None:
    answer = await register_from(worker, "127.0.0.3")
    assert (answer["code"], answer["remark"]) == (1, REFUSED + "No accessKey is configured")
    assert snapshot(r) == {}


async def test_behind_haproxy_with_the_proxy_protocol_the_brokers_own_host_decides(
        make_worker: Any, tmp_path: Path, r: redis.Redis) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(KEYS)
    worker = await make_worker(auth_tokens_file=str(tokens), remoting_white_addresses="127.0.0.2",
                               remoting_proxy_protocol=True)
    async with haproxy(tmp_path, worker.port, "127.0.0.1", "send-proxy") as port:
        refused = await register_from(worker, "127.0.0.3", port)
        assert (refused["code"], refused["remark"]) == (1, REFUSED + "No accessKey is configured")
        assert snapshot(r) == {}
        assert (await register_from(worker, "127.0.0.2", port))["code"] == 0
