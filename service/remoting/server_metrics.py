"""The RocketMQ front's metrics: requests by request and response code, and connections."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.remoting import codes
from service.remoting.dispatch import HANDLERS

if TYPE_CHECKING:
    from service.remoting.server import RemotingServer

# Why the server refuses a connection as it opens, and why it closes one.
REFUSALS = ("too_many_connections", "tls_required", "tls_handshake",  # tls: service/remoting/tls.py
            "tls_disabled")  # a TLS handshake in mode disabled: server.py
TRANSPORTS = ("plain", "tls")
CLOSINGS = ("idle", "slow_frame", "bad_frame", "answer_failed")


# (request, response) pairs exported from 0, so a rule's increase() sees the first of each:
# every request's success and SYSTEM_ERROR (a refused or failed request), and the answers
# particular to a few requests
KNOWN_ANSWERS = frozenset({
    *((code, answer) for code in HANDLERS for answer in (codes.SUCCESS, codes.SYSTEM_ERROR)),
    (codes.GET_ROUTEINFO_BY_TOPIC, codes.TOPIC_NOT_EXIST),
    (codes.GET_KV_CONFIG, codes.QUERY_NOT_FOUND),
    (codes.GET_KVLIST_BY_NAMESPACE, codes.QUERY_NOT_FOUND),
    (codes.UPDATE_NAMESRV_CONFIG, codes.NO_PERMISSION),
})


class RequestCounts(Collector):
    """``rmq_remoting_requests_total{code,response,response_name}``, from the server's plain counts: a
    labelled Prometheus counter costs a lock and a label lookup per request. Also the
    connections: open now, refused, and closed by the server by reason, served by transport."""

    def __init__(self, server: "RemotingServer") -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("rmq_remoting_requests", "RocketMQ remoting requests by request and response code "
                                     "(response_name: the response code's name)", labels=["code", "response", "response_name"])
        counts = self.server.counts
        for code, response in sorted({*KNOWN_ANSWERS, *counts}):
            family.add_metric([codes.NAMES.get(code, str(code)), str(response),
                               codes.RESPONSE_NAMES.get(response, str(response))], counts.get((code, response), 0))
        yield family
        yield GaugeMetricFamily("rmq_remoting_connections", "RocketMQ remoting connections open now",
                                value=len(self.server.open))
        refused = CounterMetricFamily("rmq_remoting_connections_refused",
                                      "RocketMQ remoting connections closed as they opened, by reason", labels=["reason"])
        closed = CounterMetricFamily("rmq_remoting_connections_closed",
                                     "RocketMQ remoting connections the worker closed, by reason", labels=["reason"])
        for reason in REFUSALS:
            refused.add_metric([reason], self.server.refused[reason])
        for reason in CLOSINGS:
            closed.add_metric([reason], self.server.closed[reason])
        yield refused
        yield closed
        accepted = CounterMetricFamily("rmq_remoting_connections_served",
                                       "RocketMQ remoting connections served, by transport (plain or TLS)",
                                       labels=["transport"])
        for transport in TRANSPORTS:
            accepted.add_metric([transport], self.server.served[transport])
        yield accepted
