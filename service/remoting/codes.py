"""Request and response codes (RocketMQ RequestCode / ResponseCode / RemotingSysResponseCode),
and the extFields MixAll names."""

from __future__ import annotations

ZONE_NAME = "__ZONE_NAME"  # MixAll.ZONE_NAME: the broker's zone, among its extFields
ZONE_MODE = "__ZONE_MODE"  # MixAll.ZONE_MODE: a client's -Drocketmq.zone.mode (DynamicalExtFieldRPCHook)

# request codes a NameServer answers; a new one also needs its handler in dispatch.py's
# HANDLERS and its role in acl.py (READS or BROKER_REQUESTS, else the admin role's)
PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
NOTIFY_MIN_BROKER_ID_CHANGE = 905  # NameServer -> broker (RocketMQ 5), oneway
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
WIPE_WRITE_PERM_OF_BROKER = 205
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
DELETE_TOPIC_IN_NAMESRV = 216
REGISTER_TOPIC_IN_NAMESRV = 217
GET_KVLIST_BY_NAMESPACE = 219
GET_TOPICS_BY_CLUSTER = 224
GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
GET_UNIT_TOPIC_LIST = 311
GET_HAS_UNIT_SUB_TOPIC_LIST = 312
GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
UPDATE_NAMESRV_CONFIG = 318
GET_NAMESRV_CONFIG = 319
QUERY_DATA_VERSION = 322
ADD_WRITE_PERM_OF_BROKER = 327
GET_BROKER_MEMBER_GROUP = 901
BROKER_HEARTBEAT = 904

# response codes
SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
TOPIC_NOT_EXIST = 17
QUERY_NOT_FOUND = 22
NO_PERMISSION = 16

# MQVersion.Version ordinals that change the wire format (checked in MQVersion.java)
V3_0_11 = 37     # from here REGISTER_BROKER carries a RegisterBrokerBody, before a bare wrapper
V4_9_4 = 401     # from here GET_ROUTEINFO_BY_TOPIC answers standard JSON (quoted map keys)
V5_0_0 = 413     # from here a compressed RegisterBrokerBody ends with the queue-mapping section
V5_3_3 = 479     # MQVersion.CURRENT_VERSION of RocketMQ 5.3.3: the version our answers carry

NAMES = {
    value: name for name, value in dict(globals()).items()
    if name.isupper() and isinstance(value, int) and not name.startswith("V") and value >= 100
}

RESPONSE_NAMES = {
    value: name for name, value in dict(globals()).items()
    if name.isupper() and isinstance(value, int) and not name.startswith("V") and value < 100
}
