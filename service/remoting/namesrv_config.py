"""What GET_NAMESRV_CONFIG answers: the Java NameServer's own keys where they mean
something here, then the worker's settings, as ``java.util.Properties`` text with Java's
formatting (``true``/``false``; a setting that is not set is left out, as
``MixAll.object2Properties`` leaves out nulls).

Java's keys (NamesrvConfig and NettyServerConfig, 4.9.8 and 5.x) that apply:
``listenPort``, ``orderMessageEnable``, ``deleteTopicWithBrokerRegistration``,
``scanNotActiveBrokerInterval``, ``returnOrderTopicConfigToBroker`` (a registration's
answer always carries ORDER_TOPIC_CONFIG), ``enableAllTopicList`` and ``enableTopicList``
(always on), ``supportActingMaster``, ``notifyMinBrokerIdChanged``. Left out because nothing here
matches them: ``rocketmqHome``, ``kvConfigPath`` and ``configStorePath`` (no files: the KV
config lives in Redis, settings come from the environment), ``productEnvName``,
``clusterTest``, Netty's thread and buffer sizes.
"""

from __future__ import annotations

from service.config import Settings

# Settings left out: they name credentials (the URL may hold Redis' password; the file's
# path is the one secret mount an attacker would want to know about).
SECRET_SETTINGS = frozenset({"redis_url", "auth_tokens_file"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def java(value: object) -> str:
    """A value as Java's toString writes it (Boolean: true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def properties(settings: Settings, listen_port: int) -> dict[str, str]:
    """Java's keys first, then every setting (camelCase, as Java spells its fields)."""
    values: dict[str, object] = {
        "listenPort": listen_port,
        "orderMessageEnable": settings.order_message_enable,
        "deleteTopicWithBrokerRegistration": settings.delete_topic_with_broker_registration,
        "scanNotActiveBrokerInterval": settings.scan_interval_ms,
        "returnOrderTopicConfigToBroker": True,
        "enableAllTopicList": True,
        "enableTopicList": True,
        "supportActingMaster": settings.support_acting_master,
        "notifyMinBrokerIdChanged": settings.notify_min_broker_id_changed,
    }
    for name, value in settings:  # the model's fields, in their order
        if name not in SECRET_SETTINGS and value is not None:
            values.setdefault(_camel(name), value)
    return {k: java(v) for k, v in values.items()}
