"""Settings the previous release (0.1.0, 3fcd6f1) started with start this one too, with
the same meaning, or are refused in one line saying what to write instead: a rollout
whose new workers refused the old settings would stall in a crash loop. The values below
are those 0.1.0's settings parser and Python's logging took (tests/test_upgrade.py
also runs them through 0.1.0's own code); CHANGELOG.md's upgrade notes name the refused ones."""

from __future__ import annotations

import logging

import pytest

from service.config import StartupError
from tests.settings_env import settings_from

# RMQ_LOG_LEVEL: 0.1.0 handed it to logging.basicConfig as it was, upper-cased
LOG_LEVELS = {"warn": logging.WARNING, "WARN": logging.WARNING, "fatal": logging.CRITICAL, "FATAL": logging.CRITICAL,
              "notset": logging.DEBUG, "NOTSET": logging.DEBUG, "Warning": logging.WARNING, "debug": logging.DEBUG,
              "error": logging.ERROR, "critical": logging.CRITICAL, "INFO": logging.INFO}
# switches: 0.1.0 stripped spaces and took 1/0, true/false, yes/no, on/off in any case
FLAGS = {" true ": True, "ON": True, "Yes": True, " off": False, "0": False, "False": False}
# numbers: 0.1.0 read them with int()
NUMBERS = {" 8080": 8080, "+8080": 8080, "8_080": 8080, "8080 ": 8080, "٨٠٨٠": 8080}
# what 0.1.0 took and this release refuses (out of range; a password to encode), and the advice
REFUSED = {
    "RMQ_PORT=0": "must be an integer from 1 to 65535",
    "RMQ_SCAN_INTERVAL_MS=0": "must be an integer of at least 1",
    "RMQ_DRAIN_MS=-1": "must be an integer of at least 0",
    "REDIS_URL=redis://:p@ss@127.0.0.1:6379/0": "percent-encode them",
}


@pytest.mark.parametrize("value", sorted(LOG_LEVELS))
def test_a_log_level_python_names_is_taken_as_its_level(value: str) -> None:
    assert logging.getLevelName(settings_from({"RMQ_LOG_LEVEL": value}).log_level) == LOG_LEVELS[value]


@pytest.mark.parametrize("value", sorted(FLAGS))
def test_a_switch_is_read_as_the_previous_release_read_it(value: str) -> None:
    assert settings_from({"RMQ_REDIS_CLUSTER": value}).redis_cluster is FLAGS[value]
    assert settings_from({"RMQ_ORDER_MESSAGE_ENABLE": value}).order_message_enable is FLAGS[value]


@pytest.mark.parametrize("value", sorted(NUMBERS))
def test_a_number_is_read_as_the_previous_release_read_it(value: str) -> None:
    assert settings_from({"RMQ_PORT": value}).port == NUMBERS[value]
    assert settings_from({"RMQ_SCAN_INTERVAL_MS": value}).scan_interval_ms == NUMBERS[value]


@pytest.mark.parametrize("setting", sorted(REFUSED))
def test_a_value_only_the_previous_release_took_is_refused_saying_what_to_write(setting: str) -> None:
    var, value = setting.split("=", 1)
    with pytest.raises(StartupError) as refused:
        settings_from({var: value})
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{var}=") and REFUSED[setting] in line
    assert "p@ss" not in line  # never the password
