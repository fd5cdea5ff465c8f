"""One worker's removal path: every broker that departs goes through one queue and one
drainer, as RocketMQ 5's BatchUnregistrationService.

What is queued (by address: a newer entry for an address replaces the queued one):
connection closes (the remoting server), unregistrations that could not reach Redis (a
broker's UNREGISTER_BROKER over TCP), and the scanner's expiries. One task per worker
removes them in batches with lua/remove_batch.lua, one script at a time: each script
checks every entry as it stands (the connection still owns the address; the deadline has
passed), removes whole addresses until its pair budget is spent and says which entries it
settled; the rest stay queued for the next script. So a close storm of hundreds of brokers
is a few dozen scripts of bounded length, and a route read waits at Redis behind one of
them at most.

A removal is idempotent and never dropped: while Redis is unavailable (or the outcome of a
script is unknown) the entries stay queued and are sent again, with a backoff capped at
RETRY_MAX_S, until a script settles them: removed, or found done already by another
worker or the scanner. One log line per script and per outcome, never per address; the
retry line once per RETRY_LOG_S, the failures meanwhile counted at its end.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from service.logs import WindowedLog
from service.registry import Registry
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

# Why a broker goes (lua/remove_batch.lua checks each its own way; lua/_groups.lua's
# remove_address is told it).
CONNECTION_CLOSED, UNREGISTERED, EXPIRED = CAUSES = ("connection closed", "unregistered", "expired")
REMOVED = "removed"


@dataclass(frozen=True, eq=False)  # compared by identity: a newer entry for an address is another one
class Removal:
    addr: str
    channel: str  # the connection that must still own the address; '' for an expiry
    cause: str


class Settled(NamedTuple):
    removal: Removal
    status: str  # 'removed', 'not due', 'not owned' or 'gone'
    # a removed broker's identity (its member row, read by the script that removed it), else ''
    cluster: str
    group: str
    broker_id: str


# Addresses named in a batch's log line; the count says how many more there were.
NAMED = 5


class Removals:
    # The (topic, group) pairs one script may remove: ~4 ms in Redis on an idle 2-core
    # machine (a whole group of 3,300 takes 8-9 ms, of 10,000 26 ms: SLOWLOG), 11-15 ms
    # with the machine loaded; a bigger group goes a slice a script (lua/remove_batch.lua).
    # Against 2,000 in one run of bench/README.md's close storm (100 groups, 330,000
    # pairs): as fast (1.5-2.2 s against 1.4-1.7 s), live reads' p99 8.5-16 ms against
    # 17-33 ms: a read waits at Redis behind one script at most.
    PAIR_BUDGET = 1_000
    # The pairs one collection script removes of departed groups (lua/collect_leaving.lua):
    # half a removal's, since nothing waits for them (their routes are gone already) while
    # reads wait behind each script: at the full fleet's close storm on a loaded machine,
    # 1,000 a script ran up to 27-39 ms.
    COLLECT_BUDGET = 500
    MAX_ENTRIES = 64  # entries one script is sent, however cheap they are (it reaches few when groups are big)
    RETRY_FIRST_S = 0.1
    RETRY_MAX_S = 2.0
    RETRY_LOG_S = 10.0

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._queued: dict[str, Removal] = {}
        self._waiters: dict[str, list[asyncio.Future[Settled]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._collecting = False  # whether departed groups may have QueueData left to remove
        self._collect_asks = 0  # collect() calls: one made while a collection script runs outlives its '0 left'
        # for /metrics
        self.removed: Counter[str] = Counter()  # brokers this worker removed, by cause
        self.failures = 0  # scripts that could not reach Redis (their entries stayed queued)
        # the retry line: one a RETRY_LOG_S, the failures meanwhile counted at its end
        self._retry_log = WindowedLog(log, self.RETRY_LOG_S, ("failed removal script", "failed removal scripts"),
                                      of="on this worker{}")

    @property
    def queued(self) -> int:
        return len(self._queued)

    def start(self) -> None:
        """Starts the drainer (at the first removal otherwise)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="removals")

    @property
    def busy(self) -> bool:
        """Whether it has work it began: removals queued, or departed groups' QueueData to
        collect (lua/collect_leaving.lua said some are left, or a departure flagged them)."""
        return bool(self._queued) or self._collecting

    async def stop(self, limit_s: float = 2.0) -> None:
        """Finishes what it began, for up to `limit_s` (the worker's drain time): every
        queued removal and the collection of departed groups' QueueData; then stops the
        drainer. What is still undone then (Redis unreachable the whole time) is left to
        the brokers' deadlines and to any worker's scanner, this one's next start included:
        a collection is found by its mark in Redis ({rmq}:leaving), whoever began it."""
        deadline = time.monotonic() + limit_s
        while self.busy and self._task is not None and not self._task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.busy:
            log.warning("stopping with %d broker removal(s) queued%s: left to their deadlines and the scanner of "
                        "any worker", len(self._queued),
                        " and departed groups' QueueData to collect" if self._collecting else "")
        self._retry_log.close()
        if self._task is not None:
            while not self._task.done():  # cancel until done (a wait_for may swallow one)
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.1)

    def submit(self, removals: Iterable[Removal]) -> None:
        """Queues removals without waiting for them (a connection close)."""
        for removal in removals:
            self._queued[removal.addr] = removal
        self._wake.set()
        self.start()

    async def settle(self, removals: Sequence[Removal]) -> list[Settled]:
        """Queues removals and waits until each is settled. StoreUnavailable when a script
        carrying one of them could not reach Redis: they stay queued all the same."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Settled]] = []
        for removal in removals:
            future: asyncio.Future[Settled] = loop.create_future()
            self._waiters.setdefault(removal.addr, []).append(future)
            futures.append(future)
        self.submit(removals)
        try:
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            for removal, future in zip(removals, futures):
                waiting = self._waiters.get(removal.addr)
                if waiting is not None and future in waiting:
                    waiting.remove(future)
                    if not waiting:
                        del self._waiters[removal.addr]
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [o for o in outcomes if isinstance(o, Settled)]

    def collect(self) -> None:
        """Has the drainer remove what departed groups left (lua/collect_leaving.lua) once
        the queue is empty: after this worker's own removals, and when the scanner sees
        groups leaving (another worker's, or one that stopped before it was done)."""
        self._collecting = True
        self._collect_asks += 1
        self._wake.set()
        self.start()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            if not self._queued and not self._collecting:
                await self._wake.wait()
                continue
            # Redis unavailable: the same step again (with what is queued by then) after a
            # wait doubling from RETRY_FIRST_S up to RETRY_MAX_S, until it answers
            retrying = AsyncRetrying(retry=retry_if_exception_type(StoreUnavailable), reraise=True,
                                     wait=wait_exponential(multiplier=self.RETRY_FIRST_S, max=self.RETRY_MAX_S),
                                     before_sleep=self._retrying)
            try:
                await retrying(self._step)
            except Exception as e:  # a bug must not end the path: the entries stay, tried again later
                log.exception("removing %d queued broker(s) failed", min(len(self._queued), self.MAX_ENTRIES))
                self._fail(e)
                await asyncio.sleep(self.RETRY_MAX_S)
                continue
            if retrying.statistics.get("attempt_number", 1) > 1:
                log.info("broker removals reach Redis again after %.1f s", retrying.statistics["delay_since_first_attempt"])

    async def _step(self) -> None:
        """One script: a batch of the queued departures, else a slice of what departed
        groups left (readers skip it already)."""
        batch = list(itertools.islice(self._queued.values(), self.MAX_ENTRIES))
        if not batch:
            asks = self._collect_asks
            left = await self.registry.collect_leaving(self.COLLECT_BUDGET)
            # a departure told meanwhile may have marked a group after the script ran
            self._collecting = left > 0 or self._collect_asks != asks
            return
        result = await self.registry.remove_batch(self.PAIR_BUDGET, [(r.addr, r.channel, r.cause) for r in batch])
        self._settle(batch, result.statuses, result.members)
        self._collecting = self._collecting or REMOVED in result.statuses

    def _retrying(self, state: RetryCallState) -> None:
        assert state.outcome is not None  # before a retry: the attempt failed
        e = state.outcome.exception()
        self.failures += 1
        self._fail(e)
        self._retry_log.write("", f"{len(self._queued)} broker removal(s) queued, Redis unavailable: {e}; "
                                  f"retrying every {self.RETRY_MAX_S:.1f} s at most")

    def _settle(self, batch: list[Removal], statuses: list[str],
                members: list[tuple[str, str, str] | None]) -> None:
        removed: list[Removal] = []
        unchanged = 0
        for removal, status, member in zip(batch, statuses, members):
            if not status or self._queued.get(removal.addr) is not removal:
                continue  # not reached, or replaced by a newer entry meanwhile: it stays queued
            del self._queued[removal.addr]
            if status == REMOVED:
                removed.append(removal)
                self.removed[removal.cause] += 1
            else:
                unchanged += 1
            for future in self._waiters.pop(removal.addr, []):
                if not future.done():
                    future.set_result(Settled(removal, status, *(member or ("", "", ""))))
        if removed:
            named = ", ".join(f"{r.addr} ({r.cause})" for r in removed[:NAMED])
            more = f" (+{len(removed) - NAMED} more)" if len(removed) > NAMED else ""
            log.info("removed %d broker(s) from the route tables: %s%s; %d settled unchanged, %d queued",
                     len(removed), named, more, unchanged, len(self._queued))

    def _fail(self, e: BaseException) -> None:
        """Tells everyone waiting for a queued entry that Redis could not be reached (the
        entries stay queued)."""
        failure = e if isinstance(e, StoreUnavailable) else StoreUnavailable(str(e))
        for addr in list(self._waiters):
            for future in self._waiters.pop(addr):
                if not future.done():
                    future.set_exception(failure)
