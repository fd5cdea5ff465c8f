"""What a worker checks before it serves, each failure a ``StartupError`` of one line
naming the setting and its value (a secret is named, never printed):

- the secrets it was given: no placeholder (``REPLACE-ME-...``, as shipped in
  ``k8s/secrets.yaml``) or empty password in ``REDIS_URL``; a readable tokens file with
  credentials and no placeholder in it (``service.auth.check_tokens_file``);
- Redis: reachable within ``RMQ_REDIS_START_TIMEOUT_MS`` (retried meanwhile, and said so),
  its scripts loaded; a password or a database number Redis refuses stops the worker at
  once, saying so (not "unreachable");
- the key schema: the version stamp in Redis (``Keys.schema``), written by the first
  worker (SET NX), equals this worker's ``SCHEMA_VERSION``, so a worker whose scripts and
  keys differ in meaning from those already in Redis never writes into them;
- the data set's name (``Keys.dataset``), written once (SET NX) for readers outside the
  service (the analytics history) to tell registries apart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import parse_qs, urlsplit

from redis.asyncio import ConnectionPool, Redis
from redis.connection import parse_url
from redis.exceptions import AuthenticationError, ResponseError

from service import start_log
from service.auth import check_tokens_file
from service.config import Settings, StartupError
from service.redis_url import SENTINEL_SCHEME, database, masked as masked_url, parse_sentinel_url
from service.keys import SCHEMA_VERSION
from service.store import Store, StoreRefusing, StoreUnavailable

log = logging.getLogger(__name__)

PLACEHOLDER = "REPLACE-ME"


def check_redis_url(url: str) -> None:
    """A password in ``REDIS_URL`` that is empty or still the shipped placeholder."""
    parts = urlsplit(url)
    credentials = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else None
    passwords = {"password": credentials.split(":", 1)[1] if credentials and ":" in credentials else None}
    passwords["sentinel_password"] = parse_qs(parts.query, keep_blank_values=True).get("sentinel_password", [None])[0]
    for what, password in passwords.items():
        if password is None:
            continue
        if password == "":
            raise StartupError(f"REDIS_URL={masked_url(url)}: an empty {what.replace('_', ' ')}; "
                               "give the real one or none at all")
        if password.startswith(PLACEHOLDER):
            raise StartupError(f"REDIS_URL={masked_url(url)}: the {what.replace('_', ' ')} is a placeholder "
                               f"({PLACEHOLDER}-...): set the real one (k8s: Secret rmq-redis)")


def check_secrets(settings: Settings) -> None:
    if settings.redis_url:
        check_redis_url(settings.redis_url)
    if settings.auth_tokens_file:
        check_tokens_file(settings.auth_tokens_file)


async def connect(store: Store, settings: Settings) -> None:
    """Loads the scripts and checks the schema stamp, retrying while Redis is unreachable
    for at most ``RMQ_REDIS_START_TIMEOUT_MS``: a Redis that starts a little after its
    workers (a fresh cluster) is waited for, one that never comes stops the worker."""
    limit_s = settings.redis_start_timeout_ms / 1000
    deadline = time.monotonic() + limit_s
    announced = False
    while True:
        try:
            await store.load_scripts()
            await check_schema(store, settings)
            await store.stamp_dataset()
            await password_unasked(store, settings)
            return
        except StoreRefusing:
            raise  # Redis answers: not a reason to wait or to refuse to start
        except ResponseError as exc:
            refused_settings(exc, settings)
            raise StartupError(f"REDIS_URL={masked_url(settings.redis_url or '')}: Redis refused the worker's "
                               f"start: {redis_said(exc)}") from None
        except StoreUnavailable as exc:
            refused_settings(exc.__cause__, settings)
            if not announced:  # once: the first failure may be a setting a probe tells
                await tls_mismatch(settings)
            if time.monotonic() >= deadline:
                raise StartupError(f"REDIS_URL={masked_url(settings.redis_url or '')}: Redis unreachable at start "
                                   f"({exc}) for {limit_s:.1f} s (RMQ_REDIS_START_TIMEOUT_MS={settings.redis_start_timeout_ms})"
                                   ) from None
            if not announced:
                # a wait is news while it lasts: said now, after what was held
                start_log.announce(log, "Redis at %s unreachable at start (%s): retrying for up to %.1f s "
                                   "(RMQ_REDIS_START_TIMEOUT_MS)", masked_url(settings.redis_url or ""), exc, limit_s)
                announced = True
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def redis_said(exc: BaseException) -> str:
    """What Redis answered, without the command's arguments it may echo (a password)."""
    return str(exc).split(", with args beginning with")[0].split(". script:")[0]


def credentials(url: str) -> tuple[str | None, str | None]:
    """The user name and password a valid URL gives (the primary's, for Sentinels), from its
    user info or its ``?password=`` / ``?username=``."""
    if url.startswith(SENTINEL_SCHEME):
        target = parse_sentinel_url(url)
        return target.username, target.password
    if "://" in url and not url.startswith(("redis://", "rediss://", "unix://")):
        return None, None
    try:
        options = parse_url(url.split(",")[0] if "," in urlsplit(url).netloc else url)
    except ValueError:
        return None, None
    return options.get("username") or None, options.get("password") or None


def refused_settings(cause: BaseException | None, settings: Settings) -> None:
    """Redis answered, and what it said is a bad setting, not an outage to wait out:
    StartupError at once, saying which."""
    url = masked_url(settings.redis_url or "")
    if isinstance(cause, AuthenticationError):
        if credentials(settings.redis_url or "")[1] is not None:
            raise StartupError(f"REDIS_URL={url}: Redis refused the password, wrong for it "
                               f"(WRONGPASS/AuthenticationError: {redis_said(cause)})")
        raise StartupError(f"REDIS_URL={url}: Redis wants a password and the URL gives none "
                           f"(NOAUTH/AuthenticationError: {redis_said(cause)})")
    if isinstance(cause, ResponseError) and "DB index is out of range" in str(cause):
        raise StartupError(f"REDIS_URL={url}: Redis has no database {database(settings.redis_url or '')} "
                           "(its 'databases' setting, 16 by default, allows 0 to that number less one)")
    if isinstance(cause, ResponseError) and "unknown command 'SENTINEL'" in str(cause):
        raise StartupError(f"REDIS_URL={url}: no Sentinel there, a plain Redis answers (it knows no SENTINEL "
                           "command): give redis://host:port for a single Redis, or the Sentinels' addresses")


async def password_unasked(store: Store, settings: Settings) -> None:
    """A password given for a Redis that has none: Redis takes any password then (its
    default user has nopass), so the worker would run on a Redis open to anyone while the
    operator believes it guarded, or on another Redis than meant. Asked on a connection
    without credentials, for a single Redis and the default user only (a named user's
    password is its own, whatever the default user's)."""
    url = settings.redis_url or ""
    username, password = credentials(url)
    if password is None or username not in (None, "default") or settings.redis_cluster \
            or url.startswith(SENTINEL_SCHEME):
        return
    pool = store.redis.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items()
              if k not in ("username", "password", "credential_provider", "retry")}
    probe = Redis(connection_pool=ConnectionPool(connection_class=pool.connection_class, max_connections=1, **kwargs))
    try:
        await store.call(probe.ping())
    except StoreUnavailable as exc:
        if isinstance(exc.__cause__, AuthenticationError):
            return  # it wants a password: the one given is right, it was just used
        raise
    finally:
        await probe.aclose()
    raise StartupError(f"REDIS_URL={masked_url(url)}: a password is given but Redis has none (it answers "
                       "without one): remove it from the URL, or set Redis' requirepass")


# the first bytes a plain Redis answers to "PING" with: PONG, or an error (NOAUTH, ...)
_PLAIN_REDIS = (b"+PONG", b"-")


async def tls_mismatch(settings: Settings) -> None:
    """``rediss://`` to a Redis that speaks plain: the TLS handshake waits out the timeout,
    which would read as an unreachable Redis. A plain PING tells it."""
    url = settings.redis_url or ""
    if not url.startswith("rediss://") or settings.redis_cluster:
        return
    options = parse_url(url)
    host, port = options.get("host", "localhost"), int(options.get("port", 6379))
    timeout = settings.redis_timeout_ms / 1000
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return  # unreachable indeed
    try:
        writer.write(b"PING\r\n")
        answer = await asyncio.wait_for(reader.read(16), timeout)
    except (OSError, asyncio.TimeoutError):
        return
    finally:
        writer.close()
    if answer.startswith(_PLAIN_REDIS):
        raise StartupError(f"REDIS_URL={masked_url(url)}: {host}:{port} speaks plain Redis, not TLS: give "
                           "redis:// for it, or turn TLS on in Redis (its tls-port)")


async def check_schema(store: Store, settings: Settings) -> None:
    """Stamps an unstamped Redis with this worker's key schema version, then refuses a
    Redis stamped with another one."""
    key, redis = store.keys.schema, store.redis
    try:
        await store.call(redis.set(key, SCHEMA_VERSION, nx=True))
    except StoreRefusing as exc:  # out of memory or a replica: check what is there all the same
        log.warning("could not stamp the key schema version (%s)", exc)
    found = await store.call(redis.get(key))
    if found is None:
        return
    found = found.decode() if isinstance(found, bytes) else str(found)
    if found != str(SCHEMA_VERSION):
        raise StartupError(f"RMQ_KEY_PREFIX={settings.key_prefix}: Redis holds key schema version {found} ({key}), "
                           f"this worker's is {SCHEMA_VERSION}; workers of both cannot share these tables "
                           "(docs/upgrade.md)")
