"""Shared pieces of the bench scripts: processes, wrk, machine info, result files.

Everything runs on 127.0.0.1: each bench starts its own redis-server on a free port and
its own registry workers, and stops them when it ends (also on error).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client as httpclient
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
sys.path.insert(0, str(ROOT))

from bench import cores as pinning  # noqa: E402
from tests.redis_server import RedisServer, free_port  # noqa: E402  (the tests' real-server helper)

WRK_LUA = BENCH / "wrk_json.lua"


# ---------------------------------------------------------------------- arguments / output
def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny sizes and 1 s load runs (smoke test)")
    p.add_argument("--out", type=Path, default=RESULTS, help="directory for the result JSON (default bench/results)")
    return p


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
        "redis_server": _redis_version(),
        "wrk": _wrk_version(),
        "haproxy": _first_line([shutil.which("haproxy") or "haproxy", "-v"]),
        "git_commit": _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
    }
    for module in ("aiohttp", "redis", "orjson", "uvloop"):
        try:
            mod = __import__(module)
            info[f"{module}_py" if module == "redis" else module] = getattr(mod, "__version__", "?")
        except ImportError:
            info[module] = None
    return info


def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _redis_version() -> str | None:
    line = _first_line([shutil.which("redis-server") or "redis-server", "--version"])
    if line and "v=" in line:
        return line.split("v=", 1)[1].split()[0]
    return line


def _wrk_version() -> str | None:
    if not shutil.which("wrk"):
        return None
    return _first_line(["wrk", "--version"])


def write_result(out_dir: Path, name: str, params: dict[str, Any], results: dict[str, Any],
                 summary: list[dict[str, Any]], machine: dict[str, Any]) -> Path:
    """One JSON per bench: machine info, parameters, raw results and the README rows."""
    machine = dict(machine, loadavg_end=list(os.getloadavg()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    doc = {"bench": name, "machine": machine, "params": params, "results": results, "summary": summary}
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    print(f"wrote {path}")
    for row in summary:
        print(f"  {row['metric']}: {row['value']} {row.get('unit', '')}")
    return path


def row(metric: str, value: float, unit: str = "", note: str = "") -> dict[str, Any]:
    return {"metric": metric, "value": round(value, 3) if isinstance(value, float) else value, "unit": unit, "note": note}


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


# ---------------------------------------------------------------------- processes
@contextlib.contextmanager
def redis_server(*extra: str) -> Iterator[RedisServer]:
    server = RedisServer(None, *extra)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


def wait_http(url: str, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer 200 within {limit_s} s ({last})")


class Proc:
    """A child process with its output in a temp file (shown when it fails to start)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, ready_url: str | None = None,
                 cwd: Path = ROOT, cores: frozenset[int] = frozenset()) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="rmq-bench-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     preexec_fn=pinning.preexec(cores))
        if ready_url:
            try:
                wait_http(ready_url)
            except RuntimeError:
                output = Path(self.log.name).read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"{args} did not start:\n{output}") from None

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 10) -> None:
    """`sig`, then SIGKILL if it has not ended within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def worker_env(redis_url: str, root: Path = ROOT, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("RMQ_")}
    # RMQ_REMOTING_PORT=0: no RocketMQ remoting listener (a fixed port would collide between workers)
    env.update({"REDIS_URL": redis_url, "RMQ_LOG_LEVEL": "WARNING", "RMQ_REMOTING_PORT": "0", "PYTHONPATH": str(root)})
    env.update(settings)
    return env


@contextlib.contextmanager
def workers(redis_url: str, count: int = 1, **settings: str) -> Iterator[list[int]]:
    """`count` registry workers (`python -m service serve`) on free ports of 127.0.0.1."""
    procs: list[Proc] = []
    ports: list[int] = []
    try:
        for _ in range(count):
            port = free_port()
            procs.append(Proc([sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
                              env=worker_env(redis_url, **settings), ready_url=f"http://127.0.0.1:{port}/readyz"))
            ports.append(port)
        yield ports
    finally:
        for p in procs:
            p.stop()


# ---------------------------------------------------------------------- wrk
def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def wrk_start(url: str, seconds: float, connections: int = 64, threads: int = 1,
              body: bytes | None = None, routes: tuple[str, int] | None = None,
              pipeline: int = 1) -> subprocess.Popen[str]:
    """wrk in the background; with `body`, every request is a POST of it (JSON); with
    `routes` ("random" or "sequential", n), each one reads the route of a topic T<i < n>;
    with `pipeline` > 1, each connection writes that many GETs of `url` at once."""
    if not have_wrk():
        raise SystemExit("wrk is not installed: run bench/run (it installs it) or `apt-get install wrk`")
    args = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
            "--timeout", "5s", "-s", str(WRK_LUA), url]
    env = dict(os.environ)
    env.pop("WRK_BODY", None)
    env.pop("WRK_ROUTES", None)
    env.pop("WRK_PIPELINE", None)
    if pipeline > 1:
        env["WRK_PIPELINE"] = str(pipeline)
    if routes is not None:
        env["WRK_ROUTES"] = f"{routes[0]},{routes[1]}"
    if body is not None:
        env["WRK_BODY"] = body.decode()
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def wrk_finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    for line in out.splitlines():
        if line.startswith("WRK_JSON "):
            r = json.loads(line[len("WRK_JSON "):])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
            errors = r["errors"]
            if sum(errors.values()):
                print(f"  wrk reported errors: {errors}", file=sys.stderr)
            return r
    raise RuntimeError(f"wrk gave no result:\n{out}")


def wrk(url: str, seconds: float, connections: int = 64, threads: int = 1, body: bytes | None = None,
        routes: tuple[str, int] | None = None, pipeline: int = 1) -> dict[str, Any]:
    """One wrk run; requests, rps, latency percentiles (µs) and error counts."""
    return wrk_finish(wrk_start(url, seconds, connections, threads, body, routes, pipeline))


# ---------------------------------------------------------------------- HTTP client (stdlib)
class Client:
    """A keep-alive HTTP/1.1 connection (stdlib), for sequential latency samples."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.conn = httpclient.HTTPConnection(host, port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        self.conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def close(self) -> None:
        self.conn.close()


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post_json(url: str, doc: Any) -> Any:
    status, body = http("POST", url, json.dumps(doc).encode())
    if status != 200:
        raise RuntimeError(f"POST {url} answered {status}: {body[:300]!r}")
    return json.loads(body)
