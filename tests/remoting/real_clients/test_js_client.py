"""ali-ons 3.12.0, a pure JavaScript RocketMQ remoting client, against a worker's TCP endpoint.

Its requests carry a JSON header, `language` JAVA and `version` 121 (so routes come back in
fastjson's form, which its JSON2 parser reads). The worker runs on the tests' real
redis-server; the node processes are driven without blocking the worker's event loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from service.http.app_keys import REGISTRY, SETTINGS
from service.models import RegisterRequest, validated
from service.remoting import acl, codec, codes
from tests.builders import registration
from tests.calls import register as http_register
from tests.calls import route as http_route
from tests.remoting.conftest import Worker
from tests.remoting.frames import identity
from tests.remoting.real_clients.helpers import JsSession, RecordingProxy, need_node, run_node
from tests.remoting.real_clients.js_frames import js_register, register_request
from tests.tables import snapshot
from tests.remoting.test_interop import normal

pytestmark = pytest.mark.usefixtures("consistent")


@pytest.fixture(autouse=True)
def _node() -> None:
    need_node()


@pytest.fixture
async def js(worker: Worker):
    session = await JsSession.start(worker.port)
    yield session
    await session.exit()


async def js_route_script(port: int, topic: str, env: dict[str, str] | None = None) -> dict:
    """route.js: ali-ons's own MQClientAPI.getDefaultTopicRouteInfoFromNameServer, in its own process."""
    rc, out, err = await run_node("route.js", f"127.0.0.1:{port}", topic, env=env)
    doc = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"stderr": err}
    if rc == 2:
        return {"missing": doc}
    assert rc == 0, (out, err)
    return doc


def sorted_route(doc: dict) -> dict:
    """ali-ons sorts queueDatas and brokerDatas by brokerName; the comparison ignores that order."""
    doc = normal(doc)
    doc["queueDatas"] = sorted(doc["queueDatas"], key=lambda q: q["brokerName"])
    doc["brokerDatas"] = sorted(doc["brokerDatas"], key=lambda b: b["brokerName"])
    for b in doc["brokerDatas"]:
        b["brokerAddrs"] = {str(k): v for k, v in b["brokerAddrs"].items()}
    return doc


async def test_registered_by_js_over_tcp_route_equals_http(worker: Worker, js: JsSession) -> None:
    await js_register(js, registration(topics=["JsTopic", "Other"]))
    await js_register(js, registration(addr="10.0.0.2:10911", broker_id=1, topics=["JsTopic", "Other"]))
    await js_register(js, registration(addr="10.0.1.1:10911", name="broker-b", topics=["JsTopic"]))

    over_http = await http_route(worker.http, "JsTopic")
    assert over_http is not None
    raw = await js.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "JsTopic"})
    assert raw["code"] == 0 and raw["flag"] & 1
    assert "{0:" in raw["body"]  # version 121 < 401: fastjson's unquoted numeric keys
    over_tcp = codec.loads(raw["body"].encode())
    assert normal(over_tcp) == normal(over_http)
    # as ali-ons itself parses it (JSON2), in the same session and in a fresh process
    assert sorted_route(await js.route("JsTopic")) == sorted_route(over_http)
    assert sorted_route(await js_route_script(worker.port, "JsTopic")) == sorted_route(over_http)
    # HTTP sees the brokers the JS client registered
    cluster = await (await worker.http.get("/v1/cluster")).json()
    assert sorted(cluster["clusterAddrTable"]["DefaultCluster"]) == ["broker-a", "broker-b"]
    assert cluster["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}


async def test_registered_over_http_visible_to_js(worker: Worker, js: JsSession) -> None:
    await http_register(worker.http, registration(topics=["HttpTopic"]))
    await http_register(worker.http, registration(addr="10.0.0.7:10911", name="broker-h", cluster="C2",
                                                  topics=["HttpTopic"]))
    over_http = await http_route(worker.http, "HttpTopic")
    assert sorted_route(await js_route_script(worker.port, "HttpTopic")) == sorted_route(over_http)
    assert sorted_route(await js.route("HttpTopic")) == sorted_route(over_http)

    info = await js.call(codes.GET_BROKER_CLUSTER_INFO)
    assert info["code"] == 0
    tcp_cluster = codec.loads(info["body"].encode())
    http_cluster = await (await worker.http.get("/v1/cluster")).json()
    assert tcp_cluster["clusterAddrTable"] == http_cluster["clusterAddrTable"]
    assert {n: {str(k): v for k, v in b["brokerAddrs"].items()} for n, b in tcp_cluster["brokerAddrTable"].items()} \
        == {n: b["brokerAddrs"] for n, b in http_cluster["brokerAddrTable"].items()}
    assert set(tcp_cluster["clusterAddrTable"]) == {"DefaultCluster", "C2"}


async def test_unknown_topic(worker: Worker, js: JsSession) -> None:
    raw = await js.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert raw["code"] == codes.TOPIC_NOT_EXIST
    assert raw["remark"] == ("No topic route info in name server for the topic: Nope"
                             "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
    missing = await js_route_script(worker.port, "Nope")
    assert "missing" in missing, missing


async def test_kv_round_trip(worker: Worker, js: JsSession) -> None:
    ns = {"namespace": "ORDER_TOPIC_CONFIG", "key": "JsOrdered"}
    assert (await js.call(codes.GET_KV_CONFIG, ns))["code"] == 22
    assert (await js.call(codes.PUT_KV_CONFIG, {**ns, "value": "broker-a:4"}))["code"] == 0
    got = await js.call(codes.GET_KV_CONFIG, ns)
    assert got["code"] == 0 and got["ext"]["value"] == "broker-a:4"
    assert (await js.call(codes.PUT_KV_CONFIG, {**ns, "value": "broker-a:8"}))["code"] == 0
    assert (await js.call(codes.GET_KV_CONFIG, ns))["ext"]["value"] == "broker-a:8"
    # a second client (a new connection) reads the same
    other = await JsSession.start(worker.port)
    try:
        assert (await other.call(codes.GET_KV_CONFIG, ns))["ext"]["value"] == "broker-a:8"
    finally:
        await other.exit()
    assert (await js.call(codes.DELETE_KV_CONFIG, ns))["code"] == 0
    gone = await js.call(codes.GET_KV_CONFIG, ns)
    assert gone["code"] == 22
    assert gone["remark"] == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: JsOrdered"
    assert (await js.call(codes.DELETE_KV_CONFIG, ns))["code"] == 0  # also when absent


async def test_unknown_code_gets_3_and_the_connection_goes_on(worker: Worker, js: JsSession) -> None:
    answer = await js.call(9999, {"anything": "x"})
    assert answer["code"] == 3 and answer["remark"] == " request type 9999 not supported"
    assert (await js.call(codes.GET_BROKER_CLUSTER_INFO))["code"] == 0


async def test_unregister(worker: Worker, js: JsSession) -> None:
    reg = registration(topics=["Leaving"])
    await js_register(js, reg)
    assert await http_route(worker.http, "Leaving") is not None
    answer = await js.call(codes.UNREGISTER_BROKER, identity(reg))
    assert answer["code"] == 0
    assert await http_route(worker.http, "Leaving") is None
    assert (await js.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "Leaving"}))["code"] == codes.TOPIC_NOT_EXIST
    cluster = await (await worker.http.get("/v1/cluster")).json()
    assert cluster["brokerAddrTable"] == {}


async def test_missing_header_field(worker: Worker, js: JsSession) -> None:
    answer = await js.call(codes.GET_ROUTEINFO_BY_TOPIC, {})
    assert answer["code"] == 1 and answer["remark"] == "the custom field <topic> is null"  # RocketMQ's wording


async def test_what_ali_ons_sends_and_gets(worker: Worker) -> None:
    """Through a recording proxy: JSON headers, language JAVA, version 121; answers JAVA 479, by opaque."""
    proxy = RecordingProxy(worker.port)
    port = await proxy.start()
    session = await JsSession.start(port)
    try:
        await js_register(session, registration(topics=["Seen"]))
        await session.route("Seen")
        await session.call(codes.GET_BROKER_CLUSTER_INFO)
    finally:
        await session.exit()
        await proxy.stop()
    sent = proxy.requests()
    assert [s.code for s in sent] == [codes.REGISTER_BROKER, codes.GET_ROUTEINFO_BY_TOPIC, codes.GET_BROKER_CLUSTER_INFO]
    assert {(s.language, s.version, s.serialize, s.flag) for s in sent} == {("JAVA", 121, 0, 0)}
    for s in sent:
        [answer] = proxy.answers_to(s)
        assert (answer.code, answer.language, answer.version, answer.flag, answer.serialize) == (0, "JAVA", 479, 1, 0)


ACL_REFUSED = "org.apache.rocketmq.acl.common.AclException: "


@pytest.mark.parametrize("secret, allowed", [("js-secret", True), ("wrong-secret", False)])
async def test_ali_ons_with_an_access_key_is_checked_by_the_acl(
        make_worker, tmp_path: Path, secret: str, allowed: bool) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("broker jskey js-secret\n")
    worker: Worker = await make_worker(auth_tokens_file=str(tokens), auth_reads="token")
    await worker.app[REGISTRY].register(validated(RegisterRequest, registration(topics=["AclTopic"]),
                                                  worker.app[SETTINGS]))
    got = await js_route_script(worker.port, "AclTopic", env={"RMQ_JS_ACCESS_KEY": "jskey", "RMQ_JS_SECRET_KEY": secret})
    if allowed:
        assert [q["brokerName"] for q in got["queueDatas"]] == ["broker-a"]
    else:
        assert "missing" in got and "Check signature failed for accessKey=jskey" in json.dumps(got), got


@pytest.mark.parametrize("secret, allowed", [("js-secret", True), ("wrong-secret", False)])
async def test_ali_ons_signs_a_registration_with_its_body(
        make_worker, tmp_path: Path, r: redis.Redis, secret: str, allowed: bool) -> None:
    """A request with a body (REGISTER_BROKER), signed by ali-ons (OnsChannel among the signed fields)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("broker jskey js-secret\n")
    worker: Worker = await make_worker(auth_tokens_file=str(tokens))
    proxy = RecordingProxy(worker.port)
    session = await JsSession.start(await proxy.start(), env={"RMQ_JS_ACCESS_KEY": "jskey", "RMQ_JS_SECRET_KEY": secret})
    try:
        code, ext, body = register_request(registration())
        answer = await session.call(code, ext, body)
        registered = r.exists("{rmq}:broker:broker-a")  # before the session's close unregisters it
    finally:
        await session.exit()
        await proxy.stop()
    [sent] = proxy.requests(codes.REGISTER_BROKER)
    assert sent.body and {"AccessKey": "jskey", "OnsChannel": "ALIYUN"}.items() <= sent.ext.items()
    assert sent.ext["Signature"] == acl.signature(secret, sent.ext, sent.body)
    if allowed:
        assert answer["code"] == codes.SUCCESS and registered
    else:
        assert (answer["code"], answer["remark"]) == (codes.SYSTEM_ERROR,
                                                      ACL_REFUSED + "Check signature failed for accessKey=jskey")
        assert snapshot(r) == {}
