"""Pieces for the real-client tests: the ali-ons session (node), a recording TCP proxy, a fake broker.

Everything here is asyncio: the worker under test runs in the test's own event loop, so the
clients run as subprocesses driven without blocking it, each bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from service.remoting import codec

JS_DIR = Path(__file__).resolve().parent.parent / "js"
JS_INSTALL = "(cd tests/remoting/js && npm ci --no-audit --no-fund)"


def need_node() -> str:
    """The node binary, or skip: node missing, or ali-ons not installed in tests/remoting/js."""
    node = shutil.which("node")
    if node is None:
        pytest.skip(f"node is not installed (apt-get install nodejs npm; then {JS_INSTALL})")
    for package in ("ali-ons", "urllib"):
        if not (JS_DIR / "node_modules" / package / "package.json").exists():
            pytest.skip(f"npm package {package} is not installed: {JS_INSTALL}")
    return node


def need_rocketmq_cpp() -> None:
    try:
        import rocketmq.client  # noqa: F401  (loads the bundled librocketmq.so)
    except (ImportError, OSError) as e:
        pytest.skip(f"the RocketMQ C++ client is not installed: pip install rocketmq==0.4.4 ({e})")


# ---------------------------------------------------------------------- ali-ons
class JsSession:
    """`node session.js host:port`: one ali-ons MQClientAPI with one connection, request per line."""

    def __init__(self, proc: asyncio.subprocess.Process, addr: str) -> None:
        self.proc = proc
        self.addr = addr

    @classmethod
    async def start(cls, port: int, host: str = "127.0.0.1", timeout: float = 20,
                    env: dict[str, str] | None = None) -> "JsSession":
        """`env` RMQ_JS_ACCESS_KEY / RMQ_JS_SECRET_KEY: ali-ons signs every request (lib.js)."""
        node = need_node()
        addr = f"{host}:{port}"
        proc = await asyncio.create_subprocess_exec(
            node, str(JS_DIR / "session.js"), addr, cwd=JS_DIR, env={**os.environ, **(env or {})},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        session = cls(proc, addr)
        ready = await session._line(timeout)
        assert ready == {"ready": True}, ready
        return session

    async def _line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            raise AssertionError(f"ali-ons session gave no answer within {timeout} s") from None
        if not line:
            err = b""
            if self.proc.stderr is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    err = await asyncio.wait_for(self.proc.stderr.read(), 2)
            raise AssertionError(f"ali-ons session ended: {err.decode(errors='replace')[-2000:]}")
        return json.loads(line)

    async def send(self, doc: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(doc).encode() + b"\n")
        await self.proc.stdin.drain()
        return await self._line(timeout)

    async def call(self, code: int, ext: dict[str, Any] | None = None, body: Any = None,
                   timeout: float = 15) -> dict[str, Any]:
        """One request through MQClientAPI.invoke; the answer's code, remark, extFields and body (text)."""
        doc: dict[str, Any] = {"code": code, "ext": ext or {}}
        if body is not None:
            doc["body"] = body
        answer = await self.send(doc, timeout)
        assert "error" not in answer, answer
        return answer

    async def route(self, topic: str) -> dict[str, Any]:
        """The route as ali-ons's own getDefaultTopicRouteInfoFromNameServer parses it."""
        answer = await self.send({"op": "route", "topic": topic})
        assert "route" in answer, answer
        return answer["route"]

    async def exit(self, timeout: float = 10) -> None:
        """Closes the client (its connection ends with a FIN) and waits for the process."""
        assert self.proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            self.proc.stdin.write(b'{"op": "exit"}\n')
            await self.proc.stdin.drain()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            await self.kill()

    async def kill(self) -> None:
        """SIGKILL: the kernel closes the connection, as when a broker process dies."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await asyncio.wait_for(self.proc.wait(), 10)


async def run_process(*argv: str, timeout: float, cwd: Path | None = None,
                      env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """A client program run to its end: exit status, stdout, stderr; killed and failed
    when it does not finish within `timeout`."""
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{' '.join(Path(a).name for a in argv[:2])} did not finish within {timeout} s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def run_node(script: str, *args: str, timeout: float = 20,
                   env: dict[str, str] | None = None) -> tuple[int, str, str]:
    return await run_process(need_node(), str(JS_DIR / script), *args, timeout=timeout, cwd=JS_DIR,
                             env={**os.environ, **(env or {})})


# ---------------------------------------------------------------------- frames on the wire
@dataclass
class Seen:
    """One decoded frame: who sent it, and the fields the tests look at."""
    direction: str  # "request" (client to server) or "answer"
    code: int
    language: str
    version: int
    opaque: int
    flag: int
    ext: dict[str, str]
    serialize: int
    body: bytes = b""
    remark: str | None = None


async def _read_frames(reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None,
                       direction: str, seen: list[Seen]) -> None:
    """Reads frames from `reader`, records them, and forwards them unchanged to `writer`."""
    try:
        while True:
            prefix = await reader.readexactly(4)
            (length,) = struct.unpack(">i", prefix)
            payload = await reader.readexactly(length)
            with contextlib.suppress(codec.FrameError, ValueError):
                cmd = codec.decode_payload(payload)
                seen.append(Seen(direction, cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag,
                                 dict(cmd.ext_fields), cmd.serialize_type, cmd.body, cmd.remark))
            if writer is not None:
                writer.write(prefix + payload)
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()


@dataclass
class RecordingProxy:
    """A TCP proxy in front of the endpoint: what the real client sent, and what came back, decoded."""
    upstream_port: int
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        sreader, swriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        await asyncio.gather(_read_frames(creader, swriter, "request", self.seen),
                             _read_frames(sreader, cwriter, "answer", self.seen))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    def requests(self, code: int | None = None) -> list[Seen]:
        return [s for s in self.seen if s.direction == "request" and (code is None or s.code == code)]

    def answers_to(self, request: Seen) -> list[Seen]:
        return [s for s in self.seen if s.direction == "answer" and s.opaque == request.opaque]


@dataclass
class FakeBroker:
    """A listener at a registered broker address: records who connects and the frames they send.

    It never answers, so a producer's send to it times out; that it connected at all shows
    the producer took the broker's address from the route our endpoint gave it.
    """
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    server: asyncio.base_events.Server | None = None
    port: int = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await _read_frames(reader, None, "request", self.seen)
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 2)


def cpp_env(home: Path) -> dict[str, str]:
    """The C++ client writes its logs under $HOME/logs/rocketmq-cpp."""
    env = dict(os.environ)
    env["HOME"] = str(home)
    return env
