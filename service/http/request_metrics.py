"""The HTTP front's metrics: requests by route and status, and their latency.

Requests are tallied in plain dicts and turned into Prometheus families only when
/metrics is scraped: labelled prometheus_client metrics take a lock and a label lookup
per request, which cost about a tenth of a cached route read's time. The counting
itself happens in service.http.observe, the wrapper around every route's handler.
"""

from __future__ import annotations

import bisect
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

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
        # by (method, route label); service.http.observe takes each route's slot once, when the
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


class RequestCollector(Collector):
    def __init__(self, tally: RequestTally) -> None:
        self.tally = tally

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
