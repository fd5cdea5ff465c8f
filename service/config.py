"""Settings from the environment, in one validated model. Command-line flags override them.

``Settings`` is a frozen pydantic model: each field's type and range is declared once,
here, and holds however it is built: from the environment (``from_env``, which
pydantic-settings reads; the variable of a field is ``RMQ_`` + its name in capitals,
``REDIS_URL`` for ``redis_url``), from the command line's flags (``with_overrides``) or in
code and tests (``Settings(...)``, which reads no environment). A bad
value stops the worker before anything starts with one line naming the variable, its
value (``REDIS_URL`` with its passwords masked) and what is allowed (``describe``),
exit code 2.
"""

from __future__ import annotations

import difflib
import re
import ssl
from typing import Annotated, Any, Literal, Mapping, get_args, get_origin

import annotated_types
from pydantic import AliasGenerator, BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from service import redis_url as urls
from service.addresses import AddressList, PatternError


class StartupError(Exception):
    """The worker cannot start: one line naming the setting and its value (never a
    secret's value), printed without a traceback before the worker exits with code 2."""


def env_name(field: str) -> str:
    """The environment variable of a field."""
    return "REDIS_URL" if field == "redis_url" else "RMQ_" + field.upper()


def _as_int(value: object) -> object:
    """A number written as the 0.1.0 release read it, with Python's int() (spaces around
    it, a sign, '_' between digits, any script's digits), so a setting it took still starts
    this one; anything else is left for the model to refuse."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    return value


def _as_bool(value: object) -> object:
    """Spaces around a true/false word, as the 0.1.0 release read it."""
    return value.strip() if isinstance(value, str) else value


# the names Python's logging takes besides the five levels, which the 0.1.0 release passed
# to it as they were: WARN and FATAL are its aliases; NOTSET on the root logger lets every
# record through, which DEBUG, the lowest level the worker logs at, does too
LOG_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "NOTSET": "DEBUG"}


def _log_level(value: object) -> object:
    if not isinstance(value, str):
        return value
    level = value.strip().upper()
    return LOG_LEVEL_ALIASES.get(level, level)


Int = Annotated[int, BeforeValidator(_as_int)]
Port = Annotated[Int, Field(ge=1, le=65535)]
PortOrOff = Annotated[Int, Field(ge=0, le=65535)]  # 0: off
Positive = Annotated[Int, Field(ge=1)]  # intervals, timeouts, sizes: 0 would spin or refuse everything
NonNegative = Annotated[Int, Field(ge=0)]  # durations and counts where 0 means none or off
Flag = Annotated[bool, BeforeValidator(_as_bool)]
# in any case, as Python's logging takes it ("info" is INFO; its aliases as their level)
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_log_level)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True,
                                      alias_generator=AliasGenerator(validation_alias=env_name),
                                      # a ValidationError's text never holds a value (REDIS_URL's password)
                                      hide_input_in_errors=True)

    redis_url: Annotated[str | None, Field(description=(
        "a redis://, rediss://, unix:// or redis+sentinel:// URL, user name and password percent-encoded"))] = None
    redis_cluster: Flag = False
    host: str = "0.0.0.0"
    port: Port = 8080
    # RocketMQ's own protocol (TCP); 0 = off. The environment's default is 9876 (from_env),
    # the model's is off, so apps built in tests bind nothing by surprise.
    remoting_port: PortOrOff = 0
    remoting_host: str | None = None
    redis_max_connections: Positive = 256
    redis_min_replicas: NonNegative = 0
    key_prefix: Annotated[str, Field(min_length=1)] = "rmq"
    broker_timeout_ms: Positive = 120_000
    scan_interval_ms: Positive = 5_000
    scan_batch: Positive = 1_000
    redis_timeout_ms: Positive = 1_000
    redis_start_timeout_ms: NonNegative = 30_000
    max_body_bytes: Positive = 4 * 1024 * 1024
    order_message_enable: Flag = False
    delete_topic_with_broker_registration: Flag = False
    support_acting_master: Flag = False
    notify_min_broker_id_changed: Flag = False
    max_queue_nums: Positive = 1024
    max_topics_per_registration: Positive = 100_000
    version_poll_ms: Annotated[Int, Field(ge=1, description=(
        "an integer of at least 1, below RMQ_MAX_STALENESS_MS unless that is 0"))] = 500
    max_staleness_ms: NonNegative = 1_000  # 0: no read cache
    watch_max_ms: NonNegative = 120_000
    stale_max_ms: NonNegative = 120_000
    # on by default: brokers' clients expect a NameServer that answers routes from memory
    # through a store outage (a Sentinel failover's ~5 s), as Java's does
    remoting_stale_reads: Flag = True
    cache_max_entries: NonNegative = 200_000
    cache_max_bytes: NonNegative = 512 * 1024 * 1024
    cache_negative_entries: NonNegative = 10_000
    auth_tokens_file: str | None = None
    auth_reads: Literal["open", "token"] = "open"
    # RocketMQ address patterns or CIDR prefixes, space-separated: unsigned broker requests and reads from them pass
    remoting_white_addresses: Annotated[str | None, Field(description=(
        "RocketMQ address patterns or CIDR prefixes, space-separated; needs RMQ_AUTH_TOKENS_FILE"))] = None
    # every RocketMQ connection starts with a PROXY protocol (v1 or v2) header
    remoting_proxy_protocol: Flag = False
    log_level: LogLevel = "INFO"
    log_format: Literal["text", "json"] = "text"
    drain_ms: NonNegative = 0
    shutdown_timeout_ms: NonNegative = 20_000
    # what one client may hold of a worker (docs/remoting.md "Limits")
    remoting_idle_ms: Positive = 120_000
    remoting_max_connections: Positive = 10_000
    remoting_frame_timeout_ms: Positive = 30_000
    # a frame of the largest size must fit
    remoting_frame_buffer_bytes: Annotated[Int, Field(ge=16 * 1024 * 1024)] = 96 * 1024 * 1024
    http_backlog: Positive = 1024
    http_header_timeout_ms: Positive = 10_000
    http_body_timeout_ms: Positive = 30_000
    max_watches: NonNegative = 1_000
    # TLS on the RocketMQ port (service/remoting/tls.py), RocketMQ's tls.server.mode
    remoting_tls_mode: Literal["disabled", "permissive", "enforcing"] = "permissive"
    remoting_tls_cert: Annotated[str | None, Field(description=(
        "a PEM certificate file, with RMQ_REMOTING_TLS_KEY; unset: a self-signed one"))] = None
    remoting_tls_key: Annotated[str | None, Field(description="its PEM key file (not encrypted)")] = None
    remoting_tls_client_ca: Annotated[str | None, Field(description=(
        "a PEM CA file: TLS clients must present a certificate it signed"))] = None

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """Built in code, settings are what the code gives, nothing from the shell that runs it
        (``from_env`` reads the environment)."""
        return (init_settings,)

    @field_validator("remoting_white_addresses")
    @classmethod
    def _white_addresses(cls, white: str | None) -> str | None:
        if white is not None:
            try:
                AddressList.from_setting(white)
            except PatternError as e:
                raise ValueError(str(e)) from None
        return white

    @model_validator(mode="after")
    def _together(self) -> "Settings":
        """Rules between settings; each message is a whole line (REDIS_URL masked)."""
        if self.redis_url:
            try:
                urls.check(self.redis_url, self.redis_cluster)
            except ValueError as exc:
                cluster = " with RMQ_REDIS_CLUSTER=true" if self.redis_cluster else ""
                raise ValueError(f"REDIS_URL={urls.masked(self.redis_url)}{cluster}: {exc}") from None
        if self.remoting_white_addresses is not None and self.auth_tokens_file is None:
            raise ValueError("RMQ_REMOTING_WHITE_ADDRESSES is set but RMQ_AUTH_TOKENS_FILE is not: without "
                             "authentication every address may already do everything")
        if self.version_poll_ms >= self.max_staleness_ms > 0:
            raise ValueError(f"RMQ_VERSION_POLL_MS={self.version_poll_ms}: must be below RMQ_MAX_STALENESS_MS="
                             f"{self.max_staleness_ms}, or the cache would never be fresh")
        _check_remoting_tls(self.remoting_tls_cert, self.remoting_tls_key, self.remoting_tls_client_ca)
        return self

    @property
    def embedded(self) -> bool:
        return not self.redis_url

    def with_overrides(self, **changes: object) -> "Settings":
        """These settings with the flags' values that are given, validated as the
        environment's are (StartupError naming the variable)."""
        given = {k: v for k, v in changes.items() if v is not None}
        return _validated({**dict(self), **given}, given)


# variable -> field: the list README's configuration table documents
ENV: dict[str, str] = {env_name(name): name for name in Settings.model_fields}


def describe(field: str) -> str:
    """What a field allows, in words: the error lines and README's table say the same."""
    info = Settings.model_fields[field]
    kind = info.annotation
    if info.description:  # a rule the type alone does not say
        return info.description
    if kind is bool:
        return "true or false (also 1/0, yes/no, on/off)"
    if get_origin(kind) is Literal:
        return "one of " + ", ".join(get_args(kind))
    if kind is int:
        least = next((m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
        most = next((m.le for m in info.metadata if isinstance(m, annotated_types.Le)), None)
        if most is not None:
            return f"an integer from {least} to {most}"
        return f"an integer of at least {least}"
    if any(isinstance(m, annotated_types.MinLen) for m in info.metadata):
        return "a non-empty text"
    return "any text"


def _shown(field: str, value: Any) -> str:
    """A value as an error line may print it: REDIS_URL masked, no control characters."""
    text = str(value)
    if field == "redis_url":
        text = urls.masked(text)
    shown = "".join(c if c.isprintable() else "?" for c in text[:200]) + ("..." if len(text) > 200 else "")
    return repr(shown) if not shown or any(c.isspace() for c in shown) else shown


def _one_line(exc: ValidationError, given: Mapping[str, Any]) -> str:
    """The first error as one line naming the variable, its value and what is allowed."""
    error = exc.errors()[0]
    more = exc.error_count() - 1
    tail = f" ({more} more bad setting{'s' * (more > 1)})" if more else ""
    if not error["loc"]:  # a rule between settings: its message is the whole line
        return f"{error.get('ctx', {}).get('error', error['msg'])}{tail}"
    key = str(error["loc"][0])
    field = ENV.get(key, key)
    var = env_name(field)
    value = given.get(key, given.get(field, given.get(var)))
    if field not in Settings.model_fields:
        return f"{var}: not a setting{tail}"
    reason = error.get("ctx", {}).get("error")
    allowed = f"{reason}" if error["type"] == "value_error" and reason else f"must be {describe(field)}"
    return f"{var}={_shown(field, value)}: {allowed}{tail}"


def _validated(values: Mapping[str, Any], given: Mapping[str, Any]) -> Settings:
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise StartupError(_one_line(exc, given)) from None


# RMQ_ variables that are not the worker's settings: other commands' (compare's secret key)
# and the project's own tooling (tests, benchmarks, the lock script), which a developer's
# shell may hold when it starts a worker
OTHER_VARIABLES = frozenset({
    "RMQ_COMPARE_SECRET_KEY", "RMQ_VENV", "RMQ_PYTHON", "RMQ_SRC", "RMQ_LOCK_VENV", "RMQ_REQUIRE_LOCK",
    "RMQ_AIOHTTP_RELEASES", "RMQ_DEPENDENCY_VENVS", "RMQ_ANALYTICS_OUT", "RMQ_SOAK_SECONDS", "RMQ_JAVA_ROCKETMQ_HOME",
})
OTHER_PREFIXES = ("RMQ_TEST_", "RMQ_BENCH_", "RMQ_JS_", "RMQ_UI_", "RMQ_FUZZ_")
# what Kubernetes sets for each Service of the namespace (rmq-registry: RMQ_REGISTRY_SERVICE_HOST,
# RMQ_REGISTRY_PORT_8080_TCP_ADDR, ...): not settings, and never a typo of one
_SERVICE_LINK = re.compile(r"_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning line for each RMQ_ variable that is no setting (a typo, such as
    RMQ_REDIS_URL for REDIS_URL, is otherwise silently ignored), naming the nearest one."""
    lines = []
    for var in sorted(environ):
        if (not var.startswith("RMQ_") or var in ENV or var in OTHER_VARIABLES or var.startswith(OTHER_PREFIXES)
                or _SERVICE_LINK.search(var)):
            continue
        # compared without the common RMQ_, which would make any name look near every setting
        bare = {name.removeprefix("RMQ_"): name for name in ENV}
        near = difflib.get_close_matches(var.removeprefix("RMQ_"), bare, n=1, cutoff=0.6)
        hint = f" (did you mean {bare[near[0]]}?)" if near else " (README.md, \"Configuration\", lists the settings)"
        lines.append(f"{var} is not a setting: ignored{hint}")
    return lines


class _Variables(Settings):
    """The settings as the environment gives them: each from its variable (its alias) alone,
    in that case alone, as 0.1.0 read them (RMQ_PORT; not rmq_port, nor port, the field's
    name, which pydantic-settings also reads for a model that takes names, as Settings does
    for the code and the flags); an empty variable counts as unset."""
    model_config = SettingsConfigDict(validate_by_name=False, case_sensitive=True, env_ignore_empty=True)


def from_env() -> Settings:
    """The settings the environment gives (an empty variable counts as unset); StartupError
    (one line) on a bad one."""
    given = EnvSettingsSource(_Variables)()  # variable -> its text
    return _validated({"RMQ_REMOTING_PORT": "9876", **given}, given)


def _check_remoting_tls(cert: str | None, key: str | None, ca: str | None) -> None:
    """A certificate comes with its key, and what is named loads (the message never holds a
    key's contents)."""
    if (cert is None) != (key is None):
        raise ValueError("RMQ_REMOTING_TLS_CERT and RMQ_REMOTING_TLS_KEY go together: set both, or neither "
                         "for a self-signed certificate")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"RMQ_REMOTING_TLS_CERT={cert}, RMQ_REMOTING_TLS_KEY={key}: cannot load them ({_why(e)})") \
            from None
    try:
        if ca is not None:
            context.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"RMQ_REMOTING_TLS_CLIENT_CA={ca}: cannot load it ({_why(e)})") from None


def _why(e: OSError) -> str:
    return getattr(e, "reason", None) or e.strerror or str(e)
