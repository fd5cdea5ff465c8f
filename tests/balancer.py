"""A small round-robin TCP load balancer for the multi-worker tests (nginx/haproxy may be absent).

Each new client connection goes to the next backend in turn; a backend that refuses the
connection is skipped (the next one is tried), as an L4 balancer with passive health checks does.
It runs on its own event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import threading


class RoundRobinBalancer:
    def __init__(self, backends: list[tuple[str, int]], host: str = "127.0.0.1") -> None:
        self.backends = list(backends)
        self.host = host
        self.port = 0
        self.next = 0
        self.picked: dict[int, int] = {}  # backend port -> connections sent there
        self.refused = 0  # connect attempts a dead backend refused (then skipped)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="balancer", daemon=True)
        self.server: asyncio.base_events.Server | None = None

    def start(self) -> "RoundRobinBalancer":
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, self.host, 0), self.loop).result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        async def close() -> None:
            if self.server is not None:
                self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
        self.loop.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        # this connection's own walk over every backend, from the next in turn: a shared
        # counter advanced by concurrent connects could send all its tries to a dead one
        first = self.next
        self.next += 1
        for k in range(len(self.backends)):
            host, port = self.backends[(first + k) % len(self.backends)]
            try:
                pair = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
            except (OSError, asyncio.TimeoutError):
                self.refused += 1
                continue
            self.picked[port] = self.picked.get(port, 0) + 1
            return pair
        return None

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:  # no backend alive
            client_w.close()
            return
        up_r, up_w = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                try:
                    if dst.can_write_eof():
                        dst.write_eof()
                except OSError:
                    pass

        try:
            await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        finally:
            for w in (up_w, client_w):
                w.close()
