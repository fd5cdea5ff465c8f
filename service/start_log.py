"""The log of a starting worker, held until it serves, so that a worker that cannot start
says so in its first line (docs/deploy.md): the lines written while it starts (its
security posture, the RocketMQ port opening, "stopped") would otherwise come before the
reason, which a reader of the first line, or of ``kubectl logs --tail``, misses.

``hold`` holds every record the root logger's handlers would write; ``release`` writes
them in order and lets the log through again, once the worker serves. A worker that has
to wait (for a Redis not there yet) says so at once with ``announce``, the rest still
held. ``fail`` writes the failure first, then only the held lines that may explain it
(``EXPLAINS``: the warnings about the settings, such as an unknown variable), and drops
the rest.
"""

from __future__ import annotations

import logging

# the held records that fail() writes after the failure: their logger's names
EXPLAINS = ("service.config",)


class _Hold(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


_held: _Hold | None = None


def hold() -> None:
    global _held
    if _held is None:
        _held = _Hold()
        for handler in logging.getLogger().handlers:
            handler.addFilter(_held)


def _stop_holding() -> list[logging.LogRecord]:
    global _held
    if _held is None:
        return []
    held, _held = _held, None
    for handler in logging.getLogger().handlers:
        handler.removeFilter(held)
    return held.records


def _write(records: list[logging.LogRecord]) -> None:
    for record in records:
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def release() -> None:
    """Writes what was held, in order, and stops holding (nothing happens when not holding)."""
    _write(_stop_holding())


def announce(logger: logging.Logger, msg: str, *args: object) -> None:
    """A warning the starting worker must give while it starts (it waits): written now,
    what was held still held (the wait may end in a failure, which comes next)."""
    if _held is None:
        logger.warning(msg, *args)
        return
    held = _stop_holding()
    logger.warning(msg, *args)
    hold()
    assert _held is not None
    _held.records[:0] = held


def fail(logger: logging.Logger, line: str) -> None:
    """The worker cannot start: `line` first (critical), then the held lines that may explain it."""
    held = _stop_holding()
    logger.critical("%s", line)
    _write([r for r in held if r.name.startswith(EXPLAINS)])
