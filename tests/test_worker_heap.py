"""A worker process keeps what its start left out of the garbage collector's full
collections (service/worker.py, freeze_startup_heap): each of those walks every tracked
object holding the GIL, and at some 70,000 start-up objects one came to 16-32 ms of CPU,
triggered by a big registration's allocations, while route reads waited (bench/README.md, 7c)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from tests.processes import start, wait_http
from tests.redis_server import free_port
from tests.waits import until_sync

# `python -m service` as it runs, plus a SIGUSR1 handler that writes the collector's counts:
# objects frozen, and objects its collections still walk
COUNTING_WORKER = """
import gc, signal, sys
from pathlib import Path
from service.cli import main

def counts(*_):
    Path(sys.argv[1]).write_text(f"{gc.get_freeze_count()} {len(gc.get_objects())}")

signal.signal(signal.SIGUSR1, counts)
sys.exit(main(sys.argv[2:]))
"""


def test_a_started_worker_has_frozen_its_startup_heap(redis_url: str, tmp_path: Path) -> None:
    port, counts = free_port(), tmp_path / "counts"
    proc = start([sys.executable, "-c", COUNTING_WORKER, str(counts), "serve", "--port", str(port)],
                 env={"REDIS_URL": redis_url, "RMQ_HOST": "127.0.0.1"})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", limit_s=60)
        proc.send_signal(signal.SIGUSR1)
        until_sync(counts.exists, 10, "the worker's counts written")
        frozen, walked = map(int, counts.read_text().split())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    # the start's objects frozen, a few hundred made since left to the collector
    assert frozen > 10 * walked, f"{frozen} objects frozen, {walked} walked by a full collection"
