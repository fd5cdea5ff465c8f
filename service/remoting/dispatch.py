"""The dispatcher: each request code's handler named in one table, run on the worker's
context (context.py's ``HandlerContext``), its failure answered.
The brokers' requests are broker_handlers.py's, the clients' reads and the operators'
changes handlers.py's.
"""

from __future__ import annotations

import asyncio
import logging

from service.registry import Busy
from service.remoting import acl, codes
from service.remoting.broker_handlers import broker_heartbeat, query_data_version, register_broker, unregister_broker
from service.remoting.codec import Command, RemotingError, fail
from service.remoting.connection import CHANNEL
from service.remoting.context import Handler, HandlerContext
from service.remoting.handlers import (
    broker_member_group,
    cluster_info,
    delete_kv,
    delete_topic,
    get_kv,
    get_route,
    kv_list,
    namesrv_config,
    put_kv,
    register_topic,
    topic_list,
    update_namesrv_config,
    write_perm,
)
from service.store import NotReplicated, OutcomeUnknown, StoreRefusing, StoreUnavailable, outcome_text

# the logger its lines carried before the dispatcher had a module of its own (log filters key on it)
log = logging.getLogger("service.remoting.handlers")


_timeout = getattr(asyncio, "timeout", None)

# requests that change nothing: a failure's answer says the store is unavailable, not what
# became of a change (QUERY_DATA_VERSION is not one: it refreshes the broker's heartbeat)
READS = frozenset({
    codes.GET_KV_CONFIG, codes.GET_ROUTEINFO_BY_TOPIC, codes.GET_BROKER_CLUSTER_INFO,
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, codes.GET_KVLIST_BY_NAMESPACE, codes.GET_TOPICS_BY_CLUSTER,
    codes.GET_SYSTEM_TOPIC_LIST_FROM_NS, codes.GET_UNIT_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_TOPIC_LIST,
    codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, codes.GET_BROKER_MEMBER_GROUP, codes.GET_NAMESRV_CONFIG,
})

HANDLERS: dict[int, Handler] = {
    codes.PUT_KV_CONFIG: put_kv,
    codes.GET_KV_CONFIG: get_kv,
    codes.DELETE_KV_CONFIG: delete_kv,
    codes.REGISTER_BROKER: register_broker,
    codes.UNREGISTER_BROKER: unregister_broker,
    codes.GET_ROUTEINFO_BY_TOPIC: get_route,
    codes.GET_BROKER_CLUSTER_INFO: cluster_info,
    codes.WIPE_WRITE_PERM_OF_BROKER: write_perm("wipe"),
    codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic_list("all"),
    codes.DELETE_TOPIC_IN_NAMESRV: delete_topic,
    codes.REGISTER_TOPIC_IN_NAMESRV: register_topic,
    codes.GET_KVLIST_BY_NAMESPACE: kv_list,
    codes.GET_TOPICS_BY_CLUSTER: topic_list("cluster"),
    codes.GET_SYSTEM_TOPIC_LIST_FROM_NS: topic_list("system"),
    codes.GET_UNIT_TOPIC_LIST: topic_list("unit"),
    codes.GET_HAS_UNIT_SUB_TOPIC_LIST: topic_list("unit-sub"),
    codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: topic_list("unit-sub-without-unit"),
    codes.QUERY_DATA_VERSION: query_data_version,
    codes.ADD_WRITE_PERM_OF_BROKER: write_perm("add"),
    codes.BROKER_HEARTBEAT: broker_heartbeat,
    codes.GET_BROKER_MEMBER_GROUP: broker_member_group,
    codes.GET_NAMESRV_CONFIG: namesrv_config,
    codes.UPDATE_NAMESRV_CONFIG: update_namesrv_config,
}


async def dispatch(ctx: HandlerContext, cmd: Command, timeout: float) -> Command:
    """The answer to one request; never raises (a failed request must not end the connection)."""
    if ctx.keys is not None:
        channel = CHANNEL.get()
        peer = channel.peer if channel else ""
        refused = acl.refusal(ctx.keys, ctx.settings.auth_reads, cmd, peer, ctx.white)
        if refused is not None:
            ctx.refusals.refused(peer, acl.refusal_line(cmd, peer, refused, ctx.white))
            return fail(cmd, codes.SYSTEM_ERROR, refused)
    handler = HANDLERS.get(cmd.code)
    if handler is None:
        return fail(cmd, codes.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
    try:
        if _timeout is not None:  # Python 3.11+: no extra task per request
            async with _timeout(timeout):
                return await handler(ctx, cmd)
        return await asyncio.wait_for(handler(ctx, cmd), timeout)
    except RemotingError as e:
        return fail(cmd, e.code, e.remark)
    except Busy as e:  # counted and logged once per burst by the registry
        return fail(cmd, codes.SYSTEM_BUSY, str(e))
    except StoreUnavailable as e:
        if not isinstance(e, (StoreRefusing, NotReplicated)):  # refusals are logged once per burst by the store
            ctx.failures.write(type(e).__name__, f"Redis unavailable for request code {cmd.code}: {e}")
        return fail(cmd, codes.SYSTEM_ERROR, outcome_text(e, read=cmd.code in READS))
    except asyncio.TimeoutError:  # the handler's own calls may have gone through
        # a frozen Redis makes every request late at once: one line per window, as its failures
        ctx.failures.write("TimeoutError", f"request code {cmd.code} took longer than {timeout:.1f} s")
        return fail(cmd, codes.SYSTEM_ERROR, outcome_text(OutcomeUnknown(), read=cmd.code in READS))
    except Exception:
        log.exception("unhandled error in request code %s", cmd.code)
        return fail(cmd, codes.SYSTEM_ERROR, "internal error; see the registry's log")
