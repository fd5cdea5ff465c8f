"""The core's metrics: applied changes, Redis errors, the expiry scanner, the read cache.

A collector rather than live metric objects: the figures are counters the core keeps
anyway, read when /metrics is scraped. Each front registers its own collectors beside
this one in the worker's registry (service.node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from service.cache import ReadCache
    from service.registry import Registry
    from service.scanner import Scanner


class CoreCollector(Collector):
    def __init__(self, registry: "Registry", scanner: "Scanner", cache: "ReadCache") -> None:
        self.registry = registry
        self.scanner = scanner
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        operations = CounterMetricFamily("rmq_table_changes", "changes this worker applied, by script (register, heartbeat, ...)",
                                         labels=["script"])
        for script, n in sorted(self.registry.operations.items()):
            operations.add_metric([script], n)
        yield operations
        skipped = CounterMetricFamily("rmq_skipped_topic_configs",
                                      "topic configs left out of registrations this worker applied, by reason",
                                      labels=["reason"])
        for reason, n in sorted(self.registry.skipped_topics.items()):
            skipped.add_metric([reason], n)
        yield skipped
        yield CounterMetricFamily("rmq_redis_errors", "Redis calls that failed or timed out",
                                  value=self.registry.store.errors)
        refusals = CounterMetricFamily("rmq_redis_refusals", "writes Redis refused, by cause (out of memory, "
                                       "read-only replica, snapshot failing)", labels=["cause"])
        for cause, n in sorted(self.registry.store.refusals.counts.items()):
            refusals.add_metric([cause], n)
        yield refusals
        paths = CounterMetricFamily("rmq_full_registrations", "registrations past the unchanged fast path, by how they went: diff "
                                    "(only what differs from this worker's copy), stale (the copy was out of date), "
                                    "staged (a new group's, in slices), full", labels=["path"])
        for path, n in sorted(self.registry.register_paths.items()):
            paths.add_metric([path], n)
        yield paths
        stats = self.scanner.stats
        yield GaugeMetricFamily("rmq_scanner_lag_ms", "how far past its deadline the most overdue broker was at the last scan",
                                value=stats.lag_ms)
        yield GaugeMetricFamily("rmq_live_brokers", "broker addresses with a deadline (all workers' view)", value=stats.live_brokers)
        yield GaugeMetricFamily("rmq_topics", "topics with at least one QueueData", value=stats.topics)
        yield GaugeMetricFamily("rmq_broker_groups_without_master", "broker groups with members but no master (brokerId 0)",
                                value=stats.groups_without_master)
        groups = GaugeMetricFamily("rmq_cluster_broker_groups", "broker groups in each cluster (a cluster whose last "
                                   "broker expired is gone from the tables, and from this gauge)", labels=["cluster"])
        for cluster, n in stats.cluster_groups.items():
            groups.add_metric([cluster], n)
        yield groups
        yield CounterMetricFamily("rmq_scanner_passes", "expiry scanner passes", value=stats.passes)
        yield CounterMetricFamily("rmq_scanner_expired_brokers", "brokers this worker removed on expiry", value=stats.expired)
        yield CounterMetricFamily("rmq_scanner_failures", "scanner passes that failed", value=stats.failures)
        yield from self._cache_metrics()

    def _cache_metrics(self) -> Iterator[Metric]:
        cache, c = self.cache, self.cache.stats
        yield GaugeMetricFamily("rmq_cache_entries", "cached read answers (routes, TOPIC_NOT_EXIST answers, whole-table answers)",
                                value=cache.size)
        yield GaugeMetricFamily("rmq_cache_bytes", "estimated memory of the cached route answers", value=cache.bytes)
        yield GaugeMetricFamily("rmq_cache_watchers", "long polls waiting for a route to change", value=cache.watchers)
        yield GaugeMetricFamily("rmq_cache_sequence", "the last change record this worker applied", value=cache.seq)
        for name, value, text in (
            ("hits", c.hits, "reads answered from the cache"),
            ("misses", c.misses, "reads that ran a read script"),
            ("evictions", c.evictions, "answers pushed out by the entry or byte budget"),
            ("invalidations", c.invalidations, "answers removed because a change touched them"),
            ("flushes", c.flushes, "times the whole cache was dropped (a gap in the change records)"),
            ("watchers_woken", c.watchers_woken, "long polls woken by a change that may alter their answer"),
            ("stale_served", c.stale_served, "answers served past the staleness bound while Redis was unreachable"),
        ):
            yield CounterMetricFamily(f"rmq_cache_{name}", text, value=value)
        yield GaugeMetricFamily("rmq_cache_stale_age_ms", "age of the last answer served past the bound", value=c.stale_age_ms)
