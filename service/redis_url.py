"""REDIS_URL: checked before a worker starts, and shown only with its passwords masked.

A single Redis (``redis://``, ``rediss://``, ``unix://``) is read by redis-py's own URL
parser (``redis.connection.parse_url``, what ``from_url`` connects with); Sentinels
(``redis+sentinel://``, parsed here) and a Redis Cluster's seed list
(``service.redis_cluster.parse_cluster_url``) by their own parsers. Every refusal is a
``ValueError`` whose text never holds a password, whole or in part.

A user name or password holding ``@ / : ? #`` must be percent-encoded (``%40 %2F %3A
%3F %23``): unencoded, a URL parser takes part of the password for the host (``p@ss``
read as host ``ss``), so such a URL is refused, before anything prints a host made of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from redis.connection import parse_url

from service.redis_cluster import names_several_hosts, parse_cluster_url

SENTINEL_SCHEME = "redis+sentinel://"
SCHEMES = ("redis://", "rediss://", "unix://", SENTINEL_SCHEME)
MASK = "***"
# a query parameter holding a password: redis-py reads ?password=, Sentinels ?sentinel_password=
_SECRET_PARAM = re.compile(r"(?<=[?&])([A-Za-z_]*password=)[^&]*")


def masked(url: str) -> str:
    """``url`` with every password (the userinfo's, ``?password=``, ``?sentinel_password=``)
    replaced by ``***``, whatever it holds: the user info ends at the *last* ``@``, so an
    unencoded ``@ / ? #`` in a password hides the rest of it too. User info without a
    colon is masked whole: it may be a password given without its colon."""
    url = _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    credentials, at, rest = rest.rpartition("@")
    if at:
        user, colon, _ = credentials.partition(":")
        credentials = f"{user}:{MASK}" if colon else MASK
    return f"{scheme}{sep}{credentials}{at}{rest}"


def check_encoded(url: str) -> None:
    """Refuses a user name or password holding an unencoded ``@ / : ? #``."""
    rest = url.partition("://")[2]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" not in rest:
        return
    credentials = authority.rpartition("@")[0]
    if "@" not in authority or "@" in credentials or credentials.count(":") > 1 or "@" in rest[len(authority):]:
        raise ValueError("the user name or password holds an unencoded '@', '/', ':', '?' or '#': percent-encode "
                         "them (%40 %2F %3A %3F %23)")


def check(url: str, cluster: bool) -> None:
    """A URL the worker can connect with, or ValueError saying what is wrong (never a password)."""
    if not url.startswith(SCHEMES):
        raise ValueError("must start with redis://, rediss://, unix:// or redis+sentinel://")
    check_encoded(url)
    if cluster:
        parse_cluster_url(url)
    elif url.startswith(SENTINEL_SCHEME):
        parse_sentinel_url(url)
    elif names_several_hosts(url):
        raise ValueError("names several hosts: set RMQ_REDIS_CLUSTER=true for a Redis Cluster's seed nodes, "
                         "or use redis+sentinel:// for Sentinels")
    else:
        check_single(url)


def check_single(url: str) -> None:
    """``redis://``, ``rediss://`` or ``unix://`` as redis-py reads it, plus what its parser
    lets through silently: port 0 (taken as 6379) and a database that is not a number
    (ignored, so database 0 would be used)."""
    try:
        kwargs = parse_url(url)
    except ValueError as exc:
        # its messages name the scheme, the port or a query option, none of them a secret
        # once the user info is known to be encoded (check_encoded)
        text = f"{exc}".rstrip(".")
        raise ValueError(f"{text}: the port must be 1-65535" if text.startswith("Port") else text) from None
    parts = urlsplit(url)
    if not url.startswith("unix://"):
        if parts.port == 0:
            raise ValueError("the port must be 1-65535, not 0")
        if not kwargs.get("host"):
            raise ValueError("names no host: redis://HOST:PORT/DB")
        database = unquote(parts.path).strip("/")
        if database and not database.isdigit():
            raise ValueError(f"the database must be a number (0-15 on a default Redis), not {database!r}")


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: list[tuple[str, int]]
    master: str
    db: int
    username: str | None
    password: str | None
    sentinel_password: str | None


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``redis+sentinel://[user:pass@]host1:26379,host2:26379/<master-name>[/<db>]
    [?sentinel_password=...]``: the credentials are the primary's; the Sentinels are asked
    without any unless ``sentinel_password`` is given. ValueError never echoes a password."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    credentials, hosts = (netloc[0], netloc[1]) if len(netloc) == 2 else ("", netloc[0])
    username, _, password = credentials.partition(":")
    sentinels = []
    for host in filter(None, hosts.split(",")):
        name, _, port = host.rpartition(":") if ":" in host else (host, "", "26379")
        if not (port or "26379").isdigit() or not 0 < int(port or 26379) < 65536:
            raise ValueError(f"Sentinel {host!r} is not host:port")
        sentinels.append((name.strip("[]"), int(port or 26379)))
    path = [p for p in parts.path.split("/") if p]
    if not sentinels or not path:
        raise ValueError(f"a Sentinel URL names the Sentinels and the master: {SENTINEL_SCHEME}host:26379/<master-name>/<db>")
    if len(path) > 1 and not path[1].isdigit():
        raise ValueError(f"the database must be a number, not {path[1]!r}")
    query = parse_qs(parts.query)
    return SentinelTarget(sentinels, unquote(path[0]), int(path[1]) if len(path) > 1 else 0,
                          unquote(username) or None, unquote(password) or None,
                          query.get("sentinel_password", [None])[0])


def database(url: str) -> int:
    """The database a valid single-Redis or Sentinel URL selects (0 for a cluster)."""
    if url.startswith(SENTINEL_SCHEME):
        return parse_sentinel_url(url).db
    try:
        return int(parse_url(url).get("db", 0))
    except ValueError:
        return 0
