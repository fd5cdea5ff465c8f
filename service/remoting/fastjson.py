"""The JSON dialect RocketMQ speaks (alibaba fastjson), both ways.

fastjson writes a map whose keys are numbers without quotes: a BrokerData's
``HashMap<Long, String> brokerAddrs`` comes out as ``{"brokerAddrs":{0:"10.0.0.1:10911"}}``,
a TopicQueueMappingInfo's ``currIdMap`` as ``{0:0}``. Standard parsers refuse that, so
``loads`` quotes such bare keys before parsing (only when the fast parse fails, and only
in documents up to ``BARE_KEYS_MAX`` bytes: the quoting is pure Python, about 0.7 s per MiB
of hostile input, so a bigger document in that form is refused rather than allowed to
hold the event loop; fastjson writes bare keys only in small maps such as brokerAddrs).

RocketMQ's NameServer sends that form to clients older than 4.9.4 (request ``version``
< 401, unless the header ``acceptStandardJsonOnly`` is true) and always for ClusterInfo;
``dialect`` turns standard JSON into it, ``broker_addrs`` maps being the only place a route
or cluster document has numeric keys.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# ~10 ms of quoting at worst on a loaded core. fastjson writes bare keys in brokerAddrs and
# in the static-topic mappings of a 5.x RegisterBrokerBody, which its compressed form
# (compressedRegister=true) carries without any JSON to quote.
BARE_KEYS_MAX = 16 * 1024

_BARE_KEY = re.compile(r"[A-Za-z0-9_$.+\-]+")
_WS = " \t\r\n"


def loads(data: bytes | str) -> Any:
    """Standard JSON, or fastjson's output with unquoted map keys (up to BARE_KEYS_MAX
    bytes); ValueError otherwise."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        if len(data) > BARE_KEYS_MAX:
            raise ValueError(f"{first}; a document over {BARE_KEYS_MAX} bytes must be standard JSON "
                             "(map keys quoted)") from None
        text = data.decode("utf-8", errors="strict") if isinstance(data, (bytes, bytearray, memoryview)) else data
        fixed = quote_bare_keys(text)
        if fixed == text:
            raise ValueError(str(first)) from None
        try:
            return orjson.loads(fixed)
        except orjson.JSONDecodeError as e:
            raise ValueError(str(e)) from None


def quote_bare_keys(text: str) -> str:
    """Puts quotes around object keys written without them ({0:"a"} -> {"0":"a"})."""
    out: list[str] = []
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c in "{,":
            j = i + 1
            while j < n and text[j] in _WS:
                j += 1
            m = _BARE_KEY.match(text, j)
            if m is not None:
                k = m.end()
                while k < n and text[k] in _WS:
                    k += 1
                if k < n and text[k] == ":":
                    out.append(text[start:j])
                    out.append('"' + m.group(0) + '"')
                    start = i = m.end()
                    continue
        i += 1
    out.append(text[start:])
    return "".join(out)


_ADDRS = re.compile(rb'"brokerAddrs":\{[^{}]*\}')
_QUOTED_INT_KEY = re.compile(rb'"(-?\d+)":')


def dialect(standard: bytes) -> bytes:
    """fastjson's default form of a route or cluster document: brokerAddrs keys unquoted.

    Safe on our documents: addresses are host:port (validated), so a brokerAddrs object
    holds no braces and no quotes inside its strings.
    """
    return _ADDRS.sub(lambda m: _QUOTED_INT_KEY.sub(rb"\1:", m.group(0)), standard)
