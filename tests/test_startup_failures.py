"""A worker that cannot start says why in one line and exits non-zero within seconds:
real worker processes against a taken port, a closed Redis port, bad secrets."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.processes import console_script, start
from tests.redis_server import free_port

SERVE = [console_script("rmq-registry"), "serve", "--host", "127.0.0.1"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else already listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# "At once": well inside the 30 s a worker waits for Redis by default (RMQ_REDIS_START_TIMEOUT_MS),
# with room for a loaded machine's slow Python start-up
AT_ONCE_S = 20


def refused(args: list[str], env: dict[str, str], limit_s: float = 40) -> tuple[str, float]:
    """Runs a worker that must refuse to start: (its output, seconds it took). It must
    exit non-zero, without a traceback, with exactly one line saying it cannot start."""
    began = time.monotonic()
    proc = start(args, env)
    try:
        out = proc.communicate(timeout=limit_s)[0].decode()
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running after {limit_s} s: {proc.communicate()[0].decode()}") from None
    took = time.monotonic() - began
    assert proc.returncode != 0, out
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if "cannot start" in line]
    assert len(lines) == 1, out
    return lines[0], took


def test_a_taken_http_port_with_redis_exits_at_once_naming_RMQ_PORT(redis_url: str, taken_port: int) -> None:
    line, took = refused(SERVE + ["--port", str(taken_port)], {"REDIS_URL": redis_url})
    assert "RMQ_PORT" in line and f"127.0.0.1:{taken_port}" in line and "in use" in line
    assert took < AT_ONCE_S


def test_a_taken_remoting_port_with_redis_exits_at_once_naming_RMQ_REMOTING_PORT(redis_url: str, taken_port: int) -> None:
    line, took = refused(SERVE + ["--port", str(free_port())],
                         {"REDIS_URL": redis_url, "RMQ_REMOTING_PORT": str(taken_port)})
    assert "RMQ_REMOTING_PORT" in line and f"127.0.0.1:{taken_port}" in line and "in use" in line
    assert took < AT_ONCE_S


def test_a_taken_http_port_on_the_embedded_store_exits_with_one_line(taken_port: int) -> None:
    line, _ = refused([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(taken_port)], {})
    assert "RMQ_PORT" in line and str(taken_port) in line


def test_an_unreachable_redis_is_retried_for_the_start_timeout_then_the_worker_exits() -> None:
    closed = free_port()
    line, took = refused(SERVE + ["--port", str(free_port())],
                         {"REDIS_URL": f"redis://127.0.0.1:{closed}/0", "RMQ_REDIS_START_TIMEOUT_MS": "2000"})
    assert "REDIS_URL" in line and f"127.0.0.1:{closed}" in line and "RMQ_REDIS_START_TIMEOUT_MS" in line
    assert 2 <= took < AT_ONCE_S


def test_the_retry_for_redis_at_start_is_announced() -> None:
    closed = free_port()
    proc = start(SERVE + ["--port", str(free_port())],
                 {"REDIS_URL": f"redis://127.0.0.1:{closed}/0", "RMQ_REDIS_START_TIMEOUT_MS": "1000"})
    out = proc.communicate(timeout=40)[0].decode()
    assert "retrying for up to 1.0 s (RMQ_REDIS_START_TIMEOUT_MS)" in out


def test_a_worker_waiting_for_redis_at_start_stops_at_once_on_sigterm() -> None:
    proc = start(SERVE + ["--port", str(free_port())],
                 {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "RMQ_REDIS_START_TIMEOUT_MS": "60000"})
    try:
        assert proc.stdout is not None
        while b"retrying for up to" not in proc.stdout.readline():
            assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = proc.wait(timeout=40)
        assert time.monotonic() - sent < AT_ONCE_S  # not the 60 s start timeout
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate()[0].decode()
    assert code == 0 and "Traceback" not in out and "stop requested while starting" in out


def tokens_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    return str(path)


def test_a_placeholder_token_refuses_to_start_and_is_not_printed(redis_url: str, tmp_path: Path) -> None:
    path = tokens_file(tmp_path, "broker 9f0c1d2e3f\nadmin REPLACE-ME-admin-token\n")
    line, _ = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": redis_url, "RMQ_AUTH_TOKENS_FILE": path})
    assert "RMQ_AUTH_TOKENS_FILE" in line and path in line and "line 2" in line and "placeholder" in line
    assert "REPLACE-ME-admin-token" not in line


def test_a_placeholder_secret_key_refuses_to_start(redis_url: str, tmp_path: Path) -> None:
    path = tokens_file(tmp_path, "# keys\nbroker brokerAK REPLACE-ME-broker-secret-key\n")
    line, _ = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": redis_url, "RMQ_AUTH_TOKENS_FILE": path})
    assert "line 2" in line and "secret key" in line and "REPLACE-ME-broker-secret-key" not in line


def test_a_tokens_file_without_credentials_refuses_to_start(redis_url: str, tmp_path: Path) -> None:
    path = tokens_file(tmp_path, "# nothing yet\n\n")
    line, _ = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": redis_url, "RMQ_AUTH_TOKENS_FILE": path})
    assert "RMQ_AUTH_TOKENS_FILE" in line and path in line and "no credentials" in line


def test_an_unreadable_tokens_file_refuses_to_start(redis_url: str, tmp_path: Path) -> None:
    path = str(tmp_path / "missing")
    line, _ = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": redis_url, "RMQ_AUTH_TOKENS_FILE": path})
    assert "RMQ_AUTH_TOKENS_FILE" in line and path in line and "cannot read" in line


def test_a_placeholder_redis_password_refuses_to_start_and_is_not_printed(redis_server: object) -> None:
    url = f"redis://:REPLACE-ME-redis-password@127.0.0.1:{free_port()}/0"
    line, took = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": url})
    assert "REDIS_URL" in line and "placeholder" in line and "REPLACE-ME-redis-password" not in line
    assert took < AT_ONCE_S


def test_an_empty_redis_password_refuses_to_start(redis_server: object) -> None:
    line, _ = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": f"redis://:@127.0.0.1:{free_port()}/0"})
    assert "REDIS_URL" in line and "empty password" in line


@pytest.mark.parametrize("url, what", [
    ("redis+sentinel://:pw@127.0.0.1:26379/mymaster/0?sentinel_password=REPLACE-ME-sentinel", "sentinel password is a placeholder"),
    ("redis+sentinel://:REPLACE-ME-redis@127.0.0.1:26379,127.0.0.2:26379/mymaster/0", "the password is a placeholder"),
    ("rediss://user:@127.0.0.1:6380/0", "an empty password"),
])
def test_every_password_of_a_redis_url_is_checked_and_masked(url: str, what: str) -> None:
    from service.config import StartupError
    from service.startup import check_redis_url

    with pytest.raises(StartupError) as refused:
        check_redis_url(url)
    line = str(refused.value)
    assert what in line and line.startswith("REDIS_URL=") and "REPLACE-ME-sentinel" not in line
    assert "REPLACE-ME-redis" not in line and ":pw@" not in line
