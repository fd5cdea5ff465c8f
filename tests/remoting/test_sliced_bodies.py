"""A big plain RegisterBrokerBody is parsed a slice of its topic table at a time (so the
decoding thread lets the event loop's reads in between): the document is the one a
whole parse gives, whatever the body holds, or the body is parsed whole."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from service.remoting import bodies
from tests.builders import topic_config

N = 3_000  # ~400 KB: three slices and more


def table(n: int = N, prefix: str = "orders.") -> dict[str, dict[str, Any]]:
    rng = random.Random(n)
    return {f"{prefix}{i:05d}": topic_config(f"{prefix}{i:05d}", read=rng.choice((1, 8, 16)), perm=rng.choice((2, 6)))
            for i in range(n)}


def body(topics: dict[str, Any], wrapper_tail: bytes = b"") -> bytes:
    """As fastjson writes it: fields in name order, the table last (unless `wrapper_tail`
    adds fields after it)."""
    head = orjson.dumps({"filterServerList": ["10.0.0.9:30000"], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 3, "timestamp": 1700000000003}}})
    return head[:-2] + b',"topicConfigTable":' + orjson.dumps(topics) + wrapper_tail + b"}}"


def parsed(raw: bytes) -> dict[str, Any]:
    return bodies.register_broker_body(raw, False, 409)


def test_a_big_body_in_fastjsons_layout_is_parsed_in_slices_to_the_whole_parses_document() -> None:
    raw = body(table())
    assert len(raw) > 2 * bodies.SLICE_BYTES
    sliced = bodies.parse_sliced(raw)
    assert sliced is not None
    assert sliced == orjson.loads(raw) == parsed(raw)
    assert list(sliced["topicConfigSerializeWrapper"]["topicConfigTable"]) == list(table())  # in the body's order


def test_a_topic_named_twice_across_slices_ends_as_a_whole_parse_leaves_it() -> None:
    topics = table()
    raw = body(topics)
    # the last topic renamed to the first one's name: a repeated key, far apart
    last = list(topics)[-1].encode()
    raw = raw.replace(b'"' + last + b'":{', b'"orders.00000":{')
    assert parsed(raw) == orjson.loads(raw)
    assert list(parsed(raw)["topicConfigSerializeWrapper"]["topicConfigTable"].items()) == \
        list(orjson.loads(raw)["topicConfigSerializeWrapper"]["topicConfigTable"].items())


@pytest.mark.parametrize("raw", [
    # 5.x TopicConfig with an attributes map: a cut may fall inside a config
    body({name: {**config, "attributes": {"+queue.type": "Normal"}} for name, config in table().items()}),
    # names holding braces and the separator's bytes (quotes escaped)
    body({**table(), "odd},\"x": topic_config("odd},\"x"), "b{r}ace": topic_config("b{r}ace")}),
    # a field after the table
    body(table(), wrapper_tail=b',"zz":{"a":{"b":1}}'),
    body(table(), wrapper_tail=b',"zz":1'),
    # the table first in its wrapper
    orjson.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "topicConfigTable": table(), "dataVersion": {"counter": 1, "timestamp": 1}}}),
], ids=["nested-attributes", "odd-names", "object-after-table", "number-after-table", "table-first"])
def test_any_other_big_body_gives_the_whole_parses_document(raw: bytes) -> None:
    assert len(raw) > 2 * bodies.SLICE_BYTES
    assert parsed(raw) == orjson.loads(raw)


def test_a_broken_slice_is_refused_as_a_whole_parse_refuses_it() -> None:
    raw = body(table())
    at = raw.index(b'"perm":', len(raw) // 2) + len(b'"perm"')  # a ':' in the middle slice
    broken = raw[:at] + b"@" + raw[at + 1:]
    with pytest.raises(bodies.BodyError, match="not JSON"):
        parsed(broken)


def test_compressed_lines_read_a_thousand_at_a_time_give_the_table_read_a_line_at_a_time() -> None:
    lines = [f"orders.{i:05d} {i % 16 + 1} {i % 8 + 1} 6 SINGLE_TAG {{}}".encode() for i in range(2_500)]
    lines[1_200] = b"orders.00010 3 3 2 SINGLE_TAG {}"  # a name again, in a later batch: the later wins
    lines[2_100] = b"orders.big 1234567890 8 6 SINGLE_TAG {}"  # not plain: that batch goes a line at a time
    expected: dict[str, tuple[int, int, int]] = {}
    for line in lines:
        name, r, w, p = line.decode().split(" ")[:4]
        expected[name] = (int(r), int(w), int(p))
    table = bodies.topic_configs(lines)
    assert len(lines) > 2 * bodies.LINES_AT_ONCE
    assert {k: (v["readQueueNums"], v["writeQueueNums"], v["perm"]) for k, v in table.items()} == expected
    assert list(table) == list(expected)  # and in the same order
