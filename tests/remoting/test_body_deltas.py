"""A big broker's registration body read as a change to its previous one
(service/remoting/body_deltas.py): whatever the change, the table it reads is the one a
whole decode reads, or it declines and the body is decoded whole."""

from __future__ import annotations

import random
from typing import Any, Callable

import orjson
import pytest

from service.models import plain_fingerprints
from service.remoting import bodies, codes
from service.remoting.body_deltas import MIN_BYTES, BodyDeltas, Delta, plain_layout
from tests.builders import topic_config
from tests.remoting import broker5

N = 1_000  # ~140 KB of JSON: over MIN_BYTES


def table(n: int = N, prefix: str = "orders.") -> dict[str, dict[str, Any]]:
    return {f"{prefix}{i:05d}": topic_config(f"{prefix}{i:05d}", read=8, write=8) for i in range(n)}


def body(topics: dict[str, Any], counter: int = 1, filters: list[str] | None = None) -> bytes:
    """RegisterBrokerBody as fastjson writes it (fields in name order, the table last); the
    table in the order given, as fastjson writes a map in its iteration order."""
    head = orjson.dumps({"filterServerList": filters or [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1700000000000 + counter}}})
    return head[:-2] + b',"topicConfigTable":' + orjson.dumps(topics) + b"}}"


def fps(topics: dict[str, Any]) -> dict[str, str]:
    found = plain_fingerprints(topics, 1024, 100_000)
    assert found is not None
    return found


def held(topics: dict[str, Any], key: str = "10.0.0.1:10911") -> tuple[BodyDeltas, bytes]:
    deltas = BodyDeltas()
    first = body(topics)
    layout = plain_layout(first, len(topics))
    assert layout is not None
    deltas.keep(key, layout, fps(topics))
    return deltas, first


def read_table(delta: Delta) -> dict[str, str] | None:
    """The fingerprints of the table the delta reads, as the handler works them out."""
    found = plain_fingerprints(delta.configs, 1024, 100_000)
    assert found is not None
    return delta.fingerprints(found)


def test_the_body_is_fastjsons_layout() -> None:
    assert orjson.loads(body(table(2))) == {"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 1, "timestamp": 1700000000001}, "topicConfigTable": table(2)}}
    assert len(body(table())) > MIN_BYTES


def test_one_changed_topic_is_the_only_config_decoded() -> None:
    topics = table()
    deltas, _ = held(topics)
    changed = dict(topics)
    changed["orders.00500"] = {**changed["orders.00500"], "writeQueueNums": 16}
    delta = deltas.read("10.0.0.1:10911", body(changed, counter=2))
    assert delta is not None
    assert delta.configs == {"orders.00500": changed["orders.00500"]}
    assert delta.replaced == ["orders.00500"]
    assert delta.head["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == 2
    assert read_table(delta) == fps(changed)


def test_a_new_data_version_alone_decodes_no_config() -> None:
    topics = table()
    deltas, _ = held(topics)
    delta = deltas.read("10.0.0.1:10911", body(topics, counter=7))
    assert delta is not None
    assert (delta.configs, delta.replaced) == ({}, [])
    assert read_table(delta) == fps(topics)


def test_another_brokers_body_is_decoded_whole() -> None:
    deltas, first = held(table())
    assert deltas.read("10.0.0.2:10911", first) is None


def edit(rng: random.Random, topics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One of the changes a broker's table goes through, at a random place."""
    names = list(topics)
    at = rng.randrange(len(names))
    kind = rng.choice(["change", "add", "remove", "rename", "reorder", "many", "prefix"])
    out = dict(topics)
    if kind == "change":
        out[names[at]] = {**out[names[at]], "perm": rng.choice((2, 4, 6)), "readQueueNums": rng.randint(1, 64)}
    elif kind == "add":  # inserted where a hash map's order puts it: anywhere
        items = list(out.items())
        new = f"orders.new{rng.randrange(10**6)}"
        items.insert(at, (new, topic_config(new, read=rng.randint(1, 16))))
        out = dict(items)
    elif kind == "remove":
        del out[names[at]]
    elif kind == "rename":
        items = list(out.items())
        new = names[at] + "x"
        items[at] = (new, {**items[at][1], "topicName": new})
        out = dict(items)
    elif kind == "reorder":  # a rehash: the same topics in another order
        items = list(out.items())
        rng.shuffle(items)
        out = dict(items)
    elif kind == "many":
        for name in rng.sample(names, 20):
            out[name] = {**out[name], "writeQueueNums": rng.randint(1, 64)}
    else:  # a name that shares its start with its neighbour's
        out[names[at] + "0"] = topic_config(names[at] + "0")
    return out


def edits_read(render: Callable[[dict[str, Any], int], bytes], seed: int, changes: int) -> list[Delta]:
    """`changes` random edits of a 600-topic table, each body (`render`ed) read against the
    one before; the deltas read, each checked to read the table a whole decode gives."""
    rng = random.Random(seed)
    topics = table(600)
    key = "10.0.0.1:10911"
    deltas = BodyDeltas()
    deltas.keep(key, plain_layout(render(topics, 1), len(topics)), fps(topics))
    read = []
    for counter in range(2, changes + 2):
        topics = edit(rng, topics)
        raw = render(topics, counter)
        delta = deltas.read(key, raw)
        whole = fps(topics)
        if delta is None:  # declined: decoded whole, as the handler then does
            deltas.keep(key, plain_layout(raw, len(topics)), whole)
            continue
        read.append(delta)
        assert delta.head["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == counter
        got = read_table(delta)
        assert got == whole, counter
        deltas.keep(key, delta.layout, got)
    return read


def test_whatever_the_change_the_table_read_is_the_whole_decodes() -> None:
    assert len(edits_read(body, 11, 298)) > 200  # most changes were read as a delta


def test_a_topic_named_twice_is_not_read_as_a_delta() -> None:
    topics = table()
    deltas, first = held(topics)
    # a body naming orders.00010 again, where orders.00500 was: a whole decode says what it means
    raw = first.replace(b'"orders.00500"', b'"orders.00010"')
    delta = deltas.read("10.0.0.1:10911", raw)
    assert delta is not None and read_table(delta) is None


@pytest.mark.parametrize("raw", [
    # the table not last in its wrapper
    orjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "topicConfigTable": table(), "dataVersion": {"counter": 2, "timestamp": 2}}}),
    # another field after the wrapper
    body(table())[:-1] + b',"zz":1}',
    # whitespace between the configs: still JSON, not fastjson's
    body(table()).replace(b'},"', b'}, "'),
], ids=["table-first", "field-after", "spaced"])
def test_a_body_laid_out_otherwise_is_decoded_whole(raw: bytes) -> None:
    deltas, _ = held(table())
    delta = deltas.read("10.0.0.1:10911", raw)
    if delta is not None:  # it may still read the part that differs, never another table
        assert read_table(delta) == fps(orjson.loads(raw)["topicConfigSerializeWrapper"]["topicConfigTable"])


def test_a_table_with_a_brace_in_a_name_is_not_held() -> None:
    topics = table()
    topics["odd}{name"] = topic_config("odd}{name")
    assert plain_layout(body(topics), len(topics)) is None


def test_a_table_with_nested_objects_is_not_held() -> None:
    topics = {name: {**config, "attributes": {"+queue.type": "Normal"}} for name, config in table().items()}
    assert plain_layout(body(topics), len(topics)) is None


def test_small_bodies_are_not_held() -> None:
    small = body(table(10))
    assert plain_layout(small, 10) is None


def test_the_bodies_held_are_bounded_in_bytes_least_recently_used_going_first() -> None:
    topics = table()
    raw = body(topics)
    deltas = BodyDeltas(max_bytes=2 * len(raw) + 10)
    layout = plain_layout(raw, len(topics))
    for key in ("a", "b"):
        deltas.keep(key, layout, fps(topics))
    assert deltas.read("a", raw) is not None  # "a" used last: "b" goes first
    deltas.keep("c", layout, fps(topics))
    assert len(deltas) == 2 and deltas.bytes == 2 * len(raw)
    assert deltas.read("b", raw) is None and deltas.read("a", raw) is not None


# ---------------------------------------------------------------------- the compressed form
V4_9_8, V5_3_3 = 409, codes.V5_3_3  # 5.x bodies end with the static topics' queue mappings
PARTS = 2_000  # ~70 KB inflated (~35 bytes a topic): over MIN_BYTES


def compressed(topics: dict[str, Any], counter: int = 1, version: int = V4_9_8, filters: list[str] | None = None) -> bytes:
    return bodies.compress_register_body({"topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1700000000000 + counter}, "topicConfigTable": topics},
        "filterServerList": filters or []}, version)


def whole(raw: bytes, version: int) -> tuple[dict[str, str], bodies.Layout | None, Any]:
    doc, layout = bodies.register_broker_body_laid_out(raw, True, version, 100_000)
    return fps(doc["topicConfigSerializeWrapper"]["topicConfigTable"]), layout, doc["filterServerList"]


@pytest.mark.slow
@pytest.mark.parametrize("version", [V4_9_8, V5_3_3], ids=["4.9.8", "5.x"])
def test_whatever_the_change_a_compressed_table_read_is_the_whole_decodes(version: int) -> None:
    rng = random.Random(5)
    topics = table(PARTS)
    key = "10.0.0.1:10911"
    deltas = BodyDeltas()
    _, layout, filters = whole(compressed(topics, 1, version), version)
    deltas.keep(key, layout, fps(topics), filters)
    read = 0
    for counter in range(2, 150):
        topics = edit(rng, topics)
        raw = compressed(topics, counter, version)
        delta = deltas.read(key, raw, compressed=True, max_topics=100_000)
        expected, layout, filters = whole(raw, version)
        if delta is None:
            deltas.keep(key, layout, expected, filters)
            continue
        read += 1
        assert delta.head["topicConfigSerializeWrapper"]["dataVersion"]["counter"] == counter
        assert read_table(delta) == expected, counter
        assert layout is not None and delta.layout.starts == layout.starts  # where each part starts, kept right
        deltas.keep(key, delta.layout, expected, filters)
    assert read > 125  # removals too: the parts' starts are known


def test_a_compressed_body_whose_filter_servers_changed_is_decoded_whole() -> None:
    topics = table(PARTS)
    deltas = BodyDeltas()
    expected, layout, filters = whole(compressed(topics), V4_9_8)
    deltas.keep("k", layout, expected, filters)
    assert deltas.read("k", compressed(topics, 2), compressed=True) is not None
    assert deltas.read("k", compressed(topics, 2, filters=["10.0.0.9:30000"]), compressed=True) is None


def test_a_plain_body_is_not_read_against_a_held_compressed_one() -> None:
    topics = table(PARTS)
    deltas = BodyDeltas()
    expected, layout, filters = whole(compressed(topics), V4_9_8)
    deltas.keep("k", layout, expected, filters)
    assert deltas.read("k", body(topics, 2)) is None


# ---------------------------------------------------------------------- a 5.x broker's plain body
def body5(topics: dict[str, Any], counter: int = 1, mappings: dict[str, Any] | None = None) -> bytes:
    """A 5.3.3 broker's plain body (tests/remoting/broker5.py): each config with its
    attributes object, the static topic mappings after the table."""
    return broker5.plain_body({n: {"attributes": {"+message.type": "NORMAL"} if i % 3 else {}, **c}
                               for i, (n, c) in enumerate(topics.items())},
                              mappings if mappings is not None else STATIC, counter=counter,
                              mapping_timestamp=1700000000000 + counter)


STATIC = {"ST1": broker5.mapping_info("ST1", "broker-a", 4)}


def test_a_5x_body_is_held_with_its_mappings_after_the_table() -> None:
    topics = table()
    layout = plain_layout(body5(topics), len(topics))
    assert layout is not None and layout.data[layout.end:].startswith(b'},"topicQueueMappingDetailMap":')


def test_whatever_the_change_a_5x_table_read_is_the_whole_decodes() -> None:
    read = edits_read(body5, 5, 198)
    assert len(read) > 150  # most changes were read as a delta
    for delta in read:
        mappings = delta.head["topicConfigSerializeWrapper"]["topicQueueMappingInfoMap"]
        assert mappings["ST1"]["currIdMap"] == {"0": 0, "1": 1, "2": 2, "3": 3}


def test_a_5x_body_whose_mappings_changed_is_decoded_whole() -> None:
    topics = table()
    key = "10.0.0.1:10911"
    deltas = BodyDeltas()
    deltas.keep(key, plain_layout(body5(topics), len(topics)), fps(topics))
    moved = {"ST1": broker5.mapping_info("ST1", "broker-a", 4, epoch=1700000000001)}
    assert deltas.read(key, body5(topics, 2, moved)) is None


def test_a_4x_body_is_not_read_against_a_held_5x_one() -> None:
    topics = table()
    key = "10.0.0.1:10911"
    deltas = BodyDeltas()
    deltas.keep(key, plain_layout(body5(topics), len(topics)), fps(topics))
    assert deltas.read(key, body(topics, 2)) is None
