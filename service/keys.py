"""The Redis key schema, in one place.

Every key carries the hash tag ``{<prefix>}`` so that a Redis Cluster keeps them all in
one slot and every Lua script may touch any of them. The Lua scripts build the same
names from the tag they are given (``lua/_keys.lua``); this module is the Python side
and the reference for both.

Names (cluster, broker name, topic, KV namespace) may be any string RocketMQ accepts,
``:``, ``{`` and ``}`` included, so they go into keys through ``encode_name``: an injective
escape whose output never contains ``:``, ``{``, ``}`` or a glob character. Two different
(topic, broker name) pairs therefore never share a key, and the ``{<prefix>}`` hash tag
stays the only braces in a key. Names made of ``[%|A-Za-z0-9_.-]`` (every name the
registry accepted before) are their own encoding, so existing keys did not move. Broker
addresses (``host:port``) are not encoded: an address only ever stands last in a key, so
its ``:`` is unambiguous there. Member and field values (set members, hash fields) hold
names as they are; only key names are encoded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The version of the key schema and of what the scripts in lua/ mean by each key. Raise it
# with any change an older worker would misread or undo (a key renamed, a value's format
# changed, a script relying on a key older scripts do not keep up to date); workers of
# another version refuse to start on a Redis stamped with this one (service.startup).
# Changes old and new workers can run side by side (new keys only the new code reads and
# rebuilds, script fixes) keep it: see docs/upgrade.md.
SCHEMA_VERSION = 1

# KV namespace whose entries are attached to routes and returned to brokers.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# The fields of each row-shaped HASH, by key kind (the ``Keys`` method naming the key): the
# only fields the scripts in lua/ read or write on such a row, and those docs/design.md's
# schema gives (tests/test_key_schema.py holds both to this).
FIELDS: dict[str, tuple[str, ...]] = {
    # BrokerData: the group's cluster and name; as its last registration sent them, whether
    # it runs with enableActingMaster ('1'/'0') and its zoneName; for the scripts:
    # queuesIntact ('1': every QueueData its master registered is in place, so an unchanged
    # re-registration may take the fast path; a 5.x prime slave's address: its table is), topicsGen (the generation of a staging under
    # way; any other change to the group's QueueData removes it, making that staging stale),
    # staging (a staged first registration is under way: readers skip the group), leaving
    # (its last member left; its QueueData are being collected: readers skip the group)
    "broker": ("cluster", "brokerName", "enableActingMaster", "zoneName", "queuesIntact", "topicsGen", "staging",
               "leaving"),
    # BrokerLiveInfo, with a key TTL: channel is the id of the remoting connection that
    # last registered or refreshed it ('' over HTTP), which alone may remove it on close;
    # enableActingMaster ('1'/'0', '' from a broker before 5.0) and zoneName ('' none) as its
    # last full registration sent them, which its unchanged ones set on the group again
    "live": ("brokerAddr", "cluster", "brokerName", "brokerId", "haServerAddr", "lastUpdateTimestamp",
             "heartbeatTimeoutMillis", "dataVersion", "channel", "enableActingMaster", "zoneName"),
    # an address's identity, no TTL (for the expiry cascade); bodyDigest: the digests (space
    # separated) of the bodies the address may be found by, their keys in body-digests (a
    # split registration's parts: several)
    "member": ("brokerAddr", "cluster", "brokerName", "brokerId", "bodyDigest"),
    # QueueData of one (topic, broker name); seq: the queue-seq value of the call that
    # created it (a route lists a topic's groups in the order they came, as Java's HashMap
    # does within a bucket; rows an older release created have none)
    "queue": ("topic", "brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "seq"),
}

# The bytes a name keeps as they are; every other byte (``~`` included, which makes the
# escape reversible) becomes ``~XX``, uppercase hex of its UTF-8 byte. lua/_keys.lua's
# ``enc`` is the same function: change both together.
_PLAIN = re.compile(r"[%|A-Za-z0-9_.\-]*")
_KEPT = frozenset(b"%|ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def encode_name(name: str) -> str:
    """``name`` as it stands in a key (see the module's docstring)."""
    if _PLAIN.fullmatch(name):  # nearly every name: no escaping, no copy
        return name
    return "".join(chr(b) if b in _KEPT else f"~{b:02X}" for b in name.encode())


def decode_name(part: str) -> str:
    """The name ``encode_name`` turned into ``part``: for readers that parse keys."""
    if "~" not in part:
        return part
    head, *escaped = part.split("~")
    raw = bytearray(head.encode())
    for piece in escaped:
        raw.append(int(piece[:2], 16))
        raw += piece[2:].encode()
    return raw.decode()


@dataclass(frozen=True)
class Keys:
    prefix: str = "rmq"

    @property
    def tag(self) -> str:
        return "{" + self.prefix + "}"

    # -- clusterAddrTable
    @property
    def clusters(self) -> str:
        """SET of cluster names."""
        return f"{self.tag}:clusters"

    def cluster(self, cluster: str) -> str:
        """SET of broker names in a cluster."""
        return f"{self.tag}:cluster:{encode_name(cluster)}"

    # -- brokerAddrTable
    def broker(self, name: str) -> str:
        """HASH row, fields ``FIELDS["broker"]``. A group with no cluster field is not
        registered yet."""
        return f"{self.tag}:broker:{encode_name(name)}"

    def addrs(self, name: str) -> str:
        """HASH brokerId -> brokerAddr."""
        return f"{self.tag}:addrs:{encode_name(name)}"

    def broker_topics(self, name: str) -> str:
        """HASH topic -> "readQueueNums,writeQueueNums,perm,topicSysFlag" of every QueueData
        of this broker name: the reverse index for cascades, and what a registration
        compares its topics against in one read."""
        return f"{self.tag}:broker-topics:{encode_name(name)}"

    # -- topicQueueTable
    @property
    def topics(self) -> str:
        """SET of topic names."""
        return f"{self.tag}:topics"

    @property
    def topic_index(self) -> str:
        """ZSET of the same topic names, all score 0: the topics in name order, so the
        dashboard's summary pages through 100,000 of them a bounded slice at a time."""
        return f"{self.tag}:topic-index"

    @property
    def staged_topics(self) -> str:
        """SET of the topics only a staging group serves (lua/register_stage.lua): in the
        topic set and index already, but no reader lists them until the group's
        registration is published."""
        return f"{self.tag}:staged-topics"

    @property
    def stagings(self) -> str:
        """HASH of the broker names whose first registration is being staged
        (lua/register_stage.lua) -> how many topics their slices added to ``staged-topics``:
        when it holds only the one publishing and that count is the set's size, every
        staged topic is that group's, and the publishing script drops the set whole."""
        return f"{self.tag}:stagings"

    @property
    def leaving(self) -> str:
        """SET of the broker names whose last member left while they had more QueueData
        than one script should remove (lua/_groups.lua remove_group): readers skip them at
        once, and lua/collect_leaving.lua removes their QueueData a slice a script."""
        return f"{self.tag}:leaving"

    def topic(self, topic: str) -> str:
        """SET of broker names serving a topic."""
        return f"{self.tag}:topic:{encode_name(topic)}"

    def queue(self, topic: str, name: str) -> str:
        """HASH row, fields ``FIELDS["queue"]``."""
        return f"{self.tag}:queue:{encode_name(topic)}:{encode_name(name)}"

    # -- topicQueueMappingInfoTable (RocketMQ 5's static topics)
    def mapping(self, topic: str) -> str:
        """HASH bname -> TopicQueueMappingInfo JSON (fields in name order, currIdMap by id):
        a static topic's queue mappings by the group hosting them, as routes answer them
        (topicQueueMappingByBroker)."""
        return f"{self.tag}:mapping:{encode_name(topic)}"

    def mapped(self, name: str) -> str:
        """SET of the topics whose mapping names this group: what goes with the group."""
        return f"{self.tag}:mapped:{encode_name(name)}"

    # -- brokerLiveTable
    def live(self, addr: str) -> str:
        """HASH row, fields ``FIELDS["live"]``, with a key TTL a minute past the broker's deadline
        (a backstop: the scanner removes it at the first pass past the deadline)."""
        return f"{self.tag}:live:{addr}"

    @property
    def expiry(self) -> str:
        """ZSET brokerAddr by deadline (ms, Redis time)."""
        return f"{self.tag}:expiry"

    def member(self, addr: str) -> str:
        """HASH row, fields ``FIELDS["member"]``, no TTL (for the expiry cascade)."""
        return f"{self.tag}:member:{addr}"

    # -- filterServerTable
    def filter(self, addr: str) -> str:
        """LIST of filter server addresses."""
        return f"{self.tag}:filter:{addr}"

    @property
    def body_digests(self) -> str:
        """HASH digest of an address's last full registration body -> brokerAddr (fast path)."""
        return f"{self.tag}:body-digests"

    @property
    def masterless(self) -> str:
        """SET of broker names that have members but no master (brokerId 0), kept by the
        scripts that change a group's addresses: what /metrics counts, with one SCARD."""
        return f"{self.tag}:masterless"

    @property
    def topics_gen(self) -> str:
        """STRING counter: each staging of a group's QueueData gets the next value (broker
        row's topicsGen), so a staging is never mistaken for a later one."""
        return f"{self.tag}:topics-gen"

    @property
    def queue_seq(self) -> str:
        """STRING counter: each call that creates QueueData rows gets the next value (their
        ``seq``), the order a topic's groups came in."""
        return f"{self.tag}:queue-seq"

    @property
    def topic_capacity(self) -> str:
        """HASH topic -> the table size Java's HashMap of its QueueData grew to, for a topic
        whose group count fell below 0.75 of it (route order; none while it never did)."""
        return f"{self.tag}:topic-capacity"

    # -- KVConfig
    @property
    def kv_namespaces(self) -> str:
        """SET of namespaces ever created (a namespace emptied still lists as {})."""
        return f"{self.tag}:kv-namespaces"

    def kv(self, namespace: str) -> str:
        """HASH key -> value."""
        return f"{self.tag}:kv:{encode_name(namespace)}"

    # -- change tracking
    @property
    def version(self) -> str:
        """STRING counter, incremented by every change a route reader could see: the
        sequence number of its change record."""
        return f"{self.tag}:version"

    @property
    def changes(self) -> str:
        """Pub/sub channel; every change publishes its change record on it (service/changes.py)."""
        return f"{self.tag}:changes"

    @property
    def changelog(self) -> str:
        """LIST of the latest change records, newest first, capped (lua/_changes.lua): what a
        worker that missed some on the channel replays."""
        return f"{self.tag}:changelog"

    # -- departures
    @property
    def departures(self) -> str:
        """ZSET of the brokers that left (unregistered, connection closed, expired) by when
        (ms, Redis time): each member the JSON {brokerAddr, brokerName, cluster, brokerId,
        cause, at}, written by the script that removed the broker, trimmed to the last hour
        and the last 1,000 (lua/_members.lua record_departure)."""
        return f"{self.tag}:departures"

    @property
    def departures_back(self) -> str:
        """HASH: when a broker that left came back, by its departure (``<addr>|<at>`` -> ms,
        Redis time), marked by the first scan pass that found its address registered again
        (lua/departures_back.lua); fields of departures past the window are trimmed."""
        return f"{self.tag}:departures-back"

    # -- upgrades
    @property
    def schema(self) -> str:
        """STRING: the key schema version (``SCHEMA_VERSION``) of the workers that may use
        these keys, written by the first worker to start (SET NX)."""
        return f"{self.tag}:schema-version"

    # -- identity
    @property
    def dataset(self) -> str:
        """STRING: a random id a worker writes once (SET NX) when it first starts on an empty
        key space (or, on a store written without one, the first analytics run that appends
        to a history: service/analytics/store_check.py). It names this registry's data set,
        so readers outside the service (the analytics history) can tell two registries on
        the same prefix apart."""
        return f"{self.tag}:dataset"

    @property
    def store_reset(self) -> str:
        """HASH with a TTL of an hour: the last store reset, as every worker reads it
        (lua/store_reset.lua): ``dataset`` (the id stamped after it), ``at`` (Redis time),
        ``gone``, ``lostGroups``, ``lostTopics``, ``lostBrokers``, ``lostChanges`` (the most any
        worker knew), ``groupsNow`` and ``backAt`` (lua/store_reset_seen.lua)."""
        return f"{self.tag}:store-reset"

    # -- patterns for readers that scan (analytics)
    def pattern(self, kind: str) -> str:
        """``keys.pattern`` for spark-redis: one row per hash, the key column gets the rest
        (names in it encoded: ``decode_name``)."""
        return f"{self.tag}:{kind}:*"
