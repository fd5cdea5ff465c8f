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

from redis.exceptions import AuthenticationError, ResponseError

from service.auth import check_tokens_file
from service.config import Settings, StartupError
from service.redis_url import database, masked as masked_url
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
            return
        except StoreRefusing:
            raise  # Redis answers: not a reason to wait or to refuse to start
        except ResponseError as exc:
            refused_settings(exc, settings)
            raise
        except StoreUnavailable as exc:
            refused_settings(exc.__cause__, settings)
            if time.monotonic() >= deadline:
                raise StartupError(f"REDIS_URL={masked_url(settings.redis_url or '')}: Redis unreachable at start "
                                   f"({exc}) for {limit_s:.1f} s (RMQ_REDIS_START_TIMEOUT_MS={settings.redis_start_timeout_ms})"
                                   ) from None
            if not announced:
                log.warning("Redis at %s unreachable at start (%s): retrying for up to %.1f s (RMQ_REDIS_START_TIMEOUT_MS)",
                            masked_url(settings.redis_url or ""), exc, limit_s)
                announced = True
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def refused_settings(cause: BaseException | None, settings: Settings) -> None:
    """Redis answered, and what it said is a bad setting, not an outage to wait out:
    StartupError at once, saying which."""
    url = masked_url(settings.redis_url or "")
    if isinstance(cause, AuthenticationError):
        if "@" in (settings.redis_url or ""):
            raise StartupError(f"REDIS_URL={url}: Redis refused the password (WRONGPASS/AuthenticationError: {cause})")
        raise StartupError(f"REDIS_URL={url}: Redis wants a password and the URL gives none "
                           f"(NOAUTH/AuthenticationError: {cause})")
    if isinstance(cause, ResponseError) and "DB index is out of range" in str(cause):
        raise StartupError(f"REDIS_URL={url}: Redis has no database {database(settings.redis_url or '')} "
                           "(its 'databases' setting, 16 by default, allows 0 to that number less one)")


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
