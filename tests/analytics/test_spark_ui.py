"""The Spark UI of a session the job starts listens on loopback only, unless asked
(service/analytics/README.md, "Progress"): checked on a real JVM's listening sockets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.analytics.session import loopback_unless_asked, ui_off_unless_asked

ROOT = Path(__file__).resolve().parents[2]
SESSION = """
import sys, urllib.parse
from service.analytics.session import get_spark
spark, _ = get_spark("local[1]")
print(urllib.parse.urlsplit(spark.sparkContext.uiWebUrl).port, flush=True)
sys.stdin.read()
"""


def listening_addresses(port: int) -> set[str]:
    """Local addresses of LISTEN sockets on `port` (/proc/net/tcp and tcp6, hex)."""
    found = set()
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::1, ::ffff:127.0.0.1


def ui_addresses(env: dict[str, str]) -> set[str]:
    proc = subprocess.Popen([sys.executable, "-c", SESSION], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        port = int(proc.stdout.readline())
        return listening_addresses(port)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.fixture
def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS") and not k.startswith("RMQ_")}


def test_a_local_sessions_ui_listens_on_loopback_only(env: dict[str, str]) -> None:
    addresses = ui_addresses(env)
    assert addresses and addresses <= LOOPBACK_HEX, addresses


def test_spark_local_ip_asks_for_another_address(env: dict[str, str]) -> None:
    assert ui_addresses({**env, "SPARK_LOCAL_IP": "0.0.0.0"}) - LOOPBACK_HEX


class Conf:
    def __init__(self, *keys: str) -> None:
        self.keys = keys

    def contains(self, key: str) -> bool:
        return key in self.keys


def test_a_session_for_a_cluster_or_under_spark_submit_is_not_moved_to_loopback() -> None:
    assert not loopback_unless_asked("spark://master:7077", {}, under_submit=False)
    assert not loopback_unless_asked(None, {"PYSPARK_SUBMIT_ARGS": "--master spark://m:7077 pyspark-shell"}, False)
    assert not loopback_unless_asked("local[2]", {}, under_submit=True)
    assert loopback_unless_asked(None, {}, under_submit=False)


def test_where_loopback_cannot_hold_the_ui_is_off_unless_asked() -> None:
    assert ui_off_unless_asked({}, Conf())
    assert not ui_off_unless_asked({"SPARK_LOCAL_IP": "10.0.0.5"}, Conf())
    assert not ui_off_unless_asked({}, Conf("spark.ui.enabled"))
