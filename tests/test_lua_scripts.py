"""The Lua scripts say what they touch (docs/design.md, "Scripts"): each names at its top the
prelude parts it uses and the key families it may touch, checked here against what it calls;
a change script declares its change and returns only through finish; no script writes the
prelude's state."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import redis

from service.config import Settings
from service.scripts import Scripts
from service.store import PARTS, READ_SCRIPTS, SCRIPTS, Store, load_sources, uses
from tests import lua_source as lua

WRITE_SCRIPTS = [name for name in SCRIPTS if name not in READ_SCRIPTS]


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_uses_every_prelude_part_it_calls(name: str) -> None:
    source = lua.text(name)
    missing = {n: lua.owners()[n] for n in lua.referenced(source) if lua.owners()[n] not in lua.closure(uses(source))}
    assert missing == {}, f"lua/{name}.lua calls these without naming their part on its -- uses: line"


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_names_only_parts_it_calls(name: str) -> None:
    source = lua.text(name)
    called = {lua.owners()[n] for n in lua.referenced(source)}
    assert [p for p in uses(source) if p not in called] == []


@pytest.mark.parametrize("part", PARTS)
def test_a_prelude_part_uses_exactly_the_earlier_parts_it_calls(part: str) -> None:
    source = lua.part_text(part)
    called = {lua.owners()[n] for n in lua.referenced(source)}
    assert set(uses(source)) == called
    assert [p for p in uses(source) if PARTS.index(p) >= PARTS.index(part)] == []


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_scripts_header_names_exactly_the_key_families_it_may_touch(name: str) -> None:
    source = lua.text(name)
    assert lua.declared_keys(source) == lua.touched_keys(source)


def test_the_key_finder_follows_prelude_calls_to_the_keys_they_build() -> None:
    # heartbeat.lua's calls: touch_live's keys, and finish's (publish_change: the version,
    # the channel and the changelog)
    source = "local change = new_change()\ntouch_live(ARGV[1], 0, 1)\nreturn finish(change)\n"
    assert lua.touched_keys(source) == {"version", "live", "expiry", "changes", "changelog"}


def test_the_key_header_reader_takes_its_continuation_lines() -> None:
    source = "-- keys: version, broker,\n--       addrs\n-- ARGV[1] name\n"
    assert lua.declared_keys(source) == {"version", "broker", "addrs"}


@pytest.mark.parametrize("name", WRITE_SCRIPTS)
def test_a_change_script_declares_its_change_and_returns_only_through_finish(name: str) -> None:
    code = lua.code(lua.text(name))
    assert code.count("local change = new_change()") == 1
    # its own local functions return to it, not to Redis
    top = re.sub(r"^local function .*?^end\b", "", code, flags=re.MULTILINE | re.DOTALL)
    returns = re.findall(r"\breturn\b[^\n]*", top)
    assert returns and [r for r in returns if not r.startswith("return finish(change")] == []


@pytest.mark.parametrize("name", sorted(READ_SCRIPTS))
def test_a_read_script_makes_no_change(name: str) -> None:
    code = lua.code(lua.text(name))
    assert "new_change" not in code and "finish(" not in code


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_body_writes_no_prelude_state(name: str) -> None:
    code = lua.code(lua.text(name))
    # the read caches are the prelude's own; the key builders and constants are only read
    assert re.findall(r"\b(memo|encoded)\b", code) == []
    assert re.findall(ASSIGNS_PRELUDE_NAME, code) == []


# an assignment to a key builder, the tag or an upper-case constant, or a new key builder
ASSIGNS_PRELUDE_NAME = re.compile(r"^\s*(?:(?:K\.\w+|K|TAG|[A-Z][A-Z_]*)\s*(?:\[[^]\n]*\])?\s*=(?!=)|function K\.)",
                                  re.MULTILINE)


def test_the_state_finder_sees_assignments_not_comparisons() -> None:
    found = ASSIGNS_PRELUDE_NAME.findall("TAG_CAP = 2\nK.x = 1\nfunction K.y() end\nif SLICE == 1 then end\n"
                                         "local CLEAN = 1\n  K['a'] = 2\n")
    assert [f.strip() for f in found] == ["TAG_CAP =", "K.x =", "function K.", "K['a'] ="]


def test_a_script_is_the_parts_it_uses_in_prelude_order_then_its_file() -> None:
    source = load_sources()["heartbeat"]
    parts = "".join(lua.part_text(p) for p in ("keys", "basics", "changes", "members"))
    assert source == parts + lua.text("heartbeat")


def test_an_unknown_part_on_a_uses_line_is_refused_by_name(tmp_path: Path) -> None:
    base = tmp_path / "lua"
    shutil.copytree(lua.LUA, base)
    script = base / "heartbeat.lua"
    script.write_text(script.read_text().replace("-- uses: keys,", "-- uses: keyz, keys,"))
    with pytest.raises(ValueError, match="heartbeat.lua .* unknown prelude part 'keyz'"):
        load_sources(base)


# ---------------------------------------------------------------------- one result shape
async def test_every_change_script_answers_the_version_first_when_nothing_visible_changed(
        settings: Settings, r: redis.Redis) -> None:
    r.set("{rmq}:version", 41)
    store = Store(settings)
    try:
        runs = {
            "heartbeat": ["10.0.0.1:10911", "broker-a", 0, ""],
            "register_unchanged": ["no such digest", "", ""],
            "unregister": ["DefaultCluster", "10.0.0.1:10911", "broker-a", 0],
            "write_perm": ["broker-a", "wipe"],
            "delete_topic": ["T", ""],
            "kv_delete": ["ns", "key"],
            "register_topic": ["T", 1, "broker-a", 4, 4, 6, 0],
            "remove_batch": [1000, "10.0.0.1:10911", "", "expired"],
            "topic_index_sync": [],
            "masterless_sync": [],
        }
        for name, args in runs.items():
            result = await store.run(name, args)
            assert result[0] == b"41", name
    finally:
        await store.close()


async def test_a_change_scripts_first_value_is_its_change_record_when_it_changed_something(
        settings: Settings) -> None:
    store = Store(settings)
    try:
        change = (await Scripts(store).kv_put("ns", "key", "value"))
        assert re.fullmatch(rb'\["1","\d+"\]', change)
    finally:
        await store.close()
