"""The model test's state machine: random operations applied to two real workers (one
redis-server) and to the reference model alike, every read of both fronts of every
running worker compared with the model's answer after each step.

A registry read may lag a change by its documented bounds (the read cache's
RMQ_MAX_STALENESS_MS, a queued close, a departed group's collection, an expiry's scan),
so each comparison waits, up to SETTLE_S, for the answers to agree; a difference that
outlasts it fails the step, and Hypothesis shrinks the run to the shortest sequence of
steps that still shows it (printed as the calls to replay it).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

import redis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from service.remoting import codec, codes
from tests.builders import registration as http_registration
from tests.model import answers
from tests.model.fleet import Fronts, Loop, Worker
from tests.model.reference import (Clock, KVConfig, ORDER_TOPIC_CONFIG, Registration, RouteInfo,
                                   TopicConfig)
from tests.remoting import broker5, frames
from tests.remoting.client import RemotingClient
from tests.tables import violations
from tests.waits import until_sync

# the bound on every lag above, generous for a loaded machine; RMQ_MODEL_SETTLE_S shortens it
# for a shrink by hand (each failing attempt waits it out)
SETTLE_S = float(os.environ.get("RMQ_MODEL_SETTLE_S", 20.0))
LONG_TIMEOUT_MS = 86_400_000  # brokers that must not expire during a run (an hour's too)
DATA_TIMESTAMP = 1_700_000_000_000
SPLIT_PART = 800  # a 5.3.3 broker's splitRegistrationSize
CLUSTER_OF = {f"g{i}": "c1" if i < 10 else "c2" for i in range(12)}  # c1: more than 8 groups (a list slice)
GROUPS = sorted(CLUSTER_OF, key=lambda g: int(g[1:]))
MEMBER_IDS = (0, 1, 2)
FLAG_OF = {"T": 0, "U": 1, "S": 2, "X": 3}  # topicSysFlag by name: every group agrees on a topic's
NAMESPACES = (ORDER_TOPIC_CONFIG, "ns1")
KEYS = ("k0", "k1", "k2")
ABSENT_TOPIC = "NeverRegistered"
TRACE = os.environ.get("RMQ_MODEL_TRACE") == "1"  # each comparison's wait, printed
ROUTES_READ = 24  # routes read per comparison besides the step's own topics
# Members of a group may disagree on zoneName and enableActingMaster, which RocketMQ 5.3.3
# takes from every registration (test_regressions.py holds what a run found there);
# RMQ_MODEL_MEMBERS_AGREE=1 keeps them agreeing.
MEMBERS_AGREE = os.environ.get("RMQ_MODEL_MEMBERS_AGREE") == "1"
# A worker's restart takes seconds where other steps take a fraction of one: a restart rule
# acts in one draw of RARE + 1 (a run's rule choice, which Hypothesis varies, could otherwise
# spend most of it restarting)
RARE = 3

# How many topics a registration carries: small mostly, and the first sizes either side of
# each limit of the tables: 256 QueueData (a departure's collection), 500 (a staged first
# registration), 800 (a split part), 1,000 (unit list slices); with `big`, 8,000 (Lua's
# unpack) and 20,000 (the all-topics list's slice).
SMALL = (0, 1, 2, 3, 5)
LIMITS = (255, 256, 257, 499, 500, 501, 799, 800, 801, 1000, 1001)
BIG = (7999, 8001, 20001)


@dataclass
class Broker:
    """What a member sent last: its table, data version and kind, to send again unchanged."""
    group: str
    broker_id: int
    table: tuple[TopicConfig, ...] = ()
    counter: int = 0
    acting: bool | None = None
    zone: str | None = None

    @property
    def addr(self) -> str:
        return f"10.0.{GROUPS.index(self.group)}.{self.broker_id}:10911"

    @property
    def cluster(self) -> str:
        return CLUSTER_OF[self.group]


def topic_table(ranges: list[tuple[str, int, int]], read: int, write: int, perm: int) -> tuple[TopicConfig, ...]:
    names: dict[str, TopicConfig] = {}
    for prefix, start, count in ranges:
        for i in range(start, start + count):
            name = f"{prefix}{i}"
            names[name] = TopicConfig(name, read, write, perm, FLAG_OF[prefix])
    return tuple(names.values())


def make_machine(redis_url: str, workers: list[Worker], big: bool) -> type[RuleBasedStateMachine]:
    """The state machine class over these workers; `big` adds the largest sizes."""
    loop = Loop()
    fronts = Fronts(loop)
    store = redis.Redis.from_url(redis_url)
    counts = SMALL + LIMITS + (BIG if big else ())
    sizes = st.one_of(st.sampled_from(SMALL), st.sampled_from(counts))
    ranges = st.lists(st.tuples(st.sampled_from(tuple(FLAG_OF)), st.sampled_from((0, 100, 4000)), sizes),
                      min_size=1, max_size=2)
    fronts_of = st.sampled_from(("http", "tcp"))

    class RegistryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            for w in workers:
                if not w.running:
                    w.start()
            store.flushall()  # each run begins on an empty store (the workers count a store reset)
            self.clock = Clock()
            self.model = RouteInfo(self.clock)
            # the registry's documented differences (docs/remoting.md, "The single-topic guard"):
            # 4.x brokers are not guarded, and a refusal changes nothing
            self.model.guard_old_brokers = False
            self.model.refusal_keeps_earlier_writes = False
            self.kv = KVConfig()
            self.brokers = {(g, i): Broker(g, i) for g in GROUPS for i in MEMBER_IDS}
            self.conns: dict[tuple[str, int, int], RemotingClient] = {}  # (group, id, worker) -> open connection
            self.seen_topics: set[str] = set()
            self.step_topics: list[str] = []
            self.group_kind: dict[str, tuple[bool | None, str | None]] = {}

        def teardown(self) -> None:
            for conn in self.conns.values():
                loop.run(conn.close())
            self.conns.clear()

        # ---- helpers

        def running(self) -> list[int]:
            return [i for i, w in enumerate(workers) if w.running]

        def conn(self, b: Broker, w: int) -> tuple[RemotingClient, object]:
            """The member's open connection to worker w (made when it has none) and the
            model's channel for it."""
            key = (b.group, b.broker_id, w)
            if key not in self.conns:
                self.conns[key] = loop.run(fronts.connect(workers[w]))
            return self.conns[key], self.conns[key]

        def send_registration(self, b: Broker, reg: Registration, front: str, w: int, body_kind: str) -> None:
            channel = None
            if front == "http":
                doc = http_registration(addr=reg.addr, name=reg.name, broker_id=reg.broker_id, cluster=reg.cluster,
                                        topics={t.name: {"topicName": t.name, "readQueueNums": t.read,
                                                         "writeQueueNums": t.write, "perm": t.perm,
                                                         "topicSysFlag": t.sys_flag, "order": False}
                                                for t in reg.topics},
                                        version=reg.data_version[1], timeout_ms=reg.timeout_ms,
                                        filters=list(reg.filters) if reg.filters is not None else None)
                if reg.acting_master is not None:
                    doc["enableActingMaster"] = reg.acting_master
                if reg.zone is not None:
                    doc["zoneName"] = reg.zone
                status, answer = loop.run(fronts.http("POST", f"{workers[w].base}/v1/brokers/register", doc))
                accepted = status == 200
                got = (answer.get("masterAddr"), answer.get("haServerAddr"),
                       answer.get("kvTable") or {}) if accepted else None
            else:
                client, channel = self.conn(b, w)
                cmd = self.tcp_registration(reg, body_kind)
                answer = loop.run(client.call(cmd, timeout=120), 150)
                accepted = answer.code == codes.SUCCESS
                kv = ({k: v for k, v in (codec.loads(answer.body).get("table") or {}).items()}
                      if answer.body else {})
                got = (answer.ext_fields.get("masterAddr") or None, answer.ext_fields.get("haServerAddr") or None,
                       kv) if accepted else None
            result = self.model.register(reg, channel)
            want = None if result is None else (result.master_addr, result.ha_addr,
                                                dict(self.kv.list(ORDER_TOPIC_CONFIG) or []))
            assert got == want, f"register {reg.addr} via {front}: registry answered {got}, model {want}"

        @staticmethod
        def tcp_registration(reg: Registration, body_kind: str) -> Any:
            if reg.acting_master is None:  # a 4.x broker: frames builds its header and body
                doc = http_registration(addr=reg.addr, name=reg.name, broker_id=reg.broker_id, cluster=reg.cluster,
                                        topics={t.name: {"topicName": t.name, "readQueueNums": t.read,
                                                         "writeQueueNums": t.write, "perm": t.perm,
                                                         "topicSysFlag": t.sys_flag} for t in reg.topics},
                                        version=reg.data_version[1], timeout_ms=reg.timeout_ms,
                                        filters=list(reg.filters or ()))
                return frames.register(doc, compressed=body_kind == "compressed", version=399)
            table = {t.name: {"attributes": {}, "order": False, "perm": t.perm, "readQueueNums": t.read,
                              "topicFilterType": "SINGLE_TAG", "topicName": t.name, "topicSysFlag": t.sys_flag,
                              "writeQueueNums": t.write} for t in reg.topics}
            body = (broker5.compressed_body(table, counter=reg.data_version[1], filters=list(reg.filters or ()))
                    if body_kind == "compressed" else
                    broker5.plain_body(table, counter=reg.data_version[1], filters=list(reg.filters or ())))
            return broker5.register(body, addr=reg.addr, name=reg.name, broker_id=reg.broker_id, cluster=reg.cluster,
                                    acting=reg.acting_master, zone=reg.zone, timeout_ms=reg.timeout_ms)

        def registration(self, b: Broker, table: tuple[TopicConfig, ...], counter: int,
                         front: str, body_kind: str, timeout_ms: int, filters: tuple[str, ...] | None) -> Registration:
            if front == "tcp" and body_kind == "compressed":
                # a compressed body's topic lines carry no topicSysFlag: Java reads 0
                table = tuple(replace(t, sys_flag=0) for t in table)
            if front == "tcp" and filters is None:
                filters = ()  # a body always has the list
            return Registration(b.cluster, b.addr, b.group, b.broker_id, b.addr.rsplit(":", 1)[0] + ":10912",
                                table, (DATA_TIMESTAMP, counter, 0), b.acting, b.zone, timeout_ms, filters)

        # ---- rules

        @rule(group=st.sampled_from(GROUPS), broker_id=st.sampled_from(MEMBER_IDS), ranges=ranges,
              queues=st.tuples(st.integers(1, 8), st.integers(1, 8)), perm=st.sampled_from((6, 4, 2, 7)),
              kind=st.sampled_from(("4.x", "5.x", "5.x acting")), zone=st.sampled_from((None, "zone-a", "zone-b")),
              front=fronts_of, worker=st.integers(0, 1), body_kind=st.sampled_from(("plain", "compressed")),
              filters=st.sampled_from((None, (), ("10.9.9.9:1",))), split=st.booleans())
        def register_changed(self, group: str, broker_id: int, ranges: list[tuple[str, int, int]],
                             queues: tuple[int, int], perm: int, kind: str, zone: str | None, front: str,
                             worker: int, body_kind: str, filters: tuple[str, ...] | None, split: bool) -> None:
            """A member registers a new table (its first registration, or a changed one)."""
            w = self.pick(worker)
            b = self.brokers[(group, broker_id)]
            b.acting = None if kind == "4.x" else kind == "5.x acting"
            b.zone = zone if kind != "4.x" else None
            self.agree(b)
            b.table = topic_table(ranges, queues[0], queues[1], perm)
            if any(t.sys_flag for t in b.table):
                # a compressed body carries no topicSysFlag: the groups serving a topic would
                # disagree on it, and the unit lists read the first group's (an order the
                # comparison leaves out until COMPARE_ORDER)
                body_kind = "plain"
            self.step_topics = [t.name for t in b.table]
            parts = [b.table]
            if split and kind != "4.x" and len(b.table) > SPLIT_PART:
                # a 5.3.3 broker's enableSplitRegistration: parts of 800, the data version moved at each
                parts = [b.table[i:i + SPLIT_PART] for i in range(0, len(b.table), SPLIT_PART)]
            for part in parts:
                b.counter += 1
                self.send_registration(b, self.registration(b, part, b.counter, front, body_kind, LONG_TIMEOUT_MS,
                                                            filters), front, w, body_kind)

        def registered(self) -> list[Broker]:
            live = set(self.model.live.keys())
            return [b for b in self.brokers.values() if (b.cluster, b.addr) in live]

        def draw_member(self, data: st.DataObject) -> Broker:
            """A registered member mostly, any member of the pool sometimes."""
            pool = self.registered()
            if not pool or data.draw(st.integers(0, 4), label="any member") == 0:
                pool = list(self.brokers.values())
            b = data.draw(st.sampled_from(pool), label="member")
            return b

        @rule(data=st.data(), front=fronts_of, worker=st.integers(0, 1))
        def register_unchanged(self, data: st.DataObject, front: str, worker: int) -> None:
            """The periodic registration: the same table and data version again."""
            b = self.draw_member(data)
            self.agree(b)
            self.step_topics = [t.name for t in b.table[:5]]
            self.send_registration(b, self.registration(b, b.table, b.counter, front, "plain", LONG_TIMEOUT_MS, None),
                                   front, self.pick(worker), "plain")

        @rule(data=st.data(), front=fronts_of, worker=st.integers(0, 1))
        def unregister(self, data: st.DataObject, front: str, worker: int) -> None:
            self.send_unregister(self.draw_member(data), front, self.pick(worker))

        def send_unregister(self, b: Broker, front: str, w: int) -> None:
            ident = {"clusterName": b.cluster, "brokerAddr": b.addr, "brokerName": b.group, "brokerId": b.broker_id}
            if front == "http":
                status, _ = loop.run(fronts.http("POST", f"{workers[w].base}/v1/brokers/unregister", ident))
                assert status == 200
            else:
                code, _, _ = loop.run(fronts.tcp(workers[w], codes.UNREGISTER_BROKER,
                                                 {k: str(v) for k, v in ident.items()}))
                assert code == codes.SUCCESS
            self.model.unregister([(b.cluster, b.addr, b.group, b.broker_id)])
            self.step_topics = [t.name for t in b.table[:5]]

        @precondition(lambda self: bool(self.conns))
        @rule(data=st.data())
        def channel_close(self, data: st.DataObject) -> None:
            """A broker's TCP connection to a worker closes."""
            key = data.draw(st.sampled_from(sorted(self.conns)), label="connection")
            conn = self.conns.pop(key)
            loop.run(conn.close())
            self.model.channel_closed(conn)
            self.step_topics = [t.name for t in self.brokers[key[:2]].table[:5]]

        @precondition(lambda self: bool(self.registered()))
        @rule(data=st.data(), timeout_ms=st.integers(300, 1000))
        def expire(self, data: st.DataObject, timeout_ms: int) -> None:
            """A member registers (unchanged) with a short heartbeat timeout, then falls silent
            past it: the model's clock moves past the timeout and it scans; the registry's
            scanners take the member within the comparison's wait."""
            b = data.draw(st.sampled_from(self.registered()), label="member")
            w = self.running()[0]
            self.send_registration(b, self.registration(b, b.table, b.counter, "http", "plain", timeout_ms, None),
                                   "http", w, "plain")
            self.clock.advance(timeout_ms + 1)
            self.model.scan()
            self.step_topics = [t.name for t in b.table[:5]]

        @rule(data=st.data(), cluster=st.sampled_from((None, "c1", "c2")), front=fronts_of, worker=st.integers(0, 1))
        def delete_topic(self, data: st.DataObject, cluster: str | None, front: str, worker: int) -> None:
            known = sorted(self.model.topic_queue.keys())
            topic = data.draw(st.sampled_from(known) if known else st.just(ABSENT_TOPIC), label="topic")
            w = self.pick(worker)
            if front == "http":
                query = f"?clusterName={cluster}" if cluster else ""
                status, _ = loop.run(fronts.http("DELETE", f"{workers[w].base}/v1/topics/{topic}{query}"))
                assert status == 200
            else:
                ext = {"topic": topic, **({"clusterName": cluster} if cluster else {})}
                code, _, _ = loop.run(fronts.tcp(workers[w], codes.DELETE_TOPIC_IN_NAMESRV, ext))
                assert code == codes.SUCCESS
            self.model.delete_topic(topic, cluster)
            self.step_topics = [topic]

        @rule(group=st.sampled_from(GROUPS), wipe=st.booleans(), front=fronts_of, worker=st.integers(0, 1))
        def write_perm(self, group: str, wipe: bool, front: str, worker: int) -> None:
            w = self.pick(worker)
            mode = "wipe" if wipe else "add"
            if front == "http":
                status, doc = loop.run(fronts.http("POST", f"{workers[w].base}/v1/brokers/{group}/{mode}-write-perm"))
                assert status == 200
                count = doc[f"{mode}TopicCount"]
            else:
                code, _, ext = loop.run(fronts.tcp(
                    workers[w], codes.WIPE_WRITE_PERM_OF_BROKER if wipe else codes.ADD_WRITE_PERM_OF_BROKER,
                    {"brokerName": group}))
                assert code == codes.SUCCESS
                count = int(ext[f"{mode}TopicCount"])
            want = self.model.write_perm(group, wipe)
            assert count == want, f"{mode} write perm of {group}: registry counted {count}, model {want}"
            self.step_topics = [t.name for b in self.brokers.values() if b.group == group for t in b.table[:3]]

        @rule(namespace=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS), value=st.sampled_from(("v1", "v2")),
              delete=st.booleans(), front=fronts_of, worker=st.integers(0, 1))
        def kv(self, namespace: str, key: str, value: str, delete: bool, front: str, worker: int) -> None:
            w = self.pick(worker)
            url = f"{workers[w].base}/v1/kv/{namespace}/{key}"
            if front == "http":
                status, _ = loop.run(fronts.http("DELETE", url) if delete else
                                     fronts.http("PUT", url, {"value": value}))
                assert status == 200
            else:
                ext = {"namespace": namespace, "key": key, **({} if delete else {"value": value})}
                code, _, _ = loop.run(fronts.tcp(workers[w], codes.DELETE_KV_CONFIG if delete else codes.PUT_KV_CONFIG,
                                                 ext))
                assert code == codes.SUCCESS
            if delete:
                self.kv.delete(namespace, key)
            else:
                self.kv.put(namespace, key, value)
            self.step_topics = []

        @precondition(lambda self: len(self.running()) == len(workers))
        @rule(worker=st.integers(0, 1), now=st.integers(0, RARE))
        def restart_worker(self, worker: int, now: int) -> None:
            """SIGTERM and start again: its connections close without removing anything."""
            if now:
                return
            self.stop(worker)
            workers[worker].start()

        @precondition(lambda self: len(self.running()) == len(workers) and bool(self.registered()))
        @rule(data=st.data(), worker=st.integers(0, 1), how=st.sampled_from(("unregister", "close")),
              now=st.integers(0, RARE))
        def stop_worker_mid_work(self, data: st.DataObject, worker: int, how: str, now: int) -> None:
            """A member leaves through a worker (its group's departure collected in the
            background when it was the last of more than 256 QueueData), and that worker gets
            SIGTERM at once; the other worker serves on."""
            if now:
                return
            b = data.draw(st.sampled_from(self.registered()), label="member")
            if how == "unregister":
                self.send_unregister(b, "http", worker)
            else:
                key = (b.group, b.broker_id, worker)
                conn = self.conns.pop(key, None)
                if conn is not None:
                    loop.run(conn.close())
                    self.model.channel_closed(conn)
                self.step_topics = [t.name for t in b.table[:5]]
            self.stop(worker)

        @precondition(lambda self: len(self.running()) < len(workers))
        @rule()
        def start_stopped_worker(self) -> None:
            for w in workers:
                if not w.running:
                    w.start()

        def stop(self, worker: int) -> None:
            workers[worker].stop()
            for key in [k for k in self.conns if k[2] == worker]:
                # the worker closed it: no broker leaves (the registry's rule; Java has no
                # worker to stop), so the model's channel just never closes
                loop.run(self.conns.pop(key).close())

        def agree(self, b: Broker) -> None:
            """With MEMBERS_AGREE, every member of a group registers as its first one did:
            the same version (4.x, 5.x, 5.x acting) and zone."""
            if not MEMBERS_AGREE:
                return
            first = self.group_kind.setdefault(b.group, (b.acting, b.zone))
            b.acting, b.zone = first

        def pick(self, worker: int) -> int:
            running = self.running()
            return worker if worker in running else running[0]

        # ---- after every step

        @invariant()
        def every_read_agrees(self) -> None:
            topics = sorted(self.model.topic_queue.keys())
            self.seen_topics.update(self.step_topics)
            self.seen_topics.update(topics[:: max(1, len(topics) // ROUTES_READ)])
            gone = sorted(self.seen_topics - set(topics))
            asked = sorted(set(self.step_topics[:20] + topics[:: max(1, len(topics) // ROUTES_READ)]
                               + gone[:: max(1, len(gone) // 8)] + [ABSENT_TOPIC]))
            clusters = sorted(set(CLUSTER_OF.values())) + ["NoSuchCluster"]
            kv_keys = {ns: list(KEYS) for ns in NAMESPACES}
            want = answers.expected(self.model, self.kv, asked, clusters, kv_keys)
            found: list[str] = []

            def agreed() -> bool:
                found.clear()
                for w in self.running():
                    got = loop.run(fronts.reads(workers[w], asked, clusters, kv_keys))
                    found.extend(answers.differences(want, got, f"worker {w}"))
                # and the tables whole: nothing half-done left behind (a stopped worker's too)
                found.extend(f"tables: {v}" for v in violations(store))
                return not found

            began = time.monotonic()
            try:
                until_sync(agreed, SETTLE_S, "every read agrees with the model", poll_s=0.2)
            except AssertionError:
                raise AssertionError("\n".join([f"after {SETTLE_S} s:"] + found[:20])) from None
            if TRACE:
                now = time.monotonic()
                print(f"  step took {began - getattr(self, 'last_check', began):.2f} s; agreed after "
                      f"{now - began:.2f} s ({len(asked)} routes, {len(topics)} topics)", flush=True)
            self.last_check = time.monotonic()

    RegistryMachine.loop = loop  # type: ignore[attr-defined]
    RegistryMachine.fronts = fronts  # type: ignore[attr-defined]
    return RegistryMachine
