"""Logging: text for a terminal, one JSON object per line for a cluster's log pipeline,
each line carrying the id of the request it was written for; and the refusals' lines,
at most one per client address and minute (``RefusalLog``), which both fronts write."""

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


class _Source:
    __slots__ = ("since", "held", "last", "timer")

    def __init__(self, since: float) -> None:
        self.since = since  # when this address's last line was written
        self.held = 0  # refusals not written since
        self.last = ""  # the last of them
        self.timer: asyncio.TimerHandle | None = None


class RefusalLog:
    """One warning per refused request, at most one per client address per ``every``
    seconds: the refusals held back meanwhile are told at the end of that window, in one
    line with their count and the last one (``... and 37 more refusals from 10.0.0.5 in
    the last 60 s, the last: ...``); an address refused all the time thus gets one line per
    window. Runs on the event loop (the summaries are its timers)."""

    def __init__(self, logger: logging.Logger, every: float = REFUSAL_EVERY_S,
                 max_sources: int = REFUSAL_SOURCES) -> None:
        self.log = logger
        self.every = every
        self.max_sources = max_sources
        self._sources: dict[str, _Source] = {}

    def refused(self, client: str, what: str) -> None:
        """`what` was refused to `client` (an address): the line reads ``refused <what>``."""
        key = client if client in self._sources or len(self._sources) < self.max_sources else OTHER_SOURCES
        source = self._sources.get(key)
        loop = asyncio.get_running_loop()
        if source is None:
            self._sources[key] = source = _Source(loop.time())
            self.log.warning("refused %s", what)
            source.timer = loop.call_at(source.since + self.every, self._window_ends, key)
            return
        source.held += 1
        source.last = what

    def _window_ends(self, key: str) -> None:
        source = self._sources[key]
        if not source.held:
            del self._sources[key]  # quiet for a whole window: its next refusal is written at once
            return
        loop = asyncio.get_running_loop()
        self.log.warning("... and %d more refusal%s from %s in the last %g s, the last: refused %s",
                         source.held, "s" if source.held > 1 else "", key, self.every, source.last)
        source.since, source.held, source.last = loop.time(), 0, ""
        source.timer = loop.call_at(source.since + self.every, self._window_ends, key)

    def close(self) -> None:
        """Cancels the pending summaries (a stopping worker)."""
        for source in self._sources.values():
            if source.timer is not None:
                source.timer.cancel()
        self._sources.clear()
