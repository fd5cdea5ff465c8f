"""A real worker on the test redis-server and a headless Debian chromium driven by Playwright."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from service.worker import create_app
from service.config import Settings
from service.http.ui import add_ui_routes
from tests.builders import registration, topic_config
from tests.redis_server import free_port

CHROMIUM = os.environ.get("RMQ_UI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "ui"


def _missing() -> str | None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} is missing (Debian: apt-get install chromium); the browser tests need it"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is missing (pip install playwright; no browser download needed)"
    return None


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    reason = _missing()
    if reason is None:
        return
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here) and "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))


# ---------------------------------------------------------------------- the worker
@dataclass
class Worker:
    url: str
    app: web.Application
    session: aiohttp.ClientSession
    runner: web.AppRunner
    token: str | None = None

    async def stop(self) -> None:
        """The worker goes away (its port closes); a second call does nothing."""
        if self.runner.server is not None or self.runner.sites:
            await self.runner.cleanup()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def register(self, body: dict[str, Any]) -> None:
        async with self.session.post(f"{self.url}/v1/brokers/register", json=body, headers=self._headers()) as resp:
            assert resp.status == 200, await resp.text()

    async def put_kv(self, namespace: str, key: str, value: str) -> None:
        async with self.session.put(f"{self.url}/v1/kv/{namespace}/{key}", json={"value": value},
                                    headers=self._headers()) as resp:
            assert resp.status == 200, await resp.text()

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.url}{path}", headers=self._headers()) as resp:
            return resp.status, await resp.json()


async def start_worker(settings: Settings) -> tuple[web.AppRunner, str, web.Application]:
    app = create_app(settings)
    add_ui_routes(app)  # a no-op once create_app registers the page itself
    # handlers end with their client (a watch long poll would otherwise hold cleanup for 30 s)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1, handler_cancellation=True)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}", app


@pytest_asyncio.fixture(loop_scope="session")  # the browser tests' loop
async def worker_factory(redis_url: str) -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def make(token: str | None = None, **overrides: Any) -> Worker:
        # the scanner runs every 200 ms, so an expired broker goes within its timeout + 0.2 s.
        # The worker shares this process' event loop with the browser's driver: on a loaded
        # machine the loop can stall past the default 1 s Redis timeout, and a call Redis
        # answered in time then ends as a 503 on the page (seen in CI). What a page shows
        # while Redis is down is tested with Redis stopped, which refuses at once.
        settings = Settings(redis_url=redis_url, scan_interval_ms=200,
                            redis_timeout_ms=10_000).with_overrides(**overrides)
        runner, url, app = await start_worker(settings)
        runners.append(runner)
        session = aiohttp.ClientSession()
        sessions.append(session)
        return Worker(url, app, session, runner, token)

    yield make
    for session in sessions:
        await session.close()
    for runner in runners:
        if runner.server is not None or runner.sites:
            await runner.cleanup()


# ---------------------------------------------------------------------- the browser
# The browser tests, their worker fixtures and the browser run on the session's event loop
# (pytest-asyncio's loop_scope), so that one chromium and one Playwright driver serve a
# test process's whole run: a launch took 1.6-2 s a test here, the driver's start 0.5-1 s.
ON_SESSION_LOOP = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def chromium() -> AsyncIterator[Any]:
    """One headless chromium per test process (an xdist worker), closed at the session's end."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(loop_scope="session")
async def browser(chromium: Any) -> AsyncIterator[Any]:
    """The process's chromium. A test opens its pages in contexts of its own
    (browser.new_context(): no cookies or storage shared with any other context); those
    it opened are closed at its end."""
    before = set(chromium.contexts)
    try:
        yield chromium
    finally:
        for context in chromium.contexts:
            if context not in before:
                await context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# ---------------------------------------------------------------------- the registry's content
TOPICS = [f"Topic-{i:03d}" for i in range(120)]
ORDER_TOPICS = ["Topic-007", "Topic-042", "Topic-099"]

# cluster -> broker group -> [(brokerId, address)]; broker-e has lost its master
LAYOUT: dict[str, dict[str, list[tuple[int, str]]]] = {
    "ClusterA": {
        "broker-a": [(0, "10.0.1.1:10911"), (1, "10.0.1.2:10911")],
        "broker-b": [(0, "10.0.1.3:10911"), (1, "10.0.1.4:10911")],
    },
    "ClusterB": {
        "broker-c": [(0, "10.0.2.1:10911"), (1, "10.0.2.2:10911"), (2, "10.0.2.3:10911")],
        "broker-d": [(0, "10.0.2.4:10911")],
    },
    "ClusterC": {
        "broker-e": [(1, "10.0.3.2:10911")],
        "broker-f": [(0, "10.0.3.3:10911"), (1, "10.0.3.4:10911")],
    },
}
MASTERS = ["broker-a", "broker-b", "broker-c", "broker-d", "broker-f"]


def topics_of(group: str) -> dict[str, dict[str, Any]]:
    """Topic i lives on two neighbouring masters; broker-c carries twice the write queues."""
    out = {}
    for i, topic in enumerate(TOPICS):
        if group in (MASTERS[i % 5], MASTERS[(i + 1) % 5]):
            write = 8 if group == "broker-c" else 4
            perm = 4 if group == "broker-d" and i % 10 == 3 else 6  # a few read-only queues
            out[topic] = topic_config(topic, read=4, write=write, perm=perm)
    return out


def expected_summary() -> dict[str, Any]:
    groups = sum(len(g) for g in LAYOUT.values())
    members = sum(len(m) for g in LAYOUT.values() for m in g.values())
    return {"clusters": len(LAYOUT), "groups": groups, "members": members}


async def seed(worker: Worker, timeout_ms: int = 120_000) -> None:
    for cluster, groups in LAYOUT.items():
        for group, members in groups.items():
            for broker_id, addr in members:
                await worker.register(registration(
                    addr=addr, name=group, broker_id=broker_id, cluster=cluster,
                    topics=topics_of(group) if broker_id == 0 else [], timeout_ms=timeout_ms))
    for topic in ORDER_TOPICS:
        await worker.put_kv("ORDER_TOPIC_CONFIG", topic, "broker-a:4;broker-b:4")


def copy_to_docs(shot: Path) -> None:
    """README's screenshot: written when missing or asked for (RMQ_UI_UPDATE_SCREENSHOT=1),
    so a test run leaves the committed picture alone."""
    target = ROOT / "docs" / "ui.png"
    if target.exists() and os.environ.get("RMQ_UI_UPDATE_SCREENSHOT") != "1":
        return
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(shot, target)
