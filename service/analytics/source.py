"""Where a run reads from, and what the read cost that Redis.

``Source`` is the record every output carries: host, port, db, prefix, whether it was a
replica, and the data set's id (the random ``{prefix}:dataset`` a worker writes once at its
first start, ``Keys.dataset``). Never a user name or password: outputs and logs quote a
``Source``, not the URL.

``command_cost`` turns two ``INFO commandstats`` of the server read into what the run cost
it: calls and microseconds per command. They are the server's counters, so on a Redis other
clients use at the same time they include those clients' commands of that interval: the
kinds the jobs never send (the workers' scripts and heartbeats) are counted apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from .reader import READ_ONLY_COMMANDS

# The kinds of command a run sends: the read-only user's (with any reader) and the
# handshake every connection opens with (any client's, the jobs' own included)
JOB_COMMANDS = frozenset(c.lstrip("+") for c in READ_ONLY_COMMANDS) | {
    "hello", "auth", "select", "ping", "client|setinfo", "client|setname"}


class JobError(Exception):
    """A refusal or failure the operator can act on: its text is the whole message."""


@dataclass(frozen=True)
class Source:
    host: str
    port: int
    db: int
    prefix: str
    dataset: str | None
    replica: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def where(self) -> str:
        return where(self.host, self.port, self.db)

    def caption(self) -> str:
        """One line for a chart: what the figures are of."""
        role = " (replica)" if self.replica else ""
        return f"{{{self.prefix}}} at {self.where}{role}, data set {self.dataset or 'unnamed'}"


def where(host: Any, port: Any, db: Any) -> str:
    return f"redis {host}:{port} db {db}"


def params_where(params: Mapping[str, Any]) -> str:
    return where(params.get("host"), params.get("port"), params.get("dbNum") or 0)


def check_replica(client: Any, place: str) -> None:
    """``--replica``: the server must be a replica whose link to its primary is up (else its
    tables may be any age)."""
    info = client.info("replication")
    if info.get("role") != "slave":
        raise JobError(f"--replica: {place} is a {info.get('role')}, not a replica (drop --replica to read it)")
    if info.get("master_link_status") != "up":
        raise JobError(f"--replica: {place} has lost its primary (master_link_status "
                       f"{info.get('master_link_status')}): its tables may be stale")


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: command -> (calls, microseconds)."""
    out: dict[str, tuple[int, int]] = {}
    for name, stats in client.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(stats["calls"]), int(stats["usec"]))
    return out


def command_cost(before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]],
                 own: frozenset[str] | None = None) -> dict[str, Any]:
    """Calls and Redis time between two ``commandstats``, without the INFO calls that took
    them. The counters are the server's, so on a Redis the registry's workers use at the
    same time they hold the workers' commands of the interval too: those of kinds the jobs
    never send (`own`, the read-only user's commands: the workers' scripts, heartbeats,
    publishes) are counted apart in ``otherClients``, and ``sharedServer`` says some were
    seen, so the jobs' own kinds of command may hold some of theirs as well."""
    own = own if own is not None else JOB_COMMANDS
    per: dict[str, dict[str, float]] = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if name == "info" or calls == c0:
            continue
        per[name] = {"calls": calls - c0, "seconds": round((usec - u0) / 1e6, 6)}

    def tally(commands: dict[str, dict[str, float]]) -> dict[str, Any]:
        return {
            "commands": sum(int(v["calls"]) for v in commands.values()),
            "redisSeconds": round(sum(v["seconds"] for v in commands.values()), 6),
            "byCommand": dict(sorted(commands.items(), key=lambda kv: -kv[1]["seconds"])),
        }

    others = {k: v for k, v in per.items() if k not in own}
    return {**tally({k: v for k, v in per.items() if k in own}), "sharedServer": bool(others),
            "otherClients": tally(others)}