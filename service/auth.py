"""Credentials with roles, from a file that is re-read when it changes; each front checks
them its own way (service.http.observe for bearer tokens).

The file (RMQ_AUTH_TOKENS_FILE, a mounted Secret in Kubernetes) has one
``<role> <token>`` (an HTTP bearer token) or ``<role> <accessKey> <secretKey>`` (a key
pair for RocketMQ's signed requests, checked in service.remoting.acl) per line, and ``#``
comments. A key pair's line may end with ``from=<pattern>`` fields (RocketMQ's
``whiteRemoteAddress``, service.addresses' forms): the key is then accepted only from
an address one of them matches. Roles: ``broker`` may register, heartbeat, query its
data version and unregister; ``admin`` may do everything. Reads of routes, cluster and topics are open or
need any valid credential (RMQ_AUTH_READS).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from service.addresses import AddressList, PatternError

from service.config import StartupError

log = logging.getLogger(__name__)

ROLES = ("broker", "admin")

# What an endpoint requires: nothing, the read rule, or a role (admin always qualifies).
OPEN, READ, BROKER, ADMIN = "open", "read", "broker", "admin"


class TokenFileError(ValueError):
    pass


class KeyPair(NamedTuple):
    role: str
    secret: str
    addresses: AddressList | None  # None: from any address


FROM = "from="


def parse_credentials(text: str) -> tuple[list[tuple[str, str]], dict[str, KeyPair]]:
    """Bearer tokens (``<role> <token>``, for HTTP) and key pairs (``<role> <accessKey>
    <secretKey> [from=<pattern> ...]``, for RocketMQ's signed requests): [(role, token)], {accessKey: KeyPair}."""
    tokens: list[tuple[str, str]] = []
    keys: dict[str, KeyPair] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        limits = parts[3:]
        if len(parts) < 2 or parts[0] not in ROLES or not all(p.startswith(FROM) for p in limits):
            raise TokenFileError(f"line {number}: expected '<broker|admin> <token>' or "
                                 "'<broker|admin> <accessKey> <secretKey> [from=<address pattern> ...]'")
        _no_placeholder(number, parts)
        if len(parts) == 2:
            tokens.append((parts[0], parts[1]))
            continue
        try:
            addresses = AddressList.parse([p[len(FROM):] for p in limits]) if limits else None
        except PatternError as e:
            raise TokenFileError(f"line {number}: {e}") from None
        keys[parts[1]] = KeyPair(parts[0], parts[2], addresses)
    return tokens, keys


# Earlier releases' example secrets (k8s/secrets.yaml) start with it: public, so never credentials.
PLACEHOLDER = "REPLACE-ME"


def _no_placeholder(number: int, parts: list[str]) -> None:
    names = ("token",) if len(parts) == 2 else ("access key", "secret key")
    for name, value in zip(names, parts[1:]):
        if value.startswith(PLACEHOLDER):
            raise TokenFileError(f"line {number}: the {parts[0]} {name} is a placeholder ({PLACEHOLDER}-...): replace it")


def check_tokens_file(path: str) -> None:
    """At start, RMQ_AUTH_TOKENS_FILE must be readable and hold credentials, none of them a
    placeholder; later, while serving, a broken file refuses everyone instead (fail closed)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeError) as exc:
        raise StartupError(f"RMQ_AUTH_TOKENS_FILE={path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        tokens, keys = parse_credentials(text)
    except TokenFileError as exc:
        raise StartupError(f"RMQ_AUTH_TOKENS_FILE={path}: {exc}") from None
    if not tokens and not keys:
        raise StartupError(f"RMQ_AUTH_TOKENS_FILE={path}: no credentials in it (an empty Secret?)")


def parse_tokens(text: str) -> list[tuple[str, str]]:
    return parse_credentials(text)[0]


@dataclass
class TokenFile:
    path: str
    check_every: float = 1.0
    tokens: list[tuple[str, str]] = field(default_factory=list)
    keys: dict[str, KeyPair] = field(default_factory=dict)
    _stamp: tuple[float, int, int] | None = None
    _checked: float = float("-inf")

    def refresh(self) -> None:
        """Re-reads the file when it changed (at most once per check_every seconds)."""
        now = time.monotonic()
        if now - self._checked < self.check_every:
            return
        self._checked = now
        try:
            st = os.stat(self.path)  # follows the symlink a Kubernetes Secret mount swaps
            stamp = (st.st_mtime, st.st_size, st.st_ino)
            if stamp == self._stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                self.tokens, self.keys = parse_credentials(f.read())
            self._stamp = stamp
            log.info("auth tokens loaded from %s: %d tokens, %d key pairs", self.path, len(self.tokens), len(self.keys))
        except (OSError, TokenFileError) as exc:
            # fail closed: an unreadable or broken file admits nobody until it is fixed
            self.tokens, self.keys, self._stamp = [], {}, None
            log.error("auth tokens file %s unusable (%s): every protected request is refused", self.path, exc)

    def role_of(self, token: str) -> str | None:
        self.refresh()
        found = None
        presented = token.encode()
        for role, known in self.tokens:
            # compare against every token, so timing tells nothing about which matched
            if hmac.compare_digest(presented, known.encode()) and found != ADMIN:
                found = role
        return found

    def key(self, access_key: str) -> KeyPair | None:
        self.refresh()
        return self.keys.get(access_key)


def allowed(role: str | None, required: str, reads: str) -> bool:
    if required == OPEN or (required == READ and reads == "open"):
        return True
    if role is None:
        return False
    return required == READ or role == ADMIN or role == required
