"""Answers in one form, whichever side gave them: the reference model, or a worker's HTTP or
TCP front. The model test compares these forms.

A route's queueDatas and brokerDatas are compared in order: the registry lists them as
Java 5.3.3's HashMap and HashSet iterate (docs/design.md, "Route order"), which tools taking
the first group rely on. COMPARE_ORDER (RMQ_MODEL_ORDER=1) also counts the order of the
cluster info's maps, a group's addresses and the topic lists, which a Java client reads into
hash tables of its own (the registry lists topics by name).
"""

from __future__ import annotations

import os
from typing import Any

from service.remoting import codes
from tests.model.reference import KVConfig, RouteInfo

COMPARE_ORDER = os.environ.get("RMQ_MODEL_ORDER", "") == "1"


def _seq(items: list[Any], key: Any = None) -> list[Any]:
    return list(items) if COMPARE_ORDER else sorted(items, key=key)


def _group(doc: dict[str, Any]) -> dict[str, Any]:
    addrs = [(int(i), a) for i, a in (doc.get("brokerAddrs") or {}).items()]
    return {"cluster": doc["cluster"], "brokerName": doc["brokerName"], "brokerAddrs": _seq(addrs),
            "enableActingMaster": bool(doc.get("enableActingMaster")), "zoneName": doc.get("zoneName") or None}


def route(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if doc is None:
        return None
    # in order: the registry lists them as Java does
    return {"queueDatas": [{k: q[k] for k in ("brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}
                           for q in doc["queueDatas"]],
            "brokerDatas": [_group(b) for b in doc["brokerDatas"]],
            "filterServerTable": {a: list(f) for a, f in (doc.get("filterServerTable") or {}).items()
                                  if f is not None}}


def cluster(doc: dict[str, Any]) -> dict[str, Any]:
    return {"brokerAddrTable": _seq([(n, _group(b)) for n, b in doc["brokerAddrTable"].items()]),
            "clusterAddrTable": _seq([(c, _seq(list(names))) for c, names in doc["clusterAddrTable"].items()])}


def topics(doc: dict[str, Any] | None) -> list[str] | None:
    return None if doc is None else _seq(list(doc.get("topicList") or []))


def kv_table(pairs: list[tuple[str, str]] | dict[str, str] | None) -> list[tuple[str, str]] | None:
    if pairs is None:
        return None
    return _seq(list(pairs.items()) if isinstance(pairs, dict) else list(pairs))


def expected(model: RouteInfo, kv: KVConfig, routes: list[str], clusters: list[str],
             kv_keys: dict[str, list[str]]) -> dict[str, Any]:
    """Every read the model test makes, as the model answers it (read name -> answer)."""
    want: dict[str, Any] = {f"route {t}": route(model.route(t)) for t in routes}
    want["cluster"] = cluster(model.cluster_info())
    want["topics"] = topics({"topicList": model.all_topics()})
    names, addr = model.system_topics()
    want["topics/system"] = (topics({"topicList": names}), addr)
    want["topics/unit"] = topics({"topicList": model.unit_topics()})
    want["topics/unit-sub"] = topics({"topicList": model.unit_sub_topics()})
    want["topics/unit-sub-without-unit"] = topics({"topicList": model.unit_sub_without_unit_topics()})
    for c in clusters:
        want[f"cluster topics {c}"] = topics({"topicList": model.topics_of_cluster(c)})
    for ns, keys in kv_keys.items():
        want[f"kv {ns}"] = kv_table(kv.list(ns))
        for k in keys:
            want[f"kv {ns} {k}"] = kv.get(ns, k)
    return want


def observed(front: str, read: str, answer: tuple[Any, ...]) -> Any:
    """A front's answer to `read` in the model's form; ('unexpected', status, body) for an
    answer no NameServer gives to it."""
    status, doc = answer[0], answer[1]
    ok = status == (200 if front == "http" else codes.SUCCESS)
    absent = status == (404 if front == "http" else None)
    if read.startswith("route "):
        if ok:
            return route(doc)
        if status == (404 if front == "http" else codes.TOPIC_NOT_EXIST):
            return None
    elif read == "cluster" and ok:
        return cluster(doc)
    elif read == "topics/system" and ok:
        return topics(doc), doc.get("brokerAddr")
    elif read.startswith("topics") or read.startswith("cluster topics "):
        if ok:
            return topics(doc)
    elif read.startswith("kv "):
        whole = read.count(" ") == 1
        if status == (404 if front == "http" else codes.QUERY_NOT_FOUND) or absent:
            return None
        if ok and whole:
            return kv_table(doc["table"])
        if ok:
            return doc["value"] if front == "http" else answer[2].get("value")
    return ("unexpected", status, doc)


def differences(want: dict[str, Any], got: dict[tuple[str, str], tuple[Any, ...]], where: str) -> list[str]:
    """One line per read whose answer differs from the model's. The system list's
    brokerAddr is Java's first group's first address: compared only with order on, and
    otherwise held to be one the model has."""
    lines = []
    for (front, read), answer in got.items():
        have = observed(front, read, answer)
        expect = want[read]
        if read == "topics/system" and not COMPARE_ORDER and isinstance(have, tuple) and len(have) == 2:
            have = (have[0], have[1] is not None)
            expect = (expect[0], expect[1] is not None)
        if have != expect:
            lines.append(f"{where} {front} {read}: {_diff(have, expect)}")
    return lines


def _diff(have: Any, expect: Any) -> str:
    """What differs, shortly: a route's or map's differing fields, a list's extra and missing items."""
    if isinstance(have, dict) and isinstance(expect, dict):
        return "; ".join(f"{k}: {_diff(have.get(k), expect.get(k))}" for k in sorted(set(have) | set(expect))
                         if have.get(k) != expect.get(k))
    if isinstance(have, list) and isinstance(expect, list) and sorted(map(repr, have)) != sorted(map(repr, expect)):
        extra = [x for x in have if x not in expect]
        missing = [x for x in expect if x not in have]
        return f"registry has {_short(extra)} more, lacks {_short(missing)} ({len(have)} vs {len(expect)})"
    return f"registry {_short(have)} != model {_short(expect)}"


def _short(value: Any, most: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + f"... ({len(text)} chars)"
