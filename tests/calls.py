"""HTTP calls the tests make again and again."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp.test_utils import TestClient


async def register(client: TestClient, body: dict) -> dict:
    resp = await client.post("/v1/brokers/register", json=body)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def route(client: TestClient, topic: str) -> dict | None:
    resp = await client.get(f"/v1/routes/{quote(topic, safe='')}")  # any name, "/" and "%" too
    if resp.status == 404:
        return None
    assert resp.status == 200, await resp.text()
    return await resp.json()
