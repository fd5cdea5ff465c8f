"""Prometheus metrics: requests by route and status, latency, expiry scanner counts.

Requests are tallied in plain dicts and turned into Prometheus families only when
/metrics is scraped: labelled prometheus_client metrics take a lock and a label lookup
per request, which cost about a tenth of a cached route read's time. The counting
itself happens in service.observe, the wrapper around every route's handler.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from service.cache import ReadCache
    from service.scanner import Scanner

METRICS = web.AppKey("metrics", dict)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Latency:
    """The latency histogram of one route label: per-bucket counts (the last slot is +Inf)
    and the sum of seconds."""

    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0


class RouteTally:
    """Requests of one (method, route label), by status, and its label's latency."""

    __slots__ = ("method", "route", "statuses", "latency")

    def __init__(self, method: str, route: str, latency: Latency) -> None:
        self.method = method
        self.route = route
        self.statuses: dict[int, int] = {}
        self.latency = latency  # shared by every method on the same path, as the histogram has no method label

    def add(self, status: int, seconds: float) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        latency = self.latency
        latency.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        latency.sum += seconds


class RequestTally:
    def __init__(self) -> None:
        # by (method, route label); service.observe takes each route's slot once, when the
        # route is added, so a request costs no label string, tuple key or lookup here
        self.by_label: dict[tuple[str, str], RouteTally] = {}
        self.latencies: dict[str, Latency] = {}

    def labelled(self, method: str, route: str) -> RouteTally:
        tally = self.by_label.get((method, route))
        if tally is None:
            latency = self.latencies.get(route)
            if latency is None:
                latency = self.latencies[route] = Latency()
            tally = self.by_label[(method, route)] = RouteTally(method, route, latency)
        return tally


class _Collector(Collector):
    def __init__(self, tally: RequestTally, scanner: "Scanner", cache: "ReadCache") -> None:
        self.tally = tally
        self.scanner = scanner
        self.cache = cache
        self.registry = scanner.registry

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("rmq_http_requests", "HTTP requests", labels=["method", "route", "status"])
        for tally in list(self.tally.by_label.values()):
            for status, n in list(tally.statuses.items()):
                requests.add_metric([tally.method, tally.route, str(status)], n)
        yield requests
        latency = HistogramMetricFamily("rmq_http_request_seconds", "HTTP request latency", labels=["route"])
        for route, histogram in list(self.tally.latencies.items()):
            if not any(histogram.buckets):
                continue  # a route no request reached yet: its slot exists, its series does not
            cumulative, buckets = 0, []
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), histogram.buckets):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([route], buckets, histogram.sum)
        yield latency
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
        stats = self.scanner.stats
        yield GaugeMetricFamily("rmq_scanner_lag_ms", "how far past its deadline the most overdue broker was at the last scan",
                                value=stats.lag_ms)
        yield GaugeMetricFamily("rmq_live_brokers", "broker addresses with a deadline (all workers' view)", value=stats.live_brokers)
        yield GaugeMetricFamily("rmq_topics", "topics with at least one QueueData", value=stats.topics)
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
        ):
            yield CounterMetricFamily(f"rmq_cache_{name}", text, value=value)


def install(app: web.Application, scanner: "Scanner", tally: RequestTally, cache: "ReadCache") -> None:
    """Publishes `tally` (counted by service.observe) and the scanner's figures on /metrics."""
    # one registry per app, so several apps in one process (tests) do not collide
    registry = CollectorRegistry()
    registry.register(_Collector(tally, scanner, cache))
    app[METRICS] = {"registry": registry, "tally": tally}


async def handler(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS]["registry"])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
