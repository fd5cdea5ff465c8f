"""A big broker's registration read as a change to its previous one.

A broker sends its whole topic table, about 150 bytes of JSON per topic, whenever any
topic changes (an operator creating one: a new dataVersion). For 10,000 topics, decoding
and checking it all again took most of the registration, although all but one topic came
back byte for byte as before. So each worker keeps, per broker address, the last big
body it decoded whole (``Layout``: where its table lies) with the fingerprints its table
validated to; the next body is compared with it, and only the topic configs between the
first and the last byte that differ are decoded and checked. The rest of the table is
known: the same bytes as before, which validated then.

Plain JSON relies on the layout fastjson writes (and RocketMQ 4.x brokers send):

    {"filterServerList":[...],"topicConfigSerializeWrapper":{"dataVersion":{...},
     "topicConfigTable":{"T1":{...},"T2":{...}}}}

Such a body is held only when its table is the last thing in it (it ends with ``}}}``)
and its topic configs are flat: the table holds exactly one ``{`` and one ``}`` per topic,
so neither a name nor a value holds a brace, and ``},"`` occurs only between two configs
(inside a JSON string a ``"`` is escaped). A 5.x broker's body has its static topics'
mappings after the table, and each of its configs one object (``"attributes":{...}``,
fastjson's first field): it is held when its table holds exactly two of each brace per
topic and one ``"attributes":{`` each, so a config ends where ``},"<name>":{`` follows
(inside a config only the attributes' ``}`` is followed by ``,"``, and by a field that is
no object); the next body must end with the same mappings, byte for byte.

The compressed form (``compressedRegister=true``) is inflated first (zlib's C code), then
compared the same way; its topic configs are length-prefixed parts, whose starts were
noted when it was read whole, and what follows them (filter servers, a 5.x broker's queue
mappings) must be the same bytes as before.

Where a new body does not fit (another layout, a part that does not decode to whole
configs, a topic named twice), ``read`` answers None and the body is decoded whole, as
every small body is: the table registered is the same either way.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import OrderedDict
from typing import Any, NamedTuple

from service.remoting import bodies, fastjson
from service.remoting.bodies import CONFIG_BETWEEN as _BETWEEN, MAPPINGS_AFTER_TABLE, NEXT_CONFIG, Layout, table_span

# Smaller bodies are decoded whole: cheap enough, and not worth holding.
MIN_BYTES = 64 * 1024
# The bodies a worker holds in all: past it the least recently used goes.
MAX_HELD_BYTES = 64 * 1024 * 1024


class Held(NamedTuple):
    layout: Layout
    fps: dict[str, str]  # every topic's fingerprint, as the whole table validated
    filters: Any  # the compressed form's filterServerList (its bytes follow the table)


class Delta(NamedTuple):
    """A body read against the one held: the document without its table (``head``), the
    topic configs read from the part that differs (``configs``: still to validate), the
    held topics that part replaces (``replaced``), the held fingerprints (``earlier``),
    and where this body's table lies (``layout``, for ``keep``)."""

    head: dict[str, Any]
    configs: dict[str, Any]
    replaced: list[str]
    earlier: dict[str, str]
    layout: Layout
    filters: Any

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


_ATTRIBUTES = b'"attributes":{'


def _objects_per_config(data: bytes, end: int) -> int:
    """How many objects each config of a plain layout's table holds, itself included: 2
    in a 5.x body (its attributes), whose table the mappings follow; 1 in a 4.x body."""
    return 2 if data.startswith(MAPPINGS_AFTER_TABLE, end) else 1


def _flat(data: bytes, start: int, end: int, topics: int, objects: int) -> bool:
    """Every config of the table holds no object but the 5.x attributes (counted in
    place, no copy)."""
    if not data.count(b"{", start, end) == objects * topics == data.count(b"}", start, end):
        return False
    return objects == 1 or data.count(_ATTRIBUTES, start, end) == topics


def plain_layout(body: bytes, topics: int) -> Layout | None:
    """The layout of a plain body whose table of `topics` topics is flat (see above), else
    None. A pass over the body: for the decoding thread."""
    if len(body) < MIN_BYTES:
        return None
    span = table_span(body)
    if span is None:
        return None
    start, end = span
    return Layout(body, start, end, None) if _flat(body, start, end, topics, _objects_per_config(body, end)) else None


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


def _differing(old: Layout, data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """How many bytes the old and the new table share at their start and at their end (the
    end's count leaving the start's alone); None when the tables are the same bytes."""
    old_size, new_size = old.end - old.start, end - start
    same_start = _same_start(old.data, old.start, data, start, min(old_size, new_size))
    if same_start == old_size == new_size:
        return None
    return same_start, _same_end(old.data, old.end, data, end, min(old_size, new_size) - same_start)


def _json_configs(segment: bytes, objects: int) -> dict[str, Any] | None:
    """The topic configs `segment` holds (``"T1":{...},"T2":{...}``), or None when it is
    not exactly a run of whole, flat configs (`objects` per config, see ``_flat``)."""
    if not segment:
        return None
    try:
        configs = fastjson.loads(b"{" + segment + b"}")
    except ValueError:
        return None
    if not isinstance(configs, dict) or not _flat(segment, 0, len(segment), len(configs), objects):
        return None
    return configs


def _config_start(data: bytes, lo: int, at: int) -> int:
    """Where the config holding offset `at` of a table starting at `lo` begins (its name's
    quote): just after the last boundary at or before `at`, or `lo`."""
    while True:
        found = data.rfind(_BETWEEN, lo, at + 1)
        if found < 0:
            return lo
        if NEXT_CONFIG.match(data, found):
            return found + 2
        at = found - 1


def _config_end(data: bytes, at: int, hi: int) -> int:
    """Where the config holding offset `at` of a table ending at `hi` ends (just after its
    "}"): at the first boundary from `at` on, or `hi`."""
    while True:
        found = data.find(_BETWEEN, at, hi)
        if found < 0:
            return hi
        if NEXT_CONFIG.match(data, found):
            return found + 1
        at = found + 1


def _part_lines(segment: bytes) -> tuple[list[bytes], list[int]] | None:
    """The length-prefixed parts `segment` is made of, and where each starts; None unless
    they fill it exactly."""
    parts, lines, starts = bodies.Parts(segment), [], []
    try:
        while parts.pos < len(segment):
            starts.append(parts.pos)
            lines.append(parts.part())
    except bodies.BodyError:
        return None
    return lines, starts


def _part_configs(lines: list[bytes]) -> dict[str, Any] | None:
    """The topic configs of compressed-form lines, or None when one is bad or two name the
    same topic (a whole decode says what those mean)."""
    try:
        configs = bodies.topic_configs(lines)
    except bodies.BodyError:
        return None
    return configs if len(configs) == len(lines) else None


class BodyDeltas:
    """The last big body of each broker address this worker decoded, least recently used
    first, bounded in bytes."""

    def __init__(self, max_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._held: OrderedDict[str, Held] = OrderedDict()
        self.reads = 0  # bodies registered as read by ``read`` (counted by the caller that used it)

    def read(self, key: str, body: bytes, compressed: bool = False, max_topics: int | None = None) -> Delta | None:
        """`body` (`compressed`: in the compressed form) as a change to the body held for
        `key`, or None (decode it whole). `max_topics`: the inflating stops early past it."""
        held = self._held.get(key)
        if held is None or (held.layout.starts is not None) != compressed:
            return None
        delta = self._read_compressed(held, body, max_topics) if compressed else self._read_plain(held, body)
        if delta is not None:
            self._held.move_to_end(key)
        return delta

    @staticmethod
    def _read_plain(held: Held, body: bytes) -> Delta | None:
        span = table_span(body) if len(body) >= MIN_BYTES else None
        if span is None:
            return None
        start, end = span
        old = held.layout
        tail = old.data[old.end:]  # 4.x: the closing braces; 5.x: the mappings too
        if len(body) - end != len(tail) or not body.endswith(tail):
            return None  # a 5.x broker's static topic mappings changed: read it whole
        objects = _objects_per_config(old.data, old.end)
        try:
            head = bodies.plain_head(body, start, end)
        except bodies.BodyError:
            return None
        layout = Layout(body, start, end, None)
        differing = _differing(old, body, layout.start, layout.end)
        if differing is None:
            return Delta(head, {}, [], held.fps, layout, None)
        same_start, same_end = differing
        # widened to whole configs: from the start of the config the first difference is
        # in to the end of the one the last is in (its "}"; the "," after it is the same)
        first = _config_start(old.data, old.start, old.start + same_start) - old.start
        cut = _config_end(old.data, max(old.end - same_end - 1, old.start), old.end) - old.start  # in the old table
        new_cut = cut + (layout.end - layout.start) - (old.end - old.start)
        replaced = _json_configs(old.data[old.start + first:old.start + cut], objects)
        configs = _json_configs(body[start + first:start + new_cut], objects) if new_cut > first else None
        if replaced is None or configs is None or any(topic not in held.fps for topic in replaced):
            return None
        return Delta(head, configs, list(replaced), held.fps, layout, None)

    @staticmethod
    def _read_compressed(held: Held, body: bytes, max_topics: int | None) -> Delta | None:
        old = held.layout
        assert old.starts is not None
        try:
            data = bodies.inflate(body, max_topics)
            parts = bodies.Parts(data)
            version = bodies.json_body(parts.part(), "DataVersion")
            count = parts.count()
        except bodies.BodyError:
            return None
        start, tail = parts.pos, old.data[old.end:]
        end = len(data) - len(tail)
        if end < start or not data.endswith(tail):
            return None  # filter servers or queue mappings changed: read it whole
        head = {"topicConfigSerializeWrapper": {"dataVersion": version}, "filterServerList": held.filters}
        differing = _differing(old, data, start, end)
        if differing is None:
            if count != len(old.starts):
                return None
            return Delta(head, {}, [], held.fps, Layout(data, start, end, old.starts), held.filters)
        same_start, same_end = differing
        old_size, grown = old.end - old.start, (end - start) - (old.end - old.start)
        # the parts from the one the first difference is in to the first one wholly after
        # the last difference (that one's start is the same as before, moved by `grown`)
        i = bisect_right(old.starts, same_start) - 1
        j = bisect_left(old.starts, old_size - same_end)
        if i < 0:
            return None
        first = old.starts[i]
        cut = old.starts[j] if j < len(old.starts) else old_size
        found = _part_lines(data[start + first:start + cut + grown]) if cut + grown >= first else None
        replaced_lines = _part_lines(old.data[old.start + first:old.start + cut])
        if found is None or replaced_lines is None or count != len(old.starts) - (j - i) + len(found[0]):
            return None
        configs, replaced = _part_configs(found[0]), _part_configs(replaced_lines[0])
        if configs is None or replaced is None:
            return None
        moved = old.starts[j:] if not grown else [s + grown for s in old.starts[j:]]
        starts = old.starts[:i] + [first + s for s in found[1]] + moved
        return Delta(head, configs, list(replaced), held.fps, Layout(data, start, end, starts), held.filters)

    def keep(self, key: str, layout: Layout | None, fps: dict[str, str], filters: Any = None) -> None:
        """Holds the body of `layout` (None: nothing to hold), whose table validated whole
        to `fps`, for `key`'s next one; `filters`: the compressed form's filter servers."""
        self.drop(key)
        if layout is None or not MIN_BYTES <= len(layout.data) <= self.max_bytes:
            return
        if layout.starts is not None and len(layout.starts) != len(fps):
            return  # a topic named twice: the next body is read whole too
        self._held[key] = Held(layout, fps, filters)
        self.bytes += len(layout.data)
        while self.bytes > self.max_bytes:
            _, old = self._held.popitem(last=False)
            self.bytes -= len(old.layout.data)

    def drop(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self.bytes -= len(held.layout.data)

    def __len__(self) -> int:
        return len(self._held)
