"""RocketMQ's ACL signature on remoting requests, checked against the tokens file's key pairs.

A signing client (the Java client's AclClientRPCHook, ali-ons with accessKey/secretKey,
the C++ client's session credentials) adds the ext fields ``AccessKey``, ``Signature``
(and ``SecurityToken`` when it has one, and whatever else it signs, e.g. ali-ons' and the
C++ client's ``OnsChannel``). The signature is Base64(HmacSHA1(secretKey, the UTF-8 bytes
of the values of every other ext field in field-name order, then the body)), as RocketMQ's
AclUtils/AclSigner compute it and its PlainAccessValidator checks it.

A refusal is answered as a RocketMQ broker with the plain ACL (4.x to 5.2) answers one:
its RPC hook throws an AclException, and the remoting layer answers any exception from a
hook with SYSTEM_ERROR (1) and the exception as the remark
(``org.apache.rocketmq.acl.common.AclException: <message>``; RocketMQ appends the throwing
stack frame, which we leave out). The messages are PlainPermissionManager's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from service import auth
from service.addresses import AddressList
from service.logs import printable
from service.remoting import codes
from service.remoting.codec import Command

ACCESS_KEY, SIGNATURE = "AccessKey", "Signature"

# What each request needs: reads follow RMQ_AUTH_READS as over HTTP, a broker's own requests
# the broker role, everything else the admin role: a new code left out here fails closed.
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


def _java_order(item: tuple[str, str]) -> bytes:
    # a TreeMap<String, ...> orders by UTF-16 code unit, which differs from code point order
    # only past U+FFFF; UTF-16-BE bytes compare in code unit order
    return item[0].encode("utf-16-be")


def signature(secret_key: str, ext_fields: dict[str, str], body: bytes) -> str:
    """Base64(HmacSHA1(secretKey, values of all ext fields but Signature, by name, then the body))."""
    content = "".join(v for k, v in sorted(ext_fields.items(), key=_java_order) if k != SIGNATURE)
    content = content.encode("utf-8") + (body or b"")
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


# e.toString() of the exception RocketMQ's ACL throws: the start of every refusal's remark
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


def refusal(keys: auth.TokenFile, reads: str, cmd: Command, peer: str = "",
            white: AddressList | None = None) -> str | None:
    """The remark refusing `cmd` from the address `peer`, or None when it may go on
    (checked in PlainPermissionManager's order).

    ``white`` (RMQ_REMOTING_WHITE_ADDRESSES) lets a broker's requests and the reads
    through unsigned, as RocketMQ's ``globalWhiteRemoteAddresses`` lets everything through:
    admin requests still need a signed admin key, because one whitelisted host (a
    broker's) must not be able to wipe write permissions, delete topics or rewrite the KV
    config of the whole estate. A key pair limited to addresses (``from=`` in the tokens
    file) is refused from any other; in RocketMQ a ``whiteRemoteAddress`` match instead
    skips the signature check, and a mismatch is no refusal."""
    need = required(cmd.code)
    if need == auth.READ and reads == "open":
        return None
    if white is not None and need != auth.ADMIN and white.matches(peer):
        return None
    access_key = cmd.ext_fields.get(ACCESS_KEY)
    if access_key is None:
        return ACL_EXCEPTION + "No accessKey is configured"
    known = keys.key(access_key)
    if known is None:
        return ACL_EXCEPTION + f"No acl config for {access_key}"
    role, secret, addresses = known
    if addresses is not None and not addresses.matches(peer):
        # the patterns stay out of the remark: whoever holds an access key need not learn where it works
        return ACL_EXCEPTION + f"Check white remote address failed for accessKey={access_key}: {peer} is not allowed"
    presented = cmd.ext_fields.get(SIGNATURE, "")
    if not hmac.compare_digest(signature(secret, cmd.ext_fields, cmd.body).encode(), presented.encode()):
        return ACL_EXCEPTION + f"Check signature failed for accessKey={access_key}"
    if not auth.allowed(role, need, reads):
        # only admin requests can be out of a valid key's reach (broker and read requests take any role)
        return ACL_EXCEPTION + f"Need admin permission for request code={cmd.code}, but accessKey={access_key} is not"
    return None


def refusal_line(cmd: Command, peer: str, remark: str, white: AddressList | None) -> str:
    """What the log says of a refusal (after ``refused``): the request, the client's
    address, the broker it names or the access key it signed with, and why."""
    name = codes.NAMES.get(cmd.code, f"request code {cmd.code}")
    fields = cmd.ext_fields
    who = [f"from {peer or 'an unknown address'}"]
    broker = " at ".join(printable(v) for v in (fields.get("brokerName"), fields.get("brokerAddr")) if v)
    if broker:
        who.append(f"broker {broker}")
    access_key = fields.get(ACCESS_KEY)
    who.append(f"accessKey {printable(access_key)}" if access_key is not None else "unsigned")
    reason = printable(remark.removeprefix(ACL_EXCEPTION), 512)  # it may quote the access key
    if access_key is None and white is not None:
        if required(cmd.code) == auth.ADMIN:
            reason += " (an admin request: RMQ_REMOTING_WHITE_ADDRESSES admits broker requests and reads only)"
        else:
            reason += f" ({peer} matches no RMQ_REMOTING_WHITE_ADDRESSES pattern)"
    return f"RocketMQ {name} {', '.join(who)}: {reason}"
