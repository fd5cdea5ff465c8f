"""The image's install steps, without Docker: build the project wheel (`pip wheel
--no-deps`, as the Dockerfile's builder stage does), install the runtime lock
(requirements/base.txt, hash-checked) and then the wheel with --no-deps into a fresh
virtualenv (as the base stage does), then start the console script from that
virtualenv, outside the source tree, and probe it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.deploy._common import ROOT, pyproject
from tests.processes import http_status
from tests.waits import until_sync

# pip's own cache (~/.cache/pip) makes repeated runs fast; an optional local wheel
# directory can be offered too.
WHEELHOUSE = os.environ.get("RMQ_TEST_WHEELHOUSE")


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV", "VIRTUAL_ENV")}
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthcheck_argv() -> list[str]:
    from tests.deploy.test_dockerfile import RUNTIME, effective

    hc = effective(RUNTIME, "HEALTHCHECK")
    return json.loads(hc.args.partition("CMD")[2])


@pytest.fixture(scope="module")
def installed_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel-install")
    dist = work / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist), str(ROOT)], cwd=work)
    wheels = list(dist.glob("rmq_registry-*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]
    version = pyproject()["project"]["version"]
    assert wheel.name.startswith(f"rmq_registry-{version}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "service/cli.py" in names and "service/http/views.py" in names
    assert any(n.startswith("service/lua/") and n.endswith(".lua") for n in names), "Lua scripts missing from the wheel"
    assert not any(n.startswith("tests/") for n in names)

    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    if WHEELHOUSE:
        pip += ["--find-links", WHEELHOUSE]
    _run(pip + ["--require-hashes", "-r", str(ROOT / "requirements" / "base.txt")], cwd=work, timeout=900)
    _run(pip + ["--no-deps", str(wheel)], cwd=work, timeout=900)
    return venv


def test_installed_package_comes_from_the_wheel(installed_venv: Path):
    out = _run([str(installed_venv / "bin" / "python"), "-c",
                "import service, service.cli; print(service.__file__)"], cwd=installed_venv)
    assert Path(out.stdout.strip()).is_relative_to(installed_venv), out.stdout
    assert (installed_venv / "bin" / "rmq-registry").exists(), "console script not installed"


def test_console_script_serves_healthz_from_a_fresh_venv(installed_venv: Path):
    port = _free_port()
    # what a container gets: no REDIS_URL (embedded store), config by environment only
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RMQ_") and k not in ("REDIS_URL", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed_venv / 'bin'}:{env.get('PATH', '')}"
    remoting_port = _free_port()
    proc = subprocess.Popen(["rmq-registry", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--remoting-port", str(remoting_port)],
                            cwd=installed_venv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        def health() -> int | None:
            assert proc.poll() is None, f"server exited early ({proc.returncode}):\n{proc.stdout.read()}"
            try:
                return http_status(base + "/healthz", timeout_s=2)
            except (urllib.error.URLError, ConnectionError, OSError):
                return None

        status = until_sync(health, 30, "/healthz answering", poll_s=0.2)
        assert status == 200, f"/healthz answered {status}"
        # the embedded store loads the Lua scripts that shipped inside the wheel
        assert http_status(base + "/readyz", timeout_s=2) == 200
        # the RocketMQ protocol endpoint (service.remoting) shipped in the wheel too
        with socket.create_connection(("127.0.0.1", remoting_port), timeout=5):
            pass
        # and the very command of the image's HEALTHCHECK, with RMQ_PORT as configured
        argv = _healthcheck_argv()
        assert argv[0] == "python"
        hc = subprocess.run([str(installed_venv / "bin" / "python"), *argv[1:]],
                            env={**env, "RMQ_PORT": str(port)}, capture_output=True, timeout=30)
        assert hc.returncode == 0, hc.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("server did not stop within 30 s of SIGTERM")
    assert code == 0, f"exit code {code} after SIGTERM:\n{proc.stdout.read()}"
