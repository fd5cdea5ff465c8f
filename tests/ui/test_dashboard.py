"""The dashboard in a real browser (Debian chromium, headless) against a real worker and redis-server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis

from service.http.app_keys import SCANNER
from service.javaorder import grown_capacity, java_order
from tests import waits
from tests.builders import registration, topic_config
from tests.ui.conftest import (
    LAYOUT,
    MASTERS,
    ON_SESSION_LOOP,
    ORDER_TOPICS,
    TOPICS,
    Worker,
    expected_summary,
    seed,
    topics_of,
)

pytestmark = ON_SESSION_LOOP  # with the process's browser (tests/ui/conftest.py)

WAIT_MS = 30_000  # a generous bound for what the page must come to show; a loaded machine is slow, not wrong


def in_route_order(items: list[str]) -> list[str]:
    """A topic's queue lines ("<group> r.. w.. RW") in its route's order: Java's HashMap's
    (docs/design.md, "Route order")."""
    names = [item.split()[0] for item in items]
    order = java_order(names, grown_capacity(len(names)))
    return sorted(items, key=lambda item: order.index(item.split()[0]))


async def open_page(browser: Any, url: str, width: int = 1280, height: int = 900) -> Any:
    context = await browser.new_context(viewport={"width": width, "height": height})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.errors = errors
    await page.goto(url + "/")
    return page


async def text(page: Any, selector: str) -> str:
    return (await page.locator(selector).inner_text()).strip()


async def until(page: Any, predicate: str, arg: Any = None) -> None:
    """Polls a JS predicate. (page.wait_for_function compiles its predicate with eval, which
    the page's Content-Security-Policy rightly forbids; page.evaluate is exempt.)"""
    await waits.until(lambda: page.evaluate(predicate, arg), WAIT_MS / 1000, f"{predicate} ({arg!r})", poll_s=0.05)


async def wait_text(page: Any, selector: str, expected: str) -> None:
    await until(page, "([sel, want]) => { const el = document.querySelector(sel); return !!el && el.textContent.trim() === want; }",
                [selector, expected])


def route_json_has(text: str) -> str:
    return "() => document.querySelector('#route-json').textContent.includes(" + repr(text) + ")"


async def loaded(page: Any) -> None:
    await page.wait_for_selector('#status[data-state="ok"]', timeout=WAIT_MS)
    await page.wait_for_selector("#topic-rows tr[data-topic]", timeout=WAIT_MS)
    await page.wait_for_selector("#chart svg rect", timeout=WAIT_MS)


BROKERS_SHOWN = """() => {
  const out = {};
  for (const table of document.querySelectorAll("table.brokers")) {
    const groups = out[table.dataset.cluster] = {};
    for (const body of table.querySelectorAll("tbody.group")) {
      groups[body.dataset.group] = {
        noMaster: body.classList.contains("no-master"),
        members: [...body.querySelectorAll("tr.member")].map((tr) => {
          const td = [...tr.querySelectorAll("td")].map((c) => c.textContent.trim());
          return { addr: tr.querySelector("th[scope=row]").textContent.trim(), id: td[0], role: td[1],
                   ha: td[2], state: tr.dataset.state, meter: tr.querySelectorAll("[role=meter]").length };
        }),
      };
    }
  }
  return out;
}"""


async def brokers_shown(page: Any) -> dict[str, Any]:
    """cluster -> group -> {noMaster, members: [{addr, id, role, ha, state, meter}]}, in page order."""
    return await page.evaluate(BROKERS_SHOWN)


def drop_live_row(redis_url: str, addr: str) -> None:
    """As if the live row's TTL had run out before the next scan (deadline left in place)."""
    r = redis.Redis.from_url(redis_url)
    try:
        assert r.delete("{rmq}:live:" + addr) == 1
    finally:
        r.close()


async def test_page_shows_clusters_groups_topics_and_a_route(
        worker_factory: Any, browser: Any, artifacts: Path, redis_url: str) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    # a slave whose live row lapsed just before the scan: shown expired until it is removed
    drop_live_row(redis_url, "10.0.2.3:10911")
    page = await open_page(browser, worker.url)
    await loaded(page)
    want = expected_summary()

    # the overview
    assert await text(page, "#count-clusters") == str(want["clusters"])
    assert await text(page, "#count-groups") == str(want["groups"])
    await wait_text(page, "#count-brokers", f"{want['members'] - 1} / {want['members']}")
    assert await text(page, "#count-topics") == str(len(TOPICS))
    assert await text(page, "#count-order") == str(len(ORDER_TOPICS))
    assert await text(page, "#count-nomaster") == "1"

    # clusters -> groups -> members, with roles, HA addresses and heartbeat bars
    shown = await brokers_shown(page)
    assert list(shown) == list(LAYOUT)
    for cluster, groups in LAYOUT.items():
        assert list(shown[cluster]) == list(groups)
        for group, members in groups.items():
            rows = shown[cluster][group]["members"]
            assert [(m["addr"], m["id"], m["role"]) for m in rows] == \
                [(addr, str(i), "master" if i == 0 else "slave") for i, addr in members]
            for m in rows:
                assert m["meter"] == 1
                if m["addr"] != "10.0.2.3:10911":
                    assert m["ha"] == m["addr"].rsplit(":", 1)[0] + ":10912"
                    assert m["state"] == "ok"
    flagged = page.locator('tbody.no-master')
    assert await flagged.count() == 1
    assert await flagged.get_attribute("data-group") == "broker-e"
    assert await flagged.locator('[data-flag="no-master"]').inner_text() == "No master"
    expired = page.locator('tr.member[data-addr="10.0.2.3:10911"]')
    assert await expired.get_attribute("data-state") == "expired"
    assert "expired" in await expired.locator(".hb-text").inner_text()
    assert await expired.locator(".bar").get_attribute("data-state") == "expired"

    # the topics table: every topic, queue counts and perms per broker group, order topics marked
    assert await text(page, "#topic-caption") == f"{len(TOPICS)} topics"
    assert await page.locator("#topic-rows tr[data-topic]").count() == len(TOPICS)
    row = page.locator('#topic-rows tr[data-topic="Topic-002"]')  # on broker-c (8 write queues) and broker-d
    assert (await row.locator("td").all_inner_texts())[1:3] == ["8", "12"]
    groups = [" ".join(g.split()) for g in await row.locator(".qlist li").all_inner_texts()]
    assert groups == in_route_order(["broker-c r4 w8 RW", "broker-d r4 w4 RW"])
    row = page.locator('#topic-rows tr[data-topic="Topic-003"]')  # broker-d serves it read-only
    groups = [" ".join(g.split()) for g in await row.locator(".qlist li").all_inner_texts()]
    assert groups == in_route_order(["broker-d r4 w4 R-", "broker-f r4 w4 RW"])
    assert await row.locator(".perm.nowrite").count() == 1
    for topic in ORDER_TOPICS:
        assert await page.locator(f'#topic-rows tr[data-topic="{topic}"] .badge.order').count() == 1
    assert await page.locator("#topic-rows .badge.order").count() == len(ORDER_TOPICS)

    # the chart: one bar per broker group with queues, broker-c's skew visible
    bars = page.locator("#chart svg rect.bar")
    assert await bars.count() == 5  # the masters; broker-e has no master, so no queues
    assert await page.locator('#chart svg rect.bar.skew[data-group="broker-c"]').count() == 1
    # write queues count writable rows only: broker-d's read-only (R-) queues are not among them
    writable = {g: sum(c["writeQueueNums"] for c in topics_of(g).values() if c["perm"] & 2) for g in MASTERS}
    shown_values = await page.eval_on_selector_all(
        "#chart svg text.val", "els => els.map(e => Number(e.textContent))")
    assert dict(zip(sorted(MASTERS), shown_values)) == writable
    assert writable["broker-d"] < sum(c["writeQueueNums"] for c in topics_of("broker-d").values())
    # one meaning per colour: the skew colour is not the late-heartbeat amber, and the legend says it
    colours = await page.evaluate("""() => {
        const css = (sel) => getComputedStyle(document.querySelector(sel)).fill;
        const late = getComputedStyle(document.documentElement).getPropertyValue('--late').trim();
        return {skew: css('#chart svg rect.bar.skew'), late: late};
    }""")
    assert colours["skew"] not in ("rgb(184, 110, 0)", "rgb(240, 168, 58)"), colours
    assert "the mean" in await text(page, "#chart-legend")

    # search narrows the table
    await page.fill("#topic-search", "Topic-04")
    await wait_text(page, "#topic-caption", f"10 of {len(TOPICS)} topics match")
    await page.check("#order-only")
    await wait_text(page, "#topic-caption", f"1 of {len(TOPICS)} topics match")
    await page.uncheck("#order-only")
    await page.fill("#topic-search", "")
    await wait_text(page, "#topic-caption", f"{len(TOPICS)} topics")

    # a topic's route on click: the very JSON a producer receives
    await page.click('#topic-rows button[data-topic="Topic-042"]')
    await until(page, "() => document.querySelector('#route-json').textContent.length > 0")
    shown = json.loads(await page.locator("#route-json").text_content())
    status, route = await worker.get("/v1/routes/Topic-042")
    assert status == 200 and shown == route
    assert await text(page, "#route-topic") == "Topic-042"
    assert await page.evaluate("document.activeElement.id") == "route-h"

    # keyboard: arrows move between topics, Enter opens, Escape closes and returns focus
    await page.focus('#topic-rows button[data-topic="Topic-010"]')
    await page.keyboard.press("ArrowDown")
    assert await page.evaluate("document.activeElement.dataset.topic") == "Topic-011"
    await page.keyboard.press("Enter")
    await wait_text(page, "#route-topic", "Topic-011")
    await page.keyboard.press("Escape")
    assert await page.locator("#route-panel").is_hidden()
    assert await page.evaluate("document.activeElement.dataset.topic") == "Topic-011"
    await page.keyboard.press("/")
    assert await page.evaluate("document.activeElement.id") == "topic-search"

    # desktop width, a route open (README's picture is the fleet-size one, test_fleet.py)
    await page.click('#topic-rows button[data-topic="Topic-007"]')
    await until(page, route_json_has("broker-"))
    await page.locator("body").click(position={"x": 5, "y": 5})
    await page.set_viewport_size({"width": 1280, "height": 1700})  # overview, brokers and topics in one picture
    await page.evaluate("window.scrollTo(0, 0)")
    desktop = artifacts / "dashboard-1280.png"
    await page.screenshot(path=str(desktop), full_page=False)
    await page.screenshot(path=str(artifacts / "dashboard-1280-full.png"), full_page=True)
    assert page.errors == []

    # phone width: nothing wider than the screen, the same content
    phone = await open_page(browser, worker.url, width=375, height=812)
    await loaded(phone)
    assert await text(phone, "#count-topics") == str(len(TOPICS))
    overflow = await phone.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than a 375 px screen"
    await phone.screenshot(path=str(artifacts / "dashboard-375.png"), full_page=False)
    await phone.locator("#topics-h").scroll_into_view_if_needed()
    await phone.screenshot(path=str(artifacts / "dashboard-375-topics.png"), full_page=False)
    assert phone.errors == []


async def test_page_follows_registrations_and_expiry_without_reload(
        worker_factory: Any, browser: Any, artifacts: Path) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    page = await open_page(browser, worker.url)
    await loaded(page)
    await page.evaluate("window.__sameDocument = 42")
    groups = expected_summary()["groups"]
    members = expected_summary()["members"]

    await page.click('#topic-rows button[data-topic="Topic-001"]')
    await until(page, "() => document.querySelector('#route-json').textContent.length > 0")
    assert "broker-g" not in await page.locator("#route-json").text_content()

    # a new master joins ClusterC serving Topic-001 and a new topic, and falls silent after 10 s
    # (its amber time, 8-10 s, is 2 s of the page's 250 ms ticks, not 0.6 s, which a loaded
    # machine's browser missed);
    # broker-h's master falls silent after 3 s, and its slave stays
    started = time.monotonic()
    await worker.register(registration(
        addr="10.0.3.9:10911", name="broker-g", broker_id=0, cluster="ClusterC", timeout_ms=10_000,
        topics={"Topic-001": topic_config("Topic-001", write=16), "Topic-new": topic_config("Topic-new")}))
    await worker.register(registration(addr="10.0.3.10:10911", name="broker-h", broker_id=0,
                                       cluster="ClusterC", timeout_ms=3000, topics=[]))
    await worker.register(registration(addr="10.0.3.11:10911", name="broker-h", broker_id=1,
                                       cluster="ClusterC", timeout_ms=60_000, topics=[]))
    groups += 1  # broker-h stays
    await wait_text(page, "#count-groups", str(groups + 1))
    await wait_text(page, "#count-topics", str(len(TOPICS) + 1))
    await page.wait_for_selector('tbody[data-group="broker-h"]:not(.no-master)', timeout=WAIT_MS)
    await page.wait_for_selector('tr.member[data-addr="10.0.3.9:10911"][data-state="ok"]', timeout=WAIT_MS)
    # the watched route shows the new group without a click
    await until(page, route_json_has("broker-g"))
    shown = json.loads(await page.locator("#route-json").text_content())
    assert [q["brokerName"] for q in shown["queueDatas"]] == ["broker-g", "broker-b", "broker-c"]  # Java's order

    # past 80 % of its timeout the bar turns amber, then it expires and the scanner removes it
    await page.wait_for_selector('tr.member[data-addr="10.0.3.9:10911"] .bar[data-state="late"]', timeout=WAIT_MS)
    await page.screenshot(path=str(artifacts / "dashboard-late.png"))
    await page.wait_for_selector('tr.member[data-addr="10.0.3.9:10911"]', state="detached", timeout=WAIT_MS)
    gone_after = time.monotonic() - started
    await wait_text(page, "#count-groups", str(groups))
    # counted against those registered before: the two that expired count until they come back
    await wait_text(page, "#count-brokers", f"{members + 1} / {members + 3}")
    await wait_text(page, "#count-topics", str(len(TOPICS)))
    await until(page, "() => !document.querySelector('#route-json').textContent.includes('broker-g')")
    assert gone_after >= 10.0

    # broker-h lost its master: flagged without reload
    await page.wait_for_selector('tbody[data-group="broker-h"].no-master [data-flag="no-master"]', timeout=WAIT_MS)
    await wait_text(page, "#count-nomaster", "2")
    assert await page.locator('tbody[data-group="broker-h"] tr.member').count() == 1

    assert await page.evaluate("window.__sameDocument") == 42
    assert await text(page, "#status-text") == "Registry reachable"
    assert page.errors == []

    # the worker goes away: the page says so and keeps the last data it had
    await worker.stop()
    await page.wait_for_selector('#status[data-state="down"]', timeout=WAIT_MS)
    assert (await text(page, "#status-text")).startswith("Registry unreachable since ")
    assert await text(page, "#count-groups") == str(groups)
    assert await page.evaluate("document.body.classList.contains('stale')")


async def test_a_fresh_browser_shows_a_departed_slave_and_a_group_that_left_with_cause_and_time(
        worker_factory: Any, browser: Any, artifacts: Path) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    members = expected_summary()["members"]
    # before any browser opened the page: broker-a's slave shuts down, broker-d (a master alone) leaves
    for body in ({"clusterName": "ClusterA", "brokerAddr": "10.0.1.2:10911", "brokerName": "broker-a", "brokerId": 1},
                 {"clusterName": "ClusterB", "brokerAddr": "10.0.2.4:10911", "brokerName": "broker-d", "brokerId": 0}):
        async with worker.session.post(f"{worker.url}/v1/brokers/unregister", json=body) as resp:
            assert resp.status == 200, await resp.text()
    page = await open_page(browser, worker.url)
    await loaded(page)
    await page.wait_for_selector('[data-problem="departed"] [data-departed="10.0.1.2:10911"]', timeout=WAIT_MS)
    slave = await text(page, '[data-departed="10.0.1.2:10911"]')
    assert slave.startswith("10.0.1.2:10911 broker-a slave 1, unregistered at "), slave
    group = await text(page, '[data-problem="gone"] [data-gone="broker-d"]')
    assert group.startswith("broker-d (ClusterB), its last member unregistered at "), group
    # every registered broker is alive, counted against the ones registered before the two left
    await wait_text(page, "#count-brokers", f"{members - 2} / {members}")
    await page.screenshot(path=str(artifacts / "dashboard-departures.png"))
    assert page.errors == []


async def test_page_with_auth_on_uses_a_token_from_session_storage(
        worker_factory: Any, browser: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin admin-secret\nbroker broker-secret\n")
    worker: Worker = await worker_factory(token="admin-secret", auth_tokens_file=str(tokens), auth_reads="token")
    await seed(worker)

    # the page and its assets need no token; the data does
    page = await open_page(browser, worker.url)
    await page.wait_for_selector('#status[data-state="auth"]', timeout=WAIT_MS)
    assert "token is required" in await text(page, "#status-text")
    assert await text(page, "#count-topics") == "–"

    # a read needs any valid token
    await page.fill("#token", "broker-secret")
    await page.press("#token", "Enter")
    await loaded(page)
    assert await text(page, "#count-topics") == str(len(TOPICS))
    assert await page.evaluate("sessionStorage.getItem('rmq-registry-token')") == "broker-secret"
    await page.click('#topic-rows button[data-topic="Topic-005"]')
    await until(page, route_json_has("queueDatas"))

    # kept for the tab: a reload reads at once
    await page.reload()
    await loaded(page)
    assert await page.input_value("#token") == "broker-secret"

    # a wrong token is reported, and forgetting it asks for one again
    await page.fill("#token", "nope")
    await page.press("#token", "Enter")
    await page.wait_for_selector('#status[data-state="auth"]', timeout=WAIT_MS)
    await page.click("#token-clear")
    await page.wait_for_selector('#status[data-state="auth"]', timeout=WAIT_MS)
    assert await page.evaluate("sessionStorage.getItem('rmq-registry-token')") is None
    # 401s are expected here; nothing else may fail
    assert [e for e in page.errors if "401" not in e] == []


async def test_the_topic_table_pages_through_the_server_and_search_finds_a_later_page(
        worker_factory: Any, browser: Any) -> None:
    worker: Worker = await worker_factory()
    names = [f"Big-{i:04d}" for i in range(450)]
    await worker.register(registration(topics=names))
    page = await open_page(browser, worker.url)
    await loaded(page)
    await wait_text(page, "#topic-caption", "topics 1-200 of 450")
    assert await page.locator("#topic-rows tr[data-topic]").count() == 200
    assert await page.locator("#topic-prev").is_disabled()
    await page.click("#topic-next")
    await wait_text(page, "#topic-caption", "topics 201-400 of 450")
    assert await page.locator('#topic-rows tr[data-topic="Big-0200"]').count() == 1
    await page.click("#topic-next")
    await wait_text(page, "#topic-caption", "topics 401-450 of 450")
    assert await page.locator("#topic-next").is_disabled()
    await page.click("#topic-prev")
    await wait_text(page, "#topic-caption", "topics 201-400 of 450")
    # a search reads the matching topics from the server, wherever they are
    await page.fill("#topic-search", "Big-044")
    await wait_text(page, "#topic-caption", "10 of 450 topics match")
    assert await page.locator('#topic-rows tr[data-topic="Big-0449"]').count() == 1
    assert not page.errors


async def test_the_page_says_when_it_shows_data_from_memory_while_redis_is_down(
        worker_factory: Any, browser: Any, redis_server: Any) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    page = await open_page(browser, worker.url)
    await loaded(page)
    redis_server.stop()
    try:
        await page.wait_for_selector('#status[data-state="stale"]', timeout=WAIT_MS)
        assert "from the registry's memory" in await text(page, "#status-text")
        # the clusters it knew are still shown
        assert await text(page, "#count-clusters") == str(expected_summary()["clusters"])
        # and nothing is called right that was not read: no green "Nothing wrong"
        await page.wait_for_selector('#problems [data-verdict="unknown"]', timeout=WAIT_MS)
        assert await page.locator("#problems .all-well").count() == 0
        assert (await text(page, '#problems [data-verdict="unknown"]')).startswith("Not known now")
    finally:
        redis_server.start()
    await page.wait_for_selector('#status[data-state="ok"]', timeout=WAIT_MS)


async def fleet_scanned(worker: Worker) -> None:
    """Until a whole scan pass has counted the seeded fleet: what the worker's store watch
    says was lost when the store is reset (service/store_watch.py)."""
    stats = worker.app[SCANNER].stats
    groups = expected_summary()["groups"]
    await waits.until(lambda: sum(stats.cluster_groups.values()) == groups, WAIT_MS / 1000,
                      f"a scan pass counting {groups} broker groups")
    counted_in = stats.passes  # the pass that counted them ends after its store check
    await waits.until(lambda: stats.passes > counted_in, WAIT_MS / 1000, "the end of that scan pass")


async def test_the_first_screen_says_the_store_was_reset_until_the_fleet_is_back(
        worker_factory: Any, browser: Any, redis_url: str) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    page = await open_page(browser, worker.url)
    await loaded(page)
    await fleet_scanned(worker)
    r = redis.Redis.from_url(redis_url)
    try:
        r.flushall()
    finally:
        r.close()
    await page.wait_for_selector('[data-problem="store-reset"]', timeout=WAIT_MS)
    said = await text(page, '[data-problem="store-reset"]')
    assert f"{expected_summary()['groups']} broker groups and " in said and " topics lost" in said, said
    assert await page.locator(".all-well").count() == 0
    # the brokers the wipe took count against those alive until they are back
    members = expected_summary()["members"]
    await wait_text(page, "#count-brokers", f"0 / {members}")
    await seed(worker)  # the brokers re-register
    await page.wait_for_selector('[data-problem="store-reset"]', state="detached", timeout=WAIT_MS)
    await wait_text(page, "#count-brokers", f"{members} / {members}")
    assert page.errors == []


async def test_a_worker_started_after_the_wipe_shows_the_reset_on_its_first_screen(
        worker_factory: Any, browser: Any, redis_url: str) -> None:
    old: Worker = await worker_factory()
    await seed(old)
    await fleet_scanned(old)
    r = redis.Redis.from_url(redis_url)
    try:
        r.flushall()
        await waits.until(lambda: old.app[SCANNER].watch.resets == 1, WAIT_MS / 1000, "the old worker noticing")
    finally:
        r.close()
    new: Worker = await worker_factory()  # remembers nothing of the store before
    page = await open_page(browser, new.url)
    await page.wait_for_selector('[data-problem="store-reset"]', timeout=WAIT_MS)
    said = await text(page, '[data-problem="store-reset"]')
    assert f"{expected_summary()['groups']} broker groups and " in said, said
    assert await page.locator(".all-well").count() == 0
    assert page.errors == []


async def test_a_broker_that_left_and_came_back_stays_on_the_first_screen_with_both_times(
        worker_factory: Any, browser: Any) -> None:
    worker: Worker = await worker_factory()
    await seed(worker)
    slave = {"clusterName": "ClusterA", "brokerAddr": "10.0.1.2:10911", "brokerName": "broker-a", "brokerId": 1}
    async with worker.session.post(f"{worker.url}/v1/brokers/unregister", json=slave) as resp:
        assert resp.status == 200, await resp.text()
    await worker.register(registration(addr="10.0.1.2:10911", name="broker-a", broker_id=1, cluster="ClusterA",
                                       topics=[], timeout_ms=120_000))
    page = await open_page(browser, worker.url)
    await loaded(page)
    shown = '[data-problem="back"] [data-back="10.0.1.2:10911"]'
    await until(page, "(s) => /, back \\d\\d:\\d\\d$/.test(document.querySelector(s)?.textContent || '')", shown)
    said = await text(page, shown)
    assert said.startswith("10.0.1.2:10911 broker-a slave 1, left ") and "(unregistered), back " in said, said
    assert await page.locator('[data-problem="departed"]').count() == 0  # it is registered: nothing missing
    assert "no broker left" not in await text(page, "#problems")
    assert page.errors == []


async def test_counts_agree_in_number_and_are_written_one_way_and_the_footer_names_session_storage(
        worker_factory: Any, browser: Any, redis_url: str) -> None:
    worker: Worker = await worker_factory()
    many = 1_234  # past a thousand: a separator
    await worker.register(registration(addr="10.0.8.1:10911", name="broker-many", broker_id=0, cluster="ClusterM",
                                       topics={f"M{i:04d}": topic_config(f"M{i:04d}") for i in range(many)},
                                       timeout_ms=3_600_000))
    await worker.register(registration(addr="10.0.8.2:10911", name="broker-many", broker_id=1, cluster="ClusterM",
                                       topics=[], timeout_ms=3_600_000))
    r = redis.Redis.from_url(redis_url)
    try:  # both members past 80 % of their hour
        seconds, _ = r.time()
        for addr in ("10.0.8.1:10911", "10.0.8.2:10911"):
            r.hset("{rmq}:live:" + addr, "lastUpdateTimestamp", str(int(seconds) * 1000 - 3_240_000))
    finally:
        r.close()
    page = await open_page(browser, worker.url)
    await page.wait_for_selector('[data-problem="late"]', timeout=WAIT_MS)
    assert (await text(page, '[data-problem="late"]')).startswith("2 members late (past 80 % of their timeout): ")
    await wait_text(page, "#count-topics", f"{many:,}")
    await wait_text(page, "#topic-caption", f"topics 1-200 of {many:,}")
    footer = await text(page, "footer")
    assert "session storage" in footer and "local storage" not in footer, footer
    assert page.errors == []


async def test_the_chart_says_its_pass_is_of_another_moment_when_the_group_count_moved_since(
        worker_factory: Any, browser: Any) -> None:
    """The write-queue tally is of its last complete pass (a new one at most every 30 s): a
    group registered since is in 'Broker groups' and not yet in the chart, which says so."""
    worker: Worker = await worker_factory()
    await seed(worker)
    groups = expected_summary()["groups"]
    page = await open_page(browser, worker.url)
    await loaded(page)
    await page.wait_for_selector("#chart svg rect.bar", timeout=WAIT_MS)
    assert "registered now" not in await text(page, "#chart-outliers")
    await worker.register(registration(addr="10.0.9.1:10911", name="broker-new", broker_id=0, cluster="ClusterA",
                                       topics={"NewTopic": topic_config("NewTopic")}, timeout_ms=120_000))
    await wait_text(page, "#count-groups", str(groups + 1))
    said = await text(page, "#chart-outliers")
    assert f"({groups + 1} broker groups registered now)" in said and " as of " in said, said
