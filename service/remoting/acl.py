"""RocketMQ's ACL signature on remoting requests, checked against the tokens file's key pairs.

A signing client (the Java client's AclClientRPCHook, ali-ons with accessKey/secretKey,
the C++ client's session credentials) adds the ext fields ``AccessKey``, ``Signature``
(and ``SecurityToken`` when it has one, and whatever else it signs, e.g. the C++
client's ``OnsChannel``). The signature is Base64(HmacSHA1(secretKey, the values of every
other ext field in field-name order, then the body)), as RocketMQ's AclUtils computes it
and its PlainAccessValidator checks it. A refusal is answered as RocketMQ answers a failed
ACL check from its RPC hook: SYSTEM_ERROR, the check's message as the remark.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from service import auth
from service.remoting import codes
from service.remoting.codec import Command

ACCESS_KEY, SIGNATURE = "AccessKey", "Signature"

# What each request needs: reads follow RMQ_AUTH_READS as over HTTP, a broker's own
# requests need the broker role, everything else the admin role.
READS = frozenset({
    codes.GET_ROUTEINFO_BY_TOPIC, codes.GET_BROKER_CLUSTER_INFO, codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
    codes.GET_TOPICS_BY_CLUSTER, codes.GET_SYSTEM_TOPIC_LIST_FROM_NS, codes.GET_UNIT_TOPIC_LIST,
    codes.GET_HAS_UNIT_SUB_TOPIC_LIST, codes.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, codes.GET_BROKER_MEMBER_GROUP,
})
BROKER_REQUESTS = frozenset({codes.REGISTER_BROKER, codes.UNREGISTER_BROKER, codes.QUERY_DATA_VERSION,
                             codes.BROKER_HEARTBEAT})


def required(code: int) -> str:
    if code in READS:
        return auth.READ
    if code in BROKER_REQUESTS:
        return auth.BROKER
    return auth.ADMIN


def signature(secret_key: str, ext_fields: dict[str, str], body: bytes) -> str:
    content = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE).encode() + (body or b"")
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


def refusal(keys: auth.TokenFile, reads: str, cmd: Command) -> str | None:
    """Why `cmd` is refused, or None when it may go on."""
    need = required(cmd.code)
    if need == auth.READ and reads == "open":
        return None
    access_key = cmd.ext_fields.get(ACCESS_KEY)
    presented = cmd.ext_fields.get(SIGNATURE)
    if not access_key or not presented:
        return "No accessKey is configured: sign requests with an access key and secret key"
    known = keys.key(access_key)
    if known is None:
        return f"No acl config for {access_key}"
    role, secret = known
    if not hmac.compare_digest(signature(secret, cmd.ext_fields, cmd.body).encode(), presented.encode()):
        return f"Check signature failed for accessKey={access_key}"
    if not auth.allowed(role, need, reads):
        return f"No permission: accessKey={access_key} ({role}) may not {codes.NAMES.get(cmd.code, cmd.code)}"
    return None
