"""Answer bodies of the NameServer's read codes, as RocketMQ's Java classes encode them
(the brokers' bodies, both ways, are broker_handlers.py's)."""

from __future__ import annotations

from typing import Any

import orjson

from service.remoting import codec


def topic_list(doc: dict[str, Any]) -> bytes:
    """TopicList: {"brokerAddr":..., "topicList":[...]}, brokerAddr only when set."""
    out: dict[str, Any] = {}
    if doc.get("brokerAddr"):
        out["brokerAddr"] = doc["brokerAddr"]
    out["topicList"] = doc["topicList"]
    return orjson.dumps(out)


def _broker_data(d: dict[str, Any]) -> dict[str, Any]:
    # BrokerData's fields in fastjson's order; a null zoneName is left out
    out = {"brokerAddrs": d["brokerAddrs"], "brokerName": d["brokerName"], "cluster": d["cluster"],
           "enableActingMaster": bool(d.get("enableActingMaster", False))}
    if d.get("zoneName") is not None:
        out["zoneName"] = d["zoneName"]
    return out


def route(data: dict[str, Any], standard: bool) -> bytes:
    """TopicRouteData: standard JSON (sorted keys) or fastjson's default dialect."""
    doc: dict[str, Any] = {
        "brokerDatas": [_broker_data(b) for b in data["brokerDatas"]],
        "filterServerTable": dict(sorted((data.get("filterServerTable") or {}).items())),
    }
    if data.get("orderTopicConf") is not None:
        doc["orderTopicConf"] = data["orderTopicConf"]
    doc["queueDatas"] = [
        {"brokerName": q["brokerName"], "perm": q["perm"], "readQueueNums": q["readQueueNums"],
         "topicSysFlag": q["topicSysFlag"], "writeQueueNums": q["writeQueueNums"]}
        for q in data["queueDatas"]
    ]
    if data.get("topicQueueMappingByBroker"):  # a static topic's (null otherwise: left out)
        doc["topicQueueMappingByBroker"] = data["topicQueueMappingByBroker"]
    encoded = orjson.dumps(doc)  # fields already in order; brokerAddrs sorted by id
    return encoded if standard else codec.dialect(encoded)


def member_group(cluster: str, name: str, addrs: dict[str, str]) -> bytes:
    """GetBrokerMemberGroupResponseBody, in fastjson's default dialect (numeric map keys bare)."""
    ordered = {k: addrs[k] for k in sorted(addrs, key=int)}
    doc = {"brokerMemberGroup": {"brokerAddrs": ordered, "brokerName": name, "cluster": cluster}}
    return codec.dialect(orjson.dumps(doc))


def properties(values: dict[str, str]) -> bytes:
    """java.util.Properties text, as MixAll.properties2String writes it: key=value lines."""
    return "".join(f"{k}={v}\n" for k, v in values.items()).encode()


def cluster_info(data: dict[str, Any]) -> bytes:
    """ClusterInfo, always in fastjson's default dialect (as ClusterInfo.encode() writes it)."""
    doc = {
        "brokerAddrTable": {name: _broker_data(d) for name, d in data["brokerAddrTable"].items()},
        "clusterAddrTable": data["clusterAddrTable"],
    }
    return codec.dialect(orjson.dumps(doc))
