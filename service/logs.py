"""Logging: text for a terminal, one JSON object per line for a cluster's log pipeline,
each line carrying the id of the request it was written for."""

from __future__ import annotations

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
