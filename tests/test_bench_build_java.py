"""bench/build_java_namesrv.py refuses bad input before building anything: one line on
stderr naming the setting and its value, a non-zero exit, --out untouched.

The source trees here are fakes shaped like the real ones (a pom.xml and the module
directories), so the checks run without RocketMQ's sources, a JDK or apt-get: each test
breaks one thing, and everything checked before it is valid.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "build_java_namesrv.py"
MODULES = ("logging", "remoting", "common", "srvutil", "namesrv")
POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <parent><groupId>org.apache</groupId><artifactId>apache</artifactId><version>18</version></parent>
  <artifactId>{artifact}</artifactId>
  <version>{version}</version>
</project>
"""


def fake_rocketmq(root: Path, version: str = "4.9.8") -> Path:
    for m in MODULES:
        (root / m / "src/main/java").mkdir(parents=True)
    (root / "pom.xml").write_text(POM.format(artifact="rocketmq-all", version=version))
    return root


def fake_fastjson(root: Path, version: str = "1.2.69") -> Path:
    (root / "src/main/java/com/alibaba/fastjson").mkdir(parents=True)
    (root / "pom.xml").write_text(POM.format(artifact="fastjson", version=version))
    return root


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    """Valid-looking inputs and an --out that does not exist yet."""
    return {"rocketmq": fake_rocketmq(tmp_path / "rocketmq"), "fastjson": fake_fastjson(tmp_path / "fastjson"),
            "out": tmp_path / "out"}


def run(rocketmq: Path, fastjson: Path, out: Path, *extra: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--rocketmq-src", str(rocketmq), "--fastjson-src",
                           str(fastjson), "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def assert_refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_missing_rocketmq_source_dir_is_refused_and_out_not_created(trees: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    proc = run(missing, trees["fastjson"], trees["out"])
    assert_refused(proc, "--rocketmq-src", str(missing))
    assert not trees["out"].exists()


def test_rocketmq_tree_of_another_version_is_refused(tmp_path: Path, trees: dict[str, Path]) -> None:
    other = fake_rocketmq(tmp_path / "rocketmq-4.9.7", version="4.9.7")
    proc = run(other, trees["fastjson"], trees["out"])
    assert_refused(proc, "--rocketmq-src", str(other), "4.9.7", "4.9.8")
    assert not trees["out"].exists()


def test_rocketmq_tree_without_a_module_is_refused(trees: dict[str, Path]) -> None:
    (trees["rocketmq"] / "namesrv/src/main/java").rmdir()
    proc = run(trees["rocketmq"], trees["fastjson"], trees["out"])
    assert_refused(proc, "--rocketmq-src", str(trees["rocketmq"]), "namesrv")
    assert not trees["out"].exists()


def test_directory_without_pom_is_refused(tmp_path: Path, trees: dict[str, Path]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run(empty, trees["fastjson"], trees["out"])
    assert_refused(proc, "--rocketmq-src", str(empty), "pom.xml")


def test_fastjson_tree_of_another_version_is_refused(tmp_path: Path, trees: dict[str, Path]) -> None:
    other = fake_fastjson(tmp_path / "fastjson-1.2.83", version="1.2.83")
    proc = run(trees["rocketmq"], other, trees["out"])
    assert_refused(proc, "--fastjson-src", str(other), "1.2.83", "1.2.69")
    assert not trees["out"].exists()


def test_non_empty_out_is_refused_without_force_and_left_as_it_was(trees: dict[str, Path]) -> None:
    trees["out"].mkdir()
    (trees["out"] / "keep.txt").write_text("mine")
    proc = run(trees["rocketmq"], trees["fastjson"], trees["out"])
    assert_refused(proc, "--out", str(trees["out"]), "--force")
    assert [p.name for p in trees["out"].iterdir()] == ["keep.txt"]
    assert (trees["out"] / "keep.txt").read_text() == "mine"


def test_missing_javac_is_refused_and_leaves_nothing_beside_out(trees: dict[str, Path], tmp_path: Path) -> None:
    no_tools = tmp_path / "empty-path"
    no_tools.mkdir()
    env = dict(os.environ, PATH=str(no_tools))
    before = sorted(p.name for p in trees["out"].parent.iterdir())
    proc = run(trees["rocketmq"], trees["fastjson"], trees["out"], env=env)
    assert_refused(proc, "javac")
    assert sorted(p.name for p in trees["out"].parent.iterdir()) == before


def test_netty_dir_without_netty_jars_is_refused(trees: dict[str, Path], tmp_path: Path) -> None:
    proc = run(trees["rocketmq"], trees["fastjson"], trees["out"], "--netty-jars", str(tmp_path))
    assert_refused(proc, "--netty-jars", str(tmp_path), "netty-buffer")
    assert not trees["out"].exists()
