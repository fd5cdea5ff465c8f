"""The Java NameServer as the same-run baseline: started from a directory the user provides.

`--java-namesrv-home DIR` (or env RMQ_BENCH_JAVA_NAMESRV_HOME) names a RocketMQ 4.9.8 or 5.3.3
binary distribution, or anything laid out like one: `DIR/lib/*.jar` holding
`org.apache.rocketmq.namesrv.NamesrvStartup` and its libraries, and optionally
`DIR/conf/logback_namesrv.xml`. This repository ships no RocketMQ code or build of it.

Each start gets a fresh ROCKETMQ_HOME in a temp dir (its `conf/logback_namesrv.xml` copied
from DIR, or a minimal one writing to files there), `user.home` there too (RocketMQ keeps
its logs and kvConfig.json under it), a properties file with a free `listenPort`, the
JVM options of RocketMQ's `runserver.sh` with a 1 GB heap instead of 4 GB (the machine is
shared; `--java-opts` overrides them), and the server core (bench/cores.py) for every
thread. It counts as up once it answers a GET_ROUTEINFO_BY_TOPIC (for a topic it does not
know: TOPIC_NOT_EXIST). A 4.9.8 distribution binds every interface; run it on a machine
where that is acceptable.

`python bench/java_namesrv.py --java-namesrv-home DIR` starts one, registers a broker with
two topics, reads a route back and stops it (a check of the distribution).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import broker_requests as br  # noqa: E402
from bench import cores as pinning  # noqa: E402
from bench.common import stop_process  # noqa: E402
from tests.redis_server import free_port  # noqa: E402

ENV = "RMQ_BENCH_JAVA_NAMESRV_HOME"
MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
JAVA_OPTS = ("-server -Xms1g -Xmx1g -XX:MetaspaceSize=128m -XX:MaxMetaspaceSize=320m -XX:+UseG1GC "
             "-XX:G1HeapRegionSize=16m -XX:G1ReservePercent=25 -XX:InitiatingHeapOccupancyPercent=30 "
             "-XX:SoftRefLRUPolicyMSPerMB=0 -XX:-OmitStackTraceInFastThrow -XX:-UseLargePages")
START_LIMIT_S = 90.0

LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/rocketmqlogs/namesrv.log</file>
    <encoder><pattern>%d{yyy-MM-dd HH:mm:ss,GMT+8} %p %t - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--java-namesrv-home", type=Path, default=None,
                   help=f"RocketMQ 4.9.8 or 5.3.3, its binary distribution unpacked (DIR/lib/*.jar) (default: env {ENV}; "
                        "none: the registry's figures alone)")
    p.add_argument("--java-opts", default=os.environ.get("RMQ_BENCH_JAVA_OPTS", JAVA_OPTS),
                   help="JVM options for the Java NameServer (default: runserver.sh's with a 1 GB heap; "
                        "env RMQ_BENCH_JAVA_OPTS)")


def home_from_args(args: argparse.Namespace) -> Path | None:
    """The Java NameServer's directory, checked; None (said in one line) when none is given."""
    home = args.java_namesrv_home or (Path(os.environ[ENV]) if os.environ.get(ENV) else None)
    if home is None:
        print(f"no Java NameServer given (--java-namesrv-home or {ENV}): the registry's figures alone")
        return None
    jars = sorted((home / "lib").glob("*.jar")) if home.is_dir() else []
    if not jars:
        raise SystemExit(f"Java NameServer home {str(home)!r} (--java-namesrv-home / {ENV}): no lib/*.jar in it")
    if shutil.which("java") is None:
        raise SystemExit(f"Java NameServer home {str(home)!r} given but no `java` on PATH")
    return home


def version_of(home: Path) -> str:
    """The RocketMQ version of a home, from its namesrv jar's name (``?`` when it has none)."""
    for jar in sorted((home / "lib").glob("rocketmq-namesrv-*.jar")):
        return jar.stem.removeprefix("rocketmq-namesrv-")
    return "?"


class JavaNamesrv:
    """One Java NameServer process on a free port of 127.0.0.1, stopped by `stop()`."""

    name = "java"

    def __init__(self, home: Path, cores: frozenset[int] = frozenset(), java_opts: str = JAVA_OPTS) -> None:
        self.home = home
        self.tmp = Path(tempfile.mkdtemp(prefix="rmq-bench-java-"))
        (self.tmp / "conf").mkdir()
        conf = home / "conf" / "logback_namesrv.xml"
        (self.tmp / "conf" / "logback_namesrv.xml").write_text(conf.read_text() if conf.is_file() else LOGBACK)
        self.port = free_port()
        props = self.tmp / "namesrv.properties"
        props.write_text(f"listenPort={self.port}\n")
        env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_HOME", "JAVA_TOOL_OPTIONS")}
        env["ROCKETMQ_HOME"] = str(self.tmp)
        args = ["java", *java_opts.split(), f"-Duser.home={self.tmp}", f"-Drocketmq.home.dir={self.tmp}",
                "-cp", f"{home / 'lib'}/*", MAIN, "-c", str(props)]
        self.log = open(self.tmp / "stdout.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=pinning.preexec(cores))
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]

    @property
    def tcp_ports(self) -> list[int]:
        return [self.port]

    def _output(self) -> str:
        self.log.flush()
        return (self.tmp / "stdout.log").read_text(errors="replace")[-3000:]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Java NameServer ({self.home}) exited with {self.proc.returncode}:\n"
                                   f"{self._output()}")
            with contextlib.suppress(OSError):
                conn = br.Connection(self.port, timeout=5)
                try:
                    code, _, _ = conn.call(br.route_frame("BenchReadyProbe", conn.next_opaque()))
                finally:
                    conn.close()
                if code in (0, br.TOPIC_NOT_EXIST):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the Java NameServer ({self.home}) did not answer on port {self.port} "
                           f"within {START_LIMIT_S:.0f} s:\n{self._output()}")

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, 15)  # NamesrvStartup's shutdown hook stops it
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def java_namesrv(home: Path, cores: frozenset[int] = frozenset(), java_opts: str = JAVA_OPTS) -> Iterator[JavaNamesrv]:
    server = JavaNamesrv(home, cores, java_opts)
    try:
        yield server
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description="Start the Java NameServer, register a broker, read a route, stop it.")
    add_arguments(p)
    args = p.parse_args()
    home = home_from_args(args)
    if home is None:
        raise SystemExit(1)
    started = time.monotonic()
    with java_namesrv(home, java_opts=args.java_opts) as server:
        print(f"Java NameServer up on 127.0.0.1:{server.port} in {time.monotonic() - started:.1f} s")
        conn = br.Connection(server.port)
        try:
            table = br.topics("CheckTopic", 2)
            ms = br.register(conn, "json", "check-broker", "127.0.0.2:10911", 0, table, br.data_version(1))
            code, remark, body = conn.call(br.route_frame("CheckTopic000001", conn.next_opaque()))
        finally:
            conn.close()
        if code != 0 or b"check-broker" not in body:
            raise SystemExit(f"route read answered code {code} ({remark}): {body[:200]!r}")
        print(f"registered 2 topics in {ms:.1f} ms; route of CheckTopic000001: {body.decode()}")


if __name__ == "__main__":
    main()
