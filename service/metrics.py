"""Prometheus metrics: requests by route and status, latency, expiry scanner counts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from service.scanner import Scanner

METRICS = web.AppKey("metrics", dict)


class _ScannerCollector(Collector):
    def __init__(self, scanner: "Scanner") -> None:
        self.scanner = scanner

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.scanner.stats
        yield CounterMetricFamily("rmq_scanner_passes", "expiry scanner passes", value=stats.passes)
        yield CounterMetricFamily("rmq_scanner_expired_brokers", "brokers this worker removed on expiry", value=stats.expired)
        yield CounterMetricFamily("rmq_scanner_failures", "scanner passes that failed", value=stats.failures)


def install(app: web.Application, scanner: "Scanner") -> None:
    # one registry per app, so several apps in one process (tests) do not collide
    registry = CollectorRegistry()
    registry.register(_ScannerCollector(scanner))
    app[METRICS] = {
        "registry": registry,
        "requests": Counter("rmq_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry),
        "latency": Histogram("rmq_http_request_seconds", "HTTP request latency", ["route"], registry=registry,
                             buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)),
    }


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
        m = request.app[METRICS]
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        m["requests"].labels(request.method, route, str(status)).inc()
        m["latency"].labels(route).observe(time.perf_counter() - started)


async def handler(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS]["registry"])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
