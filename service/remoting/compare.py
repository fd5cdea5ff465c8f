"""`rmq-registry compare A B`: what two NameServers (a Java one and the registry, both in
the brokers' namesrvAddr during a migration) answer differently, over RocketMQ's protocol.

It reads each one's ClusterInfo, its topic list, and the route of every topic either
lists (at most ``in_flight`` requests in flight per NameServer, progress on stderr), and
reports each difference on one line: a cluster's groups, a group's addresses, acting
master flag or zone, a topic missing on one side, a topic's queues and permissions per
group, the order of its queueDatas and brokerDatas (tools take the first group: Java's
``mqadmin topicClusterList`` names its cluster), its static topic mappings, its order
config, its filter servers. Routes are read
twice when they differ (a broker may have re-registered between the two reads): only
what differs both times is reported. With a zone (``--zone``), every route is also read
as a client in that zone's zone mode asks it (RocketMQ 5's ZoneRouteRPCHook) and compared
the same way, its lines naming the zone. Over TLS (``--tls``), each NameServer or one of
them is read with the client TLS settings RocketMQ's own clients and tools take
(TlsSystemConfig's ``tls.client.*``: see ``tls_context``).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from service.remoting.client import ClientError, Credentials, NameServerClient

PROGRESS_EVERY_S = 5.0


@dataclass
class Report:
    a: str
    b: str
    differences: list[str] = field(default_factory=list)
    topics: int = 0

    def differ(self, line: str) -> None:
        self.differences.append(line)


def _broker_data(data: dict[str, Any]) -> dict[str, Any]:
    """A BrokerData as compared (either dialect's brokerAddrs keys as strings)."""
    return {
        "cluster": data.get("cluster"),
        "addrs": {str(k): v for k, v in (data.get("brokerAddrs") or {}).items()},
        "enableActingMaster": bool(data.get("enableActingMaster", False)),
        "zoneName": data.get("zoneName"),
    }


def _groups(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: _broker_data(data) for name, data in (info.get("brokerAddrTable") or {}).items()}


def compare_clusters(report: Report, a: dict[str, Any], b: dict[str, Any]) -> None:
    clusters_a = {c: set(names) for c, names in (a.get("clusterAddrTable") or {}).items()}
    clusters_b = {c: set(names) for c, names in (b.get("clusterAddrTable") or {}).items()}
    for cluster in sorted(clusters_a.keys() | clusters_b.keys()):
        only_a = clusters_a.get(cluster, set()) - clusters_b.get(cluster, set())
        only_b = clusters_b.get(cluster, set()) - clusters_a.get(cluster, set())
        if only_a:
            report.differ(f"cluster {cluster}: groups only on {report.a}: {', '.join(sorted(only_a))}")
        if only_b:
            report.differ(f"cluster {cluster}: groups only on {report.b}: {', '.join(sorted(only_b))}")
    groups_a, groups_b = _groups(a), _groups(b)
    for name in sorted(groups_a.keys() & groups_b.keys()):
        ga, gb = groups_a[name], groups_b[name]
        for what in ("cluster", "addrs", "enableActingMaster", "zoneName"):
            if ga[what] != gb[what]:
                report.differ(f"group {name}: {what} {_show(ga[what])} on {report.a}, {_show(gb[what])} on {report.b}")
    for name in sorted(groups_a.keys() ^ groups_b.keys()):
        side = report.a if name in groups_a else report.b
        report.differ(f"group {name}: only on {side}")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in sorted(value.items(), key=lambda kv: _id_order(kv[0]))) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _id_order(key: str) -> tuple[int, Any]:
    return (0, int(key)) if key.lstrip("-").isdigit() else (1, key)


def _normal_route(route: dict[str, Any]) -> dict[str, Any]:
    """What a client acts on, in a form two encodings of the same route compare equal in
    (lists by broker name, map keys as strings)."""
    def mapping(info: dict[str, Any]) -> dict[str, Any]:
        return {**info, "currIdMap": {str(k): v for k, v in (info.get("currIdMap") or {}).items()}}

    return {
        "queues": {q["brokerName"]: {k: q.get(k) for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")}
                   for q in route.get("queueDatas") or []},
        "groups": {d["brokerName"]: _broker_data(d) for d in route.get("brokerDatas") or []},
        "mappings": {name: mapping(info) for name, info in (route.get("topicQueueMappingByBroker") or {}).items()},
        "orderTopicConf": route.get("orderTopicConf"),
        "filterServers": {addr: sorted(servers or []) for addr, servers in (route.get("filterServerTable") or {}).items()
                          if servers},
    }


def route_differences(topic: str, a: dict[str, Any] | None, b: dict[str, Any] | None, name_a: str,
                      name_b: str) -> list[str]:
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"topic {topic}: no route on {name_a if a is None else name_b}"]
    na, nb = _normal_route(a), _normal_route(b)
    out = []
    for group in sorted(na["queues"].keys() | nb["queues"].keys()):
        qa, qb = na["queues"].get(group), nb["queues"].get(group)
        if qa is None or qb is None:
            out.append(f"topic {topic}: queues on {group} only on {name_a if qb is None else name_b}")
            continue
        for what in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
            if qa[what] != qb[what]:
                out.append(f"topic {topic}: {group} {what} {qa[what]} on {name_a}, {qb[what]} on {name_b}")
    for group in sorted(na["groups"].keys() & nb["groups"].keys()):
        for what, va in na["groups"][group].items():
            vb = nb["groups"][group][what]
            if va != vb:
                out.append(f"topic {topic}: {group} {what} {_show(va)} on {name_a}, {_show(vb)} on {name_b}")
    for what in ("mappings", "orderTopicConf", "filterServers"):
        if na[what] != nb[what]:
            out.append(f"topic {topic}: {what} {_show(na[what])} on {name_a}, {_show(nb[what])} on {name_b}")
    for what in ("queueDatas", "brokerDatas"):
        oa, ob = _order(a, b, what), _order(b, a, what)
        if oa != ob:
            out.append(f"topic {topic}: {what} order {', '.join(oa)} on {name_a}, {', '.join(ob)} on {name_b}")
    return out


def _order(route: dict[str, Any], other: dict[str, Any], what: str) -> list[str]:
    """The broker names of `route`'s list `what` in its order, those `other`'s lacks left
    out (a missing group is a difference of its own)."""
    theirs = {d["brokerName"] for d in other.get(what) or []}
    return [d["brokerName"] for d in route.get(what) or [] if d["brokerName"] in theirs]


async def _routes(client: NameServerClient, topics: list[str], progress: Callable[[int], None],
                  zone: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}

    async def one(topic: str) -> None:
        out[topic] = await client.route(topic, zone)
        progress(1)

    await asyncio.gather(*(one(t) for t in topics))
    return out


class Progress:
    """One stderr line every PROGRESS_EVERY_S while routes are read."""

    def __init__(self, total: int, out: Any = sys.stderr) -> None:
        self.total, self.done, self.out = total, 0, out
        self.start = self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            print(f"compare: {self.done:,} of {self.total:,} routes read ({now - self.start:.0f} s)", file=self.out,
                  flush=True)


async def _compare_routes(report: Report, ca: NameServerClient, cb: NameServerClient, topics: list[str],
                          progress: Progress, zone: str | None) -> None:
    """The differences of every topic's route (in `zone`'s zone mode when given)."""
    a, b = report.a, report.b
    routes_a, routes_b = await asyncio.gather(_routes(ca, topics, progress, zone), _routes(cb, topics, progress, zone))
    differing = [t for t in topics if route_differences(t, routes_a[t], routes_b[t], a, b)]
    # read again: a broker's registration between the two reads is no difference
    again_a, again_b = await asyncio.gather(_routes(ca, differing, _quiet, zone), _routes(cb, differing, _quiet, zone))
    for topic in differing:
        name = topic if zone is None else f"{topic} (zone {zone})"
        first = set(route_differences(name, routes_a[topic], routes_b[topic], a, b))
        for line in route_differences(name, again_a[topic], again_b[topic], a, b):
            if line in first:
                report.differ(line)


def _no_password() -> str:
    raise ValueError("the key is encrypted: give its password in RMQ_COMPARE_TLS_KEY_PASSWORD")


def tls_context(trust_cert: str | None = None, cert: str | None = None, key: str | None = None,
                key_password: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """A client's TLS as RocketMQ's client takes it (``-Dtls.enable=true`` and TlsSystemConfig's
    ``tls.client.*``): the server's certificate checked against `trust_cert`
    (``tls.client.trustCertPath``; the system's CAs without it), its name too, unless
    `insecure` (``tls.client.authServer=false``, RocketMQ's default, which checks nothing);
    a certificate of its own for a server that asks for one (``tls.client.certPath``,
    ``keyPath``, ``keyPassword``). ValueError, naming the file, when one cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # certificate and host name checked
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif trust_cert:
        _load(trust_cert, lambda: context.load_verify_locations(cafile=trust_cert))
    else:
        context.load_default_certs()
    if cert or key:
        if not (cert and key):
            raise ValueError("a client certificate needs both the certificate and its key")
        _load(f"{cert} and {key}", lambda: context.load_cert_chain(
            cert, key, key_password if key_password is not None else _no_password))
    return context


def _load(what: str, load: Callable[[], None]) -> None:
    try:
        load()
    except ValueError as e:  # _no_password's
        raise ValueError(f"{what}: {e}") from None
    except OSError as e:  # ssl.SSLError included: not PEM, a key not the certificate's, a wrong password
        reason = e.strerror or str(e)
        if "PEM lib" in reason:  # OpenSSL's whole word on a chain it cannot load
            reason = "not a PEM certificate and its PEM key, or a wrong key password"
        raise ValueError(f"{what}: {reason}") from None


async def compare(a: str, b: str, in_flight: int = 64, timeout_s: float = 10.0,
                  credentials: Credentials | None = None, progress_out: Any = sys.stderr,
                  zone: str | None = None,
                  tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None] = (None, None)) -> Report:
    """The differences between NameServers `a` and `b` (host:port each); with `zone`, of
    the routes in that zone's zone mode too; `tls`: the client TLS for `a` and for `b`
    (None: plain)."""
    report = Report(a, b)
    async with NameServerClient(a, in_flight, timeout_s, credentials, tls[0]) as ca, \
            NameServerClient(b, in_flight, timeout_s, credentials, tls[1]) as cb:
        info_a, info_b = await asyncio.gather(ca.cluster_info(), cb.cluster_info())
        compare_clusters(report, info_a, info_b)
        topics_a, topics_b = await asyncio.gather(ca.topics(), cb.topics())
        for topic in sorted(set(topics_a) - set(topics_b)):
            report.differ(f"topic {topic}: listed only on {a}")
        for topic in sorted(set(topics_b) - set(topics_a)):
            report.differ(f"topic {topic}: listed only on {b}")
        topics = sorted(set(topics_a) | set(topics_b))
        report.topics = len(topics)
        zones = [None] if zone is None else [None, zone]
        progress = Progress(2 * len(topics) * len(zones), progress_out)
        for asked in zones:
            await _compare_routes(report, ca, cb, topics, progress, asked)
    return report


def _quiet(n: int) -> None:
    pass


def print_report(report: Report, out: Any = sys.stdout, most: int | None = None) -> None:
    lines: Iterable[str] = report.differences if most is None else report.differences[:most]
    for line in lines:
        print(line, file=out)
    if most is not None and len(report.differences) > most:
        print(f"... and {len(report.differences) - most:,} more differences", file=out)
    verdict = "no differences" if not report.differences else f"{len(report.differences):,} differences"
    print(f"{report.a} and {report.b}: {report.topics:,} topics compared, {verdict}", file=out)


def run(a: str, b: str, in_flight: int, timeout_s: float, credentials: Credentials | None, most: int | None,
        zone: str | None = None, tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None] = (None, None)) -> int:
    """The command: 0 when both answer the same, 1 when anything differs, 2 when either
    cannot be read."""
    try:
        report = asyncio.run(compare(a, b, in_flight, timeout_s, credentials, zone=zone, tls=tls))
    except (ClientError, ValueError) as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    print_report(report, most=most)
    return 1 if report.differences else 0
