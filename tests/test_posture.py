"""The security posture a worker states at start, in one line (service.posture)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from service.config import Settings
from service.posture import posture


def test_without_authentication_the_line_says_anyone_may_change_routes_on_both_ports() -> None:
    assert posture(Settings(remoting_port=9876)) == (
        "authentication OFF (RMQ_AUTH_TOKENS_FILE unset): anyone who reaches the HTTP port or the RocketMQ port "
        "may read and change routes; RocketMQ port 9876: no address whitelist, PROXY protocol off")


def test_with_authentication_the_line_names_the_roles_reads_whitelist_and_proxy_protocol(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin a-token\nadmin ak as\nbroker bk bs from=10.0.0.0/8\nbroker bk2 bs2\n")
    settings = Settings(remoting_port=9876, auth_tokens_file=str(tokens), auth_reads="token",
                        remoting_white_addresses=" 10.0.0.0/8  fd00::/8 ", remoting_proxy_protocol=True)
    assert posture(settings) == (
        f"authentication on (RMQ_AUTH_TOKENS_FILE={tokens}: broker: 2 key pairs (1 only from their from= "
        "addresses) / admin: 1 token, 1 key pair), reads need a credential (RMQ_AUTH_READS=token); "
        "RocketMQ port 9876: whitelist 10.0.0.0/8 fd00::/8 (unsigned broker requests and reads from them pass), "
        "PROXY protocol on (the header's address is the client's, from any sender: let only the balancers "
        "reach the port)")


def test_open_reads_a_role_without_credentials_and_the_rocketmq_port_off(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("broker b-token\n")
    assert posture(Settings(auth_tokens_file=str(tokens))) == (
        f"authentication on (RMQ_AUTH_TOKENS_FILE={tokens}: broker: 1 token / admin: none), "
        "reads open to anyone (RMQ_AUTH_READS=open); RocketMQ port off")


async def test_a_starting_worker_states_its_posture_once(make_client, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin a-token\n")
    caplog.set_level(logging.INFO, logger="service.posture")
    await make_client(auth_tokens_file=str(tokens))
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "service.posture"]
    assert said == [(logging.INFO, f"security: authentication on (RMQ_AUTH_TOKENS_FILE={tokens}: broker: none / "
                                   "admin: 1 token), reads open to anyone (RMQ_AUTH_READS=open); RocketMQ port off")]


async def test_a_worker_without_authentication_states_it_as_a_warning(make_client,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="service.posture")
    await make_client()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "service.posture"]
    assert [level for level, _ in said] == [logging.WARNING]
    assert said[0][1].startswith("security: authentication OFF (RMQ_AUTH_TOKENS_FILE unset)")
