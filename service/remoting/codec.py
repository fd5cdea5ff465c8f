"""RemotingCommand frames, as RocketMQ's RemotingCommand.encode/decode and NettyDecoder make them,
the JSON dialect their headers and bodies are written in, and a request's header fields
read and answered as a NameServer does (``need``, ``long_field``, ``bool_field``; ``ok``,
``fail``, ``RemotingError``).

A frame is::

    int32 length            bytes that follow (header-length field + header + body)
    int32 headerField       high byte: serialize type (0 JSON, 1 ROCKETMQ), low 3 bytes: header length
    header                  JSON or ROCKETMQ binary, see below
    body                    the rest

JSON header (fastjson): ``{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA",
"opaque":7,"serializeTypeCurrentRPC":"JSON","version":479}``; ``remark`` when set; every
extFields value is a string. Some clients end it with ``\\n`` (inside the header length).

ROCKETMQ binary header (RocketMQSerializable)::

    int16 code, int8 language, int16 version, int32 opaque, int32 flag,
    int32 remarkLength + UTF-8 remark,
    int32 extLength + ext entries (int16 keyLength + key, int32 valueLength + value)...

Flag bit 0 marks a response, bit 1 a oneway request (no answer). NettyDecoder refuses a
frame whose length, counting the 4-byte length field, exceeds 16 MiB. A header above
``MAX_HEADER`` is refused before it is parsed (RocketMQ's headers are a few hundred bytes;
the largest legitimate one carries a KV value of at most 64 KiB), and the integer fields
must fit Java's int, as fastjson requires when it reads them.

The JSON dialect RocketMQ speaks (alibaba fastjson), both ways (``loads``, ``dialect``):
fastjson writes a map whose keys are numbers without quotes: a BrokerData's
``HashMap<Long, String> brokerAddrs`` comes out as ``{"brokerAddrs":{0:"10.0.0.1:10911"}}``,
a TopicQueueMappingInfo's ``currIdMap`` as ``{0:0}`` (a 5.x broker's plain registration
carries one per static topic, after a topic table of up to megabytes). Standard parsers
refuse that, so ``loads`` quotes such bare keys before parsing (from a static topic's
``currIdMap`` on, when there is one; else when the fast parse fails), in documents of any
size: from where the parser stopped on, and in linear time with the
scanning done by C (bytes methods and one regex), so a 16 MiB document costs the decoding
thread a bounded time and never more than one pass per string that holds a lookalike.

RocketMQ's NameServer sends that form to clients older than 4.9.4 (request ``version``
< 401, unless the header ``acceptStandardJsonOnly`` is true) and always for ClusterInfo;
``dialect`` turns standard JSON into it, ``broker_addrs`` maps being the only place a route
or cluster document has numeric keys.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

from service.remoting import codes

JSON = 0
ROCKETMQ = 1
SERIALIZE_NAMES = {JSON: "JSON", ROCKETMQ: "ROCKETMQ"}

MAX_FRAME = 16 * 1024 * 1024  # com.rocketmq.remoting.frameMaxLength, length field included
MAX_LENGTH = MAX_FRAME - 4     # the largest value the length field may carry
MAX_HEADER = 256 * 1024        # a 64 KiB KV value, JSON-escaped, and the other fields

FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER",
             "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS")
LANGUAGE_CODES = {name: i for i, name in enumerate(LANGUAGES)}

_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag


class FrameError(ValueError):
    """The bytes are not a RemotingCommand: the connection cannot be trusted any further."""


@dataclass
class Command:
    code: int
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: int = JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


# ---------------------------------------------------------------------- the JSON dialect
# A key fastjson leaves unquoted (a number; identifiers too, as other writers do), after
# the "{" or "," that opens its place, up to its ":".
_BARE_KEY = re.compile(rb"[{,][ \t\r\n]*([A-Za-z0-9_$.+\-]+)[ \t\r\n]*:")


# A static topic's currIdMap: where a 5.x broker's plain registration (megabytes, the
# mappings last) has its bare keys. Quoted before the first parse, the body is parsed once,
# not once to find them and once more.
_CURR_ID_MAP = b'"currIdMap":{'


def loads(data: bytes | str) -> Any:
    """Standard JSON, or fastjson's output with unquoted map keys; ValueError otherwise."""
    if isinstance(data, bytes) and (at := data.find(_CURR_ID_MAP)) >= 0:
        # outside any string: inside one its quotes would be escaped
        data = quote_bare_keys(data, at + len(_CURR_ID_MAP) - 1)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        fixed = quote_bare_keys(raw, _place_before(raw, first.pos))
        if fixed is raw:
            raise ValueError(str(first)) from None
        try:
            return orjson.loads(fixed)
        except orjson.JSONDecodeError as e:
            raise ValueError(str(e)) from None


def _place_before(raw: bytes, pos: int) -> int:
    """The byte offset of the "{" or "," before character `pos` (where orjson stopped:
    outside any string, and everything before it standard JSON), or 0."""
    if not raw.isascii():
        try:
            pos = len(raw.decode()[:pos].encode())
        except UnicodeDecodeError:
            return 0
    return max(raw.rfind(b"{", 0, pos + 1), raw.rfind(b",", 0, pos + 1), 0)


def quote_bare_keys(data: bytes, start: int = 0) -> bytes:
    """`data` with object keys written without quotes quoted, from offset `start` (which
    must lie outside any string) on: ``{0:"a"}`` -> ``{"0":"a"}``. `data` itself when it
    has none."""
    # In `plain` every '"' delimits a string: escaped backslashes, then escaped quotes, are
    # two other bytes there, at the same offsets.
    plain = data.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in data else data
    out: list[bytes] = []
    copied, at = 0, start  # `at` always lies outside strings
    search = _BARE_KEY.search
    while (m := search(plain, at)) is not None:
        place = m.start()
        if plain.count(b'"', at, place) & 1:
            # inside a string: what looked like a key is text; go on after the string
            close = plain.find(b'"', place)
            if close < 0:
                break
            at = close + 1
            continue
        key, key_end = m.span(1)
        out += (data[copied:key], b'"', data[key:key_end], b'"')
        copied = key_end
        at = m.end()
    if not out:
        return data
    out.append(data[copied:])
    return b"".join(out)


_ADDRS = re.compile(rb'"(?:brokerAddrs|currIdMap)":\{[^{}]*\}')
_QUOTED_INT_KEY = re.compile(rb'"(-?\d+)":')


def dialect(standard: bytes) -> bytes:
    """fastjson's default form of a route or cluster document: the keys of brokerAddrs and
    of a static topic's currIdMap unquoted.

    Safe on our documents: addresses are host:port (validated), so a brokerAddrs object
    holds no braces and no quotes inside its strings; a currIdMap holds numbers.
    """
    return _ADDRS.sub(lambda m: _QUOTED_INT_KEY.sub(rb"\1:", m.group(0)), standard)


# ---------------------------------------------------------------------- decoding
def frame_length(prefix: bytes) -> int:
    """The length field of a frame; FrameError when it is impossible or above the limit."""
    (length,) = struct.unpack(">i", prefix)
    if length < 4:
        raise FrameError(f"bad frame length {length}")
    if length > MAX_LENGTH:
        raise FrameError(f"frame of {length + 4} bytes exceeds the {MAX_FRAME}-byte limit")
    return length


def decode_payload(payload: bytes) -> Command:
    """A frame without its length field: header-length field, header, body."""
    if len(payload) < 4:
        raise FrameError("frame shorter than its header-length field")
    (header_field,) = struct.unpack_from(">I", payload, 0)
    kind, header_len = header_field >> 24, header_field & 0xFFFFFF
    if header_len > len(payload) - 4:
        raise FrameError(f"bad header length {header_len} in a frame of {len(payload)} bytes")
    if header_len > MAX_HEADER:
        raise FrameError(f"header of {header_len} bytes exceeds the {MAX_HEADER}-byte limit")
    header = payload[4:4 + header_len]
    if kind == JSON:
        cmd = _decode_json_header(header)
    elif kind == ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise FrameError(f"unknown serialize type {kind}")
    cmd.body = payload[4 + header_len:]
    return cmd


def decode_frame(frame: bytes) -> Command:
    """A whole frame, length field included (tests and tools)."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its length field")
    length = frame_length(frame[:4])
    if len(frame) != 4 + length:
        raise FrameError(f"frame says {length} bytes follow, {len(frame) - 4} do")
    return decode_payload(frame[4:])


_INT_TEXT = re.compile(r"-?[0-9]{1,10}")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


def _int(value: object, name: str) -> int:
    """A header integer as fastjson reads it into a Java int: a number, or a string of ASCII
    digits, within int32; FrameError otherwise (the answer could not carry it back)."""
    if isinstance(value, str) and _INT_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"header field {name} is not an integer: {str(value)[:40]!r}")
    if not INT_MIN <= value <= INT_MAX:
        raise FrameError(f"header field {name} is outside Java's int: {str(value)[:40]}")
    return value


def _ext_value(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return orjson.dumps(value).decode()


def _decode_json_header(header: bytes) -> Command:
    try:
        doc = loads(header)  # trailing whitespace ('\n') is fine
    except ValueError as e:
        raise FrameError(f"malformed JSON header: {e}") from None
    if not isinstance(doc, dict) or "code" not in doc:
        raise FrameError("the JSON header is not a RemotingCommand")
    ext = doc.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    language = doc.get("language", "JAVA")
    if isinstance(language, int) and not isinstance(language, bool):
        language = LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER"
    remark = doc.get("remark")
    return Command(
        code=_int(doc["code"], "code"),
        language=str(language),
        version=_int(doc.get("version", 0), "version"),
        opaque=_int(doc.get("opaque", 0), "opaque"),
        flag=_int(doc.get("flag", 0), "flag"),
        remark=remark if isinstance(remark, str) else None,
        ext_fields={str(k): _ext_value(v) for k, v in ext.items() if v is not None},
        serialize_type=JSON,
    )


def _decode_binary_header(header: bytes) -> Command:
    try:
        code, lang, version, opaque, flag = _FIXED.unpack_from(header, 0)
        at = _FIXED.size
        (remark_len,) = struct.unpack_from(">i", header, at)
        at += 4
        remark = _read_str(header, at, remark_len)
        at += remark_len
        (ext_len,) = struct.unpack_from(">i", header, at)
        at += 4
        if ext_len < 0 or at + ext_len > len(header):
            raise FrameError(f"extFields length {ext_len} exceeds the header")
        end = at + ext_len
        ext: dict[str, str] = {}
        while at < end:
            (klen,) = struct.unpack_from(">h", header, at)
            at += 2
            key = _read_str(header, at, klen, end)
            at += klen
            (vlen,) = struct.unpack_from(">i", header, at)
            at += 4
            value = _read_str(header, at, vlen, end)
            at += vlen
            if key is not None and value is not None:
                ext[key] = value
    except struct.error as e:
        raise FrameError(f"truncated ROCKETMQ header: {e}") from None
    return Command(
        code=code,
        language=LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER",
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        serialize_type=ROCKETMQ,
    )


def _read_str(buf: bytes, at: int, length: int, end: int | None = None) -> str | None:
    limit = len(buf) if end is None else end
    if length < 0 or at + length > limit:
        raise FrameError(f"string of {length} bytes runs past the header")
    if length == 0:
        return None  # RocketMQSerializable.readStr: an empty string reads as null
    try:
        return buf[at:at + length].decode("utf-8")
    except UnicodeDecodeError as e:
        raise FrameError(f"header string is not UTF-8: {e}") from None


# ---------------------------------------------------------------------- encoding
def encode_header(cmd: Command) -> bytes:
    if cmd.serialize_type == ROCKETMQ:
        return _encode_binary_header(cmd)
    return _encode_json_header(cmd)


def _encode_json_header(cmd: Command) -> bytes:
    # fastjson's field order (alphabetical), nulls and empty extFields left out
    doc: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        doc["extFields"] = cmd.ext_fields
    doc["flag"] = cmd.flag
    doc["language"] = cmd.language
    doc["opaque"] = cmd.opaque
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    doc["serializeTypeCurrentRPC"] = "JSON"
    doc["version"] = cmd.version
    return orjson.dumps(doc)


def _encode_binary_header(cmd: Command) -> bytes:
    parts = [_FIXED.pack(_short(cmd.code), LANGUAGE_CODES.get(cmd.language, LANGUAGE_CODES["OTHER"]),
                         _short(cmd.version), _i32(cmd.opaque), _i32(cmd.flag))]
    remark = cmd.remark.encode() if cmd.remark else b""
    parts += [struct.pack(">i", len(remark)), remark]
    ext = bytearray()
    for k, v in cmd.ext_fields.items():
        kb, vb = k.encode(), v.encode()
        ext += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
    parts += [struct.pack(">i", len(ext)), bytes(ext)]
    return b"".join(parts)


def _short(v: int) -> int:
    return ((v + 0x8000) & 0xFFFF) - 0x8000  # Java's (short) cast


def _i32(v: int) -> int:
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def encode(cmd: Command) -> bytes:
    """The whole frame, length field included, as RemotingCommand.encode writes it."""
    header = encode_header(cmd)
    if len(header) > 0xFFFFFF:
        raise ValueError("header longer than 16 MiB")
    head = struct.pack(">iI", 4 + len(header) + len(cmd.body), (cmd.serialize_type << 24) | len(header))
    return head + header + cmd.body


_SUCCESS_JSON = (b'{"code":0,"flag":1,"language":"JAVA","opaque":', b',"serializeTypeCurrentRPC":"JSON","version":%d}')
_NO_REMARK_NO_EXT = b"\0\0\0\0\0\0\0\0"


def success_frame(opaque: int, serialize_type: int, body: bytes, version: int) -> bytes:
    """``encode(response_to(request, 0, body=body, version=version))`` for a request with
    this opaque and serialization, built from a template: the hot path of a cached route
    answer, where building and encoding a Command cost more than the rest of the answer."""
    if serialize_type == ROCKETMQ:
        header = _FIXED.pack(0, LANGUAGE_CODES["JAVA"], _short(version), _i32(opaque), FLAG_RESPONSE) + _NO_REMARK_NO_EXT
    else:
        header = _SUCCESS_JSON[0] + str(opaque).encode() + _SUCCESS_JSON[1] % version
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body


def response_to(request: Command, code: int, remark: str | None = None,
                ext_fields: dict[str, str] | None = None, body: bytes = b"", version: int = 0) -> Command:
    """An answer to ``request``: its opaque, its serialization, the response flag."""
    return Command(code=code, language="JAVA", version=version, opaque=request.opaque, flag=FLAG_RESPONSE,
                   remark=remark, ext_fields=ext_fields or {}, body=body,
                   serialize_type=request.serialize_type)


# ---------------------------------------------------------------------- answering a request
class RemotingError(Exception):
    """A request refused: answered with this code and remark; the connection goes on."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def ok(request: Command, ext: dict[str, str] | None = None, body: bytes = b"") -> Command:
    return response_to(request, codes.SUCCESS, None, ext, body, version=codes.V5_3_3)


def fail(request: Command, code: int, remark: str) -> Command:
    return response_to(request, code, remark, version=codes.V5_3_3)


# Headers arrive as RocketMQ's extFields (all strings). A required field that is absent is
# answered as RocketMQ does (SYSTEM_ERROR, "the custom field <x> is null").
def need(cmd: Command, name: str) -> str:
    value = cmd.ext_fields.get(name)
    if value is None:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


def long_field(cmd: Command, name: str, required: bool = True) -> int | None:
    raw = need(cmd, name) if required else cmd.ext_fields.get(name)
    if raw is None or (raw == "" and not required):
        return None
    try:
        return int(raw)
    except ValueError:
        raise RemotingError(codes.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {raw!r}") from None


def bool_field(cmd: Command, name: str) -> bool:
    return cmd.ext_fields.get(name, "").strip().lower() == "true"  # Boolean.parseBoolean
