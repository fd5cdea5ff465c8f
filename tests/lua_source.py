"""What the Lua sources say about themselves, read statically (tests/test_lua_scripts.py):
which prelude names a script or part refers to, which key families it may touch (its own
``K.*`` calls and those of every prelude function it calls, transitively), and its
``-- uses:`` and ``-- keys:`` header lines."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from service.store import PARTS, SCRIPTS, uses

LUA = Path(__file__).resolve().parent.parent / "lua"
VERSION = "version"  # KEYS[1], the one key a script is given: every other is built from its tag
_KEYS_LINE = re.compile(r"^-- keys: *(.*)$", re.MULTILINE)
# a one-line function first: the other form would run on to the next function's end
_FUNCTION = re.compile(r"^local function (\w+)\([^\n]*\bend$|^local function (\w+)\(.*?^end\b",
                       re.MULTILINE | re.DOTALL)


def code(source: str) -> str:
    """The source without comments and with every string literal empty."""
    source = re.sub(r"--[^\n]*", "", source)
    return re.sub(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"", "''", source)


def text(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def part_text(part: str) -> str:
    return text(f"_{part}")


def constant(name: str, source: str) -> int:
    """A script's or part's number constant (`local NAME = 1000`): a test of a limit runs
    the first size past the limit the code has, whatever it becomes."""
    found = re.search(rf"^local {name} = ([0-9]+)\b", text(source), re.MULTILINE)
    assert found, f"no constant {name} in lua/{source}.lua"
    return int(found.group(1))


def defined(source: str) -> set[str]:
    """The names a chunk defines at its top level (local functions and variables)."""
    out: set[str] = set()
    for m in re.finditer(r"^local function (\w+)|^local ([\w, ]+?)\s*=", source, re.MULTILINE):
        out.update([m.group(1)] if m.group(1) else [n.strip() for n in m.group(2).split(",")])
    return out


@cache
def owners() -> dict[str, str]:
    """Prelude name -> the part that defines it."""
    return {n: p for p in PARTS for n in defined(part_text(p))}


def referenced(source: str) -> set[str]:
    """The prelude names a chunk refers to but does not define itself."""
    own = defined(source)
    return {w for w in re.findall(r"\b[A-Za-z_]\w*\b", code(source)) if w in owners() and w not in own}


def closure(parts: list[str]) -> set[str]:
    """The parts `parts` name and those they name in turn."""
    out: set[str] = set()
    todo = list(parts)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo += uses(part_text(p))
    return out


def _direct_keys(body: str) -> set[str]:
    c = code(body)
    found = set(re.findall(r"\bK\.(\w+)\(", c))
    if re.search(r"KEYS\[1\]", c):
        found.add(VERSION)
    return found


@cache
def _functions() -> dict[str, str]:
    """Prelude function -> its source."""
    out = {}
    for p in PARTS:
        for m in _FUNCTION.finditer(part_text(p)):
            out[m.group(1) or m.group(2)] = m.group(0)
    return out


def touched_keys(source: str) -> set[str]:
    """The key families a script may touch: its own K.* calls and KEYS[1], and those of
    every prelude function it calls, transitively."""
    keys = _direct_keys(re.sub(r"^local TAG = [^\n]*", "", source, flags=re.MULTILINE))
    seen: set[str] = set()
    todo = [n for n in referenced(source) if n in _functions()]
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        body = _functions()[fn]
        keys |= _direct_keys(body)
        todo += [w for w in re.findall(r"\b[A-Za-z_]\w*\b", code(body)) if w in _functions() and w != fn]
    return keys


def declared_keys(source: str) -> set[str]:
    """The families a script's `-- keys:` line names (continued on indented comment lines)."""
    m = _KEYS_LINE.search(source)
    if m is None:
        return set()
    listed = [m.group(1)]
    for line in source[m.end() + 1:].splitlines():
        more = re.match(r"^-- {4,}(\S.*)$", line)
        if more is None:
            break
        listed.append(more.group(1))
    return {k.strip() for k in ",".join(listed).split(",") if k.strip()}


def scripts() -> tuple[str, ...]:
    return SCRIPTS
