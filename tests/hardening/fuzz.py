"""Schema-driven fuzzing of a real worker with schemathesis, one shard per process.

A shard loads GET /v1/openapi.json from its worker, generates requests for every operation
(positive and negative modes) and sends them one at a time. For every request: no 5xx; and
when it is rejected (4xx), or is a read, the whole table under the shard's key prefix (every
key, timestamps and scores included, read atomically in one script) must be exactly what it
was before. After every accepted change the table goes back to the seed, so every request
starts from the same small table and every snapshot is checked (no sampling).

Generation is CPU-bound (10-100 ms a case), so the test runs several shards in parallel,
each with its own worker and key prefix on one redis-server.

    python -m tests.hardening.fuzz --worker URL --redis URL --prefix P --count N --seed S --out F
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import redis
import requests

from service.keys import ORDER_TOPIC_CONFIG, Keys
from tests.builders import registration, topic_config
from tests.hardening.harness import atomic_snapshot, atomic_violations

DAY_MS = 86_400_000  # the longest accepted timeout: nothing expires during a run

SEED = [
    registration(addr="10.0.0.1:10911", name="broker-a", broker_id=0, cluster="c1", timeout_ms=DAY_MS,
                 topics={"T1": topic_config("T1"), "T2": topic_config("T2", 8, 8, 6, 1),
                         "T3": topic_config("T3", 2, 2, 4, 2)}, filters=["10.0.0.9:1"]),
    registration(addr="10.0.0.2:10911", name="broker-a", broker_id=1, cluster="c1", timeout_ms=DAY_MS),
    registration(addr="10.0.1.1:10911", name="broker-b", broker_id=0, cluster="c2", timeout_ms=DAY_MS,
                 topics=["T1", "T4"]),
]
SEED_KV = [(ORDER_TOPIC_CONFIG, "T1", "broker-a:4"), ("NS", "k1", "v1")]

# operations with a body or parameters deserve more examples than a bare GET
WEIGHT = {"POST": 3, "PUT": 3, "DELETE": 2, "GET": 1}


@dataclass
class Target:
    """A worker on a seeded table; ``expected`` is the table as seeded."""

    url: str
    r: redis.Redis
    keys: Keys
    session: requests.Session = field(default_factory=requests.Session)
    seed_dump: list[tuple[bytes, bytes, int]] = field(default_factory=list)
    expected: dict[str, Any] = field(default_factory=dict)
    reseeds: int = 0

    def seed(self) -> None:
        for body in SEED:
            resp = self.session.post(self.url + "/v1/brokers/register", json=body, timeout=10)
            assert resp.status_code == 200, resp.text
        for ns, key, value in SEED_KV:
            resp = self.session.put(f"{self.url}/v1/kv/{ns}/{key}", json={"value": value}, timeout=10)
            assert resp.status_code == 200, resp.text
        assert atomic_violations(self.r, self.keys) == []
        self.seed_dump = [(k, self.r.dump(k), self.r.pttl(k)) for k in self.r.keys(self.keys.tag + ":*")
                          if k != self.keys.version.encode()]
        self.reseed()

    def reseed(self) -> None:
        """Back to the seeded table in one transaction; caches are told by a new version."""
        pipe = self.r.pipeline(transaction=True)
        stale = self.r.keys(self.keys.tag + ":*")
        stale = [k for k in stale if k != self.keys.version.encode()]
        if stale:
            pipe.delete(*stale)
        for key, dump, ttl in self.seed_dump:
            pipe.restore(key, max(ttl, 0), dump, replace=True)
        pipe.incr(self.keys.version)
        pipe.publish(self.keys.changes, "0")
        pipe.execute()
        self.expected = self.snapshot()
        self.reseeds += 1

    def snapshot(self) -> dict[str, Any]:
        return atomic_snapshot(self.r, self.keys)

    def diff(self, after: dict[str, Any]) -> list[str]:
        return sorted(k for k in set(after) | set(self.expected) if after.get(k) != self.expected.get(k))


def _runner(strategy: Any, n: int, seed_value: int, body: Callable[[Any], None]) -> Callable[[], None]:
    from hypothesis import HealthCheck, Phase, given, seed, settings

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Any) -> None:
        body(case)

    return run


def run_fuzz(target: Target, total: int, seed_base: int = 0, time_limit_s: float = 3600) -> dict[str, Any]:
    """Sends at least ``total`` generated requests (unless the time limit ends it first)."""
    import schemathesis
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(target.url + "/v1/openapi.json")
    ops = [result.ok() for result in schema.get_all_operations()]
    stats: collections.Counter[str] = collections.Counter()
    by_status: collections.Counter[str] = collections.Counter()
    by_op: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()

    def send(case: Any, mode: str) -> None:
        if time.monotonic() - started > time_limit_s:
            return
        resp = case.call(base_url=target.url, session=target.session, timeout=10)
        stats["requests"] += 1
        stats[mode] += 1
        by_status[str(resp.status_code)] += 1
        by_op[f"{case.method.upper()} {case.path}"] += 1
        where = (f"{case.method.upper()} {case.formatted_path} query={case.query!r} "
                 f"body={json.dumps(case.body, default=str)[:300] if case.body is not None else None} "
                 f"-> {resp.status_code} {resp.text[:300]}")
        if resp.status_code >= 500:
            failures.append("5xx: " + where)
            target.reseed()
            return
        rejected = 400 <= resp.status_code < 500
        if rejected or case.method.upper() == "GET":
            stats["snapshots checked"] += 1
            after = target.snapshot()
            if after != target.expected:
                kind = "rejected" if rejected else "read"
                failures.append(f"table changed by a {kind} request: {target.diff(after)[:10]}: {where}")
                target.reseed()
        else:
            target.reseed()

    weights = {f"{op.method} {op.path}": WEIGHT.get(op.method.upper(), 1) * (2 if op.body else 1) for op in ops}
    round_no = 0
    while stats["requests"] < total and round_no < 20 and time.monotonic() - started < time_limit_s:
        remaining = total - stats["requests"]
        total_weight = sum(weights.values())
        for op in ops:
            share = max(2, remaining * weights[f"{op.method} {op.path}"] // total_weight)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    strategy = op.as_strategy(generation_mode=mode)
                except Exception:  # noqa: BLE001 - nothing to generate in this mode
                    stats[f"no {mode.value} strategy"] += 1
                    continue
                seed_value = seed_base * 100_000 + round_no * 1000 + zlib.crc32(f"{op.method} {op.path} {mode.value}".encode()) % 1000
                try:
                    _runner(strategy, max(1, share // 2), seed_value, lambda case, m=mode.value: send(case, m))()
                except Unsatisfiable:
                    stats["unsatisfiable (no such example)"] += 1
        round_no += 1
    return {
        "requests": stats["requests"],
        "seconds": round(time.monotonic() - started, 1),
        "stats": dict(stats),
        "statuses": dict(sorted(by_status.items())),
        "by_operation": dict(sorted(by_op.items())),
        "operations": len(ops),
        "reseeds": target.reseeds,
        "failures": failures,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", required=True)
    p.add_argument("--redis", required=True)
    p.add_argument("--prefix", default="rmq")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=3600)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis)
    target = Target(args.worker, r, Keys(args.prefix))
    target.seed()
    result = run_fuzz(target, args.count, args.seed, args.time_limit)
    result["violations"] = atomic_violations(r, target.keys)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
