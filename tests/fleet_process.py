"""README's fleet registering as brokers do, in a process of its own: 300 broker groups in
three clusters, a master and a slave each, 108,313 topics, ~1,000,000 (topic, group) pairs
(tests/ui/fleet.py's plan, the same seed), every member sending its whole table every
PERIOD seconds through the next worker it is given (a load balancer's round robin).

A process of its own so that encoding and sending 600 bodies of up to 1.5 MB takes nothing
from the test's reads (its own interpreter lock). Even-numbered groups register over
RocketMQ's TCP protocol as 5.3.3 brokers (every sixth group's body zlib-compressed, as with
compressedRegister=true), each member on a connection it keeps until the server closes it;
odd ones over HTTP, a connection per request. Bodies are encoded once (again when a topic
changes). A registration refused for a busy or slow store (HTTP 503, SYSTEM_BUSY, or
"did not answer in time") is sent again a second later; anything else is a failure.

Driven by JSON lines on stdin, each answered by one JSON line on stdout (FleetProcess below):
  {"workers": [[http_port, remoting_port], ...]}  whom to register through from now on
  {"pause": GROUP}     both members stop registering; answered once none is in flight
  {"resume": GROUP, "via": [http_port, remoting_port]}  both register at once through that
                       worker (master first; until applied), then every period again
  {"set": GROUP, "topic": NAME, "config": TOPIC_CONFIG}  the group's table gains or changes a
                       topic: both members register it at once (until applied), with the
                       next dataVersion (a broker registers when a topic is created or updated)
  {"stats": 1}         brokers registered at least once, failures, refusals, latencies
  {"quit": 1}          exits (closing its connections)

    python -m tests.fleet_process PERIOD_S
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from typing import Any

import aiohttp
import orjson

from service.remoting import codec, codes
from tests.builders import registration
from tests.processes import ROOT
from tests.remoting import frames
from tests.ui.fleet import plan

RETRY_S = 1.0  # a refused registration is sent again this soon (a broker: at its next round)
RETRY_LIMIT_S = 60.0  # a change refused this long is reported as not applied
# how either release says its store was too slow (service/store.py): the change may or may
# not have been applied, sending it again is safe
NOT_IN_TIME = "did not answer in time"


def fleet_plan() -> list[dict[str, Any]]:
    """Every member's registration (masters first within a group) and how it is sent."""
    fleet, tables = plan(random.Random(29))
    members = []
    for name, ids in fleet.members.items():
        n = int(name.rsplit("-", 1)[1])
        for broker_id, address in ids:
            # a slave sends its table too, as RocketMQ's do (only the master's makes routes);
            # a dict of its own per member, so that a change is made to each on purpose
            reg = registration(addr=address, name=name, broker_id=broker_id, cluster=fleet.cluster_of[name],
                               topics=dict(tables[name]))
            members.append({"reg": reg, "group": name, "tcp": n % 2 == 0, "zlib": n % 6 == 0})
    return members


class Broker:
    """One member: its encoded registration, its connection (TCP), whether it is paused."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.reg: dict[str, Any] = spec["reg"]
        self.group: str = spec["group"]
        self.tcp: bool = spec["tcp"]
        self.zlib: bool = spec["zlib"]
        self.encoded = b""
        self.encode()
        self.running = asyncio.Event()  # cleared while paused
        self.running.set()
        self.lock = asyncio.Lock()  # one request at a time on its connection
        self.stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.registered = False

    def encode(self) -> None:
        if self.tcp:
            cmd = frames.register(self.reg, compressed=self.zlib, version=codes.V5_3_3, acting=False)
            self.encoded = codec.encode(cmd)
        else:
            self.encoded = orjson.dumps(self.reg)


class Fleet:
    """Every member on one event loop, registering every period through the next worker."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.brokers = [Broker(spec) for spec in fleet_plan()]
        self.workers: list[tuple[int, int]] = []
        self.picked = 0
        self.failures: list[str] = []
        self.refused = 0
        self.latencies: list[float] = []
        self.session: aiohttp.ClientSession | None = None

    def pick(self) -> tuple[int, int]:
        self.picked += 1
        return self.workers[self.picked % len(self.workers)]

    async def register(self, b: Broker, via: tuple[int, int] | None = None) -> str:
        """One registration through `via` or the next worker: "ok" when it was applied,
        "refused" (busy or slow: sent again) or "failed" (both counted)."""
        async with b.lock:
            if via is None and not b.running.is_set():
                return "paused"  # paused while it waited for its turn: a stopped broker sends nothing
            began = time.monotonic()
            try:
                outcome = await (self._tcp(b, via) if b.tcp else self._http(b, via or self.pick()))
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                # the worker stopped under it: the next round reaches another (a broker's
                # client reconnects through the Service), as a refusal
                b.stream = None
                outcome = f"refused: {exc!r}"
            if outcome == "ok":
                b.registered = True
                self.latencies.append(time.monotonic() - began)
                return "ok"
            if outcome.startswith("refused"):
                self.refused += 1
                return "refused"
            self.failures.append(f"{b.reg['brokerAddr']} ({b.group}): {outcome}")
            return "failed"

    async def applied(self, b: Broker, via: tuple[int, int] | None = None) -> bool:
        """Registers until applied, as a broker does a refused registration at its next
        rounds (a second apart here): False on a failure, or refused for RETRY_LIMIT_S."""
        deadline = time.monotonic() + RETRY_LIMIT_S
        while (outcome := await self.register(b, via)) == "refused" and time.monotonic() < deadline:
            await asyncio.sleep(RETRY_S)
        return outcome == "ok"

    async def _http(self, b: Broker, target: tuple[int, int]) -> str:
        assert self.session is not None
        async with self.session.post(f"http://127.0.0.1:{target[0]}/v1/brokers/register", data=b.encoded,
                                     headers={"Content-Type": "application/json"}) as resp:
            body = await resp.read()
        if resp.status == 200:
            return "ok"
        if resp.status == 503:
            return "refused"
        return f"HTTP {resp.status} through {target[0]}: {body[:300]!r}"

    async def _tcp(self, b: Broker, via: tuple[int, int] | None) -> str:
        # a broker keeps its connection until the server closes it (Netty sees the close at
        # once; the next registration opens another, through the Service)
        if b.stream is not None and (b.stream[0].at_eof() or b.stream[1].is_closing()):
            b.stream[1].close()
            b.stream = None
        if via is not None and b.stream is not None:
            b.stream[1].close()  # a broker restarted: a new connection, to that worker
            b.stream = None
        if b.stream is None:
            target = via or self.pick()
            b.stream = await asyncio.open_connection("127.0.0.1", target[1])
        reader, writer = b.stream
        writer.write(b.encoded)
        await writer.drain()
        length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 60), "big")
        answer = codec.decode_payload(await asyncio.wait_for(reader.readexactly(length), 60))
        if answer.code == codes.SUCCESS:
            return "ok"
        if answer.code == codes.SYSTEM_BUSY or NOT_IN_TIME in (answer.remark or ""):
            return "refused"
        return f"TCP code {answer.code}: {answer.remark}"

    async def run_broker(self, b: Broker, offset_s: float) -> None:
        """Registers every period from `offset_s` on (brokers start at different times)."""
        await asyncio.sleep(offset_s)
        while True:
            await b.running.wait()
            if not self.workers:
                await asyncio.sleep(RETRY_S)
                continue
            outcome = await self.register(b)
            await asyncio.sleep(self.period_s if outcome == "ok" else RETRY_S)

    async def command(self, cmd: dict[str, Any]) -> Any:
        if "workers" in cmd:
            self.workers = [(int(h), int(t)) for h, t in cmd["workers"]]
            return "ok"
        if "pause" in cmd:
            members = [b for b in self.brokers if b.group == cmd["pause"]]
            for b in members:
                b.running.clear()
            for b in members:
                async with b.lock:  # none in flight once it is free
                    pass
            return "paused"
        if "resume" in cmd:
            members = [b for b in self.brokers if b.group == cmd["resume"]]
            via = (int(cmd["via"][0]), int(cmd["via"][1]))
            applied = [await self.applied(b, via) for b in members]
            for b in members:
                b.running.set()
            return applied
        if "set" in cmd:
            members = [b for b in self.brokers if b.group == cmd["set"]]
            for b in members:
                wrapper = b.reg["topicConfigSerializeWrapper"]
                wrapper["topicConfigTable"][cmd["topic"]] = cmd["config"]
                wrapper["dataVersion"]["counter"] += 1
                b.encode()
            return [await self.applied(b) for b in members]
        if "stats" in cmd:
            latencies = sorted(self.latencies)
            return {"registered": sum(b.registered for b in self.brokers), "members": len(self.brokers),
                    "failures": self.failures, "refused": self.refused, "applied": len(latencies),
                    "p99_s": round(latencies[int(0.99 * (len(latencies) - 1))], 3) if latencies else None}
        raise ValueError(f"unknown command {cmd}")

    async def main(self) -> None:
        # a connection per request, as a broker's HTTP client without keep-alive (a kept one
        # would hold an old worker's stop to its shutdown timeout)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=32),
                                             timeout=aiohttp.ClientTimeout(total=60))
        rng = random.Random(1)
        tasks = [asyncio.create_task(self.run_broker(b, rng.uniform(0, self.period_s))) for b in self.brokers]
        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
        print(json.dumps({"members": len(self.brokers)}), flush=True)
        try:
            while line := await stdin.readline():
                cmd = json.loads(line)
                if "quit" in cmd:
                    break
                print(json.dumps(await self.command(cmd)), flush=True)
        finally:
            for t in tasks:
                t.cancel()
            await self.session.close()


class FleetProcess:
    """The fleet above as a child process of the test, one command at a time."""

    def __init__(self, period_s: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fleet_process", str(period_s)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.members = self._read()["members"]

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fleet process exited with {self.proc.wait(10)}")
        return json.loads(line)

    def ask(self, cmd: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write('{"quit": 1}\n')
            self.proc.stdin.flush()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    asyncio.run(Fleet(float(sys.argv[1])).main())
