"""RocketMQ's plain ACL address patterns (service.addresses): every form, IPv4 and IPv6,
and CIDR prefixes beside them."""

from __future__ import annotations

import pytest

from service.addresses import AddressList, AddressPattern, PatternError
from service.auth import TokenFileError, parse_credentials
from service.config import StartupError
from tests.settings_env import settings_from

# pattern, addresses it lets in, addresses it keeps out
FORMS = [
    ("*", ["10.0.0.1", "::1", "2001:db8::7"], []),
    ("*.*.*.*", ["10.0.0.1", "255.255.255.255"], []),
    ("*:*:*:*:*:*:*:*", ["10.0.0.1", "fe80::1"], []),
    ("192.168.0.1", ["192.168.0.1", "::ffff:192.168.0.1"], ["192.168.0.2", "192.168.0.10"]),
    ("192.168.0.1,192.168.0.2", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("192.168.0.{100,101}", ["192.168.0.100", "192.168.0.101"], ["192.168.0.102", "192.168.1.100"]),
    ("10.10.103.*", ["10.10.103.0", "10.10.103.255"], ["10.10.104.1", "10.10.1.103"]),
    ("192.168.*", ["192.168.0.1", "192.168.255.7"], ["192.169.0.1"]),
    ("192.168.*.*", ["192.168.3.4"], ["10.168.3.4"]),
    ("192.168.100-200.10-20", ["192.168.100.10", "192.168.200.20", "192.168.150.15"],
     ["192.168.99.15", "192.168.201.15", "192.168.150.9", "192.168.150.21"]),
    ("192.168.1-10.*", ["192.168.1.0", "192.168.10.255"], ["192.168.11.0"]),
    ("2001:db8::1", ["2001:db8::1", "2001:0db8:0000:0000:0000:0000:0000:0001", "2001:DB8::1"], ["2001:db8::2"]),
    ("2001:db8::1,2001:db8::2", ["2001:db8::2"], ["2001:db8::3"]),
    ("2001:db8::{a,b}", ["2001:db8::a", "2001:db8::b"], ["2001:db8::c"]),
    ("2001:db8::ac5:*", ["2001:db8::ac5:0", "2001:db8::ac5:ffff"], ["2001:db8::ac6:1"]),
    ("2::ac5:78:1-200:*", ["2::ac5:78:1:0", "2::ac5:78:200:ffff"], ["2::ac5:78:201:0", "2::ac5:79:1:0"]),
    ("2::ac5:78:1-200", ["2::ac5:78:1", "2::ac5:78:1ff"], ["2::ac5:78:201", "2::ac5:78:0"]),
    ("::1", ["::1"], ["127.0.0.1", "::2"]),
    # CIDR prefixes, beside RocketMQ's forms
    ("127.0.0.1/32", ["127.0.0.1", "::ffff:127.0.0.1"], ["127.0.0.2", "127.0.1.1"]),
    ("10.0.0.0/8", ["10.0.0.0", "10.255.255.255", "10.7.0.1"], ["11.0.0.0", "9.255.255.255"]),
    ("192.168.4.0/22", ["192.168.4.0", "192.168.7.255"], ["192.168.3.255", "192.168.8.0"]),
    ("172.16.0.0/12", ["172.16.0.1", "172.31.255.254"], ["172.32.0.1", "172.15.255.255"]),
    ("0.0.0.0/0", ["0.0.0.0", "255.255.255.255"], ["::1"]),
    ("fd00::/8", ["fd00::1", "fdff:ffff::7"], ["fe00::1", "fc00::1", "10.0.0.1"]),
    ("2001:db8:0:8000::/49", ["2001:db8:0:8000::1", "2001:db8:0:ffff::"], ["2001:db8:0:7fff::", "2001:db8:1::"]),
    ("::1/128", ["::1"], ["::2", "127.0.0.1"]),
    ("::ffff:10.0.0.0/104", ["10.1.2.3", "::ffff:10.1.2.3"], ["11.0.0.1"]),
]


@pytest.mark.parametrize("pattern, inside, outside", FORMS, ids=[f[0] for f in FORMS])
def test_each_rocketmq_pattern_form_lets_in_exactly_its_addresses(pattern: str, inside: list[str],
                                                                    outside: list[str]) -> None:
    parsed = AddressPattern.parse(pattern)
    assert [a for a in inside if not parsed.matches(a)] == []
    assert [a for a in outside if parsed.matches(a)] == []


def test_a_family_never_matches_the_other_familys_pattern() -> None:
    assert not AddressPattern.parse("10.0.0.*").matches("::a00:1")
    assert not AddressPattern.parse("0-ff::*").matches("10.0.0.1")


def test_a_connection_address_with_an_ipv6_zone_is_matched_without_it() -> None:
    assert AddressPattern.parse("fe80::1").matches("fe80::1%eth0")


def test_a_host_that_is_no_address_matches_no_pattern_but_the_wildcard() -> None:
    assert not AddressPattern.parse("10.0.0.*").matches("")
    assert not AddressPattern.parse("10.0.0.1").matches("localhost")
    assert AddressPattern.parse("*").matches("")


@pytest.mark.parametrize("pattern", [
    "", "10.0.0", "10.0.0.256", "10.0.0.1.2", "10.0.0.*-1", "10.0.0.5-1", "10.0.0.-1", "10.0.0.1-",
    "10.0.0.300-400", "10.0.{1,2}.3", "10.0.0.{1,x}", "10.0.0.{1,2", "10.0.0.1,nope", "host.example.com",
    "2001:db8::g", "2001:db8::1::2", "1:2:3:4:5:6:7::8-9", "2001:db8::1-10000", "10.0.0.\u0661",
    "10.0.0.0/33", "10.0.0.0/", "/8", "10.0.0.*/8", "10.0.0.0/8/8", "fd00::/129", "10.0.0.0/x",
], ids=repr)
def test_a_pattern_rocketmq_would_refuse_is_refused_with_the_reason(pattern: str) -> None:
    with pytest.raises(PatternError):
        AddressPattern.parse(pattern)


def test_the_setting_holds_several_patterns_separated_by_spaces() -> None:
    white = AddressList.from_setting(" 10.10.103.*  192.168.0.{100,101} ::1 ")
    assert [white.matches(a) for a in ("10.10.103.9", "192.168.0.101", "::1", "192.168.0.102")] == [
        True, True, True, False]


def test_a_bad_whitelist_setting_stops_the_worker_with_one_line_naming_it() -> None:
    with pytest.raises(StartupError) as e:
        settings_from({"RMQ_REMOTING_WHITE_ADDRESSES": "10.0.0.* 10.0.0.999", "RMQ_AUTH_TOKENS_FILE": "/x"})
    assert str(e.value).startswith("RMQ_REMOTING_WHITE_ADDRESSES='10.0.0.* 10.0.0.999': bad address pattern '10.0.0.999'")


def test_a_cidr_prefix_with_host_bits_is_refused_naming_the_network_it_would_be() -> None:
    with pytest.raises(PatternError, match="host bits set after the prefix: the network is 10.0.0.0/8"):
        AddressPattern.parse("10.0.0.1/8")


def test_a_bad_cidr_in_the_setting_stops_the_worker_with_one_line_naming_setting_and_value() -> None:
    with pytest.raises(StartupError) as e:
        settings_from({"RMQ_REMOTING_WHITE_ADDRESSES": "10.0.0.0/8 fd00::/200", "RMQ_AUTH_TOKENS_FILE": "/x"})
    assert str(e.value) == ("RMQ_REMOTING_WHITE_ADDRESSES='10.0.0.0/8 fd00::/200': bad address pattern "
                            "'fd00::/200': not a CIDR prefix (address/length)")


def test_a_whitelist_without_authentication_stops_the_worker() -> None:
    with pytest.raises(StartupError, match="RMQ_AUTH_TOKENS_FILE"):
        settings_from({"RMQ_REMOTING_WHITE_ADDRESSES": "10.0.0.*"})


def test_a_key_pair_line_may_limit_the_key_to_addresses_and_old_lines_still_parse() -> None:
    tokens, keys = parse_credentials("broker tok\nbroker bk bs from=127.0.0.{2,3} from=::1\nadmin ak as\n")
    assert tokens == [("broker", "tok")]
    assert keys["ak"].addresses is None and (keys["ak"].role, keys["ak"].secret) == ("admin", "as")
    limited = keys["bk"].addresses
    assert limited is not None and [limited.matches(a) for a in ("127.0.0.3", "::1", "127.0.0.4")] == [True, True, False]


@pytest.mark.parametrize("line", ["broker bk bs 127.0.0.1", "broker bk bs from=127.0.0.999", "broker bk bs from="])
def test_a_bad_address_limit_makes_the_tokens_file_unusable(line: str) -> None:
    with pytest.raises(TokenFileError, match="line 1"):
        parse_credentials(line)
