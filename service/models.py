"""Request documents and their validation (docs/api.md field names).

Names (cluster, broker name, topic, KV namespace and key) are any non-empty string up to
a length limit, as a NameServer takes them (RocketMQ's default broker name is the host
name, dots included); service/keys.py escapes them for Redis keys. Only the limits that
protect Redis remain: lengths, queue counts, KV value size.

Unknown fields are ignored everywhere: brokers send more of their TopicConfig than a
route needs (topicFilterType, attributes, ...), and newer brokers may add fields.

A topic config the registry cannot store is skipped, not the whole registration (a
NameServer takes them all, and one odd topic must not take a broker's other routes
away): ``TopicConfigWrapper.skipped`` lists them for the log and the metric.
"""

from __future__ import annotations

import operator
import re
from itertools import repeat
from operator import add, mul
from typing import Annotated, Any, NamedTuple, TypeVar

from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    ModelWrapValidatorHandler,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from service.config import Settings

ADDR_PATTERN = r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$"
TOPIC_MAX = 255
NAME_MAX = 255  # cluster and broker names, KV namespaces and keys
KV_VALUE_MAX_BYTES = 64 * 1024  # UTF-8 bytes: a value travels whole in every registration answer
NAME_RULE = "1 to {max} characters"
MAX_FILTER_SERVERS = 1024
MAX_ID = 2**31 - 1
MAX_LONG = 2**63 - 1

_port = re.compile(ADDR_PATTERN)


def _check_port(addr: str) -> str:
    m = _port.match(addr)
    if m is None or not 0 < int(m.group(2)) <= 65535:
        raise ValueError("port must be 1..65535")
    return addr


def kv_value_error(value: str) -> str | None:
    # a character is at most 4 bytes: short values need no encoding to be measured
    if len(value) * 4 > KV_VALUE_MAX_BYTES and len(value.encode()) > KV_VALUE_MAX_BYTES:
        return f"value must be at most {KV_VALUE_MAX_BYTES} bytes (UTF-8)"
    return None


def _check_kv_value(value: str) -> str:
    error = kv_value_error(value)
    if error:
        raise ValueError(error)
    return value


Topic = Annotated[StrictStr, StringConstraints(min_length=1, max_length=TOPIC_MAX)]
Name = Annotated[StrictStr, StringConstraints(min_length=1, max_length=NAME_MAX)]
# every address (broker, HA, filter server) gets the port range check, not only the pattern
Addr = Annotated[StrictStr, StringConstraints(pattern=ADDR_PATTERN, max_length=NAME_MAX), AfterValidator(_check_port)]
BrokerId = Annotated[StrictInt, Field(ge=0, le=MAX_ID)]
Long = Annotated[StrictInt, Field(ge=0, le=MAX_LONG)]

class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class DataVersion(_Doc):
    timestamp: Long
    counter: Long
    # RocketMQ 5's: the controller's master epoch, moved by a fail-over (0 before 5.0)
    stateVersion: Long = 0

    def canonical(self) -> str:
        """The form stored and compared inside Redis: one string per version, equal when
        RocketMQ 5's DataVersion.equals says so (stateVersion included). A stateVersion of 0
        is left out: the form every version had before stateVersion counted, so the versions
        stored by then still compare equal."""
        if self.stateVersion:
            return f'{{"timestamp":{self.timestamp},"counter":{self.counter},"stateVersion":{self.stateVersion}}}'
        return f'{{"timestamp":{self.timestamp},"counter":{self.counter}}}'


class TopicConfig(TypedDict):
    """One topic of a registration. A plain dict once validated: a broker may send 10,000
    of them, and building a model object for each took three times as long."""

    topicName: NotRequired[Topic | None]
    # the upper bound is a setting, checked per table in TopicConfigWrapper: one loop there
    # costs far less than a Python validator call per field on a 10,000-topic registration
    readQueueNums: Annotated[StrictInt, Field(ge=0)]
    writeQueueNums: Annotated[StrictInt, Field(ge=0)]
    perm: Annotated[StrictInt, Field(ge=0, le=7)]
    topicSysFlag: NotRequired[Annotated[StrictInt, Field(ge=0, le=MAX_ID)]]
    order: NotRequired[StrictBool]


TOPIC_CONFIG = TypeAdapter(TopicConfig)


def queue_count_error(config: TopicConfig, limit: int) -> str | None:
    for field in ("readQueueNums", "writeQueueNums"):
        if config[field] > limit:  # type: ignore[literal-required]
            return f"{field} must be between 0 and {limit}"
    return None


class Skipped(NamedTuple):
    """A topic config left out of a registration: its topic, why (a short label, the
    metric's), and pydantic's or our own words for it (the log's)."""

    topic: str
    reason: str
    message: str


# the metric's label by the TopicConfig field an error is about
_REASONS = {"[key]": "name", "topicName": "topic_name", "readQueueNums": "queue_nums",
            "writeQueueNums": "queue_nums", "perm": "perm"}
SKIP_REASONS = (*dict.fromkeys(_REASONS.values()), "invalid")


def _skipped_by_error(error: ValidationError) -> dict[str, Skipped]:
    """The topics of topicConfigTable that `error` finds fault with, first fault each."""
    bad: dict[str, Skipped] = {}
    for e in error.errors():
        loc = e["loc"]
        if len(loc) < 2 or loc[0] != "topicConfigTable":
            continue  # a document-level error: it stays an error
        topic = str(loc[1])
        if topic not in bad:
            reason = _REASONS.get(str(loc[2]), "invalid") if len(loc) > 2 else "invalid"
            bad[topic] = Skipped(topic, reason, e["msg"])
    return bad


# A TopicConfig's fields, read for a whole table in one C loop each (itemgetter is the
# fastest; a table where one is missing goes the slower way, or to the full validation).
_COLUMNS = tuple(map(operator.itemgetter, ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")))
_NAMES = (operator.itemgetter("topicName"), operator.methodcaller("get", "topicName"))
_ORDERS = (operator.itemgetter("order"), operator.methodcaller("get", "order", False))


def _column(configs: list[dict[str, Any]], getters: tuple[Any, Any]) -> list[Any]:
    try:
        return list(map(getters[0], configs))
    except KeyError:
        return list(map(getters[1], configs))


def plain_fingerprints(table: dict[Any, Any], max_queues: int, max_topics: int) -> dict[str, str] | None:
    """topic -> "readQueueNums,writeQueueNums,perm,topicSysFlag" (lua/_queues.lua's
    ``fingerprint``) when every topic config of `table` passes TopicConfig and the checks of
    TopicConfigWrapper as it stands, so validating them one by one would change nothing;
    None otherwise (the full validation then names what is wrong).

    The table is read a column at a time, each in a C loop (types, names), ranges are
    checked on each column's distinct values and a fingerprint string is made once per
    distinct value set (a broker's 10,000 topics have a handful): a loop of Python checks
    per topic was a large share of a 10,000-topic registration. No object per topic is made but the
    fingerprints' dict (a tuple each would set the garbage collector going)."""
    if len(table) > max_topics:
        return None
    if not table:
        return {}
    topics = list(table)
    configs = list(table.values())
    if set(map(type, topics)) != {str} or set(map(type, configs)) != {dict}:
        return None
    lengths = set(map(len, topics))
    if min(lengths) < 1 or max(lengths) > TOPIC_MAX:
        return None
    try:
        columns = [list(map(column, configs)) for column in _COLUMNS]
    except KeyError:
        return None  # no topicSysFlag (its default is the full validation's business)
    # every value's type, before a set merges True with 1 and 6.0 with 6
    if any(set(map(type, values)) != {int} for values in columns):
        return None
    distinct = [set(values) for values in columns]
    for values, top in zip(distinct, (max_queues, max_queues, 7, MAX_ID)):
        if min(values) < 0 or max(values) > top:
            return None
    names = _column(configs, _NAMES)
    if names != topics and any(n is not None and n != t for n, t in zip(names, topics)):
        return None
    if not set(map(type, _column(configs, _ORDERS))) <= {bool}:
        return None
    if all(len(d) == 1 for d in distinct):  # every topic alike
        return dict.fromkeys(topics, ",".join(str(next(iter(d))) for d in distinct))
    # each topic's values as one int, ((r * q + w) * 8 + p) * f_range + f, in C loops
    q, f_range = max_queues + 1, MAX_ID + 1
    r, w, p, f = columns
    keys = list(map(add, map(mul, map(add, map(mul, map(add, map(mul, r, repeat(q)), w), repeat(8)), p),
                             repeat(f_range)), f))
    fingerprint = {}
    for key in set(keys):
        rwp, flag = divmod(key, f_range)
        rw, perm = divmod(rwp, 8)
        fingerprint[key] = f"{rw // q},{rw % q},{perm},{flag}"
    return dict(zip(topics, map(fingerprint.__getitem__, keys)))


def _check_mappings(mappings: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for topic, info in mappings.items():
        bname = info.get("bname")
        if not isinstance(bname, str) or not valid_name(bname):
            raise ValueError(f"the queue mapping of {topic[:80]!r} must name its broker (bname: {name_rule()})")
    return mappings


# A 5.x broker's static topics: topic -> TopicQueueMappingInfo ({bname, currIdMap, epoch, ...}),
# kept as the broker sent it and answered in routes (topicQueueMappingByBroker).
QueueMappings = Annotated[dict[Topic, dict[str, Any]], AfterValidator(_check_mappings)]


class TopicConfigWrapper(_Doc):
    topicConfigTable: dict[Topic, TopicConfig] = Field(default_factory=dict)
    dataVersion: DataVersion
    topicQueueMappingInfoMap: QueueMappings = Field(default_factory=dict)
    _skipped: list[Skipped] = PrivateAttr(default_factory=list)
    _fingerprints: dict[str, str] | None = PrivateAttr(default=None)

    @property
    def skipped(self) -> list[Skipped]:
        """The topic configs left out of topicConfigTable, in the order found."""
        return self._skipped

    @property
    def fingerprints(self) -> dict[str, str] | None:
        """The table's fingerprints when validation made them on the way (a plain table:
        nearly every registration), else None."""
        return self._fingerprints

    @field_validator("topicConfigTable")
    @classmethod
    def _table_size(cls, v: dict[str, TopicConfig], info: ValidationInfo) -> dict[str, TopicConfig]:
        limit = (info.context or {}).get("max_topics", 100_000)
        if len(v) > limit:
            raise ValueError(f"at most {limit} topics per registration")
        return v

    @model_validator(mode="wrap")
    @classmethod
    def _skip_bad_topics(cls, data: Any, handler: ModelWrapValidatorHandler["TopicConfigWrapper"],
                         info: ValidationInfo) -> "TopicConfigWrapper":
        context = info.context or {}
        table = data.get("topicConfigTable") if isinstance(data, dict) else None
        fps = plain_fingerprints(table, context.get("max_queue_nums", 1024), context.get("max_topics", 100_000)) \
            if isinstance(table, dict) else None
        if fps is not None:
            # Every config already what TopicConfig would make of it (nearly every
            # registration): the document is validated without its table, and the table
            # is kept as it came, with no per-topic validation call.
            wrapper = handler({**data, "topicConfigTable": {}})
            wrapper.__dict__["topicConfigTable"] = table
            wrapper._fingerprints = fps
            return wrapper
        # The whole table in one validation: the exact error of each bad topic config.
        try:
            wrapper = handler(data)
            bad: dict[str, Skipped] = {}
        except ValidationError as e:
            bad = _skipped_by_error(e)
            table = data.get("topicConfigTable") if isinstance(data, dict) else None
            if not bad or not isinstance(table, dict):
                raise
            # again without them: raises only if the document itself is wrong
            wrapper = handler({**data, "topicConfigTable": {t: c for t, c in table.items() if t not in bad}})
        # what the types cannot say: topicName against its key, the configured queue limit
        max_queues = (info.context or {}).get("max_queue_nums", 1024)
        table = wrapper.topicConfigTable
        for topic, config in table.items():
            named = config.get("topicName")
            if named is not None and named != topic:
                bad[topic] = Skipped(topic, "topic_name", f"topicName {named!r} differs from its key")
                continue
            error = queue_count_error(config, max_queues)
            if error:
                bad[topic] = Skipped(topic, "queue_nums", error)
        for topic in bad:
            table.pop(topic, None)  # the dict validation just built, not the caller's
        wrapper._skipped = list(bad.values())
        return wrapper


class BrokerIdentity(_Doc):
    clusterName: Name
    brokerAddr: Addr
    brokerName: Name
    brokerId: BrokerId


class RegisterRequest(BrokerIdentity):
    haServerAddr: Addr | None = None
    heartbeatTimeoutMillis: Annotated[StrictInt, Field(ge=100, le=86_400_000)] | None = None
    topicConfigSerializeWrapper: TopicConfigWrapper
    filterServerList: Annotated[list[Addr], Field(max_length=MAX_FILTER_SERVERS)] | None = None
    # a 5.x broker's: whether its group runs with enableSlaveActingMaster (None: a broker
    # before 5.0, which RocketMQ 5's prime-slave rule leaves out), and its zone
    enableActingMaster: StrictBool | None = None
    zoneName: Annotated[StrictStr, StringConstraints(max_length=NAME_MAX)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _empty_ha(cls, data: Any) -> Any:
        # brokers without HA send an empty string
        if isinstance(data, dict) and data.get("haServerAddr") == "":
            data = {**data, "haServerAddr": None}
        return data


class HeartbeatRequest(BrokerIdentity):
    dataVersion: DataVersion | None = None


class QueryDataVersionRequest(BrokerIdentity):
    dataVersion: DataVersion


class UnregisterRequest(BrokerIdentity):
    pass


class KvPutRequest(_Doc):
    value: Annotated[StrictStr, AfterValidator(_check_kv_value),
                     Field(description=f"at most {KV_VALUE_MAX_BYTES} bytes as UTF-8")]


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: dict[str, Any], settings: Settings) -> M:
    """`data` as `model`, within the configured limits (queue counts, topics per
    registration). Raises ValidationError, which each protocol answers in its own way."""
    return model.model_validate(data, context={
        "max_queue_nums": settings.max_queue_nums,
        "max_topics": settings.max_topics_per_registration,
    })


def describe(error: ValidationError) -> str:
    """One readable line naming the first few bad fields."""
    parts = []
    for e in error.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"]) or "body"
        parts.append(f"{where}: {e['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def valid_name(value: str, max_length: int = NAME_MAX) -> bool:
    """Any non-empty string within the limit: what a NameServer takes, minus what Redis
    keys should not be asked to hold."""
    return 0 < len(value) <= max_length


def name_rule(max_length: int = NAME_MAX) -> str:
    """How error messages state the name rule."""
    return NAME_RULE.format(max=max_length)
