"""The key schema lives in one place, service/keys.py: every key the scripts in lua/ build
is a ``Keys`` method with a twin in lua/_keys.lua's ``K``, every hash field they read or
write on a row-shaped key is in ``FIELDS``, and docs/design.md's schema table lists each
key with those fields."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from service.keys import FIELDS, Keys

ROOT = Path(__file__).resolve().parent.parent
LUA = sorted((ROOT / "lua").glob("*.lua"))
DESIGN = (ROOT / "docs" / "design.md").read_text()

# variables the scripts hold a row's key in
ALIASES = {"live_key": "live"}
_CALL = re.compile(r"redis\.call\('(H[A-Z]+)',")
_LITERAL = re.compile(r"^'([A-Za-z][A-Za-z0-9]*)'$")


def _args(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' is at `start`."""
    depth, args, current, quote = 0, [], [], None
    for ch in text[start:]:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "({":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")}":
            depth -= 1
            if depth == 0:
                args.append("".join(current).strip())
                return args
        elif ch == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    raise AssertionError(f"unbalanced call at {text[start:start + 80]!r}")


def hash_fields(text: str) -> list[tuple[str, str, str]]:
    """(command, key kind, field) of every literal field of a hash command on a row key."""
    found = []
    for m in _CALL.finditer(text):
        command = m.group(1)
        args = _args(text, text.index("(", m.start()))
        key = args[1]
        kind = ALIASES.get(key) or (re.match(r"K\.([a-z_]+)\(", key) or [None, None])[1]
        if kind not in FIELDS:
            continue
        rest = args[2:]
        fields = rest[0::2] if command == "HSET" else rest if command in ("HGET", "HMGET", "HDEL", "HEXISTS") else []
        for f in fields:
            literal = _LITERAL.match(f)
            if literal:
                found.append((command, kind, literal.group(1)))
    return found


def test_the_field_finder_reads_calls_across_lines_and_hset_pairs() -> None:
    text = ("redis.call('HSET', K.queue(topic, name), 'topic', topic, 'perm', e[4])\n"
            "local row = redis.call('HMGET', K.member(addr),\n  'cluster', 'brokerName')\n"
            "redis.call('HSET', live_key, 'channel', 'x')\nredis.call('SADD', K.topic(t), 'nope')")
    assert hash_fields(text) == [("HSET", "queue", "topic"), ("HSET", "queue", "perm"), ("HMGET", "member", "cluster"),
                                 ("HMGET", "member", "brokerName"), ("HSET", "live", "channel")]


@pytest.mark.parametrize("path", LUA, ids=lambda p: p.name)
def test_every_field_a_script_reads_or_writes_on_a_row_is_in_keys_fields(path: Path) -> None:
    unknown = [(c, k, f) for c, k, f in hash_fields(path.read_text()) if f not in FIELDS[k]]
    assert unknown == [], f"fields not in service/keys.py FIELDS: {unknown}"


def test_every_field_in_keys_fields_is_used_by_some_script() -> None:
    used = {(k, f) for p in LUA for _, k, f in hash_fields(p.read_text())}
    unused = [(k, f) for k, fields in FIELDS.items() for f in fields if (k, f) not in used]
    assert unused == []


def _lua_key_names() -> set[str]:
    return set(re.findall(r"^function K\.([a-z_]+)\(", (ROOT / "lua" / "_keys.lua").read_text(), re.M))


def _keys_methods() -> dict[str, str]:
    """Keys method -> its key with each name argument 'X' (the key's pattern)."""
    keys, out = Keys(), {}
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in ("tag", "pattern"):
            continue
        if isinstance(member, property):
            out[name] = getattr(keys, name)
        elif callable(member):
            arity = len(inspect.signature(member).parameters) - 1
            out[name] = member(keys, *["X"] * arity)
    return out


def test_every_key_the_scripts_build_is_a_keys_method() -> None:
    assert _lua_key_names() - set(_keys_methods()) == set()


def _design_row(key: str) -> str | None:
    """docs/design.md's schema row of a key (its placeholders standing for 'X')."""
    for line in DESIGN.splitlines():
        m = re.match(r"\| `(\{rmq\}:[^`]+)` \|", line)
        if m and re.sub(r"<[a-z]+>", "X", m.group(1)) == key:
            return line
    return None


@pytest.mark.parametrize("method", sorted(_keys_methods()))
def test_docs_design_lists_every_key(method: str) -> None:
    key = _keys_methods()[method]
    assert _design_row(key) is not None, f"docs/design.md's schema has no row for {key} (Keys.{method})"


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_docs_design_names_every_field_of_a_row(kind: str) -> None:
    row = _design_row(_keys_methods()[kind])
    assert row is not None
    missing = [f for f in FIELDS[kind] if f"`{f}`" not in row]
    assert missing == [], f"docs/design.md's row for {kind} does not name {missing}"


# ---------------------------------------------------------------------- publishing changes
WRITES = re.compile(r"redis\.call\('(HSET|HDEL|SADD|SREM|DEL|UNLINK|ZADD|ZREM|LPUSH|RPUSH|LTRIM|SET|INCR|PEXPIRE|"
                    r"PUBLISH|HINCRBY|EXPIRE)'")


def test_no_script_publishes_its_change_itself_finish_does() -> None:
    callers = [p.name for p in LUA if not p.name.startswith("_") and "publish_change" in p.read_text()]
    assert callers == []


def test_read_scripts_write_nothing() -> None:
    from service.store import READ_SCRIPTS

    writers = {name: WRITES.findall((ROOT / "lua" / f"{name}.lua").read_text()) for name in READ_SCRIPTS}
    assert {name: found for name, found in writers.items() if found} == {}


# ---------------------------------------------------------------------- the typed boundary
def test_only_service_scripts_runs_a_script_or_knows_its_argument_order() -> None:
    runs = re.compile(r"\.run\(\s*[\"']|store\.run\(")
    callers = [str(p.relative_to(ROOT)) for p in (ROOT / "service").rglob("*.py")
               if p.name not in ("scripts.py", "store.py") and runs.search(p.read_text())]
    assert callers == []


def test_every_script_has_its_typed_method() -> None:
    from service.scripts import Scripts
    from service.store import SCRIPTS

    assert [name for name in SCRIPTS if not callable(getattr(Scripts, name, None))] == []


def test_the_prelude_keeps_no_change_state_outside_the_change_object() -> None:
    # module-level state of the prelude parts (lua/_*.lua): constants (upper case), the key
    # builders, and the read caches; a new accumulator there would be a change finish does
    # not publish
    names = [n for p in LUA if p.name.startswith("_")
             for n in re.findall(r"^local (\w+)\s*=", p.read_text(), flags=re.MULTILINE)]
    state = [n for n in names if not n.isupper() and n not in ("K", "TAG", "encoded", "memo")]
    assert state == []
