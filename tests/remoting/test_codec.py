"""Frames, both header serializations, the fastjson dialect and RegisterBrokerBody forms."""

from __future__ import annotations

import struct
import zlib

import orjson
import pytest

from service.remoting import bodies, codec
from service.remoting.codec import Command, FrameError
from tests.remoting.frames import compress_register_body


def sample(serialize: int) -> Command:
    return Command(code=103, language="CPP", version=63, opaque=-5, flag=2, remark="héllo",
                   ext_fields={"brokerName": "broker-a", "brokerId": "0", "note": "ünïcode"},
                   body=b"\x00\x01body", serialize_type=serialize)


@pytest.mark.parametrize("serialize", [codec.JSON, codec.ROCKETMQ])
def test_round_trip(serialize: int) -> None:
    cmd = sample(serialize)
    frame = codec.encode(cmd)
    (length,) = struct.unpack(">i", frame[:4])
    assert length == len(frame) - 4
    (header_field,) = struct.unpack(">I", frame[4:8])
    assert header_field >> 24 == serialize
    assert codec.decode_frame(frame) == cmd
    assert cmd.is_oneway and not cmd.is_response


def test_round_trip_without_remark_ext_or_body() -> None:
    for serialize in (codec.JSON, codec.ROCKETMQ):
        cmd = Command(code=0, opaque=9, flag=1, serialize_type=serialize)
        back = codec.decode_frame(codec.encode(cmd))
        assert back == cmd and back.is_response


def test_json_header_is_fastjson_shaped() -> None:
    cmd = Command(code=0, version=479, opaque=3, flag=1, ext_fields={"value": "v"})
    header = codec.encode(cmd)[8:]
    assert header == (b'{"code":0,"extFields":{"value":"v"},"flag":1,"language":"JAVA","opaque":3,'
                      b'"serializeTypeCurrentRPC":"JSON","version":479}')


def json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def test_json_header_with_trailing_newline_and_loose_types() -> None:
    header = b'{"code":105,"language":1,"version":"63","opaque":4,"flag":0,"extFields":{"topic":"T","x":true,"n":5}}\n'
    cmd = codec.decode_frame(json_frame(header, b"B"))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque) == (105, "CPP", 63, 4)
    assert cmd.ext_fields == {"topic": "T", "x": "true", "n": "5"}
    assert cmd.body == b"B"


@pytest.mark.parametrize("header", [b"not json", b"[1,2]", b'{"opaque":1}', b'{"code":"x"}',
                                    b'{"code":1,"extFields":[1]}'])
def test_bad_json_header(header: bytes) -> None:
    with pytest.raises(FrameError):
        codec.decode_frame(json_frame(header))


def test_binary_empty_strings_read_as_null() -> None:
    # RocketMQSerializable.readStr: a zero length is null; null ext values are dropped
    header = struct.pack(">hbhii", 105, 0, 479, 1, 0) + struct.pack(">i", 0)
    ext = struct.pack(">h", 5) + b"topic" + struct.pack(">i", 1) + b"T" + struct.pack(">h", 1) + b"k" + struct.pack(">i", 0)
    header += struct.pack(">i", len(ext)) + ext
    frame = struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header
    cmd = codec.decode_frame(frame)
    assert cmd.remark is None and cmd.ext_fields == {"topic": "T"}


@pytest.mark.parametrize("cut", [3, 10, 14, 20])
def test_truncated_binary_header(cut: int) -> None:
    header = codec._encode_binary_header(sample(codec.ROCKETMQ))[:cut]
    frame = struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header
    with pytest.raises(FrameError):
        codec.decode_frame(frame)


def test_bad_lengths() -> None:
    assert codec.frame_length(struct.pack(">i", codec.MAX_LENGTH)) == codec.MAX_FRAME - 4
    for bad in (codec.MAX_LENGTH + 1, 3, -1):
        with pytest.raises(FrameError):
            codec.frame_length(struct.pack(">i", bad))
    with pytest.raises(FrameError):  # header longer than the frame
        codec.decode_payload(struct.pack(">I", 100) + b"{}")
    with pytest.raises(FrameError):  # serialize type 2 does not exist
        codec.decode_payload(struct.pack(">I", (2 << 24) | 2) + b"{}")


def test_fastjson_dialect_both_ways() -> None:
    text = b'{"brokerAddrs":{0:"10.0.0.1:10911", 1 :"10.0.0.2:10911"},"m":{"a:{0}":"x,{1:2}"},"l":[1,2]}'
    assert codec.loads(text) == {"brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
                                    "m": {"a:{0}": "x,{1:2}"}, "l": [1, 2]}
    standard = b'{"brokerDatas":[{"brokerAddrs":{"0":"a:1","12":"b:2"},"brokerName":"0"}],"x":{"0":"y"}}'
    assert codec.dialect(standard) == b'{"brokerDatas":[{"brokerAddrs":{0:"a:1",12:"b:2"},"brokerName":"0"}],"x":{"0":"y"}}'
    assert codec.loads(codec.dialect(standard)) == orjson.loads(standard)
    with pytest.raises(ValueError):
        codec.loads(b"{0:")


REG = {
    "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
        "topicConfigTable": {"A": {"topicName": "A", "readQueueNums": 4, "writeQueueNums": 8, "perm": 6},
                             "B": {"topicName": "B", "readQueueNums": 1, "writeQueueNums": 1, "perm": 4}},
    },
    "filterServerList": ["10.0.0.9:7000"],
}


@pytest.mark.parametrize("version", [400, 479])
def test_compressed_register_body(version: int) -> None:
    raw = compress_register_body(REG, version)
    doc = bodies.register_broker_body(raw, True, version)
    assert doc["filterServerList"] == ["10.0.0.9:7000"]
    wrapper = doc["topicConfigSerializeWrapper"]
    assert wrapper["dataVersion"] == REG["topicConfigSerializeWrapper"]["dataVersion"]
    assert wrapper["topicConfigTable"]["A"] == {"topicName": "A", "readQueueNums": 4, "writeQueueNums": 8,
                                                "perm": 6, "topicSysFlag": 0}
    assert set(wrapper["topicConfigTable"]) == {"A", "B"}


def test_compressed_register_body_errors() -> None:
    with pytest.raises(bodies.BodyError):
        bodies.register_broker_body(b"not zlib", True, 479)
    with pytest.raises(bodies.BodyError):  # the 5.x mapping section missing
        bodies.register_broker_body(compress_register_body(REG, 400), True, 479)
    with pytest.raises(bodies.BodyError):
        bodies.register_broker_body(zlib.compress(struct.pack(">i", 50) + b"{}"), True, 479)


def test_plain_register_body_accepts_the_dialect() -> None:
    body = b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},' \
           b'"topicConfigTable":{},"topicQueueMappingInfoMap":{"A":{"currIdMap":{0:0}}}}}'
    assert bodies.register_broker_body(body, False, 479)["filterServerList"] == []


def test_crc32_is_javas() -> None:
    data = b"some body"
    assert bodies.crc32(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert bodies.crc32(b"") == 0


@pytest.mark.parametrize("serialize", [codec.JSON, codec.ROCKETMQ])
@pytest.mark.parametrize("opaque", [0, 1, 123456, 2**31 - 1, -5])
def test_a_success_frame_from_the_template_is_the_encoded_answer(serialize: int, opaque: int) -> None:
    request = Command(code=105, language="CPP", version=63, opaque=opaque, flag=0,
                      ext_fields={"topic": "T"}, serialize_type=serialize)
    body = b'{"queueDatas":[]}'
    expected = codec.encode(codec.response_to(request, 0, body=body, version=479))
    assert codec.success_frame(opaque, serialize, body, 479) == expected


def test_a_compressed_body_is_inflated_no_further_than_the_frame_limit() -> None:
    part = struct.pack(">i", 8) + b'{"a":1} '
    huge = struct.pack(">i", bodies.MAX_INFLATED) + b" " * bodies.MAX_INFLATED
    with pytest.raises(bodies.BodyError, match="bad part length|inflates past"):
        bodies.register_broker_body(zlib.compress(part + struct.pack(">i", 1) + huge), True, 479)


def test_a_topic_count_over_the_limit_is_refused_before_the_topics_are_read() -> None:
    doc = {"topicConfigSerializeWrapper": {"dataVersion": {"counter": 1, "timestamp": 1},
                                           "topicConfigTable": {f"T{i}": REG["topicConfigSerializeWrapper"]
                                                                ["topicConfigTable"]["A"] for i in range(11)}}}
    for body, compressed in ((compress_register_body(doc, 479), True), (orjson.dumps(doc), False)):
        with pytest.raises(bodies.BodyError, match="11 topics; at most 10 topics per registration"):
            bodies.register_broker_body(body, compressed, 479, max_topics=10)


@pytest.mark.parametrize("field,value", [("code", "--5"), ("code", "\u00b2"), ("opaque", "9" * 30),
                                         ("opaque", 1 << 40), ("flag", 1.5)])
def test_header_integers_must_be_javas_int(field: str, value: object) -> None:
    doc = {"code": 105, "flag": 0, "language": "JAVA", "opaque": 1, "version": 479, field: value}
    header = orjson.dumps(doc)
    with pytest.raises(codec.FrameError, match=f"header field {field}"):
        codec.decode_payload(struct.pack(">I", len(header)) + header)


def test_a_header_over_the_limit_is_refused_before_parsing() -> None:
    payload = struct.pack(">I", codec.MAX_HEADER + 1) + b"{" * (codec.MAX_HEADER + 1)
    with pytest.raises(codec.FrameError, match="exceeds the 262144-byte limit"):
        codec.decode_payload(payload)


def test_bare_keys_are_read_in_documents_of_any_size() -> None:
    small = b"{" + b",".join(b'%d:"a"' % i for i in range(10)) + b"}"
    assert codec.loads(small)["9"] == "a"
    large = b"{" + b",".join(b'%d:"a"' % i for i in range(20_000)) + b"}"
    assert codec.loads(large)["19999"] == "a"  # a 5.x body with a static topic (issue: routes lost)


def compressed_lines(lines: list[bytes], version: int = 400) -> bytes:
    """A compressed RegisterBrokerBody with these TopicConfig lines as they are."""
    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b
    return zlib.compress(part(b'{"counter":1,"timestamp":1}') + struct.pack(">i", len(lines))
                         + b"".join(map(part, lines)) + part(b"[]"))


def compressed_table(lines: list[bytes]) -> dict:
    return bodies.register_broker_body(compressed_lines(lines), True, 400)["topicConfigSerializeWrapper"]["topicConfigTable"]


@pytest.mark.parametrize("odd", [b"Odd +8 08 6 SINGLE_TAG", b"Odd\xff 8 8 6 SINGLE_TAG", b"Odd 8 8 6 ",
                                 b"Odd 1234567890 8 6 SINGLE_TAG {}"],
                         ids=["signed and zero-led numbers", "not UTF-8", "empty filter type", "ten digits"])
def test_compressed_topic_lines_are_read_as_one_line_at_a_time_reads_them(odd: bytes) -> None:
    lines = [b"A 4 8 6 SINGLE_TAG", odd, b"B 1 1 4 SINGLE_TAG {\"k\":\"v w\"}"]
    assert compressed_table(lines) == {c["topicName"]: c for c in map(bodies._topic_config_line, lines)}


def test_a_line_break_in_a_compressed_topic_line_does_not_make_it_two() -> None:
    with pytest.raises(bodies.BodyError, match="bad TopicConfig line"):
        compressed_table([b"A 4 4 6 SINGLE_TAG\nB 4 4 6 SINGLE_TAG", b"bad"])


def test_a_later_compressed_line_of_the_same_topic_wins() -> None:
    table = compressed_table([b"A 4 4 6 SINGLE_TAG", b"A 16 16 6 SINGLE_TAG"])
    assert table == {"A": {"topicName": "A", "readQueueNums": 16, "writeQueueNums": 16, "perm": 6, "topicSysFlag": 0}}


@pytest.mark.parametrize("line", [b"A 4 4", b"A x 4 6 SINGLE_TAG"])
def test_a_bad_compressed_topic_line_is_refused(line: bytes) -> None:
    with pytest.raises(bodies.BodyError, match="bad TopicConfig line"):
        compressed_table([b"B 4 4 6 SINGLE_TAG", line])


def test_a_compressed_body_cut_in_its_topic_lines_ends_early() -> None:
    whole = zlib.decompress(compressed_lines([b"A 4 4 6 SINGLE_TAG", b"B 4 4 6 SINGLE_TAG"]))
    with pytest.raises(bodies.BodyError, match="ends early"):
        bodies.register_broker_body(zlib.compress(whole[:-12]), True, 400)
