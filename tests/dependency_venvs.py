"""Virtual environments with other releases of the project's dependencies than .venv's, for
tests/test_dependency_range.py: what pyproject.toml declares is what is tested.

Each is made once with pip (wheels come from pip's cache after the first time) under
``RMQ_DEPENDENCY_VENVS`` (default ``~/.cache/rmq-registry/venvs``), named after what it
holds and a digest of pyproject.toml, so a change to the declared dependencies makes new
ones. The project's code is never installed from there: processes run the checkout's
own (``PYTHONPATH``), only the dependencies come from the venv.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def declared(package: str) -> str:
    """The requirement pyproject.toml's dependencies declare for `package` (its first)."""
    for requirement in tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        if name and name.group(0).lower() == package.lower():
            return requirement
    raise LookupError(f"pyproject.toml declares no dependency on {package}")


def floor(package: str) -> str:
    """The lowest release of `package` the declaration admits (its ``>=`` bound)."""
    m = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", declared(package).split(";")[0])
    if m is None:
        raise LookupError(f"pyproject.toml declares no lower bound for {package}: {declared(package)!r}")
    return m.group(1)


def root() -> Path:
    return Path(os.environ.get("RMQ_DEPENDENCY_VENVS") or Path.home() / ".cache" / "rmq-registry" / "venvs")


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def pip(venv: Path, *args: str) -> None:
    """pip in `venv`; a failure raises with pip's last lines."""
    done = subprocess.run([str(python(venv)), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed in {venv}:\n{(done.stdout + done.stderr)[-3000:]}")


def version(venv: Path, package: str) -> str:
    done = subprocess.run([str(python(venv)), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def venv(name: str, requirements: list[str], extras: str = "") -> Path:
    """A venv holding the project's dependencies (with `extras`, e.g. "test") and
    `requirements` (pins such as ``aiohttp==3.9.0``), made unless it already exists."""
    digest = hashlib.sha256("\n".join([PYPROJECT.read_text(), sys.version, extras, *requirements]).encode())
    path = root() / f"{name}-{digest.hexdigest()[:12]}"
    made = path / "made"  # written last: a venv without it was interrupted, and is made again
    with locked(path):
        if made.exists():
            return path
        # made where it stays: a venv's scripts name its interpreter by its path
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
        with tempfile.TemporaryDirectory() as copy:
            # the project itself goes in too (its console script; its code runs from the
            # checkout), built from a copy: pip builds in the source tree, and two suites
            # may build at once
            for part in ("pyproject.toml", "README.md", "service", "lua"):
                (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, Path(copy) / part)
            pip(path, "install", f"{copy}[{extras}]" if extras else copy, *requirements)
        made.write_text(" ".join(requirements) + "\n")
    return path


def upgrade(venv: Path, *packages: str) -> None:
    """`packages` brought to their newest releases in `venv`, one process at a time (two
    suites may share the venv)."""
    with locked(venv):
        pip(venv, "install", "--upgrade", *packages)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One process builds a given venv at a time (two suites may run side by side)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def environment(**extra: str) -> dict[str, str]:
    """The environment of a process running the checkout's code on a venv's dependencies."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "VIRTUAL_ENV", "PYTHONHOME")
           and not k.startswith("RMQ_")}
    env.update({"PYTHONPATH": str(ROOT), "RMQ_REMOTING_PORT": "0"}, **extra)
    return env
