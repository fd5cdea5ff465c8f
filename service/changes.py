"""Change records: what one change script touched that a cached reader could see.

Every change script that alters a visible table publishes a record on the change channel
and pushes it onto the capped changelog, in the same script (``publish_change`` in
``lua/_changes.lua``). A record is a JSON array ``[seq, redisTime, tag, ...]``: ``seq`` is the
new value of the version counter, ``redisTime`` makes the record unique (so a history that
was rolled back and rewritten shows), and each tag is ``t:<topic>`` (that topic's
QueueDatas or order config), ``g:<brokerName>`` (that group's members, addresses, cluster
or filter servers: every route naming the group), ``-`` (topics new to the tables got
routes: every TOPIC_NOT_EXIST answer may be wrong now, no route answer is) or ``*`` (too
much to list: flush all). A worker that meets a tag it does not know flushes.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class Change:
    seq: int
    raw: bytes  # the record as published, compared when checking for a rewritten history
    topics: frozenset[str]
    groups: frozenset[str]
    flush: bool
    negatives: bool = False  # every TOPIC_NOT_EXIST answer goes

    @property
    def visible(self) -> bool:
        """False for a change no cached answer depends on (a KV entry outside
        ORDER_TOPIC_CONFIG): it still moves the sequence, but evicts nothing."""
        return self.flush or self.negatives or bool(self.topics) or bool(self.groups)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def parse(raw: bytes | str) -> Change | None:
    """The record, or None when `raw` is not one (a worker must then flush: it cannot
    tell what changed)."""
    data = _bytes(raw)
    try:
        record = orjson.loads(data)
        seq = int(record[0])
    except (orjson.JSONDecodeError, TypeError, ValueError, IndexError, KeyError):
        return None
    if not isinstance(record, list):
        return None
    topics, groups, flush, negatives = set(), set(), False, False
    for tag in record[2:]:
        if tag == "*":
            flush = True
        elif tag == "-":
            negatives = True
        elif isinstance(tag, str) and tag.startswith("t:"):
            topics.add(tag[2:])
        elif isinstance(tag, str) and tag.startswith("g:"):
            groups.add(tag[2:])
        else:
            flush = True  # a tag this worker does not know: be safe
    return Change(seq, data, frozenset(topics), frozenset(groups), flush, negatives)


def of_result(first: bytes | str | int) -> Change | None:
    """The change a script's first result names: its record, or None when it returned the
    bare version (nothing visible changed)."""
    if isinstance(first, int):
        return None
    data = _bytes(first)
    if not data.startswith(b"["):
        return None
    change = parse(data)
    if change is None:
        raise ValueError(f"unreadable change record {data[:80]!r}")
    return change
