"""Bearer tokens and roles: every endpoint x role, rotation without restart."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import redis
from aiohttp.test_utils import TestClient

from service.auth import TokenFile, TokenFileError, parse_credentials, parse_tokens
from service.http.app_keys import OBSERVER
from tests.builders import identity, registration
from tests.calls import register, route
from tests.tables import snapshot
from tests.waits import until

BROKER, ADMIN, OTHER_ADMIN = "b-token-1", "a-token-1", "a-token-2"

REG = registration()
# every protected endpoint with a request that would succeed for an allowed role
ENDPOINTS = {
    "register": ("POST", "/v1/brokers/register", REG, "broker"),
    "heartbeat": ("POST", "/v1/brokers/heartbeat", identity(REG), "broker"),
    "query-data-version": ("POST", "/v1/brokers/query-data-version",
                           {**identity(REG), "dataVersion": {"timestamp": 1, "counter": 1}}, "broker"),
    "unregister": ("POST", "/v1/brokers/unregister", identity(REG), "broker"),
    "wipe": ("POST", "/v1/brokers/broker-a/wipe-write-perm", None, "admin"),
    "add": ("POST", "/v1/brokers/broker-a/add-write-perm", None, "admin"),
    "delete-topic": ("DELETE", "/v1/topics/TopicTest", None, "admin"),
    "kv-put": ("PUT", "/v1/kv/ns/k", {"value": "v"}, "admin"),
    "kv-get": ("GET", "/v1/kv/ns/k", None, "admin"),
    "kv-delete": ("DELETE", "/v1/kv/ns/k", None, "admin"),
    "kv-table": ("GET", "/v1/kv/ns", None, "admin"),
    "route": ("GET", "/v1/routes/TopicTest", None, "read"),
    "cluster": ("GET", "/v1/cluster", None, "read"),
    "topics": ("GET", "/v1/topics", None, "read"),
    "system": ("GET", "/v1/topics/system", None, "read"),
    "unit": ("GET", "/v1/topics/unit", None, "read"),
    "unit-sub": ("GET", "/v1/topics/unit-sub", None, "read"),
    "unit-sub-wo": ("GET", "/v1/topics/unit-sub-without-unit", None, "read"),
    "cluster-topics": ("GET", "/v1/clusters/DefaultCluster/topics", None, "read"),
}
OPEN_PATHS = ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"]


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"# roles and tokens\nbroker {BROKER}\nadmin {ADMIN}  # ops team\n\nadmin {OTHER_ADMIN}\n")
    return path


async def authed(make_client, tokens_file: Path, reads: str = "open") -> TestClient:
    client = await make_client(auth_tokens_file=str(tokens_file), auth_reads=reads)
    await client.put("/v1/kv/ns/k", json={"value": "v"}, headers=bearer(ADMIN))
    resp = await client.post("/v1/brokers/register", json=REG, headers=bearer(BROKER))
    assert resp.status == 200
    return client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def call(client: TestClient, name: str, token: str | None) -> int:
    method, path, body, _ = ENDPOINTS[name]
    headers = bearer(token) if token else {}
    resp = await client.request(method, path, json=body, headers=headers)
    if resp.status in (401, 403):
        payload = await resp.json()
        assert payload["error"] == {401: "UNAUTHENTICATED", 403: "FORBIDDEN"}[resp.status]
    return resp.status


def expected(required: str, who: str, reads: str) -> str:
    """'ok', 401 or 403 for a caller ('none', 'bad', 'broker', 'admin')."""
    if required == "read" and reads == "open":
        return "ok"
    if who in ("none", "bad"):
        return "401"
    if required == "read" or who == "admin" or who == required:
        return "ok"
    return "403"


TOKENS = {"none": None, "bad": "not-a-token", "broker": BROKER, "admin": ADMIN}


@pytest.mark.parametrize("reads", ["open", "token"])
@pytest.mark.parametrize("who", list(TOKENS))
@pytest.mark.parametrize("name", list(ENDPOINTS))
async def test_endpoint_answers_by_role(make_client, tokens_file: Path, name: str, who: str, reads: str) -> None:
    client = await authed(make_client, tokens_file, reads)
    status = await call(client, name, TOKENS[who])
    outcome = "ok" if status < 400 or status == 404 else str(status)
    assert outcome == expected(ENDPOINTS[name][3], who, reads)


async def test_refused_request_changes_nothing(make_client, tokens_file: Path, r: redis.Redis) -> None:
    client = await authed(make_client, tokens_file)
    before = snapshot(r)
    for name in ("unregister", "wipe", "delete-topic", "kv-put", "kv-delete"):
        assert await call(client, name, None) == 401
        assert await call(client, name, BROKER if ENDPOINTS[name][3] == "admin" else "nope") in (401, 403)
    assert snapshot(r) == before


HTTP_REFUSALS = "service.http.refusals"


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == HTTP_REFUSALS]


@pytest.mark.parametrize("token, why", [
    (None, "401, no bearer token"), ("not-a-token", "401, an unknown bearer token"),
    (BROKER, "403, a broker token, admin needed"),
], ids=["no-token", "unknown-token", "broker-for-admin"])
async def test_a_refused_request_is_logged_with_the_client_request_and_reason_never_the_token(
        make_client, tokens_file: Path, caplog: pytest.LogCaptureFixture, token: str | None, why: str) -> None:
    caplog.set_level(logging.WARNING, logger=HTTP_REFUSALS)
    client = await make_client(auth_tokens_file=str(tokens_file))
    await client.delete("/v1/topics/TopicTest", headers=bearer(token) if token else {})
    assert refusal_lines(caplog) == [f"refused HTTP DELETE /v1/topics/TopicTest from 127.0.0.1: {why}"]
    assert token is None or token not in caplog.text


async def test_refusals_from_one_client_are_logged_once_then_counted(
        make_client, tokens_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=HTTP_REFUSALS)
    client = await make_client(auth_tokens_file=str(tokens_file))
    window = 0.5
    client.server.app[OBSERVER].refusals.every = window  # the worker's is 60 s
    for _ in range(5):
        assert (await client.put("/v1/kv/ns/k", json={"value": "v"})).status == 401
    assert (await client.get("/v1/kv/ns/k", headers=bearer(ADMIN))).status == 404  # allowed: not told
    assert refusal_lines(caplog) == ["refused HTTP PUT /v1/kv/ns/k from 127.0.0.1: 401, no bearer token"]
    await until(lambda: len(refusal_lines(caplog)) >= 2, 10, "the summary line")
    assert refusal_lines(caplog)[1] == (f"... and 4 more refusals from 127.0.0.1 in the last {window:g} s, the last: "
                                        "refused HTTP PUT /v1/kv/ns/k from 127.0.0.1: 401, no bearer token")


@pytest.mark.parametrize("path", OPEN_PATHS)
async def test_operations_endpoints_need_no_token(make_client, tokens_file: Path, path: str) -> None:
    client = await make_client(auth_tokens_file=str(tokens_file), auth_reads="token")
    assert (await client.get(path)).status == 200


async def test_unauthenticated_answer_names_the_scheme(make_client, tokens_file: Path) -> None:
    client = await make_client(auth_tokens_file=str(tokens_file))
    resp = await client.post("/v1/brokers/register", json=REG)
    assert resp.status == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_every_listed_token_works(make_client, tokens_file: Path) -> None:
    client = await make_client(auth_tokens_file=str(tokens_file))
    for token in (ADMIN, OTHER_ADMIN):
        assert (await client.put("/v1/kv/ns/k", json={"value": token}, headers=bearer(token))).status == 200
        assert await (await client.get("/v1/kv/ns/k", headers=bearer(token))).json() == {"value": token}


async def test_tokens_rotate_without_restart(make_client, tokens_file: Path, monkeypatch) -> None:
    client = await make_client(auth_tokens_file=str(tokens_file))
    assert (await client.get("/v1/kv/ns", headers=bearer(ADMIN))).status in (200, 404)
    tokens_file.write_text("admin rotated-admin-token-with-a-new-length\n")
    await asyncio.sleep(1.1)  # the file is looked at once a second at most
    assert (await client.get("/v1/kv/ns", headers=bearer(ADMIN))).status == 401
    assert (await client.get("/v1/kv/ns", headers=bearer("rotated-admin-token-with-a-new-length"))).status in (200, 404)


async def test_a_tokens_file_gone_unreadable_while_serving_refuses_everyone(make_client, tokens_file: Path) -> None:
    # (at start an unreadable file stops the worker: tests/test_startup_failures.py)
    client = await make_client(auth_tokens_file=str(tokens_file))
    assert (await client.post("/v1/brokers/register", json=REG, headers=bearer(ADMIN))).status == 200
    tokens_file.unlink()
    await asyncio.sleep(1.1)  # the file is looked at once a second at most
    assert (await client.post("/v1/brokers/register", json=REG, headers=bearer(ADMIN))).status == 401


def test_token_file_lines_are_role_and_token() -> None:
    assert parse_tokens("# c\nbroker x\n admin  y # z\n") == [("broker", "x"), ("admin", "y")]
    for bad in ("reader x", "admin", "admin x y z", "reader ak sk"):
        with pytest.raises(TokenFileError):
            parse_tokens(bad)


def test_token_file_lines_with_three_fields_are_key_pairs() -> None:
    tokens, keys = parse_credentials("broker t1\nbroker bk bs\nadmin ak as # for mqadmin\n")
    assert tokens == [("broker", "t1")] and keys == {"bk": ("broker", "bs", None), "ak": ("admin", "as", None)}


def test_a_placeholder_credential_is_no_credential() -> None:
    for line in ("admin REPLACE-ME-admin-token", "broker REPLACE-ME-ak sk", "broker ak REPLACE-ME-sk"):
        with pytest.raises(TokenFileError, match="placeholder"):
            parse_credentials(f"broker real-token\n{line}\n")


def test_broken_token_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("admin good\n")
    tokens = TokenFile(str(path), check_every=0)
    assert tokens.role_of("good") == "admin"
    path.write_text("superuser good\n")
    assert tokens.role_of("good") is None


def test_key_pairs_are_re_read_on_change_and_fail_closed(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("broker bk old-secret\n")
    keys = TokenFile(str(path), check_every=0)
    assert keys.key("bk") == ("broker", "old-secret", None)
    path.write_text("admin bk rotated-secret-of-another-length\n")
    assert keys.key("bk") == ("admin", "rotated-secret-of-another-length", None)
    path.write_text("admin bk one two three\n")
    assert keys.key("bk") is None
    path.unlink()
    assert keys.key("bk") is None


async def test_redis_with_a_password_is_reached_through_the_url(aiohttp_client) -> None:
    from service.worker import create_app
    from service.config import Settings, StartupError
    from tests.redis_server import RedisServer

    server = RedisServer(None, "--requirepass", "s3cret")
    server.start()
    try:
        good = await aiohttp_client(create_app(Settings(redis_url=f"redis://:s3cret@127.0.0.1:{server.port}/0")))
        await register(good, registration())
        # a wrong password stops a worker at start, the password named, not shown
        bad_url = f"redis://:wrong-one@127.0.0.1:{server.port}/0"
        with pytest.raises(StartupError) as refused:
            await aiohttp_client(create_app(Settings(redis_url=bad_url, redis_start_timeout_ms=0)))
        assert f"REDIS_URL=redis://:***@127.0.0.1:{server.port}/0" in str(refused.value)
        assert "wrong-one" not in str(refused.value)
    finally:
        server.cleanup()
