"""What a master's registration sends register.lua, and the worker's copies that let it
send less.

A broker with 10,000 topics re-registers with a new dataVersion whenever one topic is
created. The script compares every topic with the group's stored fingerprints
(``broker-topics:<name>``) and writes what differs: reading and comparing them all took
most of its time. So each worker keeps, per broker group, a copy of the stored
fingerprints with their generation (the broker row's ``topicsGen``, see service/keys.py);
holding one, it sends only the topics that differ from it and the script checks the
generation first: a copy another worker or script has since made out of date is refused
whole ('stale') and the table is sent again in full.

Work on a big table (fingerprints, diffs) runs in a thread: the event loop keeps answering
route reads meanwhile (``off_loop``).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections import OrderedDict
from typing import Any, Callable, Mapping, NamedTuple, TypeVar

import orjson

# Registrations with fewer topics go in full: the script's comparison costs little there.
COPY_MIN_TOPICS = 512
# Topics the copies of one worker hold in all (~100 bytes each): beyond it the least
# recently used group's copy goes.
COPY_MAX_TOPICS = 400_000
# Topic tables this size and over are worked on in a thread (one event loop turn each
# would hold up route reads by milliseconds).
OFF_LOOP_MIN = 2_000
# How long a thread working on a big table may hold the GIL while the event loop waits for
# it (Python's default is 5 ms; a route read takes the GIL several times on its way).
OFF_LOOP_SWITCH_S = 0.0005

T = TypeVar("T")


def body_weight(nbytes: int) -> int:
    """A request body's size in topic configs, at most (each takes 16 bytes and more, even
    compressed): what ``off_loop`` weighs."""
    return nbytes // 16


async def off_loop(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread when `size` (topic configs) is large, else here. The GIL
    still runs one thread at a time, but is handed back every OFF_LOOP_SWITCH_S (the
    worker's switch interval is set to it), so the loop's reads wait that long instead of
    the whole job."""
    if size >= OFF_LOOP_MIN:
        if sys.getswitchinterval() > OFF_LOOP_SWITCH_S:
            sys.setswitchinterval(OFF_LOOP_SWITCH_S)
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


def body_digest(*parts: bytes) -> str:
    """What finds a registration's body again (register_unchanged.lua): SHA-256 of the
    parts, cut to 128 bits. SHA-256 rather than BLAKE2: CPUs with SHA extensions hash a
    10,000-topic body (1.5 MB) in under half the time."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:32]


def fingerprints(table: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """topic -> "readQueueNums,writeQueueNums,perm,topicSysFlag" of validated configs, as
    lua/_lib.lua's ``fingerprint`` writes them."""
    return {topic: f"{c['readQueueNums']},{c['writeQueueNums']},{c['perm']},{c.get('topicSysFlag', 0)}"
            for topic, c in table.items()}


def flat(fps: Mapping[str, str]) -> list[str]:
    """[topic, fingerprint, ...]: register.lua's topic argument. Filled a column at a time:
    no tuple per topic (10,000 of them set the garbage collector going over the heap)."""
    out: list[str] = [""] * (2 * len(fps))
    out[0::2] = fps.keys()
    out[1::2] = fps.values()
    return out


def diff(copy: Mapping[str, str], fps: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The configs differing from the copy (new or changed), and the copy's topics absent."""
    if copy == fps:  # a C loop: a new dataVersion with the same topics, a staging just made
        return {}, []
    changed = {t: fp for t, fp in fps.items() if copy.get(t) != fp}
    # the copy's topics in fps are fps less the new ones: any more in the copy are absent
    new = sum(1 for t in changed if t not in copy)
    absent = [t for t in copy if t not in fps] if len(copy) > len(fps) - new else []
    return changed, absent


def after(copy: Mapping[str, str], changed: Mapping[str, str], absent: list[str],
          rewritten: bool, delete_absent: bool) -> dict[str, str]:
    """The group's fingerprints once register.lua applied a diff: the steps it takes."""
    out = dict(copy)
    for topic, fp in changed.items():
        if rewritten or topic not in out:
            out[topic] = fp
    if rewritten and delete_absent:
        for topic in absent:
            out.pop(topic, None)
    return out


class Plan(NamedTuple):
    """What a worker holding a copy sends register.lua, and the copy it holds after, both
    ways the script may take (it rewrites what differs on a new dataVersion, else adds new
    topics only): worked out in one go, so a big table costs one trip to a thread."""

    changed: dict[str, str]
    absent: list[str]
    if_rewritten: dict[str, str]
    if_not: dict[str, str]


def plan(copy: dict[str, str], fps: Mapping[str, str], delete_absent: bool) -> Plan:
    changed, absent = diff(copy, fps)
    if not changed and not (absent and delete_absent):
        return Plan(changed, absent, copy, copy)  # the copy stays what is stored
    # not rewritten, only new topics are written: none new, nothing to copy
    new = any(t not in copy for t in changed)
    return Plan(changed, absent, after(copy, changed, absent, True, delete_absent),
                after(copy, changed, absent, False, delete_absent) if new else copy)


class Copies:
    """The copies of broker groups' fingerprints this worker holds: name -> (generation,
    fingerprints), least recently used first, bounded in topics."""

    def __init__(self, max_topics: int = COPY_MAX_TOPICS) -> None:
        self.max_topics = max_topics
        self.topics = 0
        self._held: OrderedDict[str, tuple[str, dict[str, str]]] = OrderedDict()

    def get(self, name: str) -> tuple[str, dict[str, str]] | None:
        held = self._held.get(name)
        if held is not None:
            self._held.move_to_end(name)
        return held

    def put(self, name: str, generation: str, fps: dict[str, str]) -> None:
        self.drop(name)
        if not generation or len(fps) < COPY_MIN_TOPICS or len(fps) > self.max_topics:
            return
        self._held[name] = (generation, fps)
        self.topics += len(fps)
        while self.topics > self.max_topics:
            _, (_, old) = self._held.popitem(last=False)
            self.topics -= len(old)

    def drop(self, name: str) -> None:
        held = self._held.pop(name, None)
        if held is not None:
            self.topics -= len(held[1])

    def __len__(self) -> int:
        return len(self._held)


def mapping_json(info: Mapping[str, Any]) -> bytes:
    """A TopicQueueMappingInfo as a 5.x NameServer answers it to clients of 4.9.4 and later
    (fastjson with MapSortField and quoted keys): fields in name order, ``currIdMap`` by
    logic queue id in numeric order."""
    doc = dict(info)
    ids = doc.get("currIdMap")
    if isinstance(ids, dict):
        try:
            doc["currIdMap"] = {str(k): ids[k] for k in sorted(ids, key=int)}
        except (TypeError, ValueError):
            pass  # not numbers: kept as sent, sorted as names
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def mapping_args(mappings: Mapping[str, Mapping[str, Any]]) -> bytes:
    """register.lua's queue mapping argument: [topic, bname, info JSON, ...]."""
    flat: list[str] = []
    for topic, info in mappings.items():
        flat += (topic, info["bname"], mapping_json(info).decode())
    return orjson.dumps(flat)

