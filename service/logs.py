"""Logging: text for a terminal, one JSON object per line for a cluster's log pipeline,
each line carrying the id of the request it was written for; and every line the workers
may write at request rate, at most one per key and window (``WindowedLog``): refusals per
client address and minute (``RefusalLog``), Redis failures per kind every 5 s
(``redis_failure_log``), Redis' refusals per cause (store.py), connections over the cap
(remoting/server.py), busy registrations (registry.py), failed removals (removals.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from contextvars import ContextVar

import orjson

REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="-")

_worker = os.urandom(3).hex()
_sequence = itertools.count(1)


def new_request_id() -> str:
    # a counter, not uuid4: this runs on every request of the hot read path
    return f"{_worker}-{next(_sequence):x}"


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "requestId": getattr(record, "request_id", "-"),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc).decode()


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdFilter())
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s")
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


# Refusals: how often one client address gets a line, and how many addresses are tracked
# apart (past that, the others share one tally, so a flood from many addresses holds no
# more memory than this).
REFUSAL_EVERY_S = 60.0
REFUSAL_SOURCES = 10_000
OTHER_SOURCES = "other addresses"


def printable(text: str, limit: int = 128) -> str:
    """A client's text as a log line may hold it: no line breaks or control characters
    (a text log would show a forged line), at most `limit` characters."""
    shown = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return shown + "..." if len(text) > limit else shown


class _Window:
    __slots__ = ("since", "held", "last", "timer")

    def __init__(self, since: float) -> None:
        self.since = since  # when this key's last line was written
        self.held = 0  # lines held back since
        self.last = ""  # the last of them
        self.timer: asyncio.TimerHandle | None = None


class WindowedLog:
    """At most one line per key (a client address, a kind of error) per ``every`` seconds:
    the first is written at once, the ones held back meanwhile are told at the end of that
    window in one line with their count and the last one (``... and 406 more <noun> <of
    key> in the last 5 s, the last: ...``); a key written all the time thus gets one line
    per window, and a key quiet for a whole window is written at once again. Past
    ``max_keys`` keys the others share one tally (``other_keys``), so a flood of keys holds
    no more memory than this. Runs on the event loop (the summaries are its timers)."""

    def __init__(self, logger: logging.Logger, every: float, noun: tuple[str, str], of: str = "from {}",
                 max_keys: int = REFUSAL_SOURCES, other_keys: str = OTHER_SOURCES, level: int = logging.WARNING) -> None:
        self.log = logger
        self.level = level
        self.every = every
        self.noun = noun  # (one, several): what a held-back line is, in the summary
        self.of = of  # how the summary names the key
        self.max_keys = max_keys
        self.other_keys = other_keys
        self._windows: dict[str, _Window] = {}

    def write(self, key: str, line: str) -> None:
        """A `line` of `key` (at ``level``): written now, or held back and counted."""
        key = key if key in self._windows or len(self._windows) < self.max_keys else self.other_keys
        window = self._windows.get(key)
        if window is None:
            loop = asyncio.get_running_loop()
            self._windows[key] = window = _Window(loop.time())
            self.log.log(self.level, "%s", line)
            window.timer = loop.call_at(window.since + self.every, self._window_ends, key)
            return
        window.held += 1
        window.last = line

    def _window_ends(self, key: str) -> None:
        window = self._windows[key]
        if not window.held:
            del self._windows[key]  # quiet for a whole window: its next line is written at once
            return
        loop = asyncio.get_running_loop()
        noun = self.noun[0] if window.held == 1 else self.noun[1]
        self.log.log(self.level, "... and %d more %s %s in the last %g s, the last: %s", window.held, noun,
                     self.of.format(key), self.every, window.last)
        window.since, window.held, window.last = loop.time(), 0, ""
        window.timer = loop.call_at(window.since + self.every, self._window_ends, key)

    def close(self) -> None:
        """Cancels the pending summaries (a stopping worker)."""
        for window in self._windows.values():
            if window.timer is not None:
                window.timer.cancel()
        self._windows.clear()


class RefusalLog(WindowedLog):
    """One warning per refused request, at most one per client address per ``every``
    seconds (``... and 37 more refusals from 10.0.0.5 in the last 60 s, the last: ...``)."""

    def __init__(self, logger: logging.Logger, every: float = REFUSAL_EVERY_S,
                 max_sources: int = REFUSAL_SOURCES) -> None:
        super().__init__(logger, every, ("refusal", "refusals"), max_keys=max_sources)

    def refused(self, client: str, what: str) -> None:
        """`what` was refused to `client` (an address): the line reads ``refused <what>``."""
        self.write(client, f"refused {what}")


# Redis failures on the request paths: one line per kind of failure (its class: unavailable,
# outcome unknown...) every few seconds, however many requests fail (416 heartbeats in a
# second were 407 lines).
REDIS_FAILURE_EVERY_S = 5.0


def redis_failure_log(logger: logging.Logger, every: float = REDIS_FAILURE_EVERY_S) -> WindowedLog:
    """The request paths' log of Redis failures, keyed by the failure's kind."""
    return WindowedLog(logger, every, ("failure", "failures"), of="of this kind ({})")
