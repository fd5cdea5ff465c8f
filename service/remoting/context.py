"""The context every request runs on (``HandlerContext``: the worker's Registry, ReadCache
and settings), and how a request's body is read in it (``decoded``: a big one in a
thread, one at a time) and validated."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, TypeVar

from pydantic import ValidationError

from service.addresses import AddressList
from service.auth import TokenFile
from service.cache import ReadCache
from service.config import Settings
from service.logs import RefusalLog, redis_failure_log
from service.models import M, describe, validated
from service.node import Node
from service.registry import Registry, body_weight, off_loop
from service.removals import Removals
from service.remoting import codes
from service.remoting.bodies import BodyError, json_body
from service.remoting.codec import Command, RemotingError
from service.store import Store

class HandlerContext:
    """What the handlers share: the worker's registry, cache and settings (its Node)."""

    def __init__(self, node: Node) -> None:
        self.registry: Registry = node.registry
        self.removals: Removals = node.removals
        self.store: Store = node.store
        self.cache: ReadCache = node.cache
        self.settings: Settings = node.settings
        # with authentication on, every request is checked against the file's key pairs
        self.keys = TokenFile(node.settings.auth_tokens_file) if node.settings.auth_tokens_file else None
        white = node.settings.remoting_white_addresses
        self.white = AddressList.from_setting(white) if white else None
        self.refusals = RefusalLog(logging.getLogger("service.remoting.refusals"))
        # Redis failures of requests: a line per kind and window, not one per request
        # (the logger the dispatcher's lines carry: log filters key on it)
        self.failures = redis_failure_log(logging.getLogger("service.remoting.handlers"))
        self.listen_port = node.settings.remoting_port  # the bound one once the server listens
        # large bodies are decoded one at a time (decoded)
        self.decode_turn = asyncio.Semaphore(1)


Handler = Callable[[HandlerContext, Command], Awaitable[Command]]


# Bodies up to this size (decoded) are decoded at once: a few hundred microseconds at most.
SMALL_BODY = 4096
# A zlib body (a compressedRegister registration) is judged by what it inflates to, at
# most this many times its size: a 4.9.8 broker's topic config takes 2.5 bytes of it
# (bench/broker_requests.py's, 58-62x), so a 10,000-topic table is 26 KB on the wire and
# 111 ms of inflating and parsing, which its wire size alone left on the event loop.
INFLATED_PER_BYTE = 64
T = TypeVar("T")


def decoded_size(body: bytes) -> int:
    """What decoding `body` costs, in bytes of JSON: a zlib body (its header byte 0x78, as
    bodies.register_broker_body tells one) weighed as inflated."""
    return len(body) * INFLATED_PER_BYTE if body[:1] == b"\x78" else len(body)


async def decoded(ctx: HandlerContext, cmd: Command, decode: Callable[[], T]) -> T:
    """``decode()`` of a request's body. A larger body waits for its turn: one at a time
    per worker, each after the I/O that arrived meanwhile, so that pipelined bodies
    costing milliseconds each never run back to back while other clients wait; a big one
    (a 10,000-topic registration's, bench/README.md section 7b, compressed or not) runs in
    a thread, so the event loop answers route reads meanwhile."""
    size = decoded_size(cmd.body)
    if size <= SMALL_BODY:
        return decode()
    async with ctx.decode_turn:
        await asyncio.sleep(0)
        return await off_loop(body_weight(size), decode)


async def body_doc(ctx: HandlerContext, cmd: Command, what: str) -> Any:
    try:
        return await decoded(ctx, cmd, lambda: json_body(cmd.body, what))
    except BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, str(e)) from None


def validate(ctx: HandlerContext, model: type[M], data: dict[str, Any]) -> M:
    try:
        return validated(model, data, ctx.settings)
    except ValidationError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {describe(e)}") from None
