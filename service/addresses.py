"""Client address patterns in RocketMQ's plain ACL forms (``globalWhiteRemoteAddresses``,
``whiteRemoteAddress``), parsed once and matched against a connection's address.

The forms RocketMQ's ``RemoteAddressStrategyFactory`` accepts, IPv4 and IPv6 alike:

- ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``: any address;
- one address: ``192.168.0.1``, ``2001:db8::1`` (any IPv6 spelling, compared as addresses);
- a list: ``192.168.0.1,192.168.0.2``, or braces in the last part:
  ``192.168.0.{100,101}``, ``2001:db8::{a,b}``;
- ranges and wildcards by part: ``10.10.103.*``, ``192.168.*`` (a final ``*`` stands for
  every part left), ``192.168.100-200.10-20``; IPv6 groups in hex:
  ``2001:db8::1-200:*``, ``2001:db8::ac5:*``.

Beside them, not RocketMQ's: a CIDR prefix, ``10.0.0.0/8``, ``127.0.0.1/32``,
``fd00::/8``, as Kubernetes and cloud firewalls write networks. Its host bits must be 0
(``10.0.0.1/8`` is refused, naming the network it would be).

One difference, on the safe side: RocketMQ's range strategy checks only the first part
that holds a ``*`` or a range and lets the later ones through (so it lets
``192.168.150.99`` in under ``192.168.100-200.10-20``); every part is checked here.

A connection's address is normalised first: an IPv4-mapped IPv6 address
(``::ffff:10.0.0.1``, what a dual-stack socket reports) is its IPv4 address, and an IPv6
zone (``%eth0``) is dropped.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Sequence

ANY = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})

# per family: number of parts, their separator, the largest part, the base parts are written in
_V4 = (4, ".", 255, 10)
_V6 = (8, ":", 0xFFFF, 16)

Parts = tuple[tuple[int, int], ...]  # an inclusive (low, high) range per part

_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


class PatternError(ValueError):
    pass


def _parts_of(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[int, ...]:
    raw = address.packed
    if address.version == 4:
        return tuple(raw)
    return tuple(int.from_bytes(raw[i:i + 2], "big") for i in range(0, 16, 2))


def normalise(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a connection's host string names, IPv4-mapped IPv6 as IPv4; None if not an address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _exact(text: str) -> Parts:
    address = normalise(text.strip())
    if address is None or "%" in text:
        raise PatternError(f"{text.strip()!r} is not an IP address")
    return tuple((p, p) for p in _parts_of(address))


def _cidr(text: str) -> Parts:
    """A CIDR prefix, as the per-part ranges it covers (a prefix is one range per part:
    the parts before its end fixed, the one it ends in a range, the rest whole)."""
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        if "has host bits set" in str(e):
            loose = ipaddress.ip_network(text, strict=False)
            raise PatternError(f"host bits set after the prefix: the network is {loose}") from None
        raise PatternError("not a CIDR prefix (address/length)") from None
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= 96 and network.subnet_of(_MAPPED):
        # connections' IPv4-mapped addresses are matched as IPv4 (normalise): so is this prefix
        network = ipaddress.IPv4Network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))
    low, high = _parts_of(network.network_address), _parts_of(network.broadcast_address)
    return tuple(zip(low, high))


def _part(text: str, top: int, base: int) -> tuple[int, int]:
    text = text.strip()
    if text == "*":
        return 0, top
    low, dash, high = text.partition("-")
    if not text.isascii():
        raise PatternError(f"{text!r} is not a number, a range 'a-b' or '*'")
    try:
        lo = int(low, base)
        hi = int(high, base) if dash else lo
    except ValueError:
        raise PatternError(f"{text!r} is not a number, a range 'a-b' or '*'") from None
    if not (low.strip() and (high.strip() or not dash)) or not 0 <= lo <= hi <= top:
        raise PatternError(f"{text!r} is not a range within 0-{top if base == 10 else format(top, 'x')}")
    return lo, hi


def _ranges(text: str) -> Parts:
    """A pattern of wildcards and ranges by part."""
    count, sep, top, base = _V6 if ":" in text else _V4
    if sep == ".":
        parts = text.split(".")
    else:
        head, double, tail = text.partition("::")
        left = head.split(":") if head else []
        right = tail.split(":") if tail else []
        if "::" in tail:
            raise PatternError("'::' may appear once")
        fill = count - len(left) - len(right)
        if double and fill < 1:
            raise PatternError("too many groups around '::'")
        parts = left + ["0"] * max(fill, 0) + right if double else left
    if len(parts) < count and parts and parts[-1].strip() == "*":
        parts = parts + ["*"] * (count - len(parts))  # a final '*' covers every part left
    if len(parts) != count:
        raise PatternError(f"expected {count} parts separated by '{sep}'")
    return tuple(_part(p, top, base) for p in parts)


@dataclass(frozen=True)
class AddressPattern:
    """One pattern: any address, or a union of part-by-part ranges."""

    text: str
    any: bool
    alternatives: tuple[Parts, ...]

    @classmethod
    def parse(cls, text: str) -> "AddressPattern":
        text = text.strip()
        if not text:
            raise PatternError("an empty pattern")
        if text in ANY:
            return cls(text, True, ())
        try:
            if "/" in text:
                alternatives = (_cidr(text),)
            elif "{" in text or "}" in text:
                prefix, brace, rest = text.partition("{")
                if not brace or not rest.endswith("}") or "{" in rest or rest.count("}") != 1 \
                        or not prefix or prefix[-1] not in ".:":
                    raise PatternError("braces hold the last part only, as in 192.168.0.{100,101}")
                alternatives = tuple(_exact(prefix + item) for item in rest[:-1].split(","))
            elif "," in text:
                alternatives = tuple(_exact(item) for item in text.split(","))
            elif "*" in text or "-" in text:
                alternatives = (_ranges(text),)
            else:
                alternatives = (_exact(text),)
        except PatternError as e:
            raise PatternError(f"bad address pattern {text!r}: {e}") from None
        return cls(text, False, alternatives)

    def matches(self, host: str) -> bool:
        if self.any:
            return True
        address = normalise(host)
        if address is None:
            return False
        parts = _parts_of(address)
        return any(len(alt) == len(parts) and all(lo <= p <= hi for p, (lo, hi) in zip(parts, alt))
                   for alt in self.alternatives)


@dataclass(frozen=True)
class AddressList:
    """Several patterns (any one matching lets the address in)."""

    patterns: tuple[AddressPattern, ...]

    @classmethod
    def parse(cls, texts: Sequence[str]) -> "AddressList":
        return cls(tuple(AddressPattern.parse(t) for t in texts))

    @classmethod
    def from_setting(cls, value: str) -> "AddressList":
        """Patterns separated by white space (commas belong to the patterns themselves)."""
        return cls.parse(value.split())

    def matches(self, host: str) -> bool:
        return any(p.matches(host) for p in self.patterns)

    def __str__(self) -> str:
        return " ".join(p.text for p in self.patterns)
