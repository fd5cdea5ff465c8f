"""Cached route reads (GET /v1/routes/{topic}) answered from a request's raw bytes, without
aiohttp's per-request machinery.

aiohttp turns every request into a parsed message, a Request object, a handler task, a
Response and a writer; for a route the cache holds, that costs several times the answer
itself. The RemotingServer had the same problem and answers cached reads as their bytes
arrive (service/remoting/route_reads.py); the HTTP front's connection handler does the
same with ``RouteReads`` (service/http/connections.py says when it may). This module only
knows bytes: which request heads are plain cached route reads, what aiohttp would answer
to them (byte for byte but the Date), and which heads carry no body, so that the
connection knows aiohttp's parser is between requests after it was handed them.

A request is answered here only when nothing about it is unusual: GET, HTTP/1.1, the
path /v1/routes/<topic> and no query, headers in their plain form (token names, printable
ASCII values, CRLF line ends), no body or anything announcing one, no Connection header
but keep-alive, no Expect or Upgrade, a fresh cached answer for the topic. Anything else
is left to aiohttp, which answers it (or refuses it) as always.
"""

from __future__ import annotations

import re
from time import perf_counter
from urllib.parse import unquote

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_response import REASON_PHRASES

from service import auth
from service.cache import Answer, ReadCache
from service.http.context import CACHE, OBSERVER
from service.http.metrics import RouteTally
from service.http.observe import guard
from service.http.views import etag_matches
from service.logs import new_request_id

# The longest head answered here; longer ones go to aiohttp (whose limits are 8190 bytes a
# line, 8190 a header and 128 headers).
MAX_HEAD = 8190

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELDS = rb"((?:\r\n" + _TOKEN + rb":[\t\x20-\x7e]*)*)"
# A route read's head (without the empty line ending it): the topic as sent, then its
# header lines. A topic's characters are those aiohttp hands over unchanged (pchar, and
# "|"), or %XX escapes of printable ASCII (_ESCAPED), which it decodes as urllib's
# unquote does.
_ROUTE_READ = re.compile(rb"GET /v1/routes/([A-Za-z0-9._~!$&'()*+,;=:@|%-]+) HTTP/1\.1" + _FIELDS)
_ESCAPED = re.compile(rb"(?:[^%]|%[2-6][0-9A-Fa-f]|%7[0-9A-Ea-e])+")
# Any request's head in its plain form: whether it carries a body is then known.
_PLAIN = re.compile(rb"([A-Z]+) [\x21-\x7e]+ HTTP/1\.[01]" + _FIELDS)
# The headers a route read's answer depends on; without any of them (most reads), the
# answer is the cached one as it is.
_NOTABLE = re.compile(rb"\r\n(?:content-length|transfer-encoding|connection|upgrade|expect|if-none-match"
                      rb"|x-request-id):", re.IGNORECASE)
# lower-case names: those that send a request to aiohttp, those whose value decides
_REFUSED = frozenset((b"transfer-encoding", b"upgrade", b"expect"))
_DECIDING = frozenset((b"content-length", b"connection", b"if-none-match", b"x-request-id"))

# How many answers' response heads, and request heads' topics, are kept ready; the
# longest request head kept (at most 1024 x 512 bytes of them).
_KEPT = 1024
_KEPT_HEAD = 512


def bodiless(head: bytes) -> bool:
    """Whether `head` (a request's line and header lines, without the empty line) is a
    plain request with no body and no upgrade: after it, aiohttp's parser waits for the
    next request. False when unsure."""
    m = _PLAIN.fullmatch(head)
    if m is None or m.group(1) == b"CONNECT":
        return False
    fields = m.group(2)
    if not fields:
        return True
    for line in fields.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.lower()
        if name in _REFUSED or (name == b"content-length" and value.strip(b" \t") != b"0") \
                or (name == b"connection" and b"upgrade" in value.lower()):
            return False
    return True


def install(app: web.Application, routes: web.AbstractResource) -> None:
    """Lets the app's connections answer cached reads of `routes` (GET /v1/routes/{topic})
    themselves, unless reading needs a token (those go to aiohttp, which checks it)."""
    observer = app[OBSERVER]
    if guard(observer.tokens, observer.reads, auth.READ) is None:
        app[ROUTE_READS] = RouteReads(app[CACHE], observer.tally.labelled("GET", routes.canonical))


class RouteReads:
    """The route reads of one app's HTTP front: answers a head from the cache, counting it
    in the route's metrics slot as service.http.observe would."""

    def __init__(self, cache: ReadCache, slot: RouteTally) -> None:
        self.cache = cache
        self.slot = slot
        self.answered = 0  # requests answered here (tests look at it)
        # by id(answer): the answer, its response head up to the request id's value, and
        # from there to the Date's value (a cached answer's heads differ only by those two)
        self._heads: dict[int, tuple[Answer, bytes, bytes]] = {}
        # heads read before whose answer is the cached one as it is (no If-None-Match or
        # X-Request-Id): their topic. A client sends the same head again and again.
        self._topics: dict[bytes, str] = {}
        self._date = ""
        self._tail = b""  # the Date's value (self._date) and the rest of the head

    def answer(self, head: bytes) -> bytes | None:
        """The whole answer (status line, headers, body) to the request whose head is
        `head`, or None when aiohttp must answer it."""
        started = perf_counter()
        request_id = if_none_match = None
        topic = self._topics.get(head)
        if topic is None:
            m = _ROUTE_READ.fullmatch(head)
            if m is None:
                return None
            raw, fields = m.groups()
            topic = raw.decode("ascii")
            if "%" in topic:
                if _ESCAPED.fullmatch(raw) is None:
                    return None
                topic = unquote(topic)
            if fields and _NOTABLE.search(fields) is not None:
                notable = notable_headers(fields)
                if notable is None:
                    return None
                if_none_match, request_id = notable
            elif len(head) <= _KEPT_HEAD:
                topics = self._topics
                if len(topics) >= _KEPT:
                    topics.clear()
                topics[head] = topic
        answer = self.cache.lookup_route("http", topic)
        if answer is None:
            return None
        date = rfc822_formatted_time()  # aiohttp's Date, one string object a second
        if date is not self._date:
            self._date = date
            self._tail = f"{date}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode()
        if if_none_match and etag_matches(if_none_match, answer.etag):
            status = 304  # views.not_modified: no body, no Content-Type or Content-Length
            out = (f"HTTP/1.1 304 Not Modified\r\nETag: {answer.etag}\r\nCache-Control: no-cache\r\n"
                   f"X-Request-Id: {request_id or new_request_id()}\r\nDate: ").encode() + self._tail
        else:
            status = answer.status
            kept = self._heads.get(id(answer))
            if kept is None or kept[0] is not answer:
                kept = self._keep(answer)
            out = b"".join((kept[1], (request_id or new_request_id()).encode(), kept[2], self._tail, answer.body))
        self.answered += 1
        self.slot.add(status, perf_counter() - started)
        return out

    def _keep(self, answer: Answer) -> tuple[Answer, bytes, bytes]:
        """`answer`'s response head as views.answer_response, observe.observed and aiohttp
        make it (in their order), in two parts around the request id."""
        heads = self._heads
        if len(heads) >= _KEPT:
            heads.clear()
        status = answer.status
        kept = heads[id(answer)] = (
            answer,
            (f"HTTP/1.1 {status} {REASON_PHRASES.get(status, '')}\r\nETag: {answer.etag}\r\n"
             "Cache-Control: no-cache\r\nContent-Type: application/json\r\nX-Request-Id: ").encode(),
            f"\r\nContent-Length: {len(answer.body)}\r\nDate: ".encode())
        return kept


def notable_headers(fields: bytes) -> tuple[str | None, str | None] | None:
    """If-None-Match and X-Request-Id of a route read's header lines (each after a CRLF),
    or None when anything in them is for aiohttp to handle: a body, an upgrade, an
    Expect, a Connection other than keep-alive, one of these headers twice or with
    whitespace aiohttp might read differently."""
    if_none_match = request_id = None
    seen: set[bytes] = set()
    for line in fields.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.lower()
        if name in _REFUSED:
            return None
        if name not in _DECIDING:
            continue
        if name in seen:
            return None  # which one counts is aiohttp's to say
        seen.add(name)
        value = value.lstrip(b" \t")
        if value != value.rstrip(b" \t"):
            return None
        if name == b"if-none-match":
            if_none_match = value.decode("ascii")
        elif name == b"x-request-id":
            request_id = value.decode("ascii")
        elif name == b"content-length":
            if value != b"0":
                return None
        elif value.lower() != b"keep-alive":  # Connection
            return None
    return if_none_match, request_id


ROUTE_READS = web.AppKey("route_reads", RouteReads)
