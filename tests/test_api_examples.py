"""docs/api.md's examples are tests: every ```http block there is one exchange (the request,
then the answer from its `HTTP/1.1` status line on), sent in the document's order to a real
worker on a real, empty Redis, and the answer must be the one shown: its status, every
header shown, and its JSON body key for key (an unquoted `<...>` in it stands for a value
that changes, such as a time). Examples are read from the Markdown, so they cannot drift."""

from __future__ import annotations

import http.client
import json
import signal
from dataclasses import dataclass
from typing import Iterator

import pytest

from tests.doc_blocks import Block, blocks, differences, parse_documented
from tests.processes import ROOT, console_script, start, wait_http
from tests.redis_server import RedisServer, free_port

API_MD = ROOT / "docs" / "api.md"


@dataclass(frozen=True)
class Exchange:
    block: Block
    method: str
    target: str
    headers: dict[str, str]
    body: str
    status: int
    answer_headers: dict[str, str]
    answer: str


def head_and_body(lines: list[str]) -> tuple[str, dict[str, str], str]:
    blank = lines.index("") if "" in lines else len(lines)
    headers = dict(line.split(": ", 1) for line in lines[1:blank])
    return lines[0], headers, "\n".join(lines[blank + 1:]).strip()


def exchange(block: Block) -> Exchange:
    lines = block.text.rstrip("\n").split("\n")
    split = next(i for i, line in enumerate(lines) if line.startswith("HTTP/1.1 "))
    request_line, headers, body = head_and_body(lines[:split])
    status_line, answer_headers, answer = head_and_body(lines[split:])
    method, target = request_line.split()[:2]
    return Exchange(block, method, target, headers, body, int(status_line.split()[1]), answer_headers, answer)


def examples() -> list[Exchange]:
    return [exchange(b) for b in blocks(API_MD) if b.lang == "http"]


def check(ex: Exchange, port: int) -> list[str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(ex.method, ex.target, body=ex.body.encode() if ex.body else None, headers=ex.headers)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    where = ex.block.where(API_MD) + f" {ex.method} {ex.target}"
    if resp.status != ex.status:
        return [f"{where}: status {resp.status}, documented {ex.status}: {raw[:300]!r}"]
    found = []
    for name, shown in ex.answer_headers.items():
        value = resp.getheader(name)
        if value is None:
            found.append(f"{where}: no {name} header")
        elif not (shown.startswith("<") and shown.endswith(">")) and value.split(";")[0] != shown:
            found.append(f"{where}: {name}: {value}, documented {shown}")
    if not ex.answer:
        return found + ([f"{where}: a body {raw[:200]!r}, none documented"] if raw else [])
    return found + [f"{where}: {d}" for d in differences(parse_documented(ex.answer), json.loads(raw))]


@pytest.fixture
def worker(own_redis: RedisServer) -> Iterator[int]:
    port = free_port()
    proc = start([console_script("rmq-registry"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                 env={"REDIS_URL": own_redis.url})
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", limit_s=60)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_every_http_example_of_docs_api_md_answers_as_shown(worker: int) -> None:
    found = examples()
    assert len(found) >= 15, "docs/api.md's examples are ```http blocks"
    problems = [p for ex in found for p in check(ex, worker)]
    assert not problems, "\n".join(problems)


def test_docs_api_md_shows_its_examples_as_http_exchanges() -> None:
    """A JSON block would be an example nothing runs: write it as an ```http exchange."""
    stray = [b.where(API_MD) for b in blocks(API_MD) if b.lang in ("json", "sh", "bash") and b.not_run is None]
    assert not stray, f"examples outside ```http exchanges (tests/test_api_examples.py runs those): {stray}"
