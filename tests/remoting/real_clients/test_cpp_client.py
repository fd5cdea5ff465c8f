"""The RocketMQ C++ client (pip rocketmq==0.4.4, the native core in a wheel) resolves routes here.

Its producer asks GET_ROUTEINFO_BY_TOPIC (105) with `language` CPP and `version` 63 over a
JSON header. A recording proxy in front of the endpoint shows what it sent and what it got;
a fake broker listening at the registered broker address shows that it then went to that
address, i.e. that it used the route our endpoint gave it. No real broker is there, so the
send itself fails (the fake broker never answers): that is expected.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from service.http.app_keys import REGISTRY, SETTINGS
from service.models import RegisterRequest, validated
from service.remoting import acl, codec, codes
from tests.builders import registration
from tests.calls import register as http_register
from tests.remoting.conftest import Worker
from tests.remoting.real_clients.helpers import FakeBroker, RecordingProxy, cpp_env, need_rocketmq_cpp

HERE = Path(__file__).resolve().parent
SEND_TIMEOUT_MS = 1000
SEND_MESSAGE, SEND_MESSAGE_V2 = 10, 310  # RocketMQ RequestCode


async def run_producer(namesrv_port: int, topic: str, home: Path, limit_s: float = 60,
                       credentials: tuple[str, str] | None = None) -> dict:
    """cpp_producer.py in a subprocess, killed if it outlives `limit_s` (the C++ client retries)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "cpp_producer.py"), f"127.0.0.1:{namesrv_port}", topic, str(SEND_TIMEOUT_MS),
        *(credentials or ()),
        env=cpp_env(home), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"the C++ producer did not finish within {limit_s} s")
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    assert lines, f"C++ producer gave no result (rc {proc.returncode}): {err.decode()[-2000:]}"
    return json.loads(lines[-1])


@pytest.fixture(autouse=True)
def _cpp() -> None:
    need_rocketmq_cpp()


async def test_cpp_producer_takes_the_route_from_our_endpoint(worker: Worker, tmp_path: Path) -> None:
    broker = FakeBroker()
    broker_port = await broker.start()
    proxy = RecordingProxy(worker.port)
    proxy_port = await proxy.start()
    try:
        await http_register(worker.http, registration(addr=f"127.0.0.1:{broker_port}", name="broker-cpp",
                                                      topics=["CppTopic"]))
        result = await run_producer(proxy_port, "CppTopic", tmp_path)
    finally:
        await proxy.stop()
        await broker.stop()

    # what the C++ client asked our endpoint, and what it got
    asked = proxy.requests(codes.GET_ROUTEINFO_BY_TOPIC)
    assert asked, f"no GET_ROUTEINFO_BY_TOPIC seen; requests: {[(s.code, s.language) for s in proxy.requests()]}"
    first = asked[0]
    assert (first.language, first.version, first.ext.get("topic")) == ("CPP", 63, "CppTopic"), first
    answers = proxy.answers_to(first)
    assert answers and answers[0].code == 0, answers
    assert answers[0].language == "JAVA" and answers[0].flag & 1
    # version 63 < 401: the route in fastjson's form, numeric map keys unquoted, which its parser reads
    assert f'{{0:"127.0.0.1:{broker_port}"}}'.encode() in answers[0].body, answers[0].body
    assert codec.loads(answers[0].body)["brokerDatas"][0]["brokerName"] == "broker-cpp"

    # it then went to the broker address of that route (and only there: no other broker exists)
    assert broker.connections >= 1, f"the producer never connected to the registered broker; result {result}"
    sends = [s for s in broker.seen if s.code in (SEND_MESSAGE, SEND_MESSAGE_V2)]
    assert sends, [(s.code, s.language) for s in broker.seen]
    assert sends[0].language == "CPP" and sends[0].ext.get("topic") == "CppTopic"
    assert not result["sent"], result  # nobody stores messages at the fake broker


async def test_cpp_producer_unknown_topic_gets_17(worker: Worker, tmp_path: Path) -> None:
    """No route: the endpoint answers TOPIC_NOT_EXIST (17), the client reports no route info."""
    proxy = RecordingProxy(worker.port)
    proxy_port = await proxy.start()
    try:
        result = await run_producer(proxy_port, "NoSuchTopic", tmp_path)
    finally:
        await proxy.stop()
    asked = proxy.requests(codes.GET_ROUTEINFO_BY_TOPIC)
    assert asked and all(s.language == "CPP" and s.version == 63 for s in asked)
    assert {a.code for s in asked for a in proxy.answers_to(s)} == {codes.TOPIC_NOT_EXIST}
    # it also asked for the default topic TBW102 (the producer's fallback), which is not there either
    assert {s.ext.get("topic") for s in asked} <= {"NoSuchTopic", "TBW102"}
    assert not result["sent"] and "route" in result["error"].lower(), result



@pytest.mark.parametrize("secret, allowed", [("reader-secret", True), ("wrong-secret", False)])
async def test_cpp_producer_with_session_credentials_is_checked_by_the_acl(
        make_worker, tmp_path: Path, secret: str, allowed: bool) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("broker cppkey reader-secret\n")
    worker: Worker = await make_worker(auth_tokens_file=str(tokens), auth_reads="token")
    proxy = RecordingProxy(worker.port)
    proxy_port = await proxy.start()
    try:
        await worker.app[REGISTRY].register(validated(RegisterRequest, registration(
            addr="127.0.0.1:1", name="broker-cpp", topics=["AclTopic"]), worker.app[SETTINGS]))
        result = await run_producer(proxy_port, "AclTopic", tmp_path / "home", limit_s=30,
                                    credentials=("cppkey", secret))
    finally:
        await proxy.stop()
    asked = proxy.requests(codes.GET_ROUTEINFO_BY_TOPIC)
    assert asked and all(a.ext.get("AccessKey") == "cppkey" and a.ext.get("Signature") for a in asked), asked[:1]
    # the C++ client signs as the Java client does, with its channel ("OnsChannel") among the signed fields
    assert all(a.ext.get("OnsChannel") == "ALIYUN" and a.ext["Signature"] == acl.signature(secret, a.ext, a.body)
               for a in asked), asked[:1]
    answer = proxy.answers_to(asked[0])[0]
    if allowed:
        assert answer.code == codes.SUCCESS
        assert codec.loads(answer.body)["brokerDatas"][0]["brokerName"] == "broker-cpp"
    else:
        assert (answer.code, answer.remark) == (
            codes.SYSTEM_ERROR, "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=cppkey")
        assert not result["sent"], result
