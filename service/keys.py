"""The Redis key schema, in one place.

Every key carries the hash tag ``{<prefix>}`` so that a Redis Cluster keeps them all in
one slot and every Lua script may touch any of them. The Lua scripts build the same
names from the tag they are given (``lua/_lib.lua``); this module is the Python side
and the reference for both.

Names cannot contain ``:`` (API.md restricts them to ``[%|a-zA-Z0-9_-]``), so the
separator is unambiguous even though broker addresses (``host:port``) do contain it:
an address only ever stands last in a key.
"""

from __future__ import annotations

from dataclasses import dataclass

# KV namespace whose entries are attached to routes and returned to brokers.
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


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
        return f"{self.tag}:cluster:{cluster}"

    # -- brokerAddrTable
    def broker(self, name: str) -> str:
        """HASH row: cluster, brokerName."""
        return f"{self.tag}:broker:{name}"

    def addrs(self, name: str) -> str:
        """HASH brokerId -> brokerAddr."""
        return f"{self.tag}:addrs:{name}"

    def broker_topics(self, name: str) -> str:
        """HASH topic -> "readQueueNums,writeQueueNums,perm,topicSysFlag" of every QueueData
        of this broker name: the reverse index for cascades, and what a registration
        compares its topics against in one read."""
        return f"{self.tag}:broker-topics:{name}"

    # -- topicQueueTable
    @property
    def topics(self) -> str:
        """SET of topic names."""
        return f"{self.tag}:topics"

    def topic(self, topic: str) -> str:
        """SET of broker names serving a topic."""
        return f"{self.tag}:topic:{topic}"

    def queue(self, topic: str, name: str) -> str:
        """HASH row: topic, brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag."""
        return f"{self.tag}:queue:{topic}:{name}"

    # -- brokerLiveTable
    def live(self, addr: str) -> str:
        """HASH row with a key TTL equal to the broker's timeout."""
        return f"{self.tag}:live:{addr}"

    @property
    def expiry(self) -> str:
        """ZSET brokerAddr by deadline (ms, Redis time)."""
        return f"{self.tag}:expiry"

    def member(self, addr: str) -> str:
        """HASH row, no TTL: brokerAddr, cluster, brokerName, brokerId (for the expiry cascade)."""
        return f"{self.tag}:member:{addr}"

    # -- filterServerTable
    def filter(self, addr: str) -> str:
        """LIST of filter server addresses."""
        return f"{self.tag}:filter:{addr}"

    @property
    def body_digests(self) -> str:
        """HASH digest of an address's last full registration body -> brokerAddr (fast path)."""
        return f"{self.tag}:body-digests"

    # -- KVConfig
    @property
    def kv_namespaces(self) -> str:
        """SET of namespaces ever created (a namespace emptied still lists as {})."""
        return f"{self.tag}:kv-namespaces"

    def kv(self, namespace: str) -> str:
        """HASH key -> value."""
        return f"{self.tag}:kv:{namespace}"

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
        """LIST of the latest change records, newest first, capped (lua/_lib.lua): what a
        worker that missed some on the channel replays."""
        return f"{self.tag}:changelog"

    # -- patterns for readers that scan (analytics)
    def pattern(self, kind: str) -> str:
        """``keys.pattern`` for spark-redis: one row per hash, the key column gets the rest."""
        return f"{self.tag}:{kind}:*"
