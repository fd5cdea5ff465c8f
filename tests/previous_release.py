"""The previous release, from this repository's history, installed as an operator has it:
its own code and the dependencies its own lock pins, in a venv of its own.

Made once per commit and Python under ``RMQ_DEPENDENCY_VENVS`` (tests/dependency_venvs.py;
default ``~/.cache/rmq-registry/venvs``): ``git archive`` of the commit, ``pip install
--require-hashes -r requirements/base.txt`` from that tree, then the tree itself without
dependencies. About 20 s the first time here (wheels from pip's cache after that), nothing
on later runs. Its workers are started by that venv's ``rmq-registry`` with no
``PYTHONPATH``, so nothing of this checkout is imported."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests import dependency_venvs as venvs
from tests.processes import ROOT

# the release before this one (CHANGELOG.md's 0.1.0)
COMMIT = "3fcd6f1003d2bee0f3d2e17ec033c6e7dc6a1256"
VERSION = "0.1.0"


def source(commit: str, into: Path) -> Path:
    """The commit's tree, from this checkout's git history, extracted into `into`."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(f"commit {commit} is not in {ROOT}'s git history (a shallow clone? "
                           f"git fetch --unshallow): the previous release is installed from it")
    archive = into / "release.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--output", str(archive), commit], check=True, timeout=120)
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def venv(commit: str = COMMIT) -> Path:
    """The venv holding release `commit` and its locked dependencies, made unless it is there."""
    key = hashlib.sha256(f"{commit}\n{sys.version}".encode()).hexdigest()[:12]
    path = venvs.root() / f"release-{commit[:7]}-{key}"
    made = path / "made"  # written last: a venv without it was interrupted, and is made again
    with venvs.locked(path):
        if made.exists():
            return path
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
        with tempfile.TemporaryDirectory() as scratch:
            tree = source(commit, Path(scratch))
            venvs.pip(path, "install", "--require-hashes", "-r", str(tree / "requirements" / "base.txt"))
            venvs.pip(path, "install", "--no-deps", str(tree))
        made.write_text(commit + "\n")
    return path


def command(venv_path: Path) -> list[str]:
    return [str(venv_path / "bin" / "rmq-registry")]
