"""What pyproject.toml declares is what is tested: a worker started as a user starts it
serves cached HTTP route reads, with no traceback, on the lowest aiohttp and redis-py the
declaration admits, on later aiohttp releases (the last of each minor line, and those that
broke the old connection-handler shortcut), and on the newest; the HTTP front's and the
Redis Cluster tests pass on the lowest; the lowest cryptography makes the RocketMQ
port's self-signed certificate; and the settings' tests pass on the lowest pydantic and
pydantic-settings.

Each runs the checkout's code on a venv of its own (tests/dependency_venvs.py: made
with pip once, then reused). Select them with ``-m dependency_range``, leave them out with
``-m "not dependency_range"``; the first run downloads the wheels (a few minutes), later
ones take seconds. ``RMQ_AIOHTTP_RELEASES=all`` checks every aiohttp release above the
floor that pip's index lists, not just the ones named below.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from packaging.version import Version

from tests import dependency_venvs as venvs
from tests.builders import registration
from tests.processes import wait_http
from tests.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.dependency_range, pytest.mark.timeout(1200)]

TOPIC = "RangeTopic"
# Later aiohttp releases checked besides the floor and the newest: the last of each minor
# line, and 3.13.2 and 3.14.0, on which the old shortcut failed. A maintainer adds the last
# of each new minor line here.
LATER_AIOHTTP = ["3.9.5", "3.10.11", "3.11.18", "3.12.15", "3.13.2", "3.13.5", "3.14.0"]
# RMQ_AIOHTTP_RELEASES=all checks every later release instead, a venv each: a maintainer's
# check before a release of this project, too long for every suite.
EVERY_RELEASE = "all"


def every_later_aiohttp() -> list[str]:
    """Every aiohttp release above the declared floor that `pip index versions` lists (so
    through pip's own index configuration), oldest first."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "index", "versions",
                           "aiohttp"], capture_output=True, text=True, timeout=120)
    listed = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or listed is None:
        raise RuntimeError(f"pip index versions aiohttp listed no releases:\n{(done.stdout + done.stderr)[-2000:]}")
    floor = Version(venvs.floor("aiohttp"))
    releases = (Version(v.strip()) for v in listed.group(1).split(","))
    return [str(v) for v in sorted(v for v in releases if v > floor and not v.is_prerelease)]


def later_aiohttp() -> list[str]:
    wanted = os.environ.get("RMQ_AIOHTTP_RELEASES", "")
    if wanted and wanted != EVERY_RELEASE:
        raise ValueError(f"RMQ_AIOHTTP_RELEASES={wanted!r}: the one value it takes is {EVERY_RELEASE!r}")
    return every_later_aiohttp() if wanted else LATER_AIOHTTP


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    server = RedisServer()
    server.start()
    yield server.url
    server.cleanup()


def release_venv(aiohttp: str) -> Path:
    """Runtime dependencies only: aiohttp at `aiohttp`, redis-py at its declared floor. One
    venv a release, made once and never changed after: a second suite beside this one may
    be serving from it."""
    return venvs.venv(f"aiohttp-{aiohttp}", [f"aiohttp=={aiohttp}", f"redis[hiredis]=={venvs.floor('redis')}"])


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status, resp.read()


def answers(sock: socket.socket, n: int) -> list[tuple[int, bytes]]:
    """`n` HTTP answers (status, body) read from `sock`, each of Content-Length bytes."""
    data, out = b"", []
    while len(out) < n:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            m = re.search(rb"\r\ncontent-length: (\d+)", data[:head_end], re.IGNORECASE)
            end = head_end + 4 + (int(m.group(1)) if m else 0)
            if len(data) >= end:
                out.append((int(data[9:12]), data[head_end + 4:end]))
                data = data[end:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {len(out)} of {n} answers"
        data += chunk
    return out


def serve_cached_reads(venv: Path, redis_url: str) -> tuple[str, str]:
    """Starts a worker on `venv`'s dependencies, reads a route many ways (one connection
    per read as curl does, keep-alive, pipelined), stops it; its aiohttp version and its
    whole output. Fails on any answer but the route."""
    port = free_port()
    worker = subprocess.Popen([str(venvs.python(venv)), "-m", "service", "serve", "--host", "127.0.0.1",
                               "--port", str(port)], cwd=venvs.ROOT, env=venvs.environment(REDIS_URL=redis_url),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/readyz", 60)
        assert http("POST", f"{base}/v1/brokers/register", json.dumps(registration(topics=[TOPIC])).encode())[0] == 200
        status, route = http("GET", f"{base}/v1/routes/{TOPIC}")
        assert status == 200 and json.loads(route)["queueDatas"]
        for _ in range(10):  # a connection a read
            assert http("GET", f"{base}/v1/routes/{TOPIC}") == (200, route)
        get = f"GET /v1/routes/{TOPIC} HTTP/1.1\r\nHost: registry\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for _ in range(10):  # keep-alive, one at a time
                sock.sendall(get)
                assert answers(sock, 1) == [(200, route)]
            sock.sendall(get * 20)  # pipelined
            assert answers(sock, 20) == [(200, route)] * 20
        metrics = http("GET", f"{base}/metrics")[1].decode()
        assert float(re.search(r"\nrmq_cache_hits_total ([0-9.e+]+)", metrics).group(1)) >= 40  # type: ignore[union-attr]
    except BaseException as exc:
        worker.kill()
        output = worker.communicate(timeout=60)[0].decode(errors="replace")
        raise AssertionError(f"{exc}; the worker's output:\n{output[-3000:]}") from exc
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=60)[0].decode(errors="replace")
    assert worker.returncode == 0, output[-3000:]
    return venvs.version(venv, "aiohttp"), output


def same(a: str, b: str) -> bool:
    return Version(a) == Version(b)  # "3.9" and "3.9.0" are one release


def no_traceback(output: str) -> None:
    assert "Traceback" not in output and "Error handling request" not in output, output[-3000:]


def test_the_lowest_declared_aiohttp_and_redis_py_serve_cached_route_reads(redis_url: str) -> None:
    venv = release_venv(venvs.floor("aiohttp"))
    aiohttp_version, output = serve_cached_reads(venv, redis_url)
    assert same(aiohttp_version, venvs.floor("aiohttp")) and same(venvs.version(venv, "redis"), venvs.floor("redis"))
    no_traceback(output)


@pytest.mark.parametrize("release", later_aiohttp())
def test_a_later_aiohttp_release_serves_cached_route_reads(redis_url: str, release: str) -> None:
    aiohttp_version, output = serve_cached_reads(release_venv(release), redis_url)
    assert aiohttp_version == release
    no_traceback(output)


def test_the_newest_aiohttp_and_redis_py_serve_cached_route_reads(redis_url: str) -> None:
    newest = venvs.venv("newest", [])
    venvs.upgrade(newest, "aiohttp", "redis[hiredis]")  # whatever is newest today
    _, output = serve_cached_reads(newest, redis_url)
    no_traceback(output)


def test_the_http_front_and_redis_cluster_tests_pass_on_the_lowest_declared_releases() -> None:
    floor = venvs.venv("floor-test", [f"aiohttp=={venvs.floor('aiohttp')}",
                                      f"redis[hiredis]=={venvs.floor('redis')}"], extras="test")
    assert same(venvs.version(floor, "aiohttp"), venvs.floor("aiohttp"))
    assert same(venvs.version(floor, "redis"), venvs.floor("redis"))
    suite_passes(floor, "tests/test_http_route_reads.py", "tests/test_redis_cluster.py", "tests/test_shutdown.py")


def suite_passes(venv: Path, *files: str) -> None:
    """The checkout's tests in `files` pass with `venv`'s dependencies."""
    done = subprocess.run([str(venvs.python(venv)), "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
                          cwd=venvs.ROOT, env=venvs.environment(), capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout, done.stdout[-3000:]


# a TLS handshake against the worker's self-signed certificate, the client trusting it for "localhost"
HANDSHAKE = """
import socket, ssl, threading
from service.remoting import tls
ours, theirs = socket.socketpair()
cert = tls._self_signed()[0]  # made once, before the thread: two first calls at once made two
server = threading.Thread(target=lambda: tls.server_context(None, None).wrap_socket(ours, server_side=True))
server.start()
client = ssl.create_default_context(cadata=cert.decode())
with client.wrap_socket(theirs, server_hostname="localhost") as s:
    print(dict(x[0] for x in s.getpeercert()["subject"])["commonName"])
server.join()
"""


def test_the_lowest_declared_cryptography_makes_a_certificate_a_tls_client_accepts() -> None:
    floor = venvs.venv("cryptography-floor", [f"cryptography=={venvs.floor('cryptography')}"])
    assert same(venvs.version(floor, "cryptography"), venvs.floor("cryptography"))
    done = subprocess.run([str(venvs.python(floor)), "-c", HANDSHAKE], cwd=venvs.ROOT, env=venvs.environment(),
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "localhost"), (done.stdout + done.stderr)[-3000:]


def test_the_settings_tests_pass_on_the_lowest_declared_pydantic_and_pydantic_settings() -> None:
    floor = venvs.venv("settings-floor", [f"pydantic=={venvs.floor('pydantic')}",
                                          f"pydantic-settings=={venvs.floor('pydantic-settings')}"], extras="test")
    assert same(venvs.version(floor, "pydantic"), venvs.floor("pydantic"))
    assert same(venvs.version(floor, "pydantic-settings"), venvs.floor("pydantic-settings"))
    suite_passes(floor, "tests/test_settings.py", "tests/test_previous_settings.py")
