"""A big broker's registration read as a change to its previous one.

A 4.9.8 broker sends its whole topic table, about 150 bytes of JSON per topic, whenever
any topic changes (an operator creating one: a new dataVersion). For 10,000 topics,
decoding and checking 1.5 MB again took most of the registration, although all but one
topic came back byte for byte as before. So each worker keeps, per broker address, the
last big plain body it decoded whole, with the fingerprints its table validated to; the
next body is compared with it, and only the topic configs between the first and the last
byte that differ are decoded and checked. The rest of the table is known: the same bytes
as before, which validated then.

The comparison relies on the layout fastjson writes (and RocketMQ 4.x brokers send):

    {"filterServerList":[...],"topicConfigSerializeWrapper":{"dataVersion":{...},
     "topicConfigTable":{"T1":{...},"T2":{...}}}}

A body is held only when its table is the last thing in it (it ends with ``}}}``) and its
topic configs are flat: the table holds exactly one ``{`` and one ``}`` per topic, so
neither a name nor a value holds a brace, and ``},"`` occurs only between two configs
(inside a JSON string a ``"`` is escaped). Where a new body does not fit (another layout,
a segment that does not decode to whole configs, a topic named twice, a topic removed),
``read`` answers None and the body is decoded whole, as every small body is.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

from service.remoting import fastjson

# Smaller bodies are decoded whole: cheap enough, and not worth holding.
MIN_BYTES = 64 * 1024
# The bodies a worker holds in all: past it the least recently used goes.
MAX_HELD_BYTES = 64 * 1024 * 1024

_TABLE = b'"topicConfigTable":{'
_TAIL = b"}}}"  # the table's, the wrapper's and the body's closing braces
_BETWEEN = b'},"'  # the end of one topic config and the start of the next one's name


class Held(NamedTuple):
    body: bytes
    start: int  # where the table's first topic begins (just after its "{")
    fps: dict[str, str]  # every topic's fingerprint, as the whole table validated


class Delta(NamedTuple):
    """A body read against the one held: the document without its table (``head``), the
    topic configs read from the part that differs (``configs``: still to validate), the
    held topics that part replaces (``replaced``), and the held fingerprints (``earlier``)."""

    head: dict[str, Any]
    configs: dict[str, Any]
    replaced: list[str]
    earlier: dict[str, str]
    start: int  # where the body's table starts, for ``keep``

    def fingerprints(self, changed: dict[str, str]) -> dict[str, str] | None:
        """The new table's fingerprints, given those of ``configs`` once validated; None
        when a topic of the changed part is named elsewhere in the body too (a full decode
        says what a repeated name means)."""
        fps = dict(self.earlier)  # a C copy only while the dict has never lost a key
        replaced = set(self.replaced)
        if any(topic in fps for topic in changed if topic not in replaced):
            return None  # named in the unchanged part too
        for topic in replaced.difference(changed):
            del fps[topic]
        fps.update(changed)
        return fps


def table_start(body: bytes) -> int:
    """Where the topic table's first topic begins; -1 when this body is not laid out as
    this module expects (see the module's docstring)."""
    at = body.find(_TABLE)
    if at < 0 or not body.endswith(_TAIL):
        return -1
    return at + len(_TABLE)


def flat_table_start(body: bytes, topics: int) -> int:
    """``table_start`` of a body whose table of `topics` topics is flat (one "{" and one
    "}" per topic), else -1. A pass over the body: for the decoding thread."""
    if len(body) < MIN_BYTES:
        return -1
    start = table_start(body)
    if start < 0:
        return -1
    table = body[start:len(body) - len(_TAIL)]
    return start if table.count(b"{") == topics and table.count(b"}") == topics else -1


def _same_start(old: bytes, old_at: int, new: bytes, new_at: int, most: int) -> int:
    """How many bytes from `old_at` in `old` and `new_at` in `new` are the same, at most
    `most`: halving, each step one memcmp (``bytes.startswith`` of a memoryview copies
    nothing; comparing memoryviews goes a byte at a time, slicing bytes copies)."""
    view = memoryview(old)
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new.startswith(view[old_at + lo:old_at + mid], new_at + lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _same_end(old: bytes, old_end: int, new: bytes, new_end: int, most: int) -> int:
    """How many bytes before `old_end` in `old` and `new_end` in `new` are the same, at
    most `most`."""
    view = memoryview(old)
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new.startswith(view[old_end - mid:old_end - lo], new_end - mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _configs(segment: bytes) -> dict[str, Any] | None:
    """The topic configs `segment` holds (``"T1":{...},"T2":{...}``), or None when it is
    not exactly a run of whole, flat configs."""
    if not segment:
        return None
    try:
        configs = fastjson.loads(b"{" + segment + b"}")
    except ValueError:
        return None
    if not isinstance(configs, dict) or segment.count(b"{") != len(configs) or segment.count(b"}") != len(configs):
        return None
    return configs


class BodyDeltas:
    """The last big plain body of each broker address this worker decoded, least
    recently used first, bounded in bytes."""

    def __init__(self, max_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[str, Held] = OrderedDict()
        self.reads = 0  # bodies registered as read by ``read`` (counted by the caller that used it)

    def read(self, key: str, body: bytes) -> Delta | None:
        """`body` as a change to the body held for `key`, or None (decode it whole)."""
        held = self._held.get(key)
        if held is None or len(body) < MIN_BYTES:
            return None
        start = table_start(body)
        if start < 0:
            return None
        try:
            head = fastjson.loads(body[:start] + body[-len(_TAIL):])
        except ValueError:
            return None
        wrapper = head.get("topicConfigSerializeWrapper") if isinstance(head, dict) else None
        if not isinstance(wrapper, dict) or wrapper.get("topicConfigTable") != {}:
            return None
        old, old_start, old_end = held.body, held.start, len(held.body) - len(_TAIL)
        new_end = len(body) - len(_TAIL)
        old_size, new_size = old_end - old_start, new_end - start
        same_start = _same_start(old, old_start, body, start, min(old_size, new_size))
        if same_start == old_size == new_size:
            configs: dict[str, Any] = {}
            replaced: list[str] = []
        else:
            same_end = _same_end(old, old_end, body, new_end, min(old_size, new_size) - same_start)
            # widened to whole configs: from the start of the config the first difference is
            # in to the end of the one the last is in (its "}"; the "," after it is the same)
            first = old.rfind(_BETWEEN, old_start, old_start + same_start + 1)
            first = first + 2 - old_start if first >= 0 else 0
            last = old.find(_BETWEEN, max(old_end - same_end - 1, old_start), old_end)
            cut = last + 1 - old_start if last >= 0 else old_size  # in the old table
            new_cut = cut + new_size - old_size
            replaced_configs = _configs(old[old_start + first:old_start + cut])
            found = _configs(body[start + first:start + new_cut]) if new_cut > first else None
            if replaced_configs is None or found is None:
                return None
            configs, replaced = found, list(replaced_configs)
            if any(topic not in held.fps for topic in replaced):
                return None
        self._held.move_to_end(key)
        return Delta(head, configs, replaced, held.fps, start)

    def keep(self, key: str, body: bytes, fps: dict[str, str], start: int) -> None:
        """Holds `body` for `key`'s next one: its table starts at `start` (from
        ``flat_table_start``, or a ``Delta``'s) and validated whole to `fps`."""
        self.drop(key)
        if start < 0 or len(body) < MIN_BYTES or len(body) > self.max_bytes:
            return
        self._held[key] = Held(body, start, fps)
        self.bytes += len(body)
        while self.bytes > self.max_bytes:
            _, old = self._held.popitem(last=False)
            self.bytes -= len(old.body)

    def drop(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self.bytes -= len(held.body)

    def __len__(self) -> int:
        return len(self._held)
