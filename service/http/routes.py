"""The HTTP front's route table: every path of docs/api.md, its handler and the role it needs."""

from __future__ import annotations

import functools

from aiohttp import web

from service import auth
from service.http import views
from service.http.app_keys import CACHE, add_route
from service.http.ui import add_ui_routes


def add_routes(app: web.Application) -> None:
    # Path parameters take any segment, so a bad name gets the 400 INVALID_REQUEST of
    # name_param rather than a router 404, and names with braces reach their handler
    # (aiohttp's default parameter pattern excludes braces).
    add = functools.partial(add_route, app)

    add("POST", "/v1/brokers/register", views.register_broker, auth.BROKER)
    add("POST", "/v1/brokers/heartbeat", views.heartbeat, auth.BROKER)
    add("POST", "/v1/brokers/query-data-version", views.query_data_version, auth.BROKER)
    add("POST", "/v1/brokers/unregister", views.unregister_broker, auth.BROKER)
    add("POST", "/v1/brokers/{brokerName:[^/]+}/wipe-write-perm", views.wipe_write_perm, auth.ADMIN)
    add("POST", "/v1/brokers/{brokerName:[^/]+}/add-write-perm", views.add_write_perm, auth.ADMIN)
    add("GET", "/v1/routes/{topic:[^/]+}", views.route_reader(app[CACHE]), auth.READ)
    add("GET", "/v1/cluster", views.get_cluster, auth.READ)
    add("GET", "/v1/topics", views.topic_list("all"), auth.READ)
    for which in ("system", "unit", "unit-sub", "unit-sub-without-unit"):
        add("GET", f"/v1/topics/{which}", views.topic_list(which), auth.READ)
    add("GET", "/v1/clusters/{clusterName:[^/]+}/topics", views.cluster_topics, auth.READ)
    add("DELETE", "/v1/topics/{topic:[^/]+}", views.delete_topic, auth.ADMIN)
    add("PUT", "/v1/kv/{namespace:[^/]+}/{key:[^/]+}", views.kv_put, auth.ADMIN)
    add("GET", "/v1/kv/{namespace:[^/]+}/{key:[^/]+}", views.kv_get, auth.ADMIN)
    add("DELETE", "/v1/kv/{namespace:[^/]+}/{key:[^/]+}", views.kv_delete, auth.ADMIN)
    add("GET", "/v1/kv/{namespace:[^/]+}", views.kv_table, auth.ADMIN)
    add("GET", "/healthz", views.healthz, auth.OPEN)
    add("GET", "/readyz", views.readyz, auth.OPEN)
    add("GET", "/metrics", views.metrics, auth.OPEN)
    add("GET", "/v1/openapi.json", views.openapi, auth.OPEN)
    add_ui_routes(app)
