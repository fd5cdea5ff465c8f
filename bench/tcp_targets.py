"""The servers a TCP bench compares in one run: the registry (one or more checkouts) and the Java NameServer.

Every target is started once, before the first measurement, and stopped at the end; the
benches then take turns between them (A B, then B A, ...) with the same loader, so load
from the rest of the machine falls on all of them alike. Each target's processes are on
the server core (bench/cores.py): for the registry its workers and its redis-server, for
Java the JVM. `pids` are the processes whose CPU time counts as the target's.

`--registry NAME=DIR` (repeatable) runs the registry from another checkout as well (its
workers start with cwd and PYTHONPATH = DIR, with this interpreter), e.g. the main branch
next to a branch under test; by default the checkout this bench belongs to, as `registry`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

import redis

from bench import cores as pinning
from bench import java_namesrv
from bench.common import ROOT, Proc, free_port, redis_server, worker_env
from tests.redis_server import RedisServer


class Target(Protocol):
    name: str

    @property
    def pids(self) -> list[int]: ...

    @property
    def tcp_ports(self) -> list[int]: ...


@dataclass
class Registry:
    """Registry workers (each with its RocketMQ remoting port) on one redis-server."""

    name: str
    root: Path
    redis: RedisServer
    workers: list[Proc] = field(default_factory=list)
    tcp_ports: list[int] = field(default_factory=list)
    http_ports: list[int] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers] + ([self.redis.proc.pid] if self.redis.proc else [])

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url)


def add_arguments(p: argparse.ArgumentParser) -> None:
    java_namesrv.add_arguments(p)
    pinning.add_arguments(p)
    p.add_argument("--registry", action="append", default=[], metavar="NAME=DIR",
                   help="also measure the registry of checkout DIR under NAME (repeatable); "
                        "default: this checkout as `registry`")


def registry_roots(args: argparse.Namespace) -> list[tuple[str, Path]]:
    roots = []
    for spec in args.registry:
        name, sep, path = spec.partition("=")
        root = Path(path).resolve()
        if not sep or not name or not (root / "service" / "__main__.py").is_file():
            raise SystemExit(f"--registry {spec!r}: expected NAME=DIR with DIR a checkout of this registry "
                             "(DIR/service/__main__.py)")
        if name == java_namesrv.JavaNamesrv.name:
            raise SystemExit(f"--registry {spec!r}: the name `java` is the Java NameServer's")
        roots.append((name, root))
    return roots or [("registry", ROOT)]


@contextlib.contextmanager
def registry(name: str, root: Path, cores: frozenset[int], workers: int = 1, **settings: str) -> Iterator[Registry]:
    with redis_server() as rs:
        if rs.proc is not None:
            pinning.pin(rs.proc.pid, cores)
        target = Registry(name, root, rs)
        try:
            for _ in range(workers):
                http_port, tcp_port = free_port(), free_port()
                target.workers.append(Proc(
                    [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(http_port)],
                    env=worker_env(rs.url, root, RMQ_REMOTING_PORT=str(tcp_port), RMQ_REMOTING_HOST="127.0.0.1",
                                   **settings),
                    ready_url=f"http://127.0.0.1:{http_port}/readyz", cwd=root, cores=cores))
                target.http_ports.append(http_port)
                target.tcp_ports.append(tcp_port)
            yield target
        finally:
            for w in target.workers:
                w.stop()


@contextlib.contextmanager
def targets(args: argparse.Namespace, cores: pinning.Cores, workers: int = 1, **settings: str) -> Iterator[list[Target]]:
    """Every registry checkout asked for (its workers with `settings`, RMQ_* variables), then
    the Java NameServer when one is given."""
    home = java_namesrv.home_from_args(args)
    with contextlib.ExitStack() as stack:
        found: list[Target] = [stack.enter_context(registry(name, root, cores.server, workers, **settings))
                               for name, root in registry_roots(args)]
        if home is not None:
            found.append(stack.enter_context(java_namesrv.java_namesrv(home, cores.server, args.java_opts)))
        yield found


def turns(items: list[Target], rep: int) -> list[Target]:
    """The order of the targets in repetition `rep`: rotated by one each time (A B C, B C A, ...)."""
    k = rep % len(items)
    return items[k:] + items[:k]


def cpu_seconds(target: Target) -> float:
    return sum(pinning.cpu_seconds(pid) for pid in target.pids)


def describe(items: list[Target]) -> dict[str, str]:
    return {t.name: (f"registry checkout {t.root}" if isinstance(t, Registry)
                     else f"Java NameServer {java_namesrv.version_of(t.home)} from {t.home}"
                     if isinstance(t, java_namesrv.JavaNamesrv) else t.name) for t in items}
