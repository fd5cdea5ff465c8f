"""Property-based input hardening (hypothesis) against a real worker process.

Generated registration, heartbeat, query-data-version, unregister and KV requests, each
either valid or a valid one with exactly one mutation that makes it invalid; registrations
also with one topic config the registry cannot store, which is skipped while the rest
registers (a valid request). Names draw on any character, so the key encoding and the
checker's copy of it are exercised too. Properties:

- no 5xx, ever;
- an invalid request is answered 400 (413 when over the body limit) and the table is,
  key for key (timestamps and scores included), what it was before it;
- a valid request is accepted (heartbeat: 200, or 404 for a broker not registered) and
  the tables are consistent after it (invariant checker).
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
import requests
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from service.keys import ORDER_TOPIC_CONFIG
from tests.hardening.fuzz import Target
from tests.hardening.harness import atomic_violations

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))

NAME_CHARS = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
# names may hold any character; these exercise the key encoding (separator, braces, the
# escape character, glob characters, non-ASCII, NUL)
ODD_CHARS = NAME_CHARS + " :/\\.{}~*?é中\x00"
# names the seed uses, so generated requests also hit existing groups and addresses
KNOWN_NAMES = ["broker-a", "broker-b", "c1", "c2", "T1", "T2", "NS", ORDER_TOPIC_CONFIG]
KNOWN_ADDRS = ["10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911"]

names = st.one_of(st.sampled_from(KNOWN_NAMES), st.text(NAME_CHARS, min_size=1, max_size=24),
                  st.text(ODD_CHARS, min_size=1, max_size=24))
topics = st.one_of(st.sampled_from(["T1", "T2", "T3", "T4"]), st.text(NAME_CHARS, min_size=1, max_size=255),
                   st.text(ODD_CHARS, min_size=1, max_size=40))
hosts = st.one_of(
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,2}", fullmatch=True),
)
addrs = st.one_of(st.sampled_from(KNOWN_ADDRS),
                  st.builds(lambda h, p: f"{h}:{p}", hosts, st.integers(1, 65535)))
longs = st.integers(0, 2**63 - 1)
data_versions = st.fixed_dictionaries({"timestamp": longs, "counter": longs})


@st.composite
def topic_configs(draw: Any, topic: str) -> dict[str, Any]:
    tc: dict[str, Any] = {"readQueueNums": draw(st.integers(0, 1024)), "writeQueueNums": draw(st.integers(0, 1024)),
                          "perm": draw(st.integers(0, 7))}
    if draw(st.booleans()):
        tc["topicName"] = topic
    if draw(st.booleans()):
        tc["topicSysFlag"] = draw(st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        tc["order"] = draw(st.booleans())
    if draw(st.booleans()):
        tc["topicFilterType"] = "SINGLE_TAG"  # unknown fields are ignored
    return tc


@st.composite
def registrations(draw: Any) -> dict[str, Any]:
    table_topics = draw(st.lists(topics, max_size=6, unique=True))
    body: dict[str, Any] = {
        "clusterName": draw(names), "brokerAddr": draw(addrs), "brokerName": draw(names),
        "brokerId": draw(st.one_of(st.integers(0, 2), st.integers(0, 2**31 - 1))),
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {t: draw(topic_configs(t)) for t in table_topics},
            "dataVersion": draw(data_versions),
        },
    }
    if draw(st.booleans()):
        body["haServerAddr"] = draw(st.one_of(addrs, st.just(""), st.none()))
    if draw(st.booleans()):
        body["heartbeatTimeoutMillis"] = draw(st.integers(100, 86_400_000))
    if draw(st.booleans()):
        body["filterServerList"] = draw(st.lists(addrs, max_size=3))
    return body


@st.composite
def identities(draw: Any, with_version: bool | None = None) -> dict[str, Any]:
    body = {"clusterName": draw(names), "brokerAddr": draw(addrs), "brokerName": draw(names),
            "brokerId": draw(st.integers(0, 3))}
    if with_version or (with_version is None and draw(st.booleans())):
        body["dataVersion"] = draw(data_versions)
    return body


# ---------------------------------------------------------------------- mutations
# only the empty name and names over the limit are bad now (every name is 255 at most)
BAD_NAMES = st.one_of(st.just(""), st.text(ODD_CHARS, min_size=256, max_size=300))
BAD_TOPICS = BAD_NAMES
# malformed addresses; ports out of 1..65535 are refused for every address (see
# test_ports_of_every_address_are_range_checked)
MALFORMED_ADDRS = st.one_of(st.sampled_from(["", "nohost", "host:", ":1", "h:abc", "h:1:2", "h :1", "[::1]", "a/b:1",
                                             "h:-1", "h:+1", "h:123456"]),
                            st.builds(lambda n: f"{'a' * 252}:{n}", st.integers(1000, 9999)))
BAD_ADDRS = st.one_of(MALFORMED_ADDRS, st.sampled_from(["h:0", "h:65536", "h:99999"]))
WRONG_TYPES = st.sampled_from(["1", 1.5, True, None, [], {}, [1]])


def bad_int(lo: int, hi: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1), WRONG_TYPES)


Mutation = Callable[[dict[str, Any]], None]


def set_path(path: tuple[Any, ...], value: Any) -> Mutation:
    def apply(body: dict[str, Any]) -> None:
        node = body
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
    return apply


def drop_path(path: tuple[Any, ...]) -> Mutation:
    def apply(body: dict[str, Any]) -> None:
        node = body
        for p in path[:-1]:
            node = node[p]
        node.pop(path[-1], None)
    return apply


IDENTITY_FIELDS = {"clusterName": BAD_NAMES, "brokerName": BAD_NAMES, "brokerAddr": BAD_ADDRS,
                   "brokerId": bad_int(0, 2**31 - 1)}


@st.composite
def identity_mutation(draw: Any, body: dict[str, Any]) -> Mutation:
    field = draw(st.sampled_from(sorted(IDENTITY_FIELDS)))
    if draw(st.integers(0, 4)) == 0:
        return drop_path((field,))
    # "1" is a fine name: the wrong types of a string field are the non-strings
    return set_path((field,), draw(st.one_of(IDENTITY_FIELDS[field], WRONG_TYPES.filter(lambda v: not isinstance(v, str)))))


@st.composite
def version_mutation(draw: Any, path: tuple[str, ...], optional: bool = False) -> Mutation:
    kind = draw(st.sampled_from((["drop"] if not optional else []) + ["timestamp", "counter", "type", "drop-field"]))
    if kind == "drop":
        return drop_path(path)
    if kind == "type":
        return set_path(path, draw(st.sampled_from(["v1", 1, [], True] + ([] if optional else [None]))))
    if kind == "drop-field":
        return drop_path(path + (draw(st.sampled_from(["timestamp", "counter"])),))
    return set_path(path + (kind,), draw(bad_int(0, 2**63 - 1)))


@st.composite
def registration_mutation(draw: Any, body: dict[str, Any]) -> Mutation:
    """A mutation that makes the document itself invalid: refused whole."""
    kind = draw(st.sampled_from(["identity", "version", "wrapper", "ha", "timeout", "filters"]))
    w = ("topicConfigSerializeWrapper",)
    if kind == "identity":
        return draw(identity_mutation(body))
    if kind == "version":
        return draw(version_mutation(w + ("dataVersion",)))
    if kind == "wrapper":
        return draw(st.sampled_from([drop_path(w), set_path(w, "x"), set_path(w, []),
                                     set_path(w + ("topicConfigTable",), []), set_path(w + ("topicConfigTable",), "t")]))
    if kind == "ha":
        return set_path(("haServerAddr",), draw(st.one_of(MALFORMED_ADDRS.filter(bool), st.sampled_from([1, [], True]))))
    if kind == "timeout":
        return set_path(("heartbeatTimeoutMillis",), draw(bad_int(100, 86_400_000).filter(lambda v: v is not None)))
    return set_path(("filterServerList",), draw(st.one_of(
        st.builds(lambda ok, bad: ok + [bad], st.lists(addrs, max_size=2), MALFORMED_ADDRS),
        st.sampled_from(["10.0.0.1:1", {}, 1]),
        st.just(["10.0.0.1:1"] * 1025))))


@st.composite
def topic_mutation(draw: Any, body: dict[str, Any]) -> Mutation:
    """A mutation that makes one topic config unstorable: that topic is skipped, the
    registration goes through."""
    w = ("topicConfigSerializeWrapper",)
    table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
    choices = ["bad-topic-key"] + (["topic-field"] * 3 + ["topic-name", "topic-drop", "topic-type"] if table else [])
    kind = draw(st.sampled_from(choices))
    if kind == "bad-topic-key":
        return set_path(w + ("topicConfigTable", draw(BAD_TOPICS)), {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
    topic = draw(st.sampled_from(sorted(table)))
    tp = w + ("topicConfigTable", topic)
    if kind == "topic-name":
        return set_path(tp + ("topicName",), draw(st.one_of(
            topics.filter(lambda t: t != topic), BAD_TOPICS, st.sampled_from([1, [], True]))))
    if kind == "topic-drop":
        return drop_path(tp + (draw(st.sampled_from(["readQueueNums", "writeQueueNums", "perm"])),))
    if kind == "topic-type":
        return set_path(tp, draw(st.sampled_from(["x", 1, [], None])))
    field, lo, hi = draw(st.sampled_from([("readQueueNums", 0, 1024), ("writeQueueNums", 0, 1024), ("perm", 0, 7),
                                          ("topicSysFlag", 0, 2**31 - 1)]))
    bad = draw(bad_int(lo, hi))
    if field == "topicSysFlag" and bad is None:
        bad = -1
    return set_path(tp + (field,), bad)


# ---------------------------------------------------------------------- the check
def check(target: Target, method: str, path: str, body: Any, valid: bool, ok: tuple[int, ...] = (200,),
          raw: bytes | None = None, reject: tuple[int, ...] = (400, 413)) -> requests.Response:
    url = target.url + path
    data = raw if raw is not None else json.dumps(body).encode()
    resp = target.session.request(method, url, data=data, headers={"Content-Type": "application/json"}, timeout=10)
    where = f"{method} {path} {data[:400]!r} -> {resp.status_code} {resp.text[:300]}"
    if 200 <= resp.status_code < 300 and method != "GET":
        bad = atomic_violations(target.r, target.keys)
        target.reseed()  # every example starts from the seed, also after a failing one
        assert bad == [], f"{bad}: {where}"
        changed: list[str] = []
    else:
        after = target.snapshot()
        changed = target.diff(after)
        if changed:
            target.reseed()
    assert resp.status_code < 500, where
    if valid:
        assert resp.status_code in ok, where
    else:
        assert resp.status_code in reject, where
        assert set(resp.json()) == {"error", "message"}, where
    assert not changed, f"changed {changed}: {where}"
    return resp


@settings(max_examples=500, **SETTINGS)
@given(data=st.data())
def test_registrations_valid_are_accepted_and_invalid_change_nothing(target: Target, data: Any) -> None:
    body = data.draw(registrations())
    kind = data.draw(st.sampled_from(["valid", "invalid", "skipped-topic"]))
    if kind == "invalid":
        data.draw(registration_mutation(body))(body)
    elif kind == "skipped-topic":
        data.draw(topic_mutation(body))(body)
    check(target, "POST", "/v1/brokers/register", body, valid=kind != "invalid")


@settings(max_examples=400, **SETTINGS)
@given(data=st.data(), endpoint=st.sampled_from(["heartbeat", "query-data-version", "unregister"]))
def test_liveness_requests_valid_are_accepted_and_invalid_change_nothing(target: Target, data: Any, endpoint: str) -> None:
    body = data.draw(identities(with_version=endpoint != "unregister" or None))
    ok = (200, 404) if endpoint == "heartbeat" else (200,)
    if data.draw(st.booleans()):
        mutations = [identity_mutation(body)]
        if endpoint != "unregister":
            # a heartbeat's dataVersion is optional: dropping it would leave the request valid
            mutations.append(version_mutation(("dataVersion",), optional=endpoint == "heartbeat"))
        data.draw(st.one_of(*mutations))(body)
        check(target, "POST", f"/v1/brokers/{endpoint}", body, valid=False)
    else:
        check(target, "POST", f"/v1/brokers/{endpoint}", body, valid=True, ok=ok)


kv_values = st.text(max_size=200)


@settings(max_examples=300, **SETTINGS)
@given(ns=st.one_of(names, BAD_NAMES), key=st.one_of(names, BAD_NAMES), value=st.one_of(kv_values, WRONG_TYPES),
       method=st.sampled_from(["PUT", "PUT", "DELETE", "GET"]), extra=st.booleans())
def test_kv_requests_valid_are_accepted_and_invalid_change_nothing(target: Target, ns: str, key: str, value: Any,
                                                                   method: str, extra: bool) -> None:
    from urllib.parse import quote

    # "." and ".." in a URL path are dot segments an HTTP client removes before sending
    assume(ns not in (".", "..") and key not in (".", ".."))
    good_names = all(0 < len(n) <= 255 for n in (ns, key))
    path = f"/v1/kv/{quote(ns, safe='')}/{quote(key, safe='')}"
    body: dict[str, Any] = {"value": value}
    if extra:
        body["comment"] = "ignored"
    if not ns or not key:
        # an empty segment routes elsewhere (or nowhere): any 4xx, nothing changed
        resp = target.session.request(method, target.url + path, json=body, timeout=10)
        assert 400 <= resp.status_code < 500, resp.text
        assert target.snapshot() == target.expected
        return
    # a bad name is a 400 (an over-long one), or no route at all (404/405) where an empty
    # segment never reaches the handler; still rejected, still nothing changed
    reject = (400, 404, 405)
    if method == "PUT":
        check(target, "PUT", path, body, valid=good_names and isinstance(value, str), reject=reject)
    elif method == "DELETE":
        check(target, "DELETE", path, None, valid=good_names, raw=b"", reject=reject)
    else:
        check(target, "GET", path, None, valid=good_names, ok=(200, 404), raw=b"", reject=reject)


deep = st.integers(1, 5000).map(lambda d: b"[" * d + b"]" * d)
JSON_DEPTH_LIMIT = 1024  # orjson's: deeper documents are malformed JSON (400)


def deep_unknown_field(depth: int) -> bytes:
    inner = b"[" * depth + b"]" * depth
    return b'{"clusterName":"c","brokerAddr":"h:1","brokerName":"b","brokerId":0,"x":' + inner + b"}"


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"null", b"[]", b"1", b'"x"', b"{", b'{"clusterName":', b"\xff\xfe", b'{"a":NaN}',
                     b'{"brokerId": 1e400}']),
    deep,
    st.integers(JSON_DEPTH_LIMIT + 10, 5000).map(deep_unknown_field),
    st.integers(65_537, 200_000).map(lambda n: b'{"clusterName":"' + b"a" * n + b'"}'),
)


@settings(max_examples=300, **SETTINGS)
@given(body=raw_bodies, endpoint=st.sampled_from(["register", "heartbeat", "query-data-version", "unregister", "kv"]))
def test_malformed_deep_and_oversized_bodies_are_rejected_and_change_nothing(target: Target, body: bytes, endpoint: str) -> None:
    path = "/v1/kv/NS/k1" if endpoint == "kv" else f"/v1/brokers/{endpoint}"
    method = "PUT" if endpoint == "kv" else "POST"
    check(target, method, path, None, valid=False, raw=body)


@settings(max_examples=30, **SETTINGS)
@given(depth=st.integers(1, JSON_DEPTH_LIMIT - 10), endpoint=st.sampled_from(["heartbeat", "unregister"]))
def test_a_deep_value_under_an_unknown_field_is_ignored(target: Target, depth: int, endpoint: str) -> None:
    check(target, "POST", f"/v1/brokers/{endpoint}", None, valid=True, ok=(200, 404), raw=deep_unknown_field(depth))


@pytest.mark.parametrize("name", ["", "a" * 256, "%C3%A9" * 256])
def test_bad_names_in_paths_change_nothing(target: Target, name: str) -> None:
    requests_ = [("DELETE", f"/v1/topics/{name}"), ("GET", f"/v1/routes/{name}"),
                 ("POST", f"/v1/brokers/{name}/wipe-write-perm"), ("DELETE", f"/v1/topics/T1?clusterName={name}"),
                 ("GET", f"/v1/clusters/{name}/topics"), ("GET", f"/v1/kv/{name}")]
    for method, path in requests_:
        resp = target.session.request(method, target.url + path, timeout=10)
        assert 400 <= resp.status_code < 500, f"{method} {path} -> {resp.status_code} {resp.text}"
        assert target.snapshot() == target.expected, f"{method} {path}"


@pytest.mark.parametrize("field", ["haServerAddr", "filterServerList"])
@pytest.mark.parametrize("addr", ["10.0.0.5:0", "10.0.0.5:65536", "10.0.0.5:99999"])
def test_ports_of_every_address_are_range_checked(target: Target, field: str, addr: str) -> None:
    """docs/api.md: broker addresses are host:port. brokerAddr's port must be 1..65535; the same
    must hold for haServerAddr and filter servers (service/models.py checks brokerAddr only)."""
    from tests.builders import registration

    body = registration(addr="10.0.0.5:10911", name="ports", cluster="ports", topics=["PortTopic"])
    body[field] = addr if field == "haServerAddr" else [addr]
    check(target, "POST", "/v1/brokers/register", body, valid=False)
