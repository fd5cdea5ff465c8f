"""CPU pinning for the same-run comparisons: the server under test on one core, the loader on another.

Both servers (the registry's worker and its redis-server, or the Java NameServer) get the
same core, one at a time, and the loader (this process and the processes it starts) the
other, so neither server borrows the loader's core and the ratios compare one core with
one core. On a machine with one core nothing is pinned (the result files say so).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cores:
    server: frozenset[int]
    loader: frozenset[int]

    @property
    def pinned(self) -> bool:
        return bool(self.server)

    def describe(self) -> str:
        if not self.pinned:
            return "not pinned (fewer than 2 cores)"
        return f"server on core {sorted(self.server)}, loader on core {sorted(self.loader)}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server-core", type=int, default=0, help="core for the server under test (default 0)")
    p.add_argument("--loader-core", type=int, default=1, help="core for the load generator (default 1)")


def from_args(args: argparse.Namespace) -> Cores:
    """The cores to use; pins this process (the loader) at once, so its children inherit it."""
    available = os.sched_getaffinity(0)
    if len(available) < 2:
        return Cores(frozenset(), frozenset())
    for name in ("server_core", "loader_core"):
        if getattr(args, name) not in available:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: not one of this "
                             f"process's cores {sorted(available)}")
    if args.server_core == args.loader_core:
        raise SystemExit(f"--server-core and --loader-core are both {args.server_core}: they must differ")
    cores = Cores(frozenset({args.server_core}), frozenset({args.loader_core}))
    os.sched_setaffinity(0, cores.loader)
    return cores


def pin(pid: int, cores: frozenset[int]) -> None:
    """Every thread of `pid` onto `cores` (threads it starts later inherit it)."""
    if not cores:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cores)


def preexec(cores: frozenset[int]):  # type: ignore[no-untyped-def]
    """A `preexec_fn` that starts a child on `cores` (None when nothing is pinned)."""
    if not cores:
        return None
    return lambda: os.sched_setaffinity(0, cores)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads, not its children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
