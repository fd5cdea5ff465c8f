"""Settings from the environment, in one dataclass. Command-line flags override them."""

from __future__ import annotations

import os
import ssl
import sys
from dataclasses import dataclass, field, replace
from typing import Mapping, NoReturn

from service.addresses import AddressList, PatternError
from service.redis_cluster import names_several_hosts, parse_cluster_url


class StartupError(Exception):
    """The worker cannot start: one line naming the setting and its value (never a
    secret's value), printed without a traceback before the worker exits non-zero."""


def _bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    redis_cluster: bool = False
    host: str = "0.0.0.0"
    port: int = 8080
    # RocketMQ's own protocol (TCP); 0 = off. The environment's default is 9876 (from_env),
    # the dataclass's is off, so apps built in tests bind nothing by surprise.
    remoting_port: int = 0
    remoting_host: str | None = None
    redis_max_connections: int = 256
    redis_min_replicas: int = 0
    key_prefix: str = "rmq"
    broker_timeout_ms: int = 120_000
    scan_interval_ms: int = 5_000
    scan_batch: int = 1_000
    redis_timeout_ms: int = 1_000
    redis_start_timeout_ms: int = 30_000
    max_body_bytes: int = 4 * 1024 * 1024
    order_message_enable: bool = False
    delete_topic_with_broker_registration: bool = False
    support_acting_master: bool = False
    notify_min_broker_id_changed: bool = False
    max_queue_nums: int = 1024
    max_topics_per_registration: int = 100_000
    version_poll_ms: int = 500
    max_staleness_ms: int = 1_000
    watch_max_ms: int = 120_000
    stale_max_ms: int = 120_000
    remoting_stale_reads: bool = False
    cache_max_entries: int = 200_000
    cache_max_bytes: int = 512 * 1024 * 1024
    cache_negative_entries: int = 10_000
    auth_tokens_file: str | None = None
    auth_reads: str = "open"
    # RocketMQ address patterns or CIDR prefixes, space-separated: unsigned broker requests and reads from them pass
    remoting_white_addresses: str | None = None
    # every RocketMQ connection starts with a PROXY protocol (v1 or v2) header
    remoting_proxy_protocol: bool = False
    log_level: str = "INFO"
    log_format: str = "text"
    drain_ms: int = 0
    shutdown_timeout_ms: int = 20_000
    # what one client may hold of a worker (docs/remoting.md "Limits")
    remoting_idle_ms: int = 120_000
    remoting_max_connections: int = 10_000
    remoting_frame_timeout_ms: int = 30_000
    remoting_frame_buffer_bytes: int = 96 * 1024 * 1024
    http_backlog: int = 1024
    http_header_timeout_ms: int = 10_000
    http_body_timeout_ms: int = 30_000
    max_watches: int = 1_000
    # --- TLS on the RocketMQ port (service/remoting/tls.py), RocketMQ's tls.server.mode
    remoting_tls_mode: str = "permissive"  # disabled | permissive | enforcing
    remoting_tls_cert: str | None = None  # PEM; with remoting_tls_key; none: a self-signed one
    remoting_tls_key: str | None = None
    remoting_tls_client_ca: str | None = None  # PEM: TLS clients must present a certificate it signed
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def embedded(self) -> bool:
        return not self.redis_url

    def with_overrides(self, **changes: object) -> "Settings":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


# variable -> (field, parser); the single list README's configuration table documents.
ENV: dict[str, tuple[str, type | object]] = {
    "REDIS_URL": ("redis_url", str),
    "RMQ_REDIS_CLUSTER": ("redis_cluster", _bool),
    "RMQ_HOST": ("host", str),
    "RMQ_PORT": ("port", int),
    "RMQ_REMOTING_PORT": ("remoting_port", int),
    "RMQ_REMOTING_HOST": ("remoting_host", str),
    "RMQ_REDIS_MAX_CONNECTIONS": ("redis_max_connections", int),
    "RMQ_REDIS_MIN_REPLICAS": ("redis_min_replicas", int),
    "RMQ_KEY_PREFIX": ("key_prefix", str),
    "RMQ_BROKER_TIMEOUT_MS": ("broker_timeout_ms", int),
    "RMQ_SCAN_INTERVAL_MS": ("scan_interval_ms", int),
    "RMQ_SCAN_BATCH": ("scan_batch", int),
    "RMQ_REDIS_TIMEOUT_MS": ("redis_timeout_ms", int),
    "RMQ_REDIS_START_TIMEOUT_MS": ("redis_start_timeout_ms", int),
    "RMQ_MAX_BODY_BYTES": ("max_body_bytes", int),
    "RMQ_ORDER_MESSAGE_ENABLE": ("order_message_enable", _bool),
    "RMQ_DELETE_TOPIC_WITH_BROKER_REGISTRATION": ("delete_topic_with_broker_registration", _bool),
    "RMQ_SUPPORT_ACTING_MASTER": ("support_acting_master", _bool),
    "RMQ_NOTIFY_MIN_BROKER_ID_CHANGED": ("notify_min_broker_id_changed", _bool),
    "RMQ_MAX_QUEUE_NUMS": ("max_queue_nums", int),
    "RMQ_MAX_TOPICS_PER_REGISTRATION": ("max_topics_per_registration", int),
    "RMQ_VERSION_POLL_MS": ("version_poll_ms", int),
    "RMQ_MAX_STALENESS_MS": ("max_staleness_ms", int),
    "RMQ_WATCH_MAX_MS": ("watch_max_ms", int),
    "RMQ_STALE_MAX_MS": ("stale_max_ms", int),
    "RMQ_REMOTING_STALE_READS": ("remoting_stale_reads", _bool),
    "RMQ_CACHE_MAX_ENTRIES": ("cache_max_entries", int),
    "RMQ_CACHE_MAX_BYTES": ("cache_max_bytes", int),
    "RMQ_CACHE_NEGATIVE_ENTRIES": ("cache_negative_entries", int),
    "RMQ_AUTH_TOKENS_FILE": ("auth_tokens_file", str),
    "RMQ_AUTH_READS": ("auth_reads", str),
    "RMQ_REMOTING_WHITE_ADDRESSES": ("remoting_white_addresses", str),
    "RMQ_REMOTING_PROXY_PROTOCOL": ("remoting_proxy_protocol", _bool),
    "RMQ_LOG_LEVEL": ("log_level", str),
    "RMQ_LOG_FORMAT": ("log_format", str),
    "RMQ_DRAIN_MS": ("drain_ms", int),
    "RMQ_SHUTDOWN_TIMEOUT_MS": ("shutdown_timeout_ms", int),
    "RMQ_REMOTING_IDLE_MS": ("remoting_idle_ms", int),
    "RMQ_REMOTING_MAX_CONNECTIONS": ("remoting_max_connections", int),
    "RMQ_REMOTING_FRAME_TIMEOUT_MS": ("remoting_frame_timeout_ms", int),
    "RMQ_REMOTING_FRAME_BUFFER_BYTES": ("remoting_frame_buffer_bytes", int),
    "RMQ_HTTP_BACKLOG": ("http_backlog", int),
    "RMQ_HTTP_HEADER_TIMEOUT_MS": ("http_header_timeout_ms", int),
    "RMQ_HTTP_BODY_TIMEOUT_MS": ("http_body_timeout_ms", int),
    "RMQ_MAX_WATCHES": ("max_watches", int),
    # TLS on the RocketMQ port
    "RMQ_REMOTING_TLS_MODE": ("remoting_tls_mode", str),
    "RMQ_REMOTING_TLS_CERT": ("remoting_tls_cert", str),
    "RMQ_REMOTING_TLS_KEY": ("remoting_tls_key", str),
    "RMQ_REMOTING_TLS_CLIENT_CA": ("remoting_tls_client_ca", str),
}

# variable -> the least value that makes sense (a frame of the largest size must fit the buffer)
MINIMUMS: dict[str, int] = {
    "RMQ_REMOTING_IDLE_MS": 1,
    "RMQ_REMOTING_MAX_CONNECTIONS": 1,
    "RMQ_REMOTING_FRAME_TIMEOUT_MS": 1,
    "RMQ_REMOTING_FRAME_BUFFER_BYTES": 16 * 1024 * 1024,
    "RMQ_HTTP_BACKLOG": 1,
    "RMQ_HTTP_HEADER_TIMEOUT_MS": 1,
    "RMQ_HTTP_BODY_TIMEOUT_MS": 1,
    "RMQ_MAX_WATCHES": 0,
}


def _check_white_addresses(settings: Settings) -> None:
    white = settings.remoting_white_addresses
    if white is None:
        return
    try:
        AddressList.from_setting(white)
    except PatternError as e:
        raise SystemExit(f"RMQ_REMOTING_WHITE_ADDRESSES={white!r}: {e}") from None
    if settings.auth_tokens_file is None:
        raise SystemExit("RMQ_REMOTING_WHITE_ADDRESSES is set but RMQ_AUTH_TOKENS_FILE is not: without "
                         "authentication every address may already do everything")


def from_env(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for var, (name, parse) in ENV.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        try:
            values[name] = parse(raw)  # type: ignore[operator]
        except ValueError as exc:
            raise SystemExit(f"bad value for {var}: {raw!r} ({exc})") from None
    values.setdefault("remoting_port", 9876)
    settings = Settings(**values)  # type: ignore[arg-type]
    if not 0 <= settings.remoting_port <= 65535:
        raise SystemExit(f"RMQ_REMOTING_PORT must be 0 (off) or a port, not {settings.remoting_port}")
    _check_white_addresses(settings)
    if settings.version_poll_ms >= settings.max_staleness_ms > 0:
        raise SystemExit("RMQ_VERSION_POLL_MS must be below RMQ_MAX_STALENESS_MS, or the cache would never be fresh")
    if settings.log_format not in ("text", "json"):
        raise SystemExit(f"RMQ_LOG_FORMAT must be 'text' or 'json', not {settings.log_format!r}")
    for var, least in MINIMUMS.items():
        value = getattr(settings, ENV[var][0])
        if value < least:
            raise SystemExit(f"{var} must be at least {least}, not {value}")
    if settings.auth_reads not in ("open", "token"):
        raise SystemExit(f"RMQ_AUTH_READS must be 'open' or 'token', not {settings.auth_reads!r}")
    _check_cluster_url(settings)
    _check_remoting_tls(settings)
    return settings


def _check_remoting_tls(settings: Settings) -> None:
    """The TLS mode is one of RocketMQ's; a certificate comes with its key, and both load."""
    mode = settings.remoting_tls_mode
    if mode not in ("disabled", "permissive", "enforcing"):
        _refuse(f"RMQ_REMOTING_TLS_MODE must be 'disabled', 'permissive' or 'enforcing', not {mode!r}")
    cert, key, ca = settings.remoting_tls_cert, settings.remoting_tls_key, settings.remoting_tls_client_ca
    if (cert is None) != (key is None):
        _refuse("RMQ_REMOTING_TLS_CERT and RMQ_REMOTING_TLS_KEY go together: set both, or neither "
                "for a self-signed certificate")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:  # the message never holds the key's contents
        _refuse(f"RMQ_REMOTING_TLS_CERT={cert}, RMQ_REMOTING_TLS_KEY={key}: cannot load them ({_why(e)})")
    try:
        if ca is not None:
            context.load_verify_locations(ca)
    except (OSError, ssl.SSLError) as e:
        _refuse(f"RMQ_REMOTING_TLS_CLIENT_CA={ca}: cannot load it ({_why(e)})")


def _why(e: OSError) -> str:
    return getattr(e, "reason", None) or e.strerror or str(e)


def _check_cluster_url(settings: Settings) -> None:
    """A cluster's seed list is well formed, and a seed list comes with RMQ_REDIS_CLUSTER
    (the messages never echo the URL, which may hold a password)."""
    url = settings.redis_url or ""
    if settings.redis_cluster and url:
        try:
            parse_cluster_url(url)
        except ValueError as exc:
            raise SystemExit(f"bad value for REDIS_URL with RMQ_REDIS_CLUSTER=true: {exc}") from None
    elif not url.startswith("redis+sentinel://") and names_several_hosts(url):
        raise SystemExit("REDIS_URL names several hosts: set RMQ_REDIS_CLUSTER=true for a Redis Cluster's seed "
                         "nodes, or use redis+sentinel:// for Sentinels")


def _refuse(line: str) -> NoReturn:
    """A bad TLS setting: one line on stderr, exit status 2 (the docs' status for a bad setting)."""
    print(line, file=sys.stderr)
    raise SystemExit(2)
