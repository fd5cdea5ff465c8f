"""What every RocketMQ request handler works with: the connection a request came on, the
worker's shared context, the error that answers a request, and the helpers that read
extFields and bodies and build answers.

Headers arrive as RocketMQ's extFields (all strings). A required field that is absent is
answered as RocketMQ does (SYSTEM_ERROR, "the custom field <x> is null"); documents are
validated by the same pydantic models as the HTTP API, and a validation error is a
SYSTEM_ERROR too (a NameServer answers every undecodable request that way).
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from pydantic import ValidationError

from service.addresses import AddressList
from service.auth import TokenFile
from service.cache import ReadCache
from service.config import Settings
from service.logs import RefusalLog, redis_failure_log
from service.models import M, describe, name_rule, valid_name, validated
from service.node import Node
from service.registry import body_weight, off_loop
from service.registry import Registry
from service.removals import Removals
from service.remoting import bodies, codes
from service.remoting.codec import Command, response_to
from service.store import Store


@dataclass
class Channel:
    """One client connection: its id, and the brokers that registered or refreshed on it."""

    id: str
    brokers: set[str] = field(default_factory=set)
    peer: str = ""  # the client's address (the PROXY header's when there is one): whitelists check it


# the connection a request came on; set by the server for each connection's tasks
CHANNEL: ContextVar[Channel | None] = ContextVar("remoting_channel", default=None)


def channel_id(addr: str) -> str:
    channel = CHANNEL.get()
    if channel is None:
        return ""
    channel.brokers.add(addr)
    return channel.id


class RemotingError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


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
        self.failures = redis_failure_log(logging.getLogger("service.remoting.handlers"))
        self.listen_port = node.settings.remoting_port  # the bound one once the server listens
        # large bodies are decoded one at a time (see ``decoded``)
        self.decode_turn = asyncio.Semaphore(1)


Handler = Callable[[HandlerContext, Command], Awaitable[Command]]


# ---------------------------------------------------------------------- helpers
def ok(request: Command, ext: dict[str, str] | None = None, body: bytes = b"") -> Command:
    return response_to(request, codes.SUCCESS, None, ext, body, version=codes.V5_3_3)


def fail(request: Command, code: int, remark: str) -> Command:
    return response_to(request, code, remark, version=codes.V5_3_3)


def need(cmd: Command, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


def long_field(cmd: Command, name: str, required: bool = True) -> int | None:
    raw = need(cmd, name) if required else cmd.ext_fields.get(name)
    if raw is None or (raw == "" and not required):
        return None
    try:
        return int(raw)
    except ValueError:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {raw!r}") from None


def bool_field(cmd: Command, name: str) -> bool:
    return cmd.ext_fields.get(name, "").strip().lower() == "true"  # Boolean.parseBoolean


def name_field(cmd: Command, name: str, max_length: int = 255, required: bool = True) -> str | None:
    value = need(cmd, name) if required else cmd.ext_fields.get(name)
    if value is None:
        return None
    if not valid_name(value, max_length):
        raise RemotingError(codes.SYSTEM_ERROR,
                            f"invalid request: {name} must be {name_rule(max_length)}")
    return value


def validate(ctx: HandlerContext, model: type[M], data: dict[str, Any]) -> M:
    try:
        return validated(model, data, ctx.settings)
    except ValidationError as e:
        raise RemotingError(codes.SYSTEM_ERROR, f"invalid request: {describe(e)}") from None


async def body_doc(ctx: HandlerContext, cmd: Command, what: str) -> Any:
    try:
        return await decoded(ctx, cmd, lambda: bodies.json_body(cmd.body, what))
    except bodies.BodyError as e:
        raise RemotingError(codes.SYSTEM_ERROR, str(e)) from None


# Bodies up to this size are decoded at once: a few hundred microseconds at most.
SMALL_BODY = 4096
T = TypeVar("T")


async def decoded(ctx: HandlerContext, cmd: Command, decode: Callable[[], T]) -> T:
    """``decode()`` of a request's body. A larger body waits for its turn: one at a time
    per worker, each after the I/O that arrived meanwhile, so that pipelined bodies
    costing milliseconds each never run back to back while other clients wait; a big one
    (a 10,000-topic registration's, bench/README.md section 7b) runs in a thread, so the event loop
    answers route reads meanwhile."""
    if len(cmd.body) <= SMALL_BODY:
        return decode()
    async with ctx.decode_turn:
        await asyncio.sleep(0)
        return await off_loop(body_weight(len(cmd.body)), decode)


def identity(cmd: Command) -> dict[str, Any]:
    return {
        "clusterName": need(cmd, "clusterName"),
        "brokerAddr": need(cmd, "brokerAddr"),
        "brokerName": need(cmd, "brokerName"),
        "brokerId": long_field(cmd, "brokerId"),
    }
