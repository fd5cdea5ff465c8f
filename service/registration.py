"""What a registration sends register.lua: the body's digest (register_unchanged.lua finds
an unchanged body by it), the table's fingerprints as one flat JSON argument, the static
topics' mappings.

Work on a big table runs in a thread: the event loop keeps answering route reads meanwhile
(``off_loop``).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from typing import Any, Callable, Mapping, TypeVar

import orjson

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
    lua/_queues.lua's ``fingerprint`` writes them."""
    return {topic: f"{c['readQueueNums']},{c['writeQueueNums']},{c['perm']},{c.get('topicSysFlag', 0)}"
            for topic, c in table.items()}


def flat(fps: Mapping[str, str]) -> list[str]:
    """[topic, fingerprint, ...]: register.lua's topic argument. Filled a column at a time:
    no tuple per topic (10,000 of them set the garbage collector going over the heap)."""
    out: list[str] = [""] * (2 * len(fps))
    out[0::2] = fps.keys()
    out[1::2] = fps.values()
    return out


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

