"""Request documents for tests, as brokers send them."""

from __future__ import annotations

from typing import Any


def topic_config(name: str, read: int = 4, write: int = 4, perm: int = 6, sys_flag: int = 0) -> dict[str, Any]:
    return {"topicName": name, "readQueueNums": read, "writeQueueNums": write, "perm": perm,
            "topicSysFlag": sys_flag, "order": False}


def registration(
    addr: str = "10.0.0.1:10911",
    name: str = "broker-a",
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    topics: dict[str, dict[str, Any]] | list[str] | None = None,
    version: int = 1,
    ha: str | None = None,
    timeout_ms: int | None = None,
    filters: list[str] | None = None,
) -> dict[str, Any]:
    if topics is None:
        topics = ["TopicTest"]
    if isinstance(topics, list):
        topics = {t: topic_config(t) for t in topics}
    body: dict[str, Any] = {
        "clusterName": cluster,
        "brokerAddr": addr,
        "brokerName": name,
        "brokerId": broker_id,
        "haServerAddr": ha if ha is not None else addr.rsplit(":", 1)[0] + ":10912",
        "topicConfigSerializeWrapper": {
            "topicConfigTable": topics,
            "dataVersion": {"timestamp": 1700000000000, "counter": version},
        },
    }
    if timeout_ms is not None:
        body["heartbeatTimeoutMillis"] = timeout_ms
    if filters is not None:
        body["filterServerList"] = filters
    return body


def identity(reg: dict[str, Any]) -> dict[str, Any]:
    return {k: reg[k] for k in ("clusterName", "brokerAddr", "brokerName", "brokerId")}
