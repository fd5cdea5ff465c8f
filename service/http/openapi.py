"""The HTTP contract (docs/api.md) as an OpenAPI 3 document, served at /v1/openapi.json.

Request schemas come from the pydantic models that validate them, so the document
cannot drift from what the service accepts.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from service import __version__
from service.models import (
    ADDR_PATTERN,
    NAME_MAX,
    SKIP_REASONS,
    TOPIC_MAX,
    HeartbeatRequest,
    KvPutRequest,
    QueryDataVersionRequest,
    RegisterRequest,
    UnregisterRequest,
)
from service.registry import SKIPPED_LISTED

REF = "#/components/schemas/{model}"

_STR = {"type": "string"}
_INT = {"type": "integer"}
# any characters (percent-encoded in a path), as a NameServer takes them
_NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX}
_ADDR_MAP = {"type": "object", "additionalProperties": {"type": "string", "pattern": ADDR_PATTERN}}

RESPONSES: dict[str, dict[str, Any]] = {
    "Error": {"type": "object", "required": ["error", "message"],
              "properties": {"error": _STR, "message": _STR}},
    "Empty": {"type": "object"},
    "RegisterResult": {"type": "object", "properties": {
        "masterAddr": {"type": ["string", "null"]}, "haServerAddr": {"type": ["string", "null"]},
        "kvTable": {"type": "object", "additionalProperties": _STR},
        # only when topic configs were left out: they are not registered and have no route
        "skippedTopics": {"type": "array", "maxItems": SKIPPED_LISTED, "items": {
            "type": "object", "required": ["topic", "reason", "message"], "properties": {
                "topic": _STR, "reason": {"enum": list(SKIP_REASONS)},
                "message": _STR}}},
        "skippedTopicCount": {"type": "integer", "minimum": 1}}},
    "DataVersionResult": {"type": "object", "properties": {
        "changed": {"type": "boolean"},
        "nameServerDataVersion": {"oneOf": [{"$ref": REF.format(model="DataVersion")}, {"type": "null"}]}}},
    "QueueData": {"type": "object", "properties": {
        "brokerName": _STR, "readQueueNums": _INT, "writeQueueNums": _INT, "perm": _INT, "topicSysFlag": _INT}},
    "BrokerData": {"type": "object", "properties": {
        "cluster": _STR, "brokerName": _STR, "brokerAddrs": _ADDR_MAP,
        # a 5.x broker's, only when set
        "enableActingMaster": {"type": "boolean"}, "zoneName": _STR}},
    "TopicRouteData": {"type": "object", "properties": {
        "orderTopicConf": {"type": ["string", "null"]},
        "queueDatas": {"type": "array", "items": {"$ref": REF.format(model="QueueData")}},
        "brokerDatas": {"type": "array", "items": {"$ref": REF.format(model="BrokerData")}},
        "filterServerTable": {"type": "object", "additionalProperties": {"type": "array", "items": _STR}}}},
    "ClusterInfo": {"type": "object", "properties": {
        "brokerAddrTable": {"type": "object", "additionalProperties": {"$ref": REF.format(model="BrokerData")}},
        "clusterAddrTable": {"type": "object", "additionalProperties": {"type": "array", "items": _STR}}}},
    "TopicList": {"type": "object", "properties": {
        "topicList": {"type": "array", "items": _STR}, "brokerAddr": {"type": ["string", "null"]}}},
    "WipeResult": {"type": "object", "properties": {"wipeTopicCount": _INT}},
    "AddResult": {"type": "object", "properties": {"addTopicCount": _INT}},
    "KvValue": {"type": "object", "properties": {"value": _STR}},
    "KvTable": {"type": "object", "properties": {"table": {"type": "object", "additionalProperties": _STR}}},
    "Status": {"type": "object", "properties": {"status": _STR, "version": _STR}},
    "Readiness": {"type": "object", "properties": {
        "status": {**_STR, "description": "ready, or not ready (503, with the API's error and message)"},
        "writes": {**_STR, "description": "ok, or refused: <causes> while Redis refuses writes"},
        "redis": {**_STR, "description": "ok, or unreachable (with ?exclude=redis as of the last change-record poll)"},
        "error": {**_STR, "description": "503 only: STORE_UNAVAILABLE"}, "message": {**_STR, "description": "503 only: why"},
        "store": {**_STR, "description": "present only after a store reset, until the fleet is back: what was lost"}}},
    "StoreResets": {"type": "object", "properties": {
        "resets": {**_INT, "description": "store resets this worker noticed since it started"},
        "lastReset": {"type": ["object", "null"], "description": "the last one, as the store records it for every worker (one started after it included); null before any", "properties": {
            "at": _INT, "lostGroups": _INT, "lostTopics": _INT, "lostBrokers": _INT, "lostChanges": _INT, "gone": _STR,
            "groupsNow": _INT, "backAt": {"type": ["integer", "null"]},
            "recent": {"type": "boolean", "description": "the fleet is not back yet (and it is less than an hour old)"},
            "text": _STR}}}},
    "LiveBroker": {"type": "object", "properties": {
        "brokerAddr": _STR, "cluster": _STR, "brokerName": _STR, "brokerId": _INT,
        "haServerAddr": {"type": ["string", "null"]}, "lastUpdateTimestamp": {"type": ["integer", "null"]},
        "heartbeatTimeoutMillis": {"type": ["integer", "null"]}, "ageMs": {"type": ["integer", "null"]},
        "alive": {"type": "boolean"}, "deadline": {"type": ["integer", "null"]},
        "dataVersion": {"oneOf": [{"$ref": REF.format(model="DataVersion")}, {"type": "null"}]},
        "enableActingMaster": {"type": "boolean"}, "zoneName": {"type": ["string", "null"]}}},
    "LiveBrokers": {"type": "object", "properties": {
        "now": _INT, "brokers": {"type": "array", "items": {"$ref": REF.format(model="LiveBroker")}},
        "nextCursor": {"type": ["string", "null"]}}},
    "Departures": {"type": "object", "required": ["departures"], "properties": {"departures": {
        "type": "array", "description": "the brokers that left in the last hour (at most 1,000), newest first",
        "items": {"type": "object", "required": ["brokerAddr", "brokerName", "cluster", "brokerId", "cause", "at"],
                  "properties": {
                      "brokerAddr": _STR, "brokerName": _STR, "cluster": _STR, "brokerId": {"type": ["integer", "null"]},
                      "cause": {"enum": ["unregistered", "connection closed", "expired"]},
                      "at": {**_INT, "description": "when it was removed: ms since the epoch, Redis time"},
                      "backAt": {"type": ["integer", "null"], "description": "when a scan pass first found it registered again (ms, Redis time); null until then"}}}}}},
    "TopicSummary": {"type": "object", "properties": {"topics": {"type": "array", "items": {"type": "object", "properties": {
        "topic": _STR, "orderTopicConf": {"type": ["string", "null"]},
        "queueDatas": {"type": "array", "items": {"$ref": REF.format(model="QueueData")}}}}},
        "nextCursor": {"type": ["string", "null"]}, "total": _INT, "orderTopics": _INT,
        "examined": {**_INT, "description": "with cluster= or system=0: topics looked at for this page"},
        "skipped": {**_INT, "description": "with cluster= or system=0: of those, the ones the filters left out"}}},
    "WriteQueues": {"type": "object", "properties": {
        "tally": {"type": ["object", "null"], "description": "the last complete pass, null before the first", "properties": {
            "groups": {"type": "array", "items": {"type": "object", "properties": {
                "brokerName": _STR, "cluster": _STR, "topics": _INT,
                "writeQueues": {**_INT, "description": "writeQueueNums summed over the group's topics whose perm has W"}}}},
            "version": _INT, "startedAt": _INT, "finishedAt": _INT}},
        "pass": {"type": ["object", "null"], "description": "the pass under way: groups read of all",
                 "properties": {"read": _INT, "of": _INT}}}},
}

# (method, path) -> (summary, request model, success schema, error statuses)
OPERATIONS: dict[tuple[str, str], tuple[str, type[BaseModel] | None, str, tuple[int, ...]]] = {
    ("POST", "/v1/brokers/register"): ("Register a broker (full registration)", RegisterRequest, "RegisterResult", (400, 409, 413, 503)),
    ("POST", "/v1/brokers/heartbeat"): ("Keep a registered broker alive", HeartbeatRequest, "Empty", (400, 404, 413, 503)),
    ("POST", "/v1/brokers/query-data-version"): ("Compare a broker's data version; refreshes liveness", QueryDataVersionRequest, "DataVersionResult", (400, 413, 503)),
    ("POST", "/v1/brokers/unregister"): ("Unregister a broker", UnregisterRequest, "Empty", (400, 413, 503)),
    ("POST", "/v1/brokers/{brokerName}/wipe-write-perm"): ("Clear the write bit of a broker's queues", None, "WipeResult", (400, 503)),
    ("POST", "/v1/brokers/{brokerName}/add-write-perm"): ("Set a broker's queues to read+write", None, "AddResult", (400, 503)),
    ("GET", "/v1/routes/{topic}"): ("A topic's route", None, "TopicRouteData", (400, 404, 503)),
    ("GET", "/v1/cluster"): ("Cluster info", None, "ClusterInfo", (503,)),
    ("GET", "/v1/topics"): ("All topics", None, "TopicList", (503,)),
    ("GET", "/v1/topics/system"): ("Cluster and broker names, as RocketMQ reports them", None, "TopicList", (503,)),
    ("GET", "/v1/topics/unit"): ("Unit topics", None, "TopicList", (503,)),
    ("GET", "/v1/topics/unit-sub"): ("Unit-sub topics", None, "TopicList", (503,)),
    ("GET", "/v1/topics/unit-sub-without-unit"): ("Unit-sub topics without the unit flag", None, "TopicList", (503,)),
    ("GET", "/v1/clusters/{clusterName}/topics"): ("Topics of a cluster", None, "TopicList", (400, 503)),
    ("DELETE", "/v1/topics/{topic}"): ("Delete a topic's route (from one cluster's brokers with ?clusterName=)", None, "Empty", (400, 503)),
    ("PUT", "/v1/kv/{namespace}/{key}"): ("Put a KV config entry", KvPutRequest, "Empty", (400, 413, 503)),
    ("GET", "/v1/kv/{namespace}/{key}"): ("Get a KV config entry", None, "KvValue", (400, 404, 503)),
    ("DELETE", "/v1/kv/{namespace}/{key}"): ("Delete a KV config entry", None, "Empty", (400, 503)),
    ("GET", "/v1/kv/{namespace}"): ("A KV namespace", None, "KvTable", (400, 404, 503)),
    ("GET", "/v1/brokers/live"): ("A page of registered broker addresses, by broker group, with their heartbeat age against their timeout (Redis time)", None, "LiveBrokers", (400, 503)),
    ("GET", "/v1/topics/summary"): ("A page of topics in name order with their QueueDatas and order config (the dashboard's table)", None, "TopicSummary", (400, 503)),
    ("GET", "/v1/brokers/write-queues"): ("Writable write queues per broker group over every topic (the dashboard's chart); each request reads a bounded slice of the next pass", None, "WriteQueues", (503,)),
    ("GET", "/v1/departures"): ("The brokers that left in the last hour (unregistered, connection closed, expired), newest first, the same from every worker", None, "Departures", (503,)),
    ("GET", "/healthz"): ("Liveness", None, "Status", ()),
    ("GET", "/v1/store"): ("The store resets this worker noticed (Redis lost its data), the last one with what was lost", None, "StoreResets", ()),
    ("GET", "/readyz"): ("Readiness: Redis answers and the scripts are loaded; with ?exclude=redis, the worker's own "
                         "(serving, not draining), which the Kubernetes readiness probe asks", None, "Readiness", (400, 503)),
}

_PARAM_LIMITS = {"topic": TOPIC_MAX}


def _parameters(path: str) -> list[dict[str, Any]]:
    params = []
    for part in path.split("/"):
        if part.startswith("{"):
            name = part[1:-1]
            params.append({"name": name, "in": "path", "required": True,
                           "schema": {**_NAME, "maxLength": _PARAM_LIMITS.get(name, NAME_MAX)}})
    if path == "/v1/topics/{topic}":
        params.append({"name": "clusterName", "in": "query", "required": False, "schema": _NAME})
    if path in _PAGED:
        default, most, what = _PAGED[path]
        params += [
            {"name": "cursor", "in": "query", "required": False, "schema": _STR,
             "description": "the previous page's nextCursor; absent for the first page"},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": most, "default": default},
             "description": f"{what} in this page"},
        ]
    if path == "/v1/topics/summary":
        params += [
            {"name": "q", "in": "query", "required": False, "schema": {**_STR, "maxLength": 255},
             "description": "only topics whose name starts with this"},
            {"name": "order", "in": "query", "required": False, "schema": {"type": "string", "enum": ["1", "true"]},
             "description": "only order topics (with an ORDER_TOPIC_CONFIG entry)"},
            {"name": "cluster", "in": "query", "required": False, "schema": {**_STR, "maxLength": 255},
             "description": "only topics a broker group of this cluster serves (at most 10 pages read per request)"},
            {"name": "system", "in": "query", "required": False,
             "schema": {"type": "string", "enum": ["0", "1", "true", "false"], "default": "1"},
             "description": "0: without RocketMQ's own topics (TopicValidator's, %RETRY%, %DLQ%, cluster and broker names)"},
        ]
    if path == "/v1/routes/{topic}":
        params.append({"name": "zone", "in": "query", "required": False, "schema": {**_NAME, "pattern": r"\S"},
                       "description": "the route as a RocketMQ 5 client in zone mode gets it (ZoneRouteRPCHook): only "
                                      "the broker groups registered with this zoneName (any case) and the groups "
                                      "without a master, with their queueDatas and filter servers"})
    if path == "/readyz":
        params.append({"name": "exclude", "in": "query", "required": False, "schema": {"type": "string", "enum": ["redis"]},
                       "description": "redis: leave Redis out (200 while Redis is unreachable, telling it in `redis`); "
                                      "503 only while the worker drains"})
    if path in _STALE_READS:
        params.append({"name": "stale", "in": "query", "required": False, "allowEmptyValue": True, "schema": _STR,
                       "description": "while Redis is unreachable, the last answer this worker knew (at most "
                                      "RMQ_STALE_MAX_MS old), its age in the X-Registry-Age-Ms header"})
    return params


# path -> (default limit, largest limit, what a page counts)
_PAGED = {"/v1/topics/summary": (200, 300, "topics"), "/v1/brokers/live": (500, 1000, "broker groups")}
_STALE_READS = {"/v1/routes/{topic}", "/v1/cluster", "/v1/topics", "/v1/topics/system", "/v1/topics/unit",
                "/v1/topics/unit-sub", "/v1/topics/unit-sub-without-unit", "/v1/clusters/{clusterName}/topics"}


def openapi_document(app: web.Application | None = None) -> dict[str, Any]:
    models = [m for (_, m, _, _) in OPERATIONS.values() if m is not None]
    _, defs = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    schemas = {**defs.get("$defs", {}), **RESPONSES}
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), (summary, model, ok, errors) in OPERATIONS.items():
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method.lower()}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '').replace('-', '_')}",
            "parameters": _parameters(path),
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": REF.format(model=ok)}}}}},
        }
        if model is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}}
        for status in errors:
            op["responses"][str(status)] = {"description": "error", "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}}}
        paths.setdefault(path, {})[method.lower()] = op
    paths["/"] = {"get": {"summary": "The dashboard page (HTML)", "operationId": "get_dashboard",
                          "responses": {"200": {"description": "HTML page", "content": {"text/html": {"schema": _STR}}}}}}
    paths["/ui/{path}"] = {"get": {"summary": "The dashboard's script and style sheet", "operationId": "get_ui_asset",
                                   "parameters": [{"name": "path", "in": "path", "required": True, "schema": _STR}],
                                   "responses": {"200": {"description": "a static file"}, "404": {"description": "no such file"}}}}
    paths["/metrics"] = {"get": {"summary": "Prometheus metrics", "operationId": "get_metrics",
                                 "responses": {"200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": _STR}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "RocketMQ route registry", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "a token of role broker or admin (RMQ_AUTH_TOKENS_FILE)"}},
        },
        # auth is off by default, on in every deployment: a token is optional in the contract
        "security": [{}, {"bearer": []}],
    }
