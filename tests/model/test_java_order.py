"""The model's hash-map order (tests/model/java_order.py) against a JVM's own HashMap and
ConcurrentHashMap, fed the same puts and removes."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.model.java_order import JavaMap, string_hash

JAVA = shutil.which("java")

# reads scenarios from stdin: a line "=hashmap 16" or "=chm 2048" (the table size: a
# ConcurrentHashMap made with capacity c has the power of two above 1 + c/0.75), then "+key"
# or "-key" lines; prints each scenario's keys in iteration order, then "="
SOURCE = """
import java.io.*;
import java.util.*;
import java.util.concurrent.*;

public class Order {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        Map<String, Boolean> map = null;
        for (String line; (line = in.readLine()) != null; ) {
            if (line.startsWith("=")) {
                if (map != null) { for (String k : map.keySet()) out.append(k).append('\\n'); out.append("=\\n"); }
                String[] f = line.substring(1).split(" ");
                int table = Integer.parseInt(f[1]);
                // ConcurrentHashMap(c) sizes its table to the power of two above 1 + c/0.75: c = 3/4 of the table, less 1
                map = f[0].equals("chm") ? (table == 16 ? new ConcurrentHashMap<>() : new ConcurrentHashMap<>(table * 3 / 4 - 1))
                                         : new HashMap<>(table);
            } else if (line.startsWith("+")) map.put(line.substring(1), true);
            else map.remove(line.substring(1));
        }
        for (String k : map.keySet()) out.append(k).append('\\n');
        out.append("=\\n");
        System.out.print(out);
    }
}
"""


def scenarios() -> list[tuple[str, int, list[str]]]:
    rng = random.Random(39)
    out = []
    for kind, table, count in (("hashmap", 16, 12), ("hashmap", 16, 3000), ("chm", 16, 3000), ("chm", 2048, 5000),
                               ("chm", 256, 700), ("hashmap", 16, 40)):
        names = [f"{rng.choice('TUSXg')}{rng.randrange(20000)}" for _ in range(count)]
        ops = [f"+{n}" for n in names]
        for n in rng.sample(names, count // 4):  # some leave, some come back (at their bucket's tail)
            ops.append(f"-{n}")
            if rng.random() < 0.5:
                ops.append(f"+{n}")
        out.append((kind, table, ops))
    return out


def model_order(kind: str, table: int, ops: list[str]) -> list[str]:
    m: JavaMap[str, bool] = JavaMap(table, concurrent=kind == "chm")
    for op in ops:
        if op[0] == "+":
            m[op[1:]] = True
        else:
            m.pop(op[1:])
    return m.keys()


def test_string_hash_is_javas() -> None:
    # String.hashCode() as OpenJDK 17 printed it; the last one over a surrogate pair (UTF-16)
    assert [string_hash(s) for s in ("", "a", "hello", "DefaultCluster", "\u00fc\u20ac", "\U0001F600")] == [
        0, 97, 99162322, 1874216089, 16176, 1772899]


@pytest.mark.skipif(JAVA is None, reason="no java on PATH (the full suite installs it)")
def test_model_maps_iterate_as_the_jvms(tmp_path: Path) -> None:
    (tmp_path / "Order.java").write_text(SOURCE)
    cases = scenarios()
    feed = "".join(f"={kind} {table}\n" + "".join(op + "\n" for op in ops) for kind, table, ops in cases)
    run = subprocess.run([JAVA, "Order.java"], cwd=tmp_path, input=feed, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    orders = [block.split("\n")[:-1] for block in run.stdout.split("=\n")[:-1]]
    assert len(orders) == len(cases)
    for (kind, table, ops), java in zip(cases, orders):
        assert model_order(kind, table, ops) == java, f"{kind} of table {table}, {len(ops)} operations"
