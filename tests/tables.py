"""Reading the route tables straight from Redis: the invariant checker and snapshots.

Names in keys are encoded (service/keys.py): the checker decodes the ones it reads from
key names and builds every key through Keys, so it checks the encoding too."""

from __future__ import annotations

from typing import Any

import redis

from service.keys import Keys, decode_name


QUEUE_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")  # a fingerprint's order


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _keys(r: redis.Redis, pattern: str) -> list[str]:
    """The keys matching `pattern`, each once: SCAN may return a key twice while Redis
    rehashes the keyspace (it shrinks it after many deletions, a removal's or a collection's)."""
    return sorted({_s(raw) for raw in r.scan_iter(match=pattern, count=1000)})


def snapshot(r: redis.Redis, keys: Keys = Keys()) -> dict[str, Any]:
    """Every table key and its content (live rows without their timestamps, which move);
    the key schema stamp and the data set's name are no tables."""
    out: dict[str, Any] = {}
    for raw in _keys(r, f"{keys.tag}:*"):
        key = _s(raw)
        if key in (keys.schema, keys.dataset):
            continue
        kind = _s(r.type(key))
        if kind == "set":
            out[key] = sorted(_s(m) for m in r.smembers(key))
        elif kind == "hash":
            out[key] = {_s(k): _s(v) for k, v in r.hgetall(key).items() if _s(k) != "lastUpdateTimestamp"}
        elif kind == "list":
            out[key] = [_s(v) for v in r.lrange(key, 0, -1)]
        elif kind == "zset":
            out[key] = sorted(_s(m) for m in r.zrange(key, 0, -1))
        else:
            out[key] = _s(r.get(key))
    return out


def violations(r: redis.Redis, keys: Keys = Keys()) -> list[str]:
    """What is wrong with the tables; [] when they are consistent.

    - every broker name in a cluster set has a BrokerData naming that cluster, with >= 1 address
    - every BrokerData is in its cluster's set, and every listed cluster has brokers
    - every QueueData names an existing broker name and is indexed by its topic and broker
    - every topic has at least one QueueData
    - every address of a BrokerData has its identity row (for expiry) and a deadline
    - every live row and every filter list belongs to an address of some BrokerData
    - the groups-without-master set lists exactly the BrokerData without a brokerId 0
    - every static topic's queue mapping is indexed by its group, and only those
    - a BrokerData without a cluster is the bare mark of a group leaving, and every group
      marked leaving is in the leaving set
    """
    bad: list[str] = []
    t = keys.tag
    smembers = lambda k: {_s(m) for m in r.smembers(k)}  # noqa: E731
    clusters = smembers(keys.clusters)
    for c in clusters:
        if not r.exists(keys.cluster(c)):
            bad.append(f"cluster {c} listed with no brokers")
    addr_owner: dict[str, str] = {}
    for raw in _keys(r, f"{t}:cluster:*"):
        c = decode_name(_s(raw)[len(f"{t}:cluster:"):])
        if c not in clusters:
            bad.append(f"cluster set {c} not in the cluster list")
        for name in smembers(raw):
            row = r.hget(keys.broker(name), "cluster")
            if row is None:
                bad.append(f"broker {name} in cluster {c} has no BrokerData")
            elif _s(row) != c:
                bad.append(f"broker {name} in cluster set {c} but its BrokerData says {_s(row)}")
    leaving = smembers(keys.leaving)
    for raw in _keys(r, f"{t}:broker:*"):
        name = decode_name(_s(raw)[len(f"{t}:broker:"):])
        if r.hexists(raw, "leaving") and name not in leaving:
            bad.append(f"broker {name} marked leaving but not in the leaving set")
        if r.hget(raw, "cluster") is None:
            if not r.hexists(raw, "leaving") or r.hlen(raw) != 1:
                bad.append(f"BrokerData {name} without a cluster")
            continue  # the mark of a group whose last member left: its QueueData are being collected
        c = _s(r.hget(raw, "cluster"))
        if name not in smembers(keys.cluster(c)):
            bad.append(f"BrokerData {name} missing from its cluster set {c}")
        addrs = {_s(k): _s(v) for k, v in r.hgetall(keys.addrs(name)).items()}
        if not addrs:
            bad.append(f"broker {name} has no addresses")
        if len(set(addrs.values())) != len(addrs):
            bad.append(f"broker {name} has one address under two ids: {addrs}")
        for bid, addr in addrs.items():
            if addr in addr_owner:
                bad.append(f"address {addr} in two groups: {addr_owner[addr]} and {name}")
            addr_owner[addr] = name
            member = {_s(k): _s(v) for k, v in r.hgetall(keys.member(addr)).items()}
            if member.get("brokerName") != name or member.get("brokerId") != bid:
                bad.append(f"address {addr} ({name}/{bid}) has identity row {member}")
            if r.zscore(keys.expiry, addr) is None:
                bad.append(f"address {addr} ({name}) has no deadline")
    masterless = {decode_name(_s(raw)[len(f"{t}:addrs:"):]) for raw in _keys(r, f"{t}:addrs:*")
                  if not r.hexists(raw, "0")}
    if masterless != smembers(keys.masterless):
        bad.append(f"groups without master {sorted(masterless)}, listed as {sorted(smembers(keys.masterless))}")
    for raw in _keys(r, f"{t}:addrs:*"):
        name = decode_name(_s(raw)[len(f"{t}:addrs:"):])
        if not r.exists(keys.broker(name)):
            bad.append(f"addresses of {name} without BrokerData")
    topics = smembers(keys.topics)
    for raw in _keys(r, f"{t}:queue:*"):
        topic, name = map(decode_name, _s(raw)[len(f"{t}:queue:"):].split(":", 1))
        if not r.exists(keys.broker(name)):
            bad.append(f"QueueData {topic}/{name} names a broker that is gone")
        fp = r.hget(keys.broker_topics(name), topic)
        if topic not in topics or name not in smembers(keys.topic(topic)) or fp is None:
            bad.append(f"QueueData {topic}/{name} not indexed")
        elif _s(fp) != ",".join(_s(v or b"") for v in r.hmget(keys.queue(topic, name), QUEUE_FIELDS)):
            bad.append(f"QueueData {topic}/{name} differs from its fingerprint {_s(fp)}")
    for topic in topics:
        names = smembers(keys.topic(topic))
        if not names:
            bad.append(f"topic {topic} without QueueData")
        for name in names:
            if not r.exists(keys.queue(topic, name)):
                bad.append(f"topic {topic} lists {name} without its QueueData")
    for raw in _keys(r, f"{t}:topic:*"):
        if decode_name(_s(raw)[len(f"{t}:topic:"):]) not in topics:
            bad.append(f"topic set {_s(raw)} not in the topic list")
    indexed = {_s(m) for m in r.zrange(keys.topic_index, 0, -1)}
    if indexed != topics:
        bad.append(f"topic index and topic list differ: {sorted(indexed ^ topics)[:5]}")
    for raw in _keys(r, f"{t}:broker-topics:*"):
        name = decode_name(_s(raw)[len(f"{t}:broker-topics:"):])
        for topic in (_s(t) for t in r.hkeys(raw)):
            if not r.exists(keys.queue(topic, name)):
                bad.append(f"broker {name} indexes topic {topic} without QueueData")
    for kind in ("live", "member", "filter"):
        for raw in _keys(r, f"{t}:{kind}:*"):
            addr = _s(raw)[len(f"{t}:{kind}:"):]
            if addr not in addr_owner:
                bad.append(f"{kind} row of {addr}, an address in no BrokerData")
    for digest, addr in r.hgetall(keys.body_digests).items():
        if _s(digest) not in _s(r.hget(keys.member(_s(addr)), "bodyDigest") or b"").split():
            bad.append(f"body digest {_s(digest)} points at {_s(addr)}, whose bodies it is not among")
    for raw in r.zrange(keys.expiry, 0, -1):
        if _s(raw) not in addr_owner:
            bad.append(f"deadline for {_s(raw)}, an address in no BrokerData")
    for raw in _keys(r, f"{t}:mapping:*"):
        topic = decode_name(_s(raw)[len(f"{t}:mapping:"):])
        for bname in (_s(b) for b in r.hkeys(raw)):
            if not r.sismember(keys.mapped(bname), topic):
                bad.append(f"queue mapping of {topic} by {bname} not indexed in its group's mapped set")
    for raw in _keys(r, f"{t}:mapped:*"):
        bname = decode_name(_s(raw)[len(f"{t}:mapped:"):])
        for topic in smembers(raw):
            if not r.hexists(keys.mapping(topic), bname):
                bad.append(f"group {bname} indexes a queue mapping of {topic} that is not there")
    return bad
