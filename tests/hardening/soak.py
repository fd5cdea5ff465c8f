"""Soak with invariants: many simulated brokers through 3 real worker processes.

Masters and slaves of several clusters serving 1,000+ topics register, heartbeat, re-register
(sometimes with a new data version), go silent long enough to expire, and unregister, through
3 `rmq-registry serve` processes whose scanners all run (short broker timeouts, short scan
interval), for a bounded time. While it runs:

- an atomic checker EVALs tests/hardening/checks.lua (the invariants of tests/tables.py in one
  read-only script) every ~250 ms: every broker name in a cluster set has a BrokerData with
  >= 1 address, every QueueData names an existing broker, every live entry belongs to an
  address of some BrokerData, no topic without QueueData, ...;
- an observer reads GET /v1/cluster through a random worker every ~300 ms and checks, against
  what each simulated broker knows of its own history (with the read cache's staleness bound):
  - gone: a broker silent since its last 200 at L is absent once L + timeout + scan interval
    + margin has passed, and an unregistered one is absent once its unregister was answered;
  - not removed early: a broker whose last successful register/heartbeat was *sent* at s is
    present while s + timeout has not passed (and it has not unregistered).
After the run every broker falls silent; the quiescent tables are checked with
tests/tables.py violations() once all have expired, and must be empty.

Shared by tests/hardening/test_soak.py (~35 s) and bench/soak/run (10 min by default):

    python -m tests.hardening.soak --duration 600 --out bench/soak/results/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import redis
import redis.asyncio as aioredis

from service.keys import Keys
from tests.builders import identity, registration
from tests.hardening.harness import CHECKS_LUA, Worker, own_redis
from tests.tables import violations as quiescent_violations

INF = float("inf")


@dataclass
class SoakConfig:
    duration_s: float = 35.0
    workers: int = 3
    clusters: int = 4
    groups: int = 40
    topics: int = 1200
    topics_per_group: int = 60
    timeouts_ms: tuple[int, ...] = (1000, 1500, 2000)
    scan_interval_ms: int = 300
    staleness_s: float = 1.0  # the read cache's bound (RMQ_MAX_STALENESS_MS default)
    gone_margin_s: float = 1.5  # beyond timeout + interval: a scan's own duration, scheduling noise
    early_margin_s: float = 0.2
    check_every_s: float = 0.25
    observe_every_s: float = 0.3
    p_silent: float = 0.012  # per heartbeat step
    p_unregister: float = 0.006
    p_full_register: float = 0.1
    seed: int = 1


@dataclass
class Epoch:
    """From a register answered 200 to the next unregister sent (or silence noticed)."""

    start_recv: float
    end_send: float = INF
    pings: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered) of each 200


@dataclass
class Gap:
    """A time the broker must be absent from: silent since `since` (last 200 answered), or
    unregistered (answered at `since`), until the register that ends it is sent."""

    kind: str  # "silent" | "unregistered"
    since: float
    resume_send: float = INF
    confirmed_gone: bool = False


@dataclass
class Broker:
    body: dict[str, Any]
    timeout_s: float
    epochs: list[Epoch] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return self.body["brokerAddr"]


class Soak:
    def __init__(self, cfg: SoakConfig, urls: list[str], redis_url: str) -> None:
        self.cfg = cfg
        self.urls = urls
        self.redis_url = redis_url
        self.rng = random.Random(cfg.seed)
        self.ops: Counter[str] = Counter()
        self.errors: list[str] = []
        self.violations: list[str] = []
        self.stats: Counter[str] = Counter()
        self.brokers = self._brokers()
        self.stop = asyncio.Event()

    # ------------------------------------------------------------------ the population
    def _brokers(self) -> list[Broker]:
        cfg, rng = self.cfg, self.rng
        topic_names = [f"SoakTopic{i}" for i in range(cfg.topics)]
        out = []
        for g in range(cfg.groups):
            mine = set(topic_names[g::cfg.groups])  # every topic is served by some group
            mine |= set(rng.sample(topic_names, max(0, cfg.topics_per_group - len(mine))))
            slaves = 1 + (g % 3 == 0)  # some groups have two slaves
            timeout = rng.choice(cfg.timeouts_ms)
            for bid in range(1 + slaves):
                body = registration(addr=f"10.{50 + g // 200}.{g % 200}.{bid}:10911", name=f"soak-{g}",
                                    broker_id=bid, cluster=f"SoakCluster{g % cfg.clusters}",
                                    topics=sorted(mine), timeout_ms=timeout)
                out.append(Broker(body, timeout / 1000))
        return out

    # ------------------------------------------------------------------ HTTP
    async def call(self, session: aiohttp.ClientSession, op: str, path: str, body: Any = None) -> tuple[int, Any, float, float]:
        url = self.rng.choice(self.urls) + path
        sent = time.monotonic()
        try:
            if body is None:
                async with session.get(url) as resp:
                    status, data = resp.status, await resp.json()
            else:
                async with session.post(url, json=body) as resp:
                    status, data = resp.status, await resp.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            status, data = -1, str(exc)
        recv = time.monotonic()
        self.ops[f"{op} {status}"] += 1
        self.stats["operations"] += 1
        return status, data, sent, recv

    # ------------------------------------------------------------------ one broker's life
    async def broker_life(self, session: aiohttp.ClientSession, b: Broker) -> None:
        cfg, rng = self.cfg, self.rng
        await asyncio.sleep(rng.uniform(0, 1.0))  # brokers do not all start at once
        version = 1
        need_register = True
        while not self.stop.is_set():
            if need_register:
                if rng.random() < 0.3:
                    version += 1
                b.body["topicConfigSerializeWrapper"]["dataVersion"]["counter"] = version
                if b.gaps and b.gaps[-1].resume_send == INF:
                    # marked before sending: from now on the broker may be back at any moment
                    b.gaps[-1].resume_send = time.monotonic()
                status, data, sent, recv = await self.call(session, "register", "/v1/brokers/register", b.body)
                if status == 200:
                    if not b.epochs or b.epochs[-1].end_send != INF:
                        b.epochs.append(Epoch(start_recv=recv))
                    b.epochs[-1].pings.append((sent, recv))
                    need_register = False
                else:
                    self.errors.append(f"register {b.addr}: {status} {str(data)[:200]}")
                    await asyncio.sleep(0.2)
                    continue
            await asyncio.sleep(b.timeout_s / 4 * rng.uniform(0.8, 1.1))
            if self.stop.is_set():
                break
            roll = rng.random()
            if roll < cfg.p_silent:
                # silent long enough to expire, then back with a full registration
                last_ok = b.epochs[-1].pings[-1][1]
                b.epochs[-1].end_send = time.monotonic()
                b.gaps.append(Gap("silent", last_ok))
                self.stats["silences"] += 1
                await self.sleep_unless_stopped(b.timeout_s + cfg.scan_interval_ms / 1000 + 2.0 + rng.uniform(0, 1.5))
                need_register = True
            elif roll < cfg.p_silent + cfg.p_unregister:
                b.epochs[-1].end_send = time.monotonic()
                status, data, sent, recv = await self.call(session, "unregister", "/v1/brokers/unregister", identity(b.body))
                if status != 200:
                    self.errors.append(f"unregister {b.addr}: {status} {str(data)[:200]}")
                b.gaps.append(Gap("unregistered", recv))
                self.stats["unregisters"] += 1
                await self.sleep_unless_stopped(rng.uniform(0.3, 1.5))
                need_register = True
            elif roll < cfg.p_silent + cfg.p_unregister + cfg.p_full_register:
                need_register = True
            else:
                status, data, sent, recv = await self.call(session, "heartbeat", "/v1/brokers/heartbeat", identity(b.body))
                if status == 200:
                    b.epochs[-1].pings.append((sent, recv))
                elif status == 404:
                    # Expired. The last ping was applied no earlier than it was sent, and this
                    # heartbeat no later than its answer came back: only an answer back before
                    # that send + the timeout proves the broker was removed early. (The send
                    # time alone does not: a request can wait in a busy worker past the deadline.)
                    last_sent = b.epochs[-1].pings[-1][0]
                    if recv < last_sent + b.timeout_s - cfg.early_margin_s:
                        self.violations.append(f"live broker removed early: {b.addr} heartbeat 404 sent {sent - last_sent:.2f} s "
                                               f"and answered {recv - last_sent:.2f} s after a successful ping was sent "
                                               f"(timeout {b.timeout_s} s)")
                    self.stats["late heartbeats (client delay)"] += 1
                    self.stats["slowest late heartbeat answer ms"] = max(self.stats["slowest late heartbeat answer ms"],
                                                                         round((recv - sent) * 1000))
                    b.epochs[-1].end_send = sent
                    b.gaps.append(Gap("silent", b.epochs[-1].pings[-1][1], resume_send=INF))
                    need_register = True
                else:
                    self.errors.append(f"heartbeat {b.addr}: {status} {str(data)[:200]}")

    async def sleep_unless_stopped(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    # ------------------------------------------------------------------ checkers
    async def atomic_checker(self) -> None:
        r = aioredis.from_url(self.redis_url, socket_timeout=10)
        try:
            while not self.stop.is_set():
                found = await r.eval(CHECKS_LUA, 0, Keys().tag)
                self.stats["atomic checks"] += 1
                for v in found:
                    self.violations.append("invariant: " + (v.decode() if isinstance(v, bytes) else v))
                topics = await r.scard(Keys().topics)
                self.stats["max topics"] = max(self.stats["max topics"], topics)
                await asyncio.sleep(self.cfg.check_every_s)
        finally:
            await r.aclose()

    async def observer(self, session: aiohttp.ClientSession) -> None:
        cfg = self.cfg
        while not self.stop.is_set():
            await asyncio.sleep(cfg.observe_every_s)
            status, data, a, b_ = await self.call(session, "read-cluster", "/v1/cluster")
            if status != 200:
                self.errors.append(f"GET /v1/cluster: {status} {str(data)[:200]}")
                continue
            self.stats["observations"] += 1
            present = {addr for bd in data["brokerAddrTable"].values() for addr in bd["brokerAddrs"].values()}
            self.check_observation(present, a, b_)

    def check_observation(self, present: set[str], a: float, b: float) -> None:
        """`present`: addresses in a /v1/cluster answer sent at a, received at b; the answer
        shows the tables at some instant in [a - staleness, b]."""
        cfg = self.cfg
        early = a - cfg.staleness_s
        for br in self.brokers:
            for gap in br.gaps[-3:]:
                if gap.resume_send <= b:
                    continue
                due = gap.since + (br.timeout_s + cfg.scan_interval_ms / 1000 + cfg.gone_margin_s
                                   if gap.kind == "silent" else 0.0)
                if early > due:
                    self.stats[f"{gap.kind} checked gone"] += 1
                    if br.addr in present:
                        self.violations.append(f"{gap.kind} broker {br.addr} still present {early - gap.since:.2f} s "
                                               f"after its last answer (timeout {br.timeout_s} s)")
                    elif not gap.confirmed_gone:
                        gap.confirmed_gone = True
                        self.stats[f"{gap.kind} confirmed gone"] += 1
            if not br.epochs:
                continue
            ep = br.epochs[-1]
            if ep.start_recv > early or ep.end_send <= b:
                continue
            sent_before = [s for s, r in ep.pings if r <= early]
            if sent_before and max(sent_before) + br.timeout_s > b + cfg.early_margin_s:
                self.stats["live checked present"] += 1
                if br.addr not in present:
                    self.violations.append(f"live broker {br.addr} missing: last ping sent {b - max(sent_before):.2f} s "
                                           f"before the read (timeout {br.timeout_s} s)")

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=200)
        started = time.monotonic()
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            tasks = [asyncio.create_task(self.broker_life(session, b)) for b in self.brokers]
            tasks.append(asyncio.create_task(self.atomic_checker()))
            tasks.append(asyncio.create_task(self.observer(session)))
            await asyncio.sleep(cfg.duration_s)
            self.stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            ran = time.monotonic() - started
            # every broker is silent now: all gone within the longest timeout + interval + margin
            quiet_s = max(cfg.timeouts_ms) / 1000 + cfg.scan_interval_ms / 1000 + cfg.gone_margin_s + cfg.staleness_s
            await asyncio.sleep(quiet_s)
            status, data, _, _ = await self.call(session, "read-cluster", "/v1/cluster")
            scanner_expired = 0
            for url in self.urls:
                async with session.get(url + "/metrics") as resp:
                    for line in (await resp.text()).splitlines():
                        if line.startswith("rmq_scanner_expired_brokers_total") or line.startswith("rmq_scanner_expired_brokers "):
                            scanner_expired += int(float(line.split()[-1]))
        final_cluster_empty = status == 200 and data == {"brokerAddrTable": {}, "clusterAddrTable": {}}
        if not final_cluster_empty:
            self.violations.append(f"brokers left after every broker fell silent for {quiet_s:.1f} s: {str(data)[:300]}")
        r = redis.Redis.from_url(self.redis_url)
        quiescent = quiescent_violations(r)
        r.close()
        self.violations += ["quiescent: " + v for v in quiescent]
        return {
            "config": asdict(cfg),
            "seconds": round(ran, 1),
            "brokers": len(self.brokers),
            "masters": sum(1 for b in self.brokers if b.body["brokerId"] == 0),
            "slaves": sum(1 for b in self.brokers if b.body["brokerId"] != 0),
            "operations": self.stats["operations"],
            "operations_by_kind": dict(sorted(self.ops.items())),
            "expiries_scanner_removed": scanner_expired,
            "silences": self.stats["silences"],
            "silences_confirmed_gone": self.stats["silent confirmed gone"],
            "unregisters": self.stats["unregisters"],
            "checks": {k: v for k, v in self.stats.items() if k not in ("operations", "silences", "unregisters")},
            "errors": len(self.errors),
            "first_errors": self.errors[:20],
            "violations": len(self.violations),
            "first_violations": self.violations[:20],
        }


def run_soak(cfg: SoakConfig) -> dict[str, Any]:
    """Starts its own redis-server and worker processes, runs, stops them."""
    server = own_redis()
    workers = [Worker(server.url, RMQ_SCAN_INTERVAL_MS=cfg.scan_interval_ms, RMQ_REDIS_TIMEOUT_MS=2000).start()
               for _ in range(cfg.workers)]
    try:
        result = asyncio.run(Soak(cfg, [w.url for w in workers], server.url).run())
        result["workers_alive"] = all(w.alive() for w in workers)
        result["worker_errors_logged"] = sum(w.log(10**8).count("Traceback") for w in workers)
        if not result["workers_alive"] or result["worker_errors_logged"]:
            result["worker_log_tail"] = [w.log(2000) for w in workers]
        return result
    finally:
        for w in workers:
            w.cleanup()
        server.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    p.add_argument("--groups", type=int, default=40)
    p.add_argument("--topics", type=int, default=1200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="write the JSON report here")
    args = p.parse_args(argv)
    cfg = SoakConfig(duration_s=args.duration, groups=args.groups, topics=args.topics, seed=args.seed)
    result = run_soak(cfg)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    ok = result["violations"] == 0 and result["errors"] == 0 and result["workers_alive"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
