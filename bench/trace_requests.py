"""The map of docs/design.md ("Two requests as they run"), measured: which service modules a
REGISTER_BROKER and a GET_ROUTEINFO_BY_TOPIC enter, who calls whom, and on which thread.

A real worker (its Node, its RocketMQ server on a free port, a real redis-server) runs on an
event loop in a thread of this process; this process's main thread sends it the frames a
RocketMQ 4.9.8 or 5.3.3 broker and client send (bench/broker_requests.py), one at a time.
A profile hook on every thread (threading.setprofile before the worker's thread and its
executors start) records each call into a module of service/ while a request is answered
and for 0.3 s after its answer (what Redis' notices wake): the calling module (the nearest
service frame below; "(loop)" when the event loop called it, a task or callback it
scheduled; "(thread)" when an executor's thread did), the thread (on the loop: the
connection's task, or "another task" such as the cache's follower), and whether the callee
was handed in (a callback, or a method of an object the caller was given: its module is
not one the caller imports). A coroutine resumed is not a call.

    python bench/trace_requests.py            # prints one section per request
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grimp  # noqa: E402
from aiohttp import web  # noqa: E402

from bench import broker_requests as br  # noqa: E402
from bench.common import redis_server  # noqa: E402
from service.config import Settings  # noqa: E402
from service.remoting.connection import CHANNEL  # noqa: E402
from service.worker import REMOTING, create_app, install_remoting  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVICE = str(ROOT / "service") + "/"
SETTLE_S = 0.3
GRAPH = grimp.build_graph("service", cache_dir=None)


def module(frame: FrameType | None) -> str | None:
    while frame is not None:
        if frame.f_code.co_filename.startswith(SERVICE):
            return frame.f_code.co_filename[len(SERVICE):]
        frame = frame.f_back
    return None


def polling(frame: FrameType | None) -> bool:
    """A call of the cache's periodic poll (every RMQ_VERSION_POLL_MS, whatever the requests)."""
    while frame is not None:
        if frame.f_code.co_qualname in ("Follower.run_poller", "Follower.poll_once"):
            return True
        frame = frame.f_back
    return False


def dotted(path: str) -> str:
    return "service." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


class Tracer:
    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str, str, str]] | None = None
        self.started: set[int] = set()
        self.alive: list[FrameType] = []

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(SERVICE):
            return
        if frame.f_code.co_flags & 0x380:  # a coroutine or generator: its later "call"s resume it
            if id(frame) in self.started:
                return
            self.started.add(id(frame))
            self.alive.append(frame)  # kept, so that no other frame takes its id
        if self.calls is None or polling(frame):
            return
        callee = frame.f_code.co_filename[len(SERVICE):]
        thread = "loop" if threading.current_thread().name == "worker" else "thread"
        if thread == "loop" and CHANNEL.get() is None:
            thread = "loop, another task"  # not the connection's: the cache's follower, say
        caller = module(frame.f_back) or f"({thread})"
        if caller != callee:
            self.calls[(caller, callee, frame.f_code.co_qualname, thread)] += 1


def report(title: str, calls: Counter[tuple[str, str, str, str]], answer: tuple[int, str]) -> None:
    modules = {m for c in calls for m in c[:2] if not m.startswith("(")}
    print(f"\n## {title}: answer code {answer[0]}{' ' + answer[1].splitlines()[0] if answer[1] else ''}")
    lines, pairs, handed_pairs = [], set(), set()
    for (caller, callee, name, thread), n in sorted(calls.items()):
        imports = GRAPH.find_modules_directly_imported_by(dotted(caller)) if not caller.startswith("(") else None
        handed = imports is not None and not any(dotted(callee) == m or dotted(callee).startswith(m + ".") for m in imports)
        if imports is not None:
            pairs.add((caller, callee))
            if handed:
                handed_pairs.add((caller, callee))
        lines.append(f"  {caller} -> {callee} {name} x{n}{' [' + thread + ']' if thread != 'loop' else ''}"
                     f"{' (handed in)' if handed else ''}")
    off_loop = sum(n for c, n in calls.items() if c[3] == "thread")
    print(f"{len(modules)} modules, {len(pairs)} calling pairs ({len(handed_pairs)} handed in), "
          f"{sum(calls.values())} calls, {off_loop} of them on an executor's thread: {', '.join(sorted(modules))}")
    print("\n".join(lines))


def main() -> None:
    tracer = Tracer()
    threading.setprofile(tracer.profile)  # every thread started from here on: the worker's, its executors'
    ready = threading.Event()
    state: dict[str, Any] = {}
    with redis_server() as redis:
        def serve() -> None:
            loop = asyncio.new_event_loop()
            state["loop"] = loop
            app = create_app(Settings(redis_url=redis.url, scan_interval_ms=3_600_000))
            install_remoting(app, "127.0.0.1", 0)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            state["port"] = app[REMOTING].bound_port
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())

        worker = threading.Thread(target=serve, name="worker", daemon=True)
        worker.start()
        ready.wait(30)
        broker, reader = br.Connection(state["port"]), br.Connection(state["port"])
        for conn in (broker, reader):  # each connection's first request: its accepting is not traced
            conn.call(br.route_frame("warm-up", conn.next_opaque()))

        def traced(title: str, conn: br.Connection, frame: bytes) -> None:
            tracer.calls = Counter()
            code, remark, _ = conn.call(frame)
            time.sleep(SETTLE_S)
            calls, tracer.calls = tracer.calls, None
            report(title, calls, (code, remark))

        def reg(form: str, name: str, addr: str, table: dict[str, Any], counter: int) -> bytes:
            return br.register_frame(form, name, addr, 0, table, {"counter": counter, "timestamp": 1700000000000},
                                     broker.next_opaque())

        table = br.topics("T", 100)
        traced("REGISTER_BROKER, first (4.9.8 plain body, 100 topics)", broker, reg("json", "b1", "10.0.0.1:10911", table, 1))
        traced("REGISTER_BROKER, unchanged (the same bytes again)", broker, reg("json", "b1", "10.0.0.1:10911", table, 1))
        table["T000000"] = br.topic_config("T000000", queues=16)
        traced("REGISTER_BROKER, changed (one topic's queues, dataVersion moved)", broker,
               reg("json", "b1", "10.0.0.1:10911", table, 2))
        big = br.topics("B", 3000)
        traced("REGISTER_BROKER, first, 3,000 topics (5.3.3 plain body)", broker, reg("json5", "b2", "10.0.0.2:10911", big, 1))
        traced("REGISTER_BROKER, first, 3,000 topics (4.9.8 compressed body)", broker,
               reg("zlib", "b3", "10.0.0.3:10911", br.topics("Z", 3000), 1))
        names = list(big)
        for round_ in (1, 2, 3):  # an unchanged part takes the unchanged path from its third round on
            for i in range(0, 3000, 800):
                part = {n: big[n] for n in names[i:i + 800]}
                body = br.json5_body(part, {"counter": round_ * 10 + i, "timestamp": 1700000000000}, "b4",
                                     static=None if i + 800 < 3000 else names[0])
                ext = {"brokerAddr": "10.0.0.4:10911", "brokerId": "0", "brokerName": "b4", "clusterName": "BenchCluster",
                       "haServerAddr": "10.0.0.4:10912", "compressed": "false", "bodyCrc32": str(br.crc32(body)),
                       "enableActingMaster": "false", "heartbeatTimeoutMillis": "120000"}
                frame = br.frame(br.REGISTER_BROKER, ext, body, broker.next_opaque(), br.V5_3_3)
                if i == 800 and round_ != 2:  # the second of four parts: one of the middle
                    traced(f"REGISTER_BROKER, split part 2 of 4 (5.3.3, 800 topics), round {round_}", broker, frame)
                else:
                    broker.call(frame)
        traced("GET_ROUTEINFO_BY_TOPIC, uncached", reader, br.route_frame("T000001", reader.next_opaque()))
        traced("GET_ROUTEINFO_BY_TOPIC, cached", reader, br.route_frame("T000001", reader.next_opaque()))
        traced("GET_ROUTEINFO_BY_TOPIC, unknown topic", reader, br.route_frame("Nope", reader.next_opaque()))
        traced("GET_ROUTEINFO_BY_TOPIC, unknown topic again", reader, br.route_frame("Nope", reader.next_opaque()))
        broker.close()
        reader.close()
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        worker.join(30)


if __name__ == "__main__":
    main()
