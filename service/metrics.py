"""Prometheus metrics: requests by route and status, latency, expiry scanner counts.

Requests are tallied in plain dicts and turned into Prometheus families only when
/metrics is scraped: labelled prometheus_client metrics take a lock and a label lookup
per request, which cost about a tenth of a cached route read's time.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from service.scanner import Scanner

METRICS = web.AppKey("metrics", dict)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class RequestTally:
    def __init__(self) -> None:
        self.counts: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        # route -> per-bucket counts (the last slot is +Inf), and the sum of seconds
        self.buckets: defaultdict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))
        self.sums: defaultdict[str, float] = defaultdict(float)

    def add(self, method: str, route: str, status: int, seconds: float) -> None:
        self.counts[(method, route, str(status))] += 1
        self.buckets[route][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[route] += seconds


class _Collector(Collector):
    def __init__(self, tally: RequestTally, scanner: "Scanner") -> None:
        self.tally = tally
        self.scanner = scanner
        self.registry = scanner.registry

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("rmq_http_requests", "HTTP requests", labels=["method", "route", "status"])
        for labels, n in list(self.tally.counts.items()):
            requests.add_metric(list(labels), n)
        yield requests
        latency = HistogramMetricFamily("rmq_http_request_seconds", "HTTP request latency", labels=["route"])
        for route, counts in list(self.tally.buckets.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([route], buckets, self.tally.sums[route])
        yield latency
        operations = CounterMetricFamily("rmq_table_changes", "changes this worker applied, by script (register, heartbeat, ...)",
                                         labels=["script"])
        for script, n in sorted(self.registry.operations.items()):
            operations.add_metric([script], n)
        yield operations
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


def install(app: web.Application, scanner: "Scanner") -> None:
    # one registry per app, so several apps in one process (tests) do not collide
    registry = CollectorRegistry()
    tally = RequestTally()
    registry.register(_Collector(tally, scanner))
    app[METRICS] = {"registry": registry, "tally": tally}


@web.middleware
async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as e:
        status = e.status
        raise
    finally:
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        request.app[METRICS]["tally"].add(request.method, route, status, time.perf_counter() - started)


async def handler(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS]["registry"])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
