"""A real worker on the test redis-server and a headless Debian chromium driven by Playwright."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import aiohttp
import pytest
from aiohttp import web

from service.worker import create_app
from service.config import Settings
from service.http.ui import add_ui_routes
from tests.builders import registration, topic_config
from tests.redis_server import free_port
from tests.waits import until_sync

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


@pytest.fixture
async def worker_factory(redis_url: str) -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def make(token: str | None = None, **overrides: Any) -> Worker:
        # the scanner runs every 200 ms, so an expired broker goes within its timeout + 0.2 s
        settings = Settings(redis_url=redis_url, scan_interval_ms=200).with_overrides(**overrides)
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
@pytest.fixture(scope="session")
def chromium() -> Iterator[str]:
    """One headless chromium per test process (an xdist worker) for its whole run, where each
    test launched its own; its DevTools endpoint. Closed at the session's end."""
    profile = Path(tempfile.mkdtemp(prefix="rmq-ui-chromium-"))
    # port 0: chromium picks a free port and writes it into DevToolsActivePort in its profile
    proc = subprocess.Popen([CHROMIUM, *CHROMIUM_ARGS, "--remote-debugging-address=127.0.0.1",
                             "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        active = profile / "DevToolsActivePort"

        def port() -> str | None:
            assert proc.poll() is None, f"{CHROMIUM} exited with {proc.returncode} at its start"
            lines = active.read_text().splitlines() if active.exists() else []
            return lines[0] if lines and lines[0].isdigit() else None

        yield f"http://127.0.0.1:{until_sync(port, 60, f'{CHROMIUM} listening for DevTools')}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Any]:
    """The process's chromium, connected for this test. A test opens its pages in contexts of
    its own (browser.new_context(): no cookies or storage shared with any other context),
    which close with the connection at its end."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.connect_over_cdp(chromium)
        try:
            yield b
        finally:
            await b.close()  # closes the contexts this connection made, then disconnects


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
