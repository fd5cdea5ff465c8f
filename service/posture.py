"""The worker's security posture, said in one line at start (``service.node``): whether
authentication is on and with which roles' credentials, whether reads need one, and on
the RocketMQ port the address whitelist and the PROXY protocol. What an operator, or an
auditor reading the log, would otherwise piece together from six settings."""

from __future__ import annotations

import logging

from service import auth
from service.config import Settings

log = logging.getLogger(__name__)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def credentials(path: str) -> str:
    """The roles the tokens file grants, and how: ``admin: 1 token, 1 key pair / broker: ...``."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens, keys = auth.parse_credentials(f.read())
    except (OSError, UnicodeError, auth.TokenFileError) as e:
        return f"unusable now: {e}"
    parts = []
    for role in auth.ROLES:
        held = []
        if n := sum(1 for r, _ in tokens if r == role):
            held.append(_count(n, "token"))
        pairs = [pair for pair in keys.values() if pair.role == role]
        if pairs:
            limited = sum(1 for pair in pairs if pair.addresses is not None)
            held.append(_count(len(pairs), "key pair") + (f" ({limited} only from their from= addresses)" if limited else ""))
        parts.append(f"{role}: {', '.join(held) or 'none'}")
    return " / ".join(parts)


def posture(settings: Settings) -> str:
    if not settings.auth_tokens_file:
        line = ("authentication OFF (RMQ_AUTH_TOKENS_FILE unset): anyone who reaches the HTTP port"
                + (" or the RocketMQ port" if settings.remoting_port else "") + " may read and change routes")
    else:
        reads = ("reads open to anyone (RMQ_AUTH_READS=open)" if settings.auth_reads == "open"
                 else "reads need a credential (RMQ_AUTH_READS=token)")
        line = (f"authentication on (RMQ_AUTH_TOKENS_FILE={settings.auth_tokens_file}: "
                f"{credentials(settings.auth_tokens_file)}), {reads}")
    if not settings.remoting_port:
        return line + "; RocketMQ port off"
    white = settings.remoting_white_addresses
    whitelist = (f"whitelist {' '.join(white.split())} (unsigned broker requests and reads from them pass)" if white
                 else "no address whitelist")
    if settings.remoting_proxy_protocol:
        proxy = ("PROXY protocol on (the header's address is the client's, from any sender: let only the "
                 "balancers reach the port)")
    else:
        proxy = "PROXY protocol off"
    return f"{line}; RocketMQ port {settings.remoting_port}: {whitelist}, {proxy}"


def say(settings: Settings) -> None:
    """The posture line: a warning when authentication is off, else information."""
    log.log(logging.INFO if settings.auth_tokens_file else logging.WARNING, "security: %s", posture(settings))
