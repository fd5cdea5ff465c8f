"""The figures the jobs must report, computed from the seed model in plain Python.

Deliberately not sharing code with service/analytics: Gini here is the mean absolute
difference form, the jobs use the sorted-rank form.
"""

from __future__ import annotations

from typing import Any

from tests.analytics.seed import ACTING, Model


def gini_mad(xs: list[float]) -> float:
    n = len(xs)
    total = sum(xs)
    if n == 0 or total == 0:
        return 0.0
    mean = total / n
    return sum(abs(a - b) for a in xs for b in xs) / (2 * n * n * mean)


def snapshot(model: Model, delta_ms: int, flag_ratio: float = 0.8) -> dict[str, Any]:
    """``delta_ms``: how much later than the seeding the job read Redis time."""
    groups: dict[str, dict[str, Any]] = {}
    for name, cluster in model.groups.items():
        ms = [m for m in model.members if m.name == name]
        master = next((m for m in ms if m.broker_id == 0), None)
        groups[name] = {
            "cluster": cluster,
            "members": len(ms),
            "hasMaster": master is not None,
            "masterAddr": master.addr if master else None,
            "masterAlive": bool(master and master.live),
            "slaves": sum(1 for m in ms if m.broker_id != 0),
            "liveMembers": sum(1 for m in ms if m.live),
            "actingMaster": ACTING.get(name, {}).get("enableActingMaster") == "1",
            "zoneName": ACTING.get(name, {}).get("zoneName"),
        }
    live = [m for m in model.members if m.live]
    ages = {m.addr: m.age_ms + delta_ms for m in live}
    flagged = sorted(m.addr for m in live if ages[m.addr] >= flag_ratio * m.timeout_ms)
    return {
        "counts": {
            "clusters": len(set(model.groups.values())),
            "brokerGroups": len(model.groups),
            "members": len(model.members),
            "masters": sum(1 for g in groups.values() if g["hasMaster"]),
            "slaves": sum(1 for m in model.members if m.broker_id != 0),
            "liveBrokers": len(live),
            "groupsWithoutMaster": sum(1 for g in groups.values() if not g["hasMaster"]),
            "groupsWithoutLiveMaster": sum(1 for g in groups.values() if not g["masterAlive"]),
            "groupsWithoutSlave": sum(1 for g in groups.values() if g["slaves"] == 0),
            "flaggedBrokers": len(flagged),
            "membersWithoutLiveRow": sum(1 for m in model.members if not m.live),
        },
        "groups": groups,
        "groupsWithoutMaster": sorted(n for n, g in groups.items() if not g["hasMaster"]),
        "groupsWithoutLiveMaster": sorted(n for n, g in groups.items() if not g["masterAlive"]),
        "groupsWithoutSlave": sorted(n for n, g in groups.items() if g["slaves"] == 0),
        "ages": ages,
        "flagged": flagged,
        "unseen": sorted(m.addr for m in model.members if not m.live),
        "memberAddrs": sorted(m.addr for m in model.members),
    }


def topics(model: Model) -> dict[str, Any]:
    per_group = {n: {"cluster": c, "topics": 0, "readQueues": 0, "writeQueues": 0}
                 for n, c in model.groups.items()}
    by_topic: dict[str, list[Any]] = {}
    for q in model.queues:
        g = per_group[q.name]
        g["topics"] += 1
        g["readQueues"] += q.read
        g["writeQueues"] += q.write if q.perm & 2 else 0  # a wiped row's queues take no writes
        by_topic.setdefault(q.topic, []).append(q)
    writes = [g["writeQueues"] for g in per_group.values()]
    reads = [g["readQueues"] for g in per_group.values()]
    clusters = sorted(set(model.groups.values()))
    per_cluster = {}
    for c in clusters:
        names = [n for n, cc in model.groups.items() if cc == c]
        per_cluster[c] = {
            "topics": sum(1 for qs in by_topic.values() if any(model.groups[q.name] == c for q in qs)),
            "brokerGroups": len(names),
            "readQueues": sum(per_group[n]["readQueues"] for n in names),
            "writeQueues": sum(per_group[n]["writeQueues"] for n in names),
        }

    def skew(xs: list[int]) -> dict[str, float]:
        mean = sum(xs) / len(xs)
        return {"max": max(xs), "mean": mean, "maxOverMean": max(xs) / mean, "gini": gini_mad(xs)}

    return {
        "topics": len(by_topic),
        "queueRows": len(model.queues),
        "perGroup": per_group,
        "perCluster": per_cluster,
        "skewWrite": skew(writes),
        "skewRead": skew(reads),
        "skewWriteByCluster": {c: skew([per_group[n]["writeQueues"] for n, cc in model.groups.items() if cc == c])
                               for c in clusters},
        "readQueues": sum(reads),
        "writeQueues": sum(writes),
        "single": sorted(t for t, qs in by_topic.items() if len(qs) == 1),
        "mismatch": sorted((q.topic, q.name, q.read, q.write) for q in model.queues if q.read != q.write),
        "wiped": sorted((q.topic, q.name, q.perm) for q in model.queues if not q.perm & 2),
        "unwritable": sorted(t for t, qs in by_topic.items() if all(not q.perm & 2 for q in qs)),
        "order": {t: (conf, t in by_topic) for t, conf in model.order.items()},
    }
