"""REGISTER_BROKER's walk through the code (docs/remoting.md, "Following REGISTER_BROKER"):
two forms it is carried in, which call none of the other modules, and six steps, each
calling only the next. A profile hook records which module calls which while a real
worker answers the registration, so a helper module put on the way, or a step calling
back into one before it, fails here."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from service.remoting import codes
from service.remoting.connection import CHANNEL
from tests.builders import registration
from tests.remoting.client import RemotingClient
from tests.remoting.frames import register

ROOT = Path(__file__).resolve().parents[2]
SERVICE = str(ROOT / "service") + "/"

STEPS = ["service/remoting/server.py", "service/remoting/dispatch.py", "service/remoting/broker_handlers.py",
         "service/registry.py", "service/scripts.py", "service/store.py"]
FORMS = {"service/remoting/codec.py", "service/models.py"}
# called on the way but not steps of it: the server's own parts that receive the bytes,
# the store's key schema, and the read cache the registry tells what changed
ASIDE = {"service/remoting/route_reads.py", "service/remoting/byte_budget.py", "service/keys.py", "service/changes.py"}


def module(frame: FrameType | None) -> str | None:
    """The service module of `frame` or of the nearest frame below it that has one."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(SERVICE):
            return frame.f_code.co_filename[len(str(ROOT)) + 1:]
        frame = frame.f_back
    return None


async def calls_while(client: RemotingClient, *requests: Any) -> tuple[set[tuple[str, str]], list[int]]:
    """(caller module, callee module) of every call the connection's tasks make between two
    service modules while the worker answers `requests`; the answers' codes."""
    edges: set[tuple[str, str]] = set()
    started: set[int] = set()  # code objects' frames already entered: a coroutine resumed is no call

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or CHANNEL.get() is None or id(frame) in started:
            return  # only the tasks of a connection (others, e.g. the scanner's, run meanwhile)
        callee = module(frame)
        caller = module(frame.f_back)
        if frame.f_code.co_flags & 0x380:  # a coroutine or generator: later "call"s resume it
            started.add(id(frame))
            frames.append(frame)  # kept alive, so that no other frame takes its id
        if callee is not None and caller is not None and caller != callee:
            edges.add((caller, callee))

    frames: list[FrameType] = []
    answers = []
    sys.setprofile(profile)
    try:
        for request in requests:
            answers.append((await client.call(request)).code)
    finally:
        sys.setprofile(None)
    return edges, answers


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
async def test_register_broker_goes_through_eight_modules_each_calling_only_onwards(
        rmq: RemotingClient, compressed: bool) -> None:
    reg = registration(topics=["TopicA", "TopicB"])
    full, unchanged = register(reg, compressed=compressed), register(reg, compressed=compressed)
    edges, answers = await calls_while(rmq, full, unchanged)
    assert answers == [codes.SUCCESS, codes.SUCCESS]
    entered = {m for edge in edges for m in edge}
    on_path = set(STEPS) | FORMS
    assert {m for m in entered if not m.startswith("service/cache/")} - on_path - ASIDE == set()
    assert on_path <= entered  # the walk reached Redis (store.py) and used both forms
    between_steps = {(a, b) for a, b in edges if a in STEPS and b in STEPS}
    assert between_steps == set(zip(STEPS, STEPS[1:]))  # each step calls the next, nothing else
    assert {(a, b) for a, b in edges if a in FORMS and b in on_path} == set()
