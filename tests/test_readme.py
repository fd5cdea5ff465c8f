"""README's shell blocks are tests: every ```bash block runs as written, read from
README.md, unless an HTML comment right above it says why not (`<!-- not run by the tests:
needs a Kubernetes cluster -->`), so a new block is run by default.

What a block is given, as a user on one machine would have it:
- free ports instead of the ones written (`localhost:N`, `127.0.0.1:N`, `--port N`,
  `..._PORT=N`), the same one for each number throughout the block, so that a machine
  running other things (or another suite) does not collide with it;
- `./scripts/serve` is this checkout's `rmq-registry serve`, what the script runs once its
  virtualenv exists (the tests' virtualenv is that one);
- a block that talks to the walk-through's worker (port 8080) without starting one gets
  one, on a real Redis, as "With ./scripts/serve running in another terminal" says;
- answers shown as comments (`# {...}`, folded lines going on with `#  `) are what the
  block must print, in order; a block must also exit 0 under `bash -euo pipefail`.
Whatever a block leaves running (its `&` jobs) is stopped with its process group."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.doc_blocks import Block, blocks
from tests.processes import ROOT, console_script, start, wait_http
from tests.redis_server import RedisServer, free_port

README = ROOT / "README.md"
PORT = re.compile(r"(?<=localhost:)\d{4,5}\b|(?<=127\.0\.0\.1:)\d{4,5}\b|(?<=--port )\d{4,5}\b|(?<=_PORT=)\d{4,5}\b")
WALKTHROUGH_PORT = 8080


def shell_blocks() -> list[Block]:
    return [b for b in blocks(README) if b.lang in ("bash", "sh")]


def runnable() -> list[Block]:
    return [b for b in shell_blocks() if b.not_run is None]


def shown_output(script: str) -> str:
    """The answers the block shows as comments; curl prints them without newlines."""
    shown, lines = [], script.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("# {", "# [")) or (line.startswith("#  ") and shown and lines[i - 1].startswith("#")):
            shown.append(line[2:].strip())
    return "".join(shown)


def as_run_here(script: str) -> tuple[str, dict[int, int]]:
    ports = {int(n): free_port() for n in dict.fromkeys(PORT.findall(script))}
    script = PORT.sub(lambda m: str(ports[int(m.group())]), script)
    return script.replace("./scripts/serve", f"{console_script('rmq-registry')} serve"), ports


@pytest.fixture
def walkthrough_worker(own_redis: RedisServer) -> Iterator[Callable[[int], None]]:
    procs = []

    def serve(port: int) -> None:
        procs.append(start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                           env={"REDIS_URL": own_redis.url}))
        wait_http(f"http://127.0.0.1:{port}/readyz", limit_s=60)

    yield serve
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_every_shell_block_is_run_or_says_why_not() -> None:
    assert runnable(), "README.md has no shell block the tests run"
    for block in shell_blocks():
        assert block.not_run is None or len(block.not_run) > 10, block.where(README)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.heading)
def test_readme_shell_block_runs_as_written(block: Block, walkthrough_worker: Callable[[int], None],
                                            tmp_path: Path) -> None:
    script, ports = as_run_here(block.text)
    if WALKTHROUGH_PORT in ports and not re.search(r"scripts/serve|rmq-registry serve", block.text):
        walkthrough_worker(ports[WALKTHROUGH_PORT])
    environ = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("RMQ_")}
    # files, not pipes: what the block leaves running would hold a pipe open after it ends
    with open(tmp_path / "out", "w+") as stdout, open(tmp_path / "err", "w+") as stderr:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=environ,
                                stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            proc.wait(timeout=120)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # the block's own group: what it left running
            except ProcessLookupError:
                pass
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert proc.returncode == 0, f"{block.where(README)} exited {proc.returncode}:\n{err[-2000:]}"
    assert out == shown_output(block.text), block.where(README)


def test_every_server_a_runnable_block_starts_listens_on_the_loopback_only() -> None:
    """They run with no password and authentication off: another host must not reach them."""
    for block in runnable():
        for line in block.text.replace("\\\n", " ").splitlines():
            if re.search(r"^\s*[^#]*redis-server\b", line):
                assert "--bind 127.0.0.1" in line, (block.where(README), line)
            if re.search(r"^\s*[^#]*(scripts/serve|rmq-registry serve)\b", line):
                assert "--host 127.0.0.1" in line, (block.where(README), line)
