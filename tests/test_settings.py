"""The settings model (service/config.py) and REDIS_URL's checks (service/redis_url.py):
one test per rule. The same rules on real worker processes (exit 2, one line, no
password printed): tests/test_startup_failures.py."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from pydantic import ValidationError
from redis.connection import parse_url

from service.config import ENV, Settings, StartupError, describe, unknown_variables
from service.redis_url import masked
from tests.settings_env import settings_from

README = Path(__file__).resolve().parent.parent / "README.md"
PASSWORD = "p@ss/w:rd#1"


def refusal(env: dict[str, str]) -> str:
    with pytest.raises(StartupError) as refused:
        settings_from(env)
    line = str(refused.value)
    assert "\n" not in line
    return line


def fields_with_least(least: int) -> list[str]:
    return [var for var, name in ENV.items() if describe(name).startswith(f"an integer of at least {least}")]


def test_every_variable_is_the_field_name_in_capitals_after_RMQ() -> None:
    assert all(var == ("REDIS_URL" if name == "redis_url" else "RMQ_" + name.upper()) for var, name in ENV.items())
    assert len(ENV) == len(Settings.model_fields)


def test_ports_are_1_to_65535() -> None:
    assert refusal({"RMQ_PORT": "0"}) == "RMQ_PORT=0: must be an integer from 1 to 65535"
    assert "RMQ_PORT=65536" in refusal({"RMQ_PORT": "65536"})
    assert (settings_from({"RMQ_PORT": "1"}).port, settings_from({"RMQ_PORT": "65535"}).port) == (1, 65535)


def test_the_remoting_port_may_be_0_for_off_but_not_above_65535() -> None:
    assert settings_from({"RMQ_REMOTING_PORT": "0"}).remoting_port == 0
    assert "RMQ_REMOTING_PORT=70000: must be an integer from 0 to 65535" in refusal({"RMQ_REMOTING_PORT": "70000"})


def test_the_remoting_port_defaults_to_9876_from_the_environment_only() -> None:
    assert (settings_from({}).remoting_port, Settings().remoting_port) == (9876, 0)


def test_intervals_timeouts_and_sizes_must_be_positive() -> None:
    positive = fields_with_least(1)
    assert {"RMQ_SCAN_INTERVAL_MS", "RMQ_REDIS_TIMEOUT_MS", "RMQ_BROKER_TIMEOUT_MS", "RMQ_SCAN_BATCH"} <= set(positive)
    for var in positive:
        assert refusal({var: "0"}) == f"{var}=0: must be {describe(ENV[var])}"


def test_durations_and_counts_may_be_0_but_not_negative() -> None:
    zero_or_more = fields_with_least(0)
    assert {"RMQ_MAX_STALENESS_MS", "RMQ_DRAIN_MS", "RMQ_STALE_MAX_MS", "RMQ_MAX_WATCHES"} <= set(zero_or_more)
    for var in zero_or_more:
        assert refusal({var: "-1"}) == f"{var}=-1: must be {describe(ENV[var])}"
        assert getattr(settings_from({var: "0"}), ENV[var]) == 0


def test_the_frame_buffer_holds_at_least_the_largest_frame() -> None:
    assert "RMQ_REMOTING_FRAME_BUFFER_BYTES=1000: must be an integer of at least 16777216" in refusal(
        {"RMQ_REMOTING_FRAME_BUFFER_BYTES": "1000"})


def test_a_non_integer_is_refused() -> None:
    assert refusal({"RMQ_SCAN_INTERVAL_MS": "5s"}) == "RMQ_SCAN_INTERVAL_MS=5s: must be an integer of at least 1"
    assert "RMQ_DRAIN_MS=1.5" in refusal({"RMQ_DRAIN_MS": "1.5"})


def test_the_version_poll_is_below_the_staleness_bound_unless_the_cache_is_off() -> None:
    assert "RMQ_VERSION_POLL_MS=1000: must be below RMQ_MAX_STALENESS_MS=1000" in refusal({"RMQ_VERSION_POLL_MS": "1000"})
    assert settings_from({"RMQ_VERSION_POLL_MS": "1000", "RMQ_MAX_STALENESS_MS": "0"}).version_poll_ms == 1000


def test_the_log_level_is_one_of_pythons_in_any_case() -> None:
    assert refusal({"RMQ_LOG_LEVEL": "LOUD"}) == "RMQ_LOG_LEVEL=LOUD: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    assert settings_from({"RMQ_LOG_LEVEL": "debug"}).log_level == "DEBUG"


def test_the_log_format_and_read_auth_are_enumerated() -> None:
    assert refusal({"RMQ_LOG_FORMAT": "xml"}) == "RMQ_LOG_FORMAT=xml: must be one of text, json"
    assert refusal({"RMQ_AUTH_READS": "x"}) == "RMQ_AUTH_READS=x: must be one of open, token"


def test_booleans_take_true_false_1_0_yes_no_on_off() -> None:
    for text, value in (("true", True), ("1", True), ("yes", True), ("ON", True),
                        ("false", False), ("0", False), ("no", False), ("off", False)):
        assert settings_from({"RMQ_ORDER_MESSAGE_ENABLE": text}).order_message_enable is value
    assert refusal({"RMQ_ORDER_MESSAGE_ENABLE": "maybe"}) == (
        "RMQ_ORDER_MESSAGE_ENABLE=maybe: must be true or false (also 1/0, yes/no, on/off)")


def test_an_empty_variable_counts_as_unset() -> None:
    assert settings_from({"RMQ_PORT": "", "REDIS_URL": ""}) == settings_from({})


def test_a_setting_is_read_from_its_variable_only_not_its_fields_name_or_another_case() -> None:
    assert settings_from({"port": "9000", "rmq_port": "9000", "redis_url": "redis://h/0"}) == settings_from({})


def test_settings_built_in_code_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_PORT", "9000")
    assert Settings().port == 8080


def test_a_value_with_spaces_is_quoted_in_the_line() -> None:
    assert refusal({"RMQ_PORT": " 80 80 "}).startswith("RMQ_PORT=' 80 80 ': ")


def test_several_bad_settings_are_one_line_naming_the_first_and_counting_the_rest() -> None:
    assert refusal({"RMQ_PORT": "99999", "RMQ_DRAIN_MS": "-1", "RMQ_LOG_LEVEL": "LOUD"}) == (
        "RMQ_PORT=99999: must be an integer from 1 to 65535 (2 more bad settings)")


def test_settings_built_in_code_hold_the_same_ranges() -> None:
    with pytest.raises(ValidationError):
        Settings(scan_interval_ms=0)
    with pytest.raises(ValidationError):
        Settings(no_such_setting=1)  # type: ignore[call-arg]


def test_a_flag_override_is_validated_as_the_environment_is() -> None:
    with pytest.raises(StartupError, match=r"^RMQ_PORT=99999: must be an integer from 1 to 65535$"):
        Settings().with_overrides(port=99999)
    assert Settings().with_overrides(port=9000, host=None) == Settings(port=9000)


def test_settings_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Settings().port = 1  # type: ignore[misc]


def test_no_validation_error_holds_the_redis_url() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url=f"redis://:{quote(PASSWORD, safe='')}@h:6379/0", scan_interval_ms=0)
    assert quote(PASSWORD, safe="") not in str(refused.value)


# ------------------------------------------------------------------------- REDIS_URL

def test_redis_url_is_redis_rediss_unix_or_sentinel() -> None:
    assert refusal({"REDIS_URL": "http://h:6379/0"}) == (
        "REDIS_URL=http://h:6379/0: must start with redis://, rediss://, unix:// or redis+sentinel://")
    for url in ("redis://h:6379/0", "rediss://u:p@h:6380/1", "unix:///run/redis.sock?db=2",
                "redis+sentinel://:p@s1:26379,s2:26379/rmq/0?sentinel_password=q"):
        assert settings_from({"REDIS_URL": url}).redis_url == url


def test_redis_url_port_must_be_a_number_from_1_to_65535() -> None:
    assert "Port could not be cast to integer value as 'abc': the port must be 1-65535" in refusal(
        {"REDIS_URL": "redis://h:abc/0"})
    assert "Port out of range" in refusal({"REDIS_URL": "redis://h:65536/0"})
    # redis-py's parser would take port 0 for 6379
    assert refusal({"REDIS_URL": "redis://h:0/0"}) == "REDIS_URL=redis://h:0/0: the port must be 1-65535, not 0"


def test_redis_url_database_must_be_a_number() -> None:
    # redis-py's parser would ignore it and use database 0
    assert "the database must be a number (0-15 on a default Redis), not 'x'" in refusal({"REDIS_URL": "redis://h/x"})
    assert "the database must be a number, not 'x'" in refusal({"REDIS_URL": "redis+sentinel://s:26379/rmq/x"})


def test_redis_url_names_a_host() -> None:
    assert "names no host" in refusal({"REDIS_URL": "redis:///0"})


@pytest.mark.parametrize("char", list("@/:?#"))
def test_an_unencoded_url_delimiter_in_the_password_is_refused_without_echoing_it(char: str) -> None:
    secret = f"se{char}cr{char}et"
    for url in (f"redis://:{secret}@h:6379/0", f"redis://user:{secret}@h:6379/0",
                f"redis+sentinel://:{secret}@s:26379/rmq/0"):
        line = refusal({"REDIS_URL": url})
        assert "percent-encode" in line and "se" + char not in line and "cr" not in line, line


def test_a_percent_encoded_password_is_what_redis_py_sends() -> None:
    url = f"redis://:{quote(PASSWORD, safe='')}@h:6379/0"
    assert settings_from({"REDIS_URL": url}).redis_url == url
    assert parse_url(url)["password"] == PASSWORD and parse_url(url)["host"] == "h"


def test_masking_hides_every_password_whole() -> None:
    assert masked(f"redis://:{PASSWORD}@h:6379/0") == "redis://:***@h:6379/0"
    assert masked("rediss://user:s3cret@h:6380/0") == "rediss://user:***@h:6380/0"
    assert masked("redis://s3cret@h/0") == "redis://***@h/0"  # no colon: perhaps a password
    assert masked("unix:///r.sock?db=1&password=s3cret") == "unix:///r.sock?db=1&password=***"
    assert masked("redis+sentinel://:a@s:26379/m/0?sentinel_password=b@c&x=1") == (
        "redis+sentinel://:***@s:26379/m/0?sentinel_password=***&x=1")
    assert masked("redis://h:6379/0") == "redis://h:6379/0"


def test_several_hosts_need_the_cluster_setting() -> None:
    assert "set RMQ_REDIS_CLUSTER=true" in refusal({"REDIS_URL": "redis://h1:1,h2:2/0"})
    assert settings_from({"REDIS_URL": "redis://h1:1,h2:2/0", "RMQ_REDIS_CLUSTER": "true"}).redis_cluster


# ------------------------------------------------------------------------------ docs

def readme_table() -> dict[str, str]:
    """README's configuration table: variable -> its "allowed" cell."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| .*? \| (.*?) \| .* \|$", README.read_text(), re.M)
    return {var: allowed for var, allowed in rows if var in ENV}


def test_the_readme_table_states_every_settings_allowed_values() -> None:
    table = readme_table()
    assert set(table) == set(ENV)
    assert {var: describe(name) for var, name in ENV.items()} == table


def test_the_analytics_jobs_refuse_a_bad_redis_url_without_echoing_its_password() -> None:
    from service.analytics.reader import url_to_options

    for url in ("http://:s3cret@h:6379/0", f"redis://:{PASSWORD}@h:6379/0"):
        with pytest.raises(ValueError) as refused:
            url_to_options(url)
        assert "s3cret" not in str(refused.value) and "ss/w" not in str(refused.value)


@pytest.mark.parametrize("typo, nearest", [("RMQ_REDIS_URL", "REDIS_URL"), ("RMQ_LOG_LEVL", "RMQ_LOG_LEVEL"),
                                           ("RMQ_TLS_MODE", "RMQ_REMOTING_TLS_MODE")])
def test_an_unknown_rmq_variable_is_warned_by_name_with_the_nearest_setting(typo: str, nearest: str) -> None:
    assert unknown_variables({typo: "x", "REDIS_URL": "redis://h/0"}) == [
        f"{typo} is not a setting: ignored (did you mean {nearest}?)"]


def test_an_unknown_rmq_variable_near_no_setting_points_to_the_list() -> None:
    [line] = unknown_variables({"RMQ_FOO": "1"})
    assert line.startswith("RMQ_FOO is not a setting: ignored") and "Configuration" in line


def test_settings_kubernetes_service_links_and_the_projects_tooling_are_no_unknown_variables() -> None:
    env = {**dict.fromkeys(ENV, "1"), "RMQ_REGISTRY_SERVICE_HOST": "10.0.0.1", "RMQ_REGISTRY_SERVICE_PORT_HTTP": "8080",
           "RMQ_REGISTRY_PORT": "tcp://10.0.0.1:8080", "RMQ_REGISTRY_PORT_9876_TCP_ADDR": "10.0.0.1",
           "RMQ_VENV": "/v", "RMQ_COMPARE_SECRET_KEY": "s", "RMQ_TEST_PROCESSES": "2", "PATH": "/bin"}
    assert unknown_variables(env) == []
