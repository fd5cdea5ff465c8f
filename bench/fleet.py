"""Bench 9: the registry at fleet size, 300 broker groups and 100,000 topics.

Seeds, through the HTTP API of one worker, 300 broker groups (master + slave) and 100,000
topics, each topic on 3 to 30 groups (mean about 10: about 1,000,000 (topic, group) pairs,
about 3,300 topics per master), plus one group of 10,000 topics of its own. Then, with a
second worker reading:
  - seeding time and Redis memory per (topic, group) pair;
  - the steady state: every member re-registering unchanged every 30 s (simulated at that
    rate), Redis CPU per second;
  - random-topic route reads (`wrk -t1 -c64`) at 0, 1 and 10 visible changes a second made
    by a small group through the first worker: reads/s, their ratio to 0, the reader's
    cache hit ratio, Redis CPU per second, scripts run per change, the reader's cache
    memory and resident memory;
  - 5,000 long polls on distinct topics: how many one change to one topic wakes, and how
    many a membership change of one group wakes (with the number of watched topics that
    group serves);
  - the longest Lua script of each phase (SLOWLOG), by script name;
  - the analytics `all` job's time on that dataset (built-in reader), unless --no-analytics.
`--quick` runs the same at a tiny size for the smoke test.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp  # noqa: E402
import redis  # noqa: E402

from bench.common import (  # noqa: E402
    ROOT, http, machine_info, median, parser, post_json, redis_server, row, workers, wrk, write_result,
)
from bench.seed import registration, topic_config  # noqa: E402
from service.keys import Keys  # noqa: E402
from service.store import load_sources  # noqa: E402

SCRIPT_BY_SHA = {__import__("hashlib").sha1(src.encode()).hexdigest(): name for name, src in load_sources().items()}


# ---------------------------------------------------------------------- the fleet
def assign(groups: int, topics: int, rng: random.Random) -> dict[int, list[str]]:
    """Topic T<i> on 3..30 distinct groups, about 10 on average."""
    by_group: dict[int, list[str]] = {g: [] for g in range(groups)}
    for i in range(topics):
        k = min(groups, 3 + min(27, int(rng.expovariate(1 / 7.5))))
        for g in rng.sample(range(groups), k):
            by_group[g].append(f"T{i}")
    return by_group


def member_bodies(by_group: dict[int, list[str]], big: int) -> list[dict[str, Any]]:
    bodies = []
    for g, names in by_group.items():
        for broker_id in (0, 1):
            bodies.append(registration(addr=f"10.{g // 250}.{g % 250}.{broker_id + 1}:10911", name=f"group-{g}",
                                       broker_id=broker_id, topics=names, timeout_ms=3_600_000))
    for broker_id in (0, 1):
        bodies.append(registration(addr=f"10.99.0.{broker_id + 1}:10911", name="group-big", broker_id=broker_id,
                                   topics=[f"Big{i}" for i in range(big)], timeout_ms=3_600_000))
    return bodies


def post_all(base: str, bodies: list[bytes], threads: int = 4) -> None:
    def one(body: bytes) -> None:
        # a 503 (Redis slower than the worker's timeout on a loaded machine) is retried, as
        # a broker retries on its next round; anything else, or 503s for a minute, fails
        deadline = time.monotonic() + 60
        while True:
            status, answer = http("POST", f"{base}/v1/brokers/register", body)
            if status == 200:
                return
            if status != 503 or time.monotonic() > deadline:
                raise RuntimeError(f"registration answered {status}: {answer[:300]!r}")
            time.sleep(0.5)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, bodies))


# ---------------------------------------------------------------------- measuring
class RedisProbe:
    def __init__(self, url: str) -> None:
        self.r = redis.Redis.from_url(url)
        self.r.config_set("slowlog-log-slower-than", 1000)  # µs: every script over 1 ms
        self.r.config_set("slowlog-max-len", 10000)

    def cpu(self) -> float:
        info = self.r.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def memory(self) -> int:
        return int(self.r.info("memory")["used_memory"])

    def evalsha(self) -> int:
        return int(self.r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    def slowest(self) -> list[dict[str, Any]]:
        """The phase's slowest scripts since the last call, by name; the log is then reset."""
        entries = self.r.slowlog_get(10000)
        self.r.slowlog_reset()
        out = []
        for e in entries:
            args = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in e["command"].split()[:2]] \
                if isinstance(e["command"], bytes) else []
            name = SCRIPT_BY_SHA.get(args[1], args[1][:12]) if len(args) > 1 and args[0].upper() == "EVALSHA" else " ".join(args)
            out.append({"ms": e["duration"] / 1000, "script": name})
        out.sort(key=lambda x: -x["ms"])
        return out[:5]


def metrics(port: int) -> dict[str, float]:
    _, text = http("GET", f"http://127.0.0.1:{port}/metrics")
    return {k: float(v) for k, v in re.findall(r"^(rmq_cache_[a-z_]+) (\S+)$", text.decode(), re.M)}


def rss_mb(port: int) -> float:
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    pid = re.search(r"pid=(\d+)", out)
    if pid is None:
        return 0.0
    status = Path(f"/proc/{pid.group(1)}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


class Changer(threading.Thread):
    """One small group re-registering `rate` times a second with a new dataVersion and a
    different write queue count on one of its topics: one visible change each time."""

    def __init__(self, base: str, rate: float, start_at: int) -> None:
        super().__init__(daemon=True)
        self.base, self.rate, self.made = base, rate, start_at
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        if self.rate <= 0:
            return
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.made += 1
            self.count += 1
            post_json(f"{self.base}/v1/brokers/register", changing_body(self.made))
            next_at += 1 / self.rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def changing_body(n: int) -> dict[str, Any]:
    topics = {f"C{i}": topic_config(f"C{i}") for i in range(10)}
    topics["C0"] = topic_config("C0", write=1 + n % 8)
    return registration(addr="10.98.0.1:10911", name="changing", topics=topics, version=n + 1)


class SteadyState(threading.Thread):
    """Every member's unchanged registration once per `period` seconds, spread evenly."""

    def __init__(self, base: str, bodies: list[bytes], period: float) -> None:
        super().__init__(daemon=True)
        self.base, self.bodies, self.period = base, bodies, period
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        gap = self.period / len(self.bodies)
        next_at = time.monotonic()
        while not self.stop.is_set():
            body = self.bodies[self.sent % len(self.bodies)]
            status, _ = http("POST", f"{self.base}/v1/brokers/register", body)
            assert status == 200
            self.sent += 1
            next_at += gap
            self.stop.wait(max(0.0, next_at - time.monotonic()))


async def watchers_woken(reader: int, writer: int, watched: list[str], member: dict[str, Any],
                         group_topics: set[str]) -> dict[str, Any]:
    """Starts a long poll per watched topic, then makes one change to one watched topic and
    one membership change of one group, counting the watches each wakes."""
    base = f"http://127.0.0.1:{reader}"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def etag(topic: str) -> str:
            async with session.get(f"{base}/v1/routes/{topic}") as resp:
                return resp.headers["ETag"].strip('"')

        etags = []
        for i in range(0, len(watched), 200):
            etags += await asyncio.gather(*(etag(t) for t in watched[i:i + 200]))
        woken: list[str] = []
        ended: Counter[str] = Counter()  # how the watches that ended before the changes ended

        async def watch(topic: str, tag: str) -> None:
            try:
                async with session.get(f"{base}/v1/routes/{topic}?watch={tag}&timeout=120s") as resp:
                    body = await resp.read()
                    if resp.status == 200:
                        woken.append(topic)
                    error = json.loads(body).get("error", "") if resp.status >= 400 else ""
                    ended[f"{resp.status} {error}".strip()] += 1
            except aiohttp.ClientError as e:
                ended[type(e).__name__] += 1

        tasks = [asyncio.create_task(watch(t, e)) for t, e in zip(watched, etags)]
        deadline = time.monotonic() + 60
        while metrics(reader).get("rmq_cache_watchers", 0) < len(watched) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        waiting = metrics(reader).get("rmq_cache_watchers", 0)
        ended_early = dict(ended)
        await asyncio.to_thread(post_json, f"http://127.0.0.1:{writer}/v1/brokers/register", changing_body(10_000_000))
        await asyncio.sleep(2)
        one_topic = len(woken)
        await asyncio.to_thread(post_json, f"http://127.0.0.1:{writer}/v1/brokers/register", member)
        await asyncio.sleep(3)
        membership = len(woken) - one_topic
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"watchers": len(watched), "waiting": waiting, "ended_before_the_changes": ended_early,
            "woken_by_one_topic_change": one_topic,
            "woken_by_membership_change": membership, "watched_topics_of_that_group": len(group_topics & set(watched))}


async def unregister_all_but_master(reg: Any, r: redis.Redis, g: int, identity: dict[str, Any], settings: Any) -> None:
    """Every member of the group but its master (the watch phase may have moved one)."""
    from service.models import UnregisterRequest, validated

    for broker_id, addr in r.hgetall(f"{{rmq}}:addrs:group-{g}").items():
        if broker_id != b"0":
            await reg.unregister(validated(UnregisterRequest, {**identity, "brokerId": int(broker_id),
                                                               "brokerAddr": addr.decode()}, settings))


async def isolated_scripts(redis_url: str, by_group: dict[int, list[str]]) -> dict[str, float]:
    """Each kind of script once on an otherwise idle Redis at fleet size, its own time from
    SLOWLOG (every command logged): under load, SLOWLOG also counts the time Redis waited
    for a core, which on 2 shared cores says more about the machine than the script."""
    from bench.seed import store_for
    from service.models import HeartbeatRequest, RegisterRequest, UnregisterRequest, validated
    from service.registry import Registry

    store = store_for(redis_url)
    await store.load_scripts()
    reg, r, settings = Registry(store), redis.Redis.from_url(redis_url), store.settings
    r.config_set("slowlog-log-slower-than", 0)
    widest = max((t for names in by_group.values() for t in names), key=lambda t: r.scard(f"{{rmq}}:topic:{t}"))
    g = max(by_group, key=lambda k: len(by_group[k]))
    master = registration(addr=f"10.{g // 250}.{g % 250}.1:10911", name=f"group-{g}", topics=by_group[g],
                          timeout_ms=3_600_000)
    changed = json.loads(json.dumps(master))
    table = changed["topicConfigSerializeWrapper"]["topicConfigTable"]
    table[by_group[g][0]]["writeQueueNums"] = 7
    changed["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = 99
    identity = {k: master[k] for k in ("clusterName", "brokerAddr", "brokerName", "brokerId")}
    calls: list[tuple[str, str, Any]] = [
        (f"route (topic on {r.scard(f'{{rmq}}:topic:{widest}')} groups)", "route", lambda: reg.route(widest)),
        ("cluster_info", "cluster_info", reg.cluster_info),
        ("topic_lists all (longest slice)", "topic_lists", lambda: reg.topic_list("all")),
        ("topic_lists cluster (longest slice)", "topic_lists", lambda: reg.topic_list("cluster", "DefaultCluster")),
        ("topic_lists unit (longest slice)", "topic_lists", lambda: reg.topic_list("unit")),
        (f"register, new dataVersion, 1 of {len(by_group[g])} topics changed", "register",
         lambda: reg.register(validated(RegisterRequest, changed, settings))),
        ("heartbeat", "heartbeat", lambda: reg.heartbeat(validated(HeartbeatRequest, identity, settings))),
        (f"write_perm wipe ({len(by_group[g])} topics)", "write_perm", lambda: reg.write_perm(f"group-{g}", "wipe")),
        (f"write_perm add ({len(by_group[g])} topics)", "write_perm", lambda: reg.write_perm(f"group-{g}", "add")),
        ("delete_topic", "delete_topic", lambda: reg.delete_topic(widest, None)),
        ("live_brokers, a page of 500 groups", "live_brokers", lambda: store.run("live_brokers", ["", 500])),
        ("topic_summary, first page of 200", "topic_summary", lambda: store.run("topic_summary", ["", 200, "", "0"])),
        ("topic_summary, a page of 300 (the largest) from the middle", "topic_summary", lambda: store.run("topic_summary", ["T5", 300, "", "0"])),
        ("topic_summary, prefix search", "topic_summary", lambda: store.run("topic_summary", ["", 200, "T9999", "0"])),
        ("unregister the slaves", "unregister", lambda: unregister_all_but_master(reg, r, g, identity, settings)),
        (f"unregister master: group removal ({len(by_group[g])} topics)", "unregister",
         lambda: reg.unregister(validated(UnregisterRequest, identity, settings))),
    ]
    # Redis also logs the commands a script calls: keep room for all of a call's entries,
    # and take the call's own script by its SHA (the workers' polls run meanwhile)
    r.config_set("slowlog-max-len", 100_000)
    sha_of = {script: sha for sha, script in SCRIPT_BY_SHA.items()}
    out = {}
    for name, script, call in calls:
        r.slowlog_reset()
        await call()
        entries = [e for e in r.slowlog_get(100_000)
                   if e["command"].split()[:2] == [b"EVALSHA", sha_of[script].encode()]]
        out[name] = max((e["duration"] for e in entries), default=0) / 1000
        print(f"  {name}: {out[name]:.2f} ms")
    r.config_set("slowlog-log-slower-than", 1000)
    await store.close()
    return out


async def dashboard_timings(port: int, topic: str) -> dict[str, float] | None:
    """Headless Chromium on the dashboard: time to the first rendered clusters and topic
    table, to the complete fleet-wide chart, and to the result of a search typed into it.
    None without Playwright or Chromium."""
    chromium = "/usr/bin/chromium"
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return None
    if not Path(chromium).exists():
        return None
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, headless=True,
                                           args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        started = time.monotonic()
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.wait_for_selector("#topic-rows tr[data-topic]", timeout=60_000)
        await page.wait_for_selector("#cluster-list details.cluster", timeout=60_000)
        first_render = time.monotonic() - started
        # the fleet-wide chart follows: the worker reads its tally a slice per request
        await page.wait_for_selector("#chart svg rect", timeout=120_000)
        chart = time.monotonic() - started
        started = time.monotonic()
        await page.fill("#topic-search", topic)
        await page.wait_for_selector(f'#topic-rows tr[data-topic="{topic}"]', timeout=60_000)
        search = time.monotonic() - started
        await browser.close()
    return {"first_render_ms": first_render * 1000, "chart_complete_ms": chart * 1000, "search_result_ms": search * 1000}


def analytics_seconds(redis_url: str) -> float | None:
    """None when pyspark is not installed (bench/run installs only the service; the test
    virtualenv, `scripts/test`, has it)."""
    if importlib.util.find_spec("pyspark") is None:
        print("analytics skipped: pyspark is not installed (pip install -e '.[analytics]')")
        return None
    with tempfile.TemporaryDirectory() as out:
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "service", "analytics", "all", "--redis-url", redis_url,
                               "--out", out, "--reader", "builtin", "--no-charts", "--no-history", "--json", "-"],
                              cwd=ROOT, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"analytics failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return time.monotonic() - started


# ---------------------------------------------------------------------- the run
def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, help="broker groups, each master + slave (default 300, quick 6)")
    p.add_argument("--topics", type=int, help="topics (default 100000, quick 300)")
    p.add_argument("--big", type=int, help="topics of the one big group (default 10000, quick 200)")
    p.add_argument("--seconds", type=float, help="each measured load run (default 10, quick 1)")
    p.add_argument("--watchers", type=int, help="long polls on distinct topics (default 5000, quick 50)")
    p.add_argument("--rounds", type=int, help="rounds over the change rates (default 3, quick 1)")
    p.add_argument("--no-analytics", action="store_true", help="skip the analytics job")
    args = p.parse_args()
    q = args.quick
    groups = args.groups or (6 if q else 300)
    n_topics = args.topics or (300 if q else 100_000)
    big = args.big or (200 if q else 10_000)
    seconds = args.seconds or (1 if q else 10)
    rounds = args.rounds or (1 if q else 3)
    n_watchers = min(args.watchers or (50 if q else 5000), n_topics)
    rng = random.Random(12)
    machine = machine_info()
    results: dict[str, Any] = {}
    slow: dict[str, list[dict[str, Any]]] = {}

    by_group = assign(groups, n_topics, rng)
    bodies = [json.dumps(b).encode() for b in member_bodies(by_group, big)]
    pairs = sum(len(v) for v in by_group.values()) + big
    results["fleet"] = {"groups": groups, "members": len(bodies), "topics": n_topics, "pairs": pairs,
                        "mean_groups_per_topic": (pairs - big) / n_topics,
                        "mean_topics_per_master": (pairs - big) / groups}
    print(f"fleet: {groups} groups, {n_topics} topics, {pairs} pairs")

    # the reader holds every watch at once (a worker's default cap, RMQ_MAX_WATCHES, is 1,000)
    watch_cap = str(max(1000, 2 * n_watchers))
    with redis_server() as rs, workers(rs.url, count=2, RMQ_MAX_WATCHES=watch_cap) as [writer, reader]:
        probe = RedisProbe(rs.url)
        wbase = f"http://127.0.0.1:{writer}"
        mem0 = probe.memory()
        started = time.monotonic()
        post_all(wbase, bodies)
        post_json(f"{wbase}/v1/brokers/register", changing_body(1))
        seeded = time.monotonic() - started
        results["seeding"] = {"seconds": seeded, "redis_bytes_per_pair": (probe.memory() - mem0) / pairs}
        slow["seeding"] = probe.slowest()
        print(f"seeded in {seeded:.1f} s, {results['seeding']['redis_bytes_per_pair']:.0f} B per pair")

        steady = SteadyState(wbase, bodies, period=30)
        cpu0, t0 = probe.cpu(), time.monotonic()
        steady.start()
        time.sleep(max(seconds, 3))
        steady.stop.set()
        steady.join()
        elapsed = time.monotonic() - t0
        results["steady_state"] = {"registrations_per_s": steady.sent / elapsed,
                                   "redis_cpu_per_s": (probe.cpu() - cpu0) / elapsed}
        slow["steady_state"] = probe.slowest()

        url = f"http://127.0.0.1:{reader}/v1/routes/T0"
        for _ in range(5):  # every topic's route in the reader's cache before anything is measured
            wrk(url, max(2, n_topics / 5000), routes=("sequential", n_topics))
            if metrics(reader)["rmq_cache_entries"] >= n_topics:
                break
        print(f"warm-up: {metrics(reader)['rmq_cache_entries']:.0f} answers cached")
        runs: dict[str, list[dict[str, Any]]] = {"0": [], "1": [], "10": []}
        made = 1
        for _ in range(rounds):  # the rates interleaved, so the machine's other load hits them alike
            for rate in (0, 1, 10):
                changer = Changer(wbase, rate, made)
                m0, cpu0 = metrics(reader), probe.cpu()
                changer.start()
                result = wrk(url, seconds, routes=("random", n_topics))
                changer.stop.set()
                changer.join()
                made = changer.made
                m1, cpu1 = metrics(reader), probe.cpu()
                hits = m1["rmq_cache_hits_total"] - m0["rmq_cache_hits_total"]
                misses = m1["rmq_cache_misses_total"] - m0["rmq_cache_misses_total"]
                runs[str(rate)].append({
                    "rps": result["rps"], "changes": changer.count, "hit_ratio": hits / max(1.0, hits + misses),
                    "misses": misses, "redis_cpu_per_s": (cpu1 - cpu0) / (result["duration_us"] / 1e6),
                    "errors": sum(result["errors"].values()), "cache_bytes": m1["rmq_cache_bytes"],
                    "cache_entries": m1["rmq_cache_entries"], "reader_rss_mb": rss_mb(reader),
                })
                print(f"{rate} changes/s: {result['rps']:.0f} reads/s, hit ratio {runs[str(rate)][-1]['hit_ratio']:.4f}")
        reads: dict[str, Any] = {}
        for rate, rs_ in runs.items():
            changes = sum(x["changes"] for x in rs_)
            reads[rate] = {k: median([x[k] for x in rs_]) for k in rs_[0]} | {
                "changes": changes, "misses_per_change": sum(x["misses"] for x in rs_) / changes if changes else None,
                "errors": sum(x["errors"] for x in rs_), "runs": rs_}
            if rate != "0":
                reads[rate]["ratio_to_no_change"] = median([x["rps"] / y["rps"] for x, y in zip(rs_, runs["0"])])
        results["random_reads"] = reads
        slow["random_reads"] = probe.slowest()

        probe.r.publish(Keys().changes, b"flush")  # an unreadable record: every worker starts afresh
        time.sleep(3)  # dropping 100,000 cached answers takes the reader a moment
        cluster_ms = []
        for _ in range(5):  # the first one reads Redis, the others the cache
            t0 = time.monotonic()
            status, body = http("GET", f"http://127.0.0.1:{reader}/v1/cluster")
            assert status == 200
            cluster_ms.append((time.monotonic() - t0) * 1000)
        results["views"] = {"cluster_uncached_ms": cluster_ms[0], "cluster_cached_ms": sorted(cluster_ms[1:])[2],
                            "cluster_bytes": len(body)}
        slow["views"] = probe.slowest()
        watched = [f"T{i}" for i in rng.sample(range(n_topics), n_watchers - 1)] + ["C0"]
        target = rng.randrange(groups)
        moved = registration(addr=f"10.97.{target // 250}.{target % 250}:10911", name=f"group-{target}", broker_id=1,
                             topics=by_group[target], timeout_ms=3_600_000)
        results["watch"] = asyncio.run(watchers_woken(reader, writer, watched, moved, set(by_group[target])))
        print(f"watch: {results['watch']}")
        slow["watch"] = probe.slowest()
        results["dashboard"] = asyncio.run(dashboard_timings(reader, f"T{n_topics - 1}"))
        print(f"dashboard: {results['dashboard']}")
        print("scripts alone at fleet size:")
        results["scripts_alone_ms"] = asyncio.run(isolated_scripts(rs.url, by_group))
        if not args.no_analytics and not q:
            results["analytics_all_seconds"] = analytics_seconds(rs.url)
            print(f"analytics all: {results['analytics_all_seconds']:.1f} s")
    results["slowest_scripts"] = slow

    r10 = results["random_reads"]["10"]
    summary = [
        row("fleet: (topic, group) pairs", pairs, "", f"{groups} groups x2 members, {n_topics:,} topics, +1 group of {big:,}"),
        row("seeding through the API", seeded, "s"),
        row("Redis memory per pair", results["seeding"]["redis_bytes_per_pair"], "B", "goal <= 398"),
        row("steady state: unchanged re-registrations", results["steady_state"]["registrations_per_s"], "/s"),
        row("steady state: Redis CPU", results["steady_state"]["redis_cpu_per_s"], "s/s"),
    ]
    for rate in ("0", "1", "10"):
        rr = results["random_reads"][rate]
        summary.append(row(f"random route reads, {rate} changes/s", rr["rps"], "req/s"))
        summary.append(row(f"cache hit ratio, {rate} changes/s", rr["hit_ratio"], "", "goal >= 0.99" if rate == "10" else ""))
        summary.append(row(f"Redis CPU under reads, {rate} changes/s", rr["redis_cpu_per_s"], "s/s"))
    summary += [
        row("reads at 10 changes/s / reads at 0", r10["ratio_to_no_change"], "", "goal >= 0.9"),
        row("route re-reads per change (10/s)", r10["misses_per_change"] or 0, "", "a change to a topic no reader asks for"),
        row("reader cache memory (estimate)", r10["cache_bytes"] / 2**20, "MiB", f"{int(r10['cache_entries']):,} answers"),
        row("reader resident memory", r10["reader_rss_mb"], "MiB"),
        row("watchers woken by one topic's change", results["watch"]["woken_by_one_topic_change"], "",
            f"of {results['watch']['waiting']:.0f} waiting; 1 watches it"),
        row("watchers woken by one group's membership change", results["watch"]["woken_by_membership_change"], "",
            f"{results['watch']['watched_topics_of_that_group']} watched topics name that group"),
        row("GET /v1/cluster, from Redis", results["views"]["cluster_uncached_ms"], "ms"),
        row("GET /v1/cluster, cached", results["views"]["cluster_cached_ms"], "ms"),
    ]
    for name, ms in results["scripts_alone_ms"].items():
        summary.append(row(f"script alone: {name}", ms, "ms", "goal <= ~20"))
    for phase, entries in slow.items():
        if entries:
            summary.append(row(f"longest script under load, {phase}", entries[0]["ms"], "ms", entries[0]["script"]))
    if results.get("dashboard"):
        summary.append(row("dashboard: first render (headless Chromium)", results["dashboard"]["first_render_ms"], "ms"))
        summary.append(row("dashboard: fleet-wide chart complete", results["dashboard"]["chart_complete_ms"], "ms"))
        summary.append(row("dashboard: a search's result", results["dashboard"]["search_result_ms"], "ms",
                           "debounce 150 ms included"))
    if results.get("analytics_all_seconds") is not None:
        summary.append(row("analytics `all` job (built-in reader)", results["analytics_all_seconds"], "s"))
    write_result(args.out, "fleet", {"groups": groups, "topics": n_topics, "big": big, "seconds": seconds,
                                     "watchers": n_watchers, "rounds": rounds, "connections": 64, "wrk_threads": 1},
                 results, summary, machine)


if __name__ == "__main__":
    main()
