"""The JSON dialect RocketMQ speaks (alibaba fastjson), both ways.

fastjson writes a map whose keys are numbers without quotes: a BrokerData's
``HashMap<Long, String> brokerAddrs`` comes out as ``{"brokerAddrs":{0:"10.0.0.1:10911"}}``,
a TopicQueueMappingInfo's ``currIdMap`` as ``{0:0}`` (a 5.x broker's plain registration
carries one per static topic, after a topic table of up to megabytes). Standard parsers
refuse that, so ``loads`` quotes such bare keys before parsing (from a static topic's
``currIdMap`` on, when there is one; else when the fast parse fails), in documents of any
size: from where the parser stopped on, and in linear time with the
scanning done by C (bytes methods and one regex), so a 16 MiB document costs the decoding
thread a bounded time and never more than one pass per string that holds a lookalike.

RocketMQ's NameServer sends that form to clients older than 4.9.4 (request ``version``
< 401, unless the header ``acceptStandardJsonOnly`` is true) and always for ClusterInfo;
``dialect`` turns standard JSON into it, ``broker_addrs`` maps being the only place a route
or cluster document has numeric keys.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# A key fastjson leaves unquoted (a number; identifiers too, as other writers do), after
# the "{" or "," that opens its place, up to its ":".
_BARE_KEY = re.compile(rb"[{,][ \t\r\n]*([A-Za-z0-9_$.+\-]+)[ \t\r\n]*:")


# A static topic's currIdMap: where a 5.x broker's plain registration (megabytes, the
# mappings last) has its bare keys. Quoted before the first parse, the body is parsed once,
# not once to find them and once more.
_CURR_ID_MAP = b'"currIdMap":{'


def loads(data: bytes | str) -> Any:
    """Standard JSON, or fastjson's output with unquoted map keys; ValueError otherwise."""
    if isinstance(data, bytes) and (at := data.find(_CURR_ID_MAP)) >= 0:
        # outside any string: inside one its quotes would be escaped
        data = quote_bare_keys(data, at + len(_CURR_ID_MAP) - 1)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        fixed = quote_bare_keys(raw, _place_before(raw, first.pos))
        if fixed is raw:
            raise ValueError(str(first)) from None
        try:
            return orjson.loads(fixed)
        except orjson.JSONDecodeError as e:
            raise ValueError(str(e)) from None


def _place_before(raw: bytes, pos: int) -> int:
    """The byte offset of the "{" or "," before character `pos` (where orjson stopped:
    outside any string, and everything before it standard JSON), or 0."""
    if not raw.isascii():
        try:
            pos = len(raw.decode()[:pos].encode())
        except UnicodeDecodeError:
            return 0
    return max(raw.rfind(b"{", 0, pos + 1), raw.rfind(b",", 0, pos + 1), 0)


def quote_bare_keys(data: bytes, start: int = 0) -> bytes:
    """`data` with object keys written without quotes quoted, from offset `start` (which
    must lie outside any string) on: ``{0:"a"}`` -> ``{"0":"a"}``. `data` itself when it
    has none."""
    # In `plain` every '"' delimits a string: escaped backslashes, then escaped quotes, are
    # two other bytes there, at the same offsets.
    plain = data.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in data else data
    out: list[bytes] = []
    copied, at = 0, start  # `at` always lies outside strings
    search = _BARE_KEY.search
    while (m := search(plain, at)) is not None:
        place = m.start()
        if plain.count(b'"', at, place) & 1:
            # inside a string: what looked like a key is text; go on after the string
            close = plain.find(b'"', place)
            if close < 0:
                break
            at = close + 1
            continue
        key, key_end = m.span(1)
        out += (data[copied:key], b'"', data[key:key_end], b'"')
        copied = key_end
        at = m.end()
    if not out:
        return data
    out.append(data[copied:])
    return b"".join(out)


_ADDRS = re.compile(rb'"(?:brokerAddrs|currIdMap)":\{[^{}]*\}')
_QUOTED_INT_KEY = re.compile(rb'"(-?\d+)":')


def dialect(standard: bytes) -> bytes:
    """fastjson's default form of a route or cluster document: the keys of brokerAddrs and
    of a static topic's currIdMap unquoted.

    Safe on our documents: addresses are host:port (validated), so a brokerAddrs object
    holds no braces and no quotes inside its strings; a currIdMap holds numbers.
    """
    return _ADDRS.sub(lambda m: _QUOTED_INT_KEY.sub(rb"\1:", m.group(0)), standard)
