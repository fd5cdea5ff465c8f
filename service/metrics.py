"""The core's metrics: applied changes, Redis errors, the removal path, the expiry scanner,
the read cache.

A collector rather than live metric objects: the figures are counters the core keeps
anyway, read when /metrics is scraped. Each front registers its own collectors beside
this one in the worker's registry (service.node).

A labelled counter is exported at 0 for every label value known before its first event
(scripts, skip reasons, refusal causes, registration paths, the clusters seen): a series
that appears only with its first event hides that event from a rule's ``increase()``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service import __version__
from service.liveness import LATE_FRACTION
from service.models import SKIP_REASONS
from service.removals import CAUSES
from service.store import READ_SCRIPTS, REFUSAL_CAUSES, SCRIPTS

if TYPE_CHECKING:
    from service.cache import ReadCache
    from service.registry import Registry
    from service.removals import Removals
    from service.scanner import Scanner


# rmq_table_changes_total's scripts: every script that writes, and the fast path's own count
CHANGE_SCRIPTS = (*(s for s in SCRIPTS if s not in READ_SCRIPTS), "register_unchanged")
# rmq_full_registrations_total's paths (service.registry counts them)
REGISTER_PATHS = ("staged", "full")


def labelled(name: str, text: str, label: str, counts: Counter[str] | dict[str, int], known: Iterable[str]) -> Metric:
    """A counter by one label: every known value (at 0 until its first event), then any other."""
    family = CounterMetricFamily(name, text, labels=[label])
    for value in sorted({*known, *counts}):
        family.add_metric([value], counts.get(value, 0))
    return family


class CoreCollector(Collector):
    def __init__(self, registry: "Registry", scanner: "Scanner", removals: "Removals", cache: "ReadCache") -> None:
        self.registry = registry
        self.scanner = scanner
        self.removals = removals
        self.cache = cache
        self.started = time.monotonic()  # "unreachable since" for a worker that never reached Redis

    def collect(self) -> Iterator[Metric]:
        registry, stats = self.registry, self.scanner.stats
        # which release each worker runs, so a rollout's mix shows (count by (version) (rmq_build_info))
        build = GaugeMetricFamily("rmq_build_info", "1, labelled with the release this worker runs", labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        yield labelled("rmq_table_changes", "changes this worker applied, by script (register, heartbeat, ...)",
                       "script", registry.operations, CHANGE_SCRIPTS)
        yield labelled("rmq_skipped_topic_configs", "topic configs left out of registrations this worker applied, by reason",
                       "reason", registry.skipped_topics, SKIP_REASONS)
        yield CounterMetricFamily("rmq_redis_errors", "Redis calls that failed or timed out",
                                  value=registry.store.errors)
        yield labelled("rmq_redis_refusals", "writes Redis refused, by cause (out of memory, read-only replica, snapshot failing, too few replicas)",
                       "cause", registry.store.refusals.counts, REFUSAL_CAUSES)
        yield labelled("rmq_full_registrations", "registrations past the unchanged fast path, by how they went: "
                       "staged (a new group's, in slices), full (one script)", "path", registry.register_paths, REGISTER_PATHS)
        yield GaugeMetricFamily("rmq_redis_unreachable_seconds", "how long this worker has not reached Redis (its change "
                                "record poll fails); 0 while the last poll succeeded", value=self._unreachable_s())
        lag = GaugeMetricFamily("rmq_scanner_lag_ms", "how far past its deadline the most overdue broker is: measured at each "
                                "scan; while scans fail, estimated from the last earliest deadline read, so it grows "
                                "(absent until the tables were read once)")
        lag_ms = self.scanner.lag_now_ms()
        if lag_ms is not None:
            lag.add_metric([], lag_ms)
        yield lag
        yield GaugeMetricFamily("rmq_live_brokers", "broker addresses with a deadline (all workers' view)", value=stats.live_brokers)
        yield GaugeMetricFamily("rmq_late_brokers", f"live broker addresses past {LATE_FRACTION:.0%} of their heartbeat "
                                "timeout, not yet expired (all workers' view, at the last scan)", value=stats.late_brokers)
        yield GaugeMetricFamily("rmq_topics", "topics with at least one QueueData", value=stats.topics)
        yield GaugeMetricFamily("rmq_broker_groups_without_master", "broker groups with members but no master (brokerId 0)",
                                value=stats.groups_without_master)
        masterless = GaugeMetricFamily("rmq_broker_group_without_master", "1 for each broker group with members but no "
                                       "master (brokerId 0), with its cluster", labels=["cluster", "group"])
        for group, cluster in stats.masterless.items():
            masterless.add_metric([cluster, group], 1)
        yield masterless
        groups = GaugeMetricFamily("rmq_cluster_broker_groups", "broker groups in each cluster (a cluster whose last "
                                   "broker expired is gone from the tables, and from this gauge)", labels=["cluster"])
        for cluster, n in stats.cluster_groups.items():
            groups.add_metric([cluster], n)
        yield groups
        yield CounterMetricFamily("rmq_scanner_passes", "expiry scanner passes", value=stats.passes)
        yield CounterMetricFamily("rmq_scanner_expired_brokers", "brokers this worker removed on expiry", value=stats.expired)
        yield labelled("rmq_cluster_expired_brokers", "brokers this worker removed on expiry, by cluster (every cluster "
                       "seen since the worker started, from 0)", "cluster", stats.expired_by_cluster, ())
        yield CounterMetricFamily("rmq_scanner_failures", "scanner passes that failed", value=stats.failures)
        yield CounterMetricFamily("rmq_store_resets", "times this worker found the store had lost its data (its data-set "
                                  "id or schema stamp gone while it knew of data in it): Redis restarted empty, a "
                                  "failover to an empty replica, a FLUSHALL", value=self.scanner.watch.resets)
        yield GaugeMetricFamily("rmq_store_reset_open", "1 while the store's last reset is an incident: the fleet "
                                "is not back yet and it is less than an hour old (the reset record in the store, the "
                                "same on every worker, a worker started after it included)",
                                value=1 if self.scanner.watch.recent() is not None else 0)
        removals = self.removals
        yield GaugeMetricFamily("rmq_removals_queued", "departed brokers (connection closed, unregistration that could "
                                "not reach Redis, expiry) queued for this worker's removal path", value=removals.queued)
        yield labelled("rmq_removed_brokers", "brokers this worker's removal path removed, by cause", "cause",
                       removals.removed, CAUSES)
        yield CounterMetricFamily("rmq_registrations_busy", "registrations refused as busy (SYSTEM_BUSY, HTTP 503 "
                                  "BUSY): no turn free on this worker within their wait", value=registry.busy)
        yield CounterMetricFamily("rmq_removal_failures", "removal scripts that could not reach Redis (their brokers "
                                  "stayed queued and were sent again)", value=removals.failures)
        yield from self._cache_metrics()

    def _unreachable_s(self) -> float:
        cache = self.cache
        if not cache.unreachable:
            return 0.0
        return time.monotonic() - max(cache.confirmed_at, self.started)

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
        yield GaugeMetricFamily("rmq_cache_stale_age_ms", "while Redis is unreachable, the age of the last answer served "
                                "past the bound (0 once Redis is reached again)", value=c.stale_age_ms if cache.unreachable else 0)
