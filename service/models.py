"""Request documents and their validation (API.md field names, RocketMQ's naming rules).

Unknown fields are ignored everywhere: brokers send more of their TopicConfig than a
route needs (topicFilterType, attributes, ...), and newer brokers may add fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

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
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from service.config import Settings

NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
ADDR_PATTERN = r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})$"
TOPIC_MAX = 127
NAME_MAX = 255
MAX_FILTER_SERVERS = 1024
MAX_ID = 2**31 - 1
MAX_LONG = 2**63 - 1

_port = re.compile(ADDR_PATTERN)


def _check_port(addr: str) -> str:
    m = _port.match(addr)
    if m is None or not 0 < int(m.group(2)) <= 65535:
        raise ValueError("port must be 1..65535")
    return addr


Topic = Annotated[StrictStr, StringConstraints(pattern=NAME_PATTERN, max_length=TOPIC_MAX)]
Name = Annotated[StrictStr, StringConstraints(pattern=NAME_PATTERN, max_length=NAME_MAX)]
# every address (broker, HA, filter server) gets the port range check, not only the pattern
Addr = Annotated[StrictStr, StringConstraints(pattern=ADDR_PATTERN, max_length=NAME_MAX), AfterValidator(_check_port)]
BrokerId = Annotated[StrictInt, Field(ge=0, le=MAX_ID)]
Long = Annotated[StrictInt, Field(ge=0, le=MAX_LONG)]

class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class DataVersion(_Doc):
    timestamp: Long
    counter: Long

    def canonical(self) -> str:
        """The form stored and compared inside Redis: one string per version."""
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


class TopicConfigWrapper(_Doc):
    topicConfigTable: dict[Topic, TopicConfig] = Field(default_factory=dict)
    dataVersion: DataVersion

    @field_validator("topicConfigTable")
    @classmethod
    def _table(cls, v: dict[str, TopicConfig], info: ValidationInfo) -> dict[str, TopicConfig]:
        context = info.context or {}
        limit = context.get("max_topics", 100_000)
        if len(v) > limit:
            raise ValueError(f"at most {limit} topics per registration")
        max_queues = context.get("max_queue_nums", 1024)
        for topic, config in v.items():
            named = config.get("topicName")
            if named is not None and named != topic:
                raise ValueError(f"topicName {named!r} differs from its key {topic!r}")
            error = queue_count_error(config, max_queues)
            if error:
                raise ValueError(f"{topic}: {error}")
        return v


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
    value: StrictStr


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


_name = re.compile(NAME_PATTERN)


def valid_name(value: str, max_length: int = NAME_MAX) -> bool:
    return len(value) <= max_length and _name.fullmatch(value) is not None
