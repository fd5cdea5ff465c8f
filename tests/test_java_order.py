"""Java's hash table order, as lua/_javaorder.lua and service/javaorder.py compute it, held
to a real JVM (tests/java/JavaOrder.java, compiled with the machine's javac) over many
random name sets: two clusters' groups, names that share a hash, non-ASCII names, and
sizes past each resize (13 entries and more grow a HashMap past 16 bins)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from service import javaorder
from tests import lua_source

JAVA_SOURCE = Path(__file__).parent / "java" / "JavaOrder.java"
KINDS = ("hash", "map", "set")

# Runs the part on each case: hashes as digits, orders as lists (names put in list order).
HARNESS = """
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local kind, names = c[1], c[2]
  if kind == 'hash' then
    local hs = {}
    for j, n in ipairs(names) do hs[j] = string.format('%.0f', java_hash(n)) end
    out[i] = hs
  elseif kind == 'map' then
    out[i] = java_order(names, grown_capacity(#names))
  else
    out[i] = java_order(java_order(names, grown_capacity(#names)), copied_capacity(#names))
  end
end
return cjson.encode(out)
"""


def bin16(name: str) -> int:
    return javaorder.bucket(javaorder.java_hash(name), 16)


def _names(rng: random.Random) -> list[str]:
    """A name set as brokers put it: distinct, in a random order."""
    size = rng.choice([1, 2, 3, 5, 8, 11, 12, 13, 14, 20, 24, 25, 30, 40, 48, 49, 60])
    style = rng.randrange(4)
    if style == 0:  # two clusters' groups
        names = [f"{rng.choice('xy')}-broker-{i}" for i in range(size)]
    elif style == 1:  # RocketMQ's own spelling
        names = [f"broker-{chr(97 + i % 26)}{i // 26 or ''}" for i in range(size)]
    elif style == 2:  # "Aa" and "BB" share a hash: up to 8 names in one bin, where insertion order
        # shows (a 9th makes Java grow the table up to 64 bins, then keep the bin as a tree,
        # which the registry does not model: docs/design.md, "Route order")
        shared = ["".join(rng.choice(("Aa", "BB")) for _ in range(6)) for _ in range(rng.randint(2, 8))]
        # none of the others in their bin at 16 bins, so none at any size: 8 at most there
        names = shared + [n for n in (f"broker-{i}" for i in range(size)) if bin16(n) != bin16(shared[0])]
    else:  # any name RocketMQ takes: non-ASCII, astral (a surrogate pair in UTF-16)
        alphabet = "abcXYZ019_-%|.éß中文😀"
        names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(size)]
    names = list(dict.fromkeys(names))
    rng.shuffle(names)
    return names


def _cases() -> list[tuple[str, list[str]]]:
    rng = random.Random(39)
    return [(kind, _names(rng)) for _ in range(200) for kind in KINDS]


CASES = _cases()


def _python(kind: str, names: list[str]) -> list[str]:
    if kind == "hash":
        return [str(javaorder.java_hash(n)) for n in names]
    in_map = javaorder.java_order(names, javaorder.grown_capacity(len(names)))
    if kind == "map":
        return in_map
    if kind == "set":
        return javaorder.java_order(in_map, javaorder.copied_capacity(len(names)))
    initial = int(kind.removeprefix("chm"))
    return javaorder.java_order(names, javaorder.concurrent_capacity(initial, len(names)))


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Answers of the JVM for a list of cases."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac not installed: Java's own order is not checked")
    out_dir = tmp_path_factory.mktemp("javaorder")
    subprocess.run(["javac", "-d", str(out_dir), str(JAVA_SOURCE)], check=True)

    def run(cases: list[tuple[str, list[str]]]) -> list[list[str]]:
        text = "".join(kind + "".join("\t" + n for n in names) + "\n" for kind, names in cases)
        proc = subprocess.run(["java", "-cp", str(out_dir), "JavaOrder"], input=text.encode(), capture_output=True,
                              check=True)
        lines = proc.stdout.decode().split("\n")[:-1]
        return [line.split("\t") for line in lines]

    return run


def _lua(client: Any) -> list[list[str]]:
    source = lua_source.part_text("javaorder") + HARNESS
    answer = client.eval(source, 0, json.dumps(CASES))
    return json.loads(answer)


def test_python_hashes_and_orders_are_javas(java: Any) -> None:
    cases = CASES + [(kind, names) for kind in ("chm128", "chm32") for _, names in CASES[1::3] if len(names) < 48]
    assert [_python(kind, names) for kind, names in cases] == java(cases)


def test_lua_hashes_and_orders_on_redis_are_javas(java: Any, r: redis.Redis) -> None:
    assert _lua(r) == java(CASES)


def test_lua_hashes_and_orders_on_redis_are_pythons(r: redis.Redis) -> None:
    assert _lua(r) == [_python(kind, names) for kind, names in CASES]


def test_lua_hashes_and_orders_on_the_embedded_store_are_pythons() -> None:
    assert _lua(fakeredis.FakeStrictRedis()) == [_python(kind, names) for kind, names in CASES]


def test_a_set_copied_from_twelve_names_iterates_otherwise_than_their_map(java: Any) -> None:
    """At 12 names the map has 16 bins and its copy 32 (Java 8 to 17): the two orders can differ."""
    names = [f"broker-{i}" for i in range(12)]
    in_map, in_set = java([("map", names), ("set", names)])
    assert in_map != in_set
    assert _python("set", names) == in_set


@pytest.mark.parametrize("initial, sizes", [(32, (40, 47, 48, 49, 60, 95, 96, 97)), (128, (180, 191, 192, 193))])
def test_a_concurrent_hash_maps_table_grows_as_javas(java: Any, initial: int, sizes: tuple[int, ...]) -> None:
    """A ConcurrentHashMap doubles when a put makes its count 0.75 of its bins; the order
    within a bin then is no longer that of insertion, but its bins come in order at the
    size computed (at another size they would not)."""
    rng = random.Random(initial)
    cases = [(f"chm{initial}", [f"broker-{rng.randrange(10**6)}-{i}" for i in range(n)]) for n in sizes]
    for (_, names), shown in zip(cases, java(cases)):
        capacity = javaorder.concurrent_capacity(initial, len(names))
        bins = [javaorder.bucket(javaorder.java_hash(n), capacity) for n in shown]
        assert sorted(shown) == sorted(names) and bins == sorted(bins), (len(names), capacity)
