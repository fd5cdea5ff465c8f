"""Schema-driven fuzzing (schemathesis, from GET /v1/openapi.json) of real worker processes.

>= 10,000 generated requests in total (``RMQ_FUZZ_EXAMPLES`` for more), spread over
``RMQ_FUZZ_SHARDS`` (default 2) shard processes, each with its own worker and key prefix on
one redis-server of this test's own. No 5xx; for every rejected request and every read the
table snapshot after equals the one before (all of them; see tests/hardening/fuzz.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

from service.keys import Keys
from tests.hardening.harness import Worker, atomic_violations, own_redis
from tests.processes import ROOT

TOTAL = int(os.environ.get("RMQ_FUZZ_EXAMPLES", "10000"))
SHARDS = int(os.environ.get("RMQ_FUZZ_SHARDS", "2"))


@pytest.mark.timeout(0 if "RMQ_FUZZ_EXAMPLES" in os.environ else 900)
def test_schemathesis_fuzz_no_5xx_and_rejected_requests_change_nothing() -> None:
    server = own_redis()
    workers = [Worker(server.url, RMQ_KEY_PREFIX=f"fuzz{i}", RMQ_SCAN_INTERVAL_MS=3_600_000,
                      RMQ_MAX_BODY_BYTES=262_144).start() for i in range(SHARDS)]
    outdir = Path(tempfile.mkdtemp(prefix="rmq-fuzz-"))
    procs = []
    try:
        started = time.monotonic()
        for i, w in enumerate(workers):
            per = -(-TOTAL // SHARDS)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.hardening.fuzz", "--worker", w.url, "--redis", server.url,
                 "--prefix", f"fuzz{i}", "--count", str(per), "--seed", str(i), "--out", str(outdir / f"{i}.json")],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outputs = [p.communicate(timeout=None if "RMQ_FUZZ_EXAMPLES" in os.environ else 850)[0].decode(errors="replace")
                   for p in procs]
        elapsed = time.monotonic() - started
        for p, out in zip(procs, outputs):
            assert p.returncode == 0, out[-5000:]
        results = [json.loads((outdir / f"{i}.json").read_text()) for i in range(SHARDS)]
        total = sum(r["requests"] for r in results)
        statuses: dict[str, int] = {}
        for r in results:
            for k, v in r["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
        checked = sum(r["stats"].get("snapshots checked", 0) for r in results)
        print(f"\nfuzz: {total} requests in {elapsed:.0f} s over {SHARDS} shards; statuses {statuses}; "
              f"{checked} snapshots compared; {sum(r['reseeds'] for r in results)} reseeds; "
              f"operations {results[0]['operations']}")
        report = os.environ.get("RMQ_FUZZ_REPORT")
        if report:
            Path(report).write_text(json.dumps({"requests": total, "seconds": round(elapsed), "statuses": statuses,
                                                "snapshots_checked": checked, "shards": results}, indent=1))
        failures = [f for r in results for f in r["failures"]]
        assert not failures, f"{len(failures)} failures, first ones:\n" + "\n".join(failures[:10])
        assert all(r["violations"] == [] for r in results), [r["violations"] for r in results]
        assert total >= TOTAL, total
        assert all(w.alive() for w in workers)
        r = redis.Redis.from_url(server.url)
        for i in range(SHARDS):
            assert atomic_violations(r, Keys(f"fuzz{i}")) == []
        r.close()
        for w in workers:
            assert "Traceback" not in w.log(10**7), w.log()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for w in workers:
            w.cleanup()
        server.cleanup()
