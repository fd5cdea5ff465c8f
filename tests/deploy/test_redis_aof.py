"""The bundled Redis restores a script's writes whole or not at all after a crash.

Redis 7 writes a script's effects to its append-only file as one MULTI/EXEC block. When a
crash cuts that block, `aof-load-truncated` drops only the cut command and leaves the half
block in the file; the next restart then applies it together with the next block
(valkey-io/valkey#4342): half a registration in the route tables. The StatefulSet's redis
container therefore runs `redis-check-aof --fix` before every start, which cuts the file
back to before MULTI. Here that start command, taken from the rendered manifests (the
Sentinel variant's pods keep it), is run with the real redis-server on a crashed AOF."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import redis

import tests.deploy.test_manifests as m
from tests.deploy.test_redis_sentinel import container, docs, render  # noqa: F401  (docs: a fixture)
from tests.redis_server import free_port
from tests.waits import until_sync

SCRIPT = "redis.call('SET', KEYS[1], '1'); redis.call('SET', KEYS[2], '2'); redis.call('SET', KEYS[3], '3')"


def start_command(statefulset: dict) -> list[str]:
    c = container(statefulset["spec"]["template"]["spec"], "redis")
    return [*c["command"], *c["args"]]


class Pod:
    """The redis container's command run here: /data is a folder of the test's own, and
    redis-server gets a free port and `appendfsync always` (each write on disk at once)."""

    def __init__(self, command: list[str], data: Path) -> None:
        self.command = [part.replace("/data", str(data)) for part in command]
        self.data = data
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> redis.Redis:
        args = [*self.command, "--port", str(self.port), "--appendfsync", "always", "--save", ""]
        args = [a for a in args if a != "$(REDIS_PASSWORD)"]
        if "--requirepass" in args:
            args.remove("--requirepass")
        proc = self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, decode_responses=True)

        def answers() -> bool:
            assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.BusyLoadingError):
                return False

        until_sync(answers, 20, "redis-server started by the container's command")
        return client

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def cut_last_block(self) -> None:
        """A crash while the last script's block was being written: the file ends inside
        its third SET (a write cut short), EXEC never reached it."""
        incr = sorted((self.data / "appendonlydir").glob("*.incr.aof"))[-1]
        raw = incr.read_bytes()
        incr.write_bytes(raw[:raw.rindex(b"*3\r\n$3\r\nSET\r\n") + 8])


@pytest.fixture(scope="module")
def base() -> list[str]:
    """The redis container's start command as k8s/ renders it."""
    return start_command(m.one("StatefulSet", "redis", docs=render(m.K8S)))


@pytest.fixture
def command(docs: list[dict]) -> list[str]:  # noqa: F811  (the Sentinel variant's rendering)
    return start_command(m.one("StatefulSet", "redis", docs=docs))


@pytest.fixture
def pod(tmp_path: Path, base: list[str]):
    if shutil.which("redis-check-aof") is None:
        pytest.skip("redis-check-aof is not installed (it comes with redis-server)")
    p = Pod(base, tmp_path)
    yield p
    if p.proc is not None and p.proc.poll() is None:
        p.crash()


def test_both_the_base_and_the_sentinel_variant_check_the_aof_before_redis_starts(base: list[str],
                                                                                  command: list[str]):
    for cmd in (base, command):
        script = cmd[2]
        assert cmd[:2] == ["sh", "-c"] and "redis-check-aof --fix" in script and script.rstrip().endswith('exec "$@"')
    assert command[command.index("redis-start") + 1:] == ["redis-server", "/conf/redis.conf"]


def test_a_script_cut_by_a_crash_is_never_applied_half_even_after_a_second_restart(pod: Pod):
    r = pod.start()
    r.set("before", "kept")
    r.eval(SCRIPT, 3, "a", "b", "c")
    pod.crash()
    pod.cut_last_block()
    r = pod.start()
    assert (r.get("before"), r.mget("a", "b", "c")) == ("kept", [None, None, None])
    r.eval(SCRIPT, 3, "x", "y", "z")  # the next block, after the restart
    pod.crash()
    r = pod.start()
    # without the check, this second restart brought back a=1 and b=2 beside x, y, z
    assert r.mget("a", "b", "c", "x", "y", "z") == [None, None, None, "1", "2", "3"]
    assert r.get("before") == "kept"
