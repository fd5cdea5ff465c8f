"""The fast check of a registration's topic table (service.models.plain_fingerprints):
whatever it lets through is what the full, per-topic validation keeps, with the
fingerprints lua/_queues.lua writes; anything else goes through the full validation."""

from __future__ import annotations

from typing import Any

import pytest

from service.config import Settings
from service.models import RegisterRequest, plain_fingerprints, validated
from service.registry import fingerprints
from tests.builders import registration, topic_config


def wrapper(settings: Settings, topics: dict[str, Any]) -> Any:
    return validated(RegisterRequest, registration(topics=topics), settings).topicConfigSerializeWrapper


def test_a_plain_tables_fingerprints_are_those_of_its_validated_configs(settings: Settings) -> None:
    topics = {f"T{i}": topic_config(f"T{i}", read=i % 5, write=8, perm=(2, 4, 6)[i % 3], sys_flag=i % 2)
              for i in range(100)}
    fast = plain_fingerprints(topics, 1024, 100_000)
    assert fast == fingerprints(topics) and fast["T7"] == "2,8,4,1"
    validated_ = wrapper(settings, topics)
    assert validated_.fingerprints == fast and validated_.skipped == []


@pytest.mark.parametrize("field,value", [("readQueueNums", True), ("perm", 6.0), ("topicSysFlag", False),
                                         ("writeQueueNums", "4")])
def test_a_value_of_another_type_beside_an_equal_int_is_skipped_not_merged(settings: Settings, field: str,
                                                                          value: Any) -> None:
    # True == 1, 6.0 == 6, False == 0: a set of the values would merge them with the ints
    topics = {"A": topic_config("A", read=1, perm=6), "B": {**topic_config("B", read=1, perm=6), field: value}}
    assert plain_fingerprints(topics, 1024, 100_000) is None
    validated_ = wrapper(settings, topics)
    assert [s.topic for s in validated_.skipped] == ["B"] and validated_.fingerprints is None


@pytest.mark.parametrize("change", [{"readQueueNums": 2000}, {"perm": 8}, {"topicSysFlag": -1},
                                    {"topicName": "other"}, {"order": 0}, {"order": None}],
                         ids=["queues over the limit", "perm", "negative flag", "topicName", "order int",
                              "order null"])
def test_a_config_the_full_validation_would_skip_is_not_plain(settings: Settings, change: dict[str, Any]) -> None:
    topics = {"A": topic_config("A"), "B": {**topic_config("B"), **change}}
    assert plain_fingerprints(topics, 1024, 100_000) is None
    assert [s.topic for s in wrapper(settings, topics).skipped] == ["B"]


@pytest.mark.parametrize("topics", [{"A": {"topicName": "A", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}},
                                    {"A": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicSysFlag": 0}}],
                         ids=["no topicSysFlag", "no topicName"])
def test_optional_fields_left_out_give_the_full_validations_fingerprints(settings: Settings,
                                                                         topics: dict[str, Any]) -> None:
    validated_ = wrapper(settings, topics)
    fps = validated_.fingerprints if validated_.fingerprints is not None else fingerprints(validated_.topicConfigTable)
    assert fps == {"A": "1,1,6,0"} and validated_.skipped == []


def test_a_table_over_the_topic_limit_is_not_plain() -> None:
    assert plain_fingerprints({f"T{i}": topic_config(f"T{i}") for i in range(11)}, 1024, 10) is None
