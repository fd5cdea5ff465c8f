"""A worker that cannot start says why in one line and exits 2 within seconds: real worker
processes against a taken port, a closed Redis port, bad secrets, bad settings, a Redis
with a password (given wrong, or holding URL-special characters, which no output shows)."""

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
from tests.redis_server import RedisServer, free_port

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
    assert proc.returncode == 2, out
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


# ------------------------------------------------------------------ bad settings
# Each refused before anything starts: exit 2, and stderr is that one line (nothing on stdout).

PASSWORD = "p@ss/w:rd#1"  # every character a URL parser could take for a delimiter
ENCODED = "p%40ss%2Fw%3Ard%231"
# what would give the password away, whole or in part (the host a parser makes of it included)
PASSWORD_PARTS = (PASSWORD, ENCODED, "p@ss", "ss/w", "w:rd", "rd#1", "p%40", "connecting to ss:")


def bad_setting(env: dict[str, str], args: list[str] | None = None) -> str:
    """Runs a worker with a bad setting: the one line it writes on stderr, once it has
    exited 2 at once, with nothing on stdout and no password anywhere (first_line)."""
    _, lines = first_line(env, args, limit_s=AT_ONCE_S)
    assert len(lines) == 1, lines
    return lines[0]


def test_a_port_out_of_range_is_refused_in_one_line() -> None:
    line = bad_setting({"RMQ_PORT": "99999"}, SERVE)
    assert "RMQ_PORT=99999: must be an integer from 1 to 65535" in line


def test_a_port_flag_out_of_range_is_refused_naming_its_variable() -> None:
    line = bad_setting({}, SERVE + ["--port", "99999"])
    assert "RMQ_PORT=99999" in line and "1 to 65535" in line


def test_a_remoting_port_out_of_range_is_refused_in_one_line() -> None:
    assert "RMQ_REMOTING_PORT=65536: must be an integer from 0 to 65535" in bad_setting({"RMQ_REMOTING_PORT": "65536"})


def test_a_zero_scan_interval_is_refused_in_one_line() -> None:
    assert "RMQ_SCAN_INTERVAL_MS=0: must be an integer of at least 1" in bad_setting({"RMQ_SCAN_INTERVAL_MS": "0"})


def test_a_negative_staleness_is_refused_in_one_line() -> None:
    assert "RMQ_MAX_STALENESS_MS=-5: must be an integer of at least 0" in bad_setting({"RMQ_MAX_STALENESS_MS": "-5"})


def test_a_negative_drain_is_refused_in_one_line() -> None:
    assert "RMQ_DRAIN_MS=-1: must be an integer of at least 0" in bad_setting({"RMQ_DRAIN_MS": "-1"})


def test_an_unknown_log_level_is_refused_in_one_line() -> None:
    line = bad_setting({"RMQ_LOG_LEVEL": "LOUD"})
    assert "RMQ_LOG_LEVEL=LOUD: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in line


def test_a_non_integer_is_refused_in_one_line() -> None:
    assert "RMQ_REDIS_TIMEOUT_MS=1s: must be an integer of at least 1" in bad_setting({"RMQ_REDIS_TIMEOUT_MS": "1s"})


def test_a_bad_setting_stops_the_scan_command_too() -> None:
    line = bad_setting({"REDIS_URL": "redis://127.0.0.1:6379/0", "RMQ_SCAN_BATCH": "0"},
                       [console_script("rmq-registry"), "scan"])
    assert "RMQ_SCAN_BATCH=0" in line


def test_a_non_redis_url_is_refused_in_one_line() -> None:
    line = bad_setting({"REDIS_URL": f"http://:{ENCODED}@127.0.0.1:6379/0"})
    assert "REDIS_URL=http://:***@127.0.0.1:6379/0: must start with redis://" in line


def test_a_non_numeric_redis_port_is_refused_in_one_line() -> None:
    line = bad_setting({"REDIS_URL": f"redis://:{ENCODED}@127.0.0.1:63x9/0"})
    assert "REDIS_URL=redis://:***@127.0.0.1:63x9/0" in line and "the port must be 1-65535" in line


def test_a_non_numeric_redis_database_is_refused_in_one_line() -> None:
    line = bad_setting({"REDIS_URL": f"redis://:{ENCODED}@127.0.0.1:6379/zero"})
    assert "the database must be a number" in line and "'zero'" in line


def test_an_unencoded_password_is_refused_without_printing_any_of_it() -> None:
    line = bad_setting({"REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0"})
    assert "REDIS_URL=redis://:***@127.0.0.1:6379/0" in line and "percent-encode" in line


@pytest.fixture(scope="module")
def guarded_redis() -> Iterator[RedisServer]:
    """A redis-server whose password holds every URL delimiter."""
    server = RedisServer(None, "--requirepass", PASSWORD)
    server.start()
    yield server
    server.cleanup()


def test_a_wrong_password_is_reported_as_refused_at_once(guarded_redis: RedisServer) -> None:
    url = f"redis://:wrong-{ENCODED}@127.0.0.1:{guarded_redis.port}/0"
    line, took = refused(SERVE + ["--port", str(free_port())], {"REDIS_URL": url})
    assert f"REDIS_URL=redis://:***@127.0.0.1:{guarded_redis.port}/0: Redis refused the password" in line
    assert "unreachable" not in line and "wrong-" not in line and took < AT_ONCE_S


def test_no_password_for_a_redis_that_wants_one_is_reported_at_once(guarded_redis: RedisServer) -> None:
    line, took = refused(SERVE + ["--port", str(free_port())],
                         {"REDIS_URL": f"redis://127.0.0.1:{guarded_redis.port}/0"})
    assert "Redis wants a password and the URL gives none" in line and took < AT_ONCE_S


def test_a_database_redis_does_not_have_is_refused_at_once(guarded_redis: RedisServer) -> None:
    line, took = refused(SERVE + ["--port", str(free_port())],
                         {"REDIS_URL": f"redis://:{ENCODED}@127.0.0.1:{guarded_redis.port}/99"})
    assert "Redis has no database 99" in line and took < AT_ONCE_S


def test_a_percent_encoded_password_with_url_delimiters_serves_and_is_never_printed(guarded_redis: RedisServer) -> None:
    url = f"redis://:{ENCODED}@127.0.0.1:{guarded_redis.port}/0"
    proc = start(SERVE + ["--port", str(free_port())], {"REDIS_URL": url, "RMQ_LOG_LEVEL": "DEBUG"})
    try:
        assert proc.stdout is not None
        seen = []
        while not seen or "serving on" not in seen[-1]:
            line = proc.stdout.readline().decode()
            assert line, "".join(seen)
            seen.append(line)
        proc.send_signal(signal.SIGTERM)
        out = "".join(seen) + proc.communicate(timeout=40)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and not any(part in out for part in PASSWORD_PARTS), out


# ------------------------------------------------------------------ the line that says what is wrong
# Each case: exit 2, the first line on stderr is the reason naming the setting at fault,
# nothing on stdout, no password anywhere.

def first_line(env: dict[str, str], args: list[str] | None = None, limit_s: float = 40) -> tuple[str, list[str]]:
    """Runs a worker that must refuse to start: its first stderr line, once it has exited
    2 saying it cannot start in that line, and all its stderr lines."""
    proc = start(args or SERVE + ["--port", str(free_port())], env, errors=subprocess.PIPE)
    try:
        out, err = (b.decode() for b in proc.communicate(timeout=limit_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running after {limit_s} s: {proc.communicate()}") from None
    assert proc.returncode == 2, (out, err)
    lines = err.splitlines()
    assert out == "" and lines and "cannot start: " in lines[0] and "Traceback" not in err, err
    assert not any(part in out + err for part in PASSWORD_PARTS), err
    return lines[0].split("cannot start: ", 1)[1], lines


def test_the_cannot_start_line_is_the_first_and_only_one(redis_url: str, taken_port: int) -> None:
    # the lines of the start (the security posture, "stopped") no longer come before it
    line, lines = first_line({"REDIS_URL": redis_url}, SERVE + ["--port", str(taken_port)])
    assert line.startswith(f"RMQ_PORT={taken_port}: cannot listen") and len(lines) == 1


def test_a_sentinel_url_to_a_plain_redis_says_no_sentinel_answers(redis_server: RedisServer) -> None:
    line, lines = first_line({"REDIS_URL": f"redis+sentinel://:{ENCODED}@127.0.0.1:{redis_server.port}/mymaster/0"})
    assert line.startswith(f"REDIS_URL=redis+sentinel://:***@127.0.0.1:{redis_server.port}/mymaster/0: no Sentinel "
                           "there, a plain Redis answers")
    assert len(lines) == 1  # not a 91-line traceback


def test_a_password_for_a_redis_that_has_none_is_refused(redis_server: RedisServer) -> None:
    line, _ = first_line({"REDIS_URL": f"redis://:{ENCODED}@127.0.0.1:{redis_server.port}/0"})
    assert line.startswith(f"REDIS_URL=redis://:***@127.0.0.1:{redis_server.port}/0: a password is given but "
                           "Redis has none")


def test_a_wrong_password_in_the_query_is_reported_as_wrong_not_as_missing(guarded_redis: RedisServer) -> None:
    line, _ = first_line({"REDIS_URL": f"redis://127.0.0.1:{guarded_redis.port}/0?password=wrong-{ENCODED}"})
    assert line.startswith(f"REDIS_URL=redis://127.0.0.1:{guarded_redis.port}/0?password=***: Redis refused the "
                           "password") and "gives none" not in line and "wrong-" not in line


@pytest.mark.parametrize("host, why", [("192.0.2.1", "not an address of this machine"),
                                       ("no-such-host.invalid", "not a host name or address")])
def test_a_bad_host_is_blamed_on_RMQ_HOST_not_on_RMQ_PORT(redis_url: str, host: str, why: str) -> None:
    line, _ = first_line({"REDIS_URL": redis_url, "RMQ_HOST": host},
                         [console_script("rmq-registry"), "serve", "--port", str(free_port())])
    assert line.startswith(f"RMQ_HOST={host}: cannot listen on {host}:") and why in line


def test_rediss_to_a_plain_redis_is_told_as_a_tls_mismatch_not_a_timeout(redis_server: RedisServer) -> None:
    line, _ = first_line({"REDIS_URL": f"rediss://:{ENCODED}@127.0.0.1:{redis_server.port}/0",
                          "RMQ_REDIS_START_TIMEOUT_MS": "30000"})
    assert line.startswith(f"REDIS_URL=rediss://:***@127.0.0.1:{redis_server.port}/0: 127.0.0.1:{redis_server.port} "
                           "speaks plain Redis, not TLS") and "unreachable" not in line


def test_an_unknown_rmq_variable_is_warned_first_naming_the_nearest_setting(redis_url: str) -> None:
    proc = start(SERVE + ["--port", str(free_port())], {"REDIS_URL": redis_url, "RMQ_REDIS_URL": redis_url})
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        while "serving on" not in proc.stdout.readline().decode():
            assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=40)
    assert first.rstrip().endswith("RMQ_REDIS_URL is not a setting: ignored (did you mean REDIS_URL?)")
    assert "WARNING" in first
