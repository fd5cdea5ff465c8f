"""The lock (requirements/, written by scripts/lock) and the scripts that install from it:
every dependency pyproject.toml declares is pinned at a version it admits, with hashes,
one version per package across the files; scripts/_env.sh installs the lock on the
Python it is for, re-installs when a lock file changes, and on another Python falls back
to pyproject.toml's ranges, saying so, or refuses in one line when the lock is required."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy._common import ROOT, pyproject

LOCKS = ROOT / "requirements"
# the target scripts/lock resolves for (its --python-version, --python-platform)
TARGET = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.M)


def pins(name: str) -> dict[str, tuple[str, int]]:
    """package -> (version, number of hashes) of one lock file."""
    text = (LOCKS / name).read_text()
    found = {canonicalize_name(p): (v, h.count("--hash=")) for p, v, h in PIN.findall(text)}
    listed = re.findall(r"^[A-Za-z0-9][^\s]*==", text, re.M)
    assert len(found) == len(listed), f"{name}: a pin without hashes"
    return found


def declared(*extras: str) -> list[Requirement]:
    project = pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


LOCK_FILES = {
    "base.txt": declared(),
    "analytics.txt": declared("analytics"),
    "test-analytics.txt": declared("test", "analytics"),
    "build.txt": [Requirement(r) for r in pyproject()["build-system"]["requires"]] + [Requirement("pip")],
}


@pytest.mark.parametrize("name", list(LOCK_FILES))
def test_every_declared_dependency_is_pinned_with_hashes_at_a_version_pyproject_admits(name: str):
    locked = pins(name)
    for req in LOCK_FILES[name]:
        if req.marker and not req.marker.evaluate(TARGET):
            continue
        assert canonicalize_name(req.name) in locked, f"{name}: {req} is not in the lock: run scripts/lock"
        version, hashes = locked[canonicalize_name(req.name)]
        assert req.specifier.contains(version, prereleases=True), f"{name}: {req.name}=={version} but {req}"
        assert hashes >= 1


def test_a_package_has_one_version_in_every_lock_file():
    versions: dict[str, set[str]] = {}
    for name in LOCK_FILES:
        for package, (version, _) in pins(name).items():
            versions.setdefault(package, set()).add(version)
    assert {p: v for p, v in versions.items() if len(v) > 1} == {}


def test_the_smaller_locks_are_subsets_of_the_lock_of_every_extra():
    every = set(pins("test-analytics.txt"))
    assert set(pins("base.txt")) < set(pins("analytics.txt")) <= every


# ------------------------------------------------------------------- scripts/_env.sh
FAKE_PYTHON = """#!/bin/sh
# a stand-in interpreter: logs its arguments, answers ensure_venv's target question
printf '%s\\n' "$*" | head -1 >> "$FAKE_LOG"
case "$*" in *"import platform"*) echo "$FAKE_TARGET";; esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """scripts/, requirements/ and pyproject.toml in a directory of their own."""
    root = tmp_path / "checkout"
    for part in ("scripts", "requirements"):
        shutil.copytree(ROOT / part, root / part)
    shutil.copy(ROOT / "pyproject.toml", root)
    (root / "venv" / "bin").mkdir(parents=True)
    python = root / "venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def ensure_venv(root: Path, extras: str, target: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = root / "python.log"
    log.write_text("")
    environ = {k: v for k, v in os.environ.items() if k not in ("RMQ_REQUIRE_LOCK", "RMQ_PYTHON")}
    environ.update(RMQ_VENV=str(root / "venv"), FAKE_LOG=str(log), FAKE_TARGET=target, **env)
    out = subprocess.run(["bash", "-c", '. "$0/scripts/_env.sh" && ensure_venv "$1"', str(root), extras],
                         env=environ, capture_output=True, text=True, timeout=60)
    calls = [line for line in log.read_text().splitlines() if "import platform" not in line]
    return out, calls


def test_the_lock_python_installs_the_build_lock_then_its_lock_then_the_project_alone(checkout: Path):
    out, calls = ensure_venv(checkout, "test,analytics", "cpython-3.11-Linux-x86_64")
    assert out.returncode == 0, out.stderr
    assert calls == ["-m pip install -q --require-hashes -r requirements/build.txt",
                     "-m pip install -q --require-hashes -r requirements/test-analytics.txt",
                     "-m pip install -q --no-deps --no-build-isolation -e ."]


def test_each_extras_set_installs_its_own_lock_file(checkout: Path):
    for extras, lock in (("", "base.txt"), ("analytics", "analytics.txt")):
        out, calls = ensure_venv(checkout, extras, "cpython-3.11-Linux-x86_64")
        assert out.returncode == 0, out.stderr
        assert f"-m pip install -q --require-hashes -r requirements/{lock}" in calls


def test_a_changed_lock_file_installs_again_and_an_unchanged_one_does_not(checkout: Path):
    assert ensure_venv(checkout, "", "cpython-3.11-Linux-x86_64")[1]
    assert ensure_venv(checkout, "", "cpython-3.11-Linux-x86_64")[1] == []
    with (checkout / "requirements" / "base.txt").open("a") as f:
        f.write("# changed\n")
    assert ensure_venv(checkout, "", "cpython-3.11-Linux-x86_64")[1]


def test_another_python_gets_pyprojects_ranges_and_says_so_in_one_line(checkout: Path):
    out, calls = ensure_venv(checkout, "test,analytics", "cpython-3.12-Linux-aarch64")
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "the lock is for" in line]
    assert len(said) == 1 and "cpython-3.12-Linux-aarch64" in said[0] and "cpython-3.11-Linux-x86_64" in said[0]
    assert calls[-1] == "-m pip install -q -e .[test,analytics]"
    assert not any("--require-hashes" in c for c in calls)


def test_another_python_is_refused_in_one_line_when_the_lock_is_required(checkout: Path):
    out, calls = ensure_venv(checkout, "test,analytics", "cpython-3.10-Linux-x86_64", RMQ_REQUIRE_LOCK="1")
    assert out.returncode == 2 and calls == []
    (line,) = out.stderr.strip().splitlines()
    assert "RMQ_REQUIRE_LOCK" in line and "cpython-3.10-Linux-x86_64" in line and "RMQ_PYTHON" in line


def test_ci_requires_the_lock():
    assert re.search(r"^export RMQ_REQUIRE_LOCK=1$", (ROOT / ".ci" / "run").read_text(), re.M)
