"""`rmq-registry compare --tls`: NameServers in TLS enforcing mode (workers with
RMQ_REMOTING_TLS_MODE=enforcing) read with the client TLS settings RocketMQ's clients take
(tls.client.trustCertPath, authServer, certPath, keyPath, keyPassword), each side or both;
bad TLS options refused in one line, exit 2."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest

from service.cli import main
from service.remoting.client import ClientError
from service.remoting.compare import compare, tls_context
from tests.processes import console_script
from tests.remoting import broker5
from tests.remoting.conftest import Worker
from tests.remoting.test_compare import OPEN, TABLE, addr, master, registered
from tests.tls_certs import Certs, insecure_client, make_certs

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
async def closing() -> AsyncIterator[None]:
    yield
    while OPEN:
        await OPEN.pop().close()


@pytest.fixture
def enforcing(make_worker: Callable[..., Awaitable[Worker]], certs: Certs,
              closing: None) -> Callable[..., Awaitable[Worker]]:
    """A worker taking TLS only, with the CA's server certificate; `client_ca`: it also asks
    clients for a certificate the CA signed."""
    async def make(prefix: str, client_ca: bool = False) -> Worker:
        return await make_worker(key_prefix=prefix, remoting_tls_mode="enforcing", remoting_tls_cert=str(certs.server),
                                 remoting_tls_key=str(certs.server_key),
                                 remoting_tls_client_ca=str(certs.ca) if client_ca else None)
    return make


async def command(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(console_script("rmq-registry"), "compare", *args,
                                                env={**os.environ, **(env or {})},
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_over_tls_a_difference_between_two_enforcing_nameservers_is_found(
        enforcing: Callable[..., Awaitable[Worker]], certs: Certs) -> None:
    a, b = await enforcing("rmq-a"), await enforcing("rmq-b")
    await registered(a, master(TABLE), tls=insecure_client())
    await registered(b, master({**TABLE, "T1": broker5.topic_config("T1", 4, 4, perm=4)}), tls=insecure_client())
    context = tls_context(trust_cert=str(certs.ca))
    report = await compare(addr(a), addr(b), tls=(context, context))
    assert report.differences == [f"topic T1: broker-a perm 6 on {addr(a)}, 4 on {addr(b)}"]


async def test_without_tls_an_enforcing_nameserver_is_said_to_close_before_any_answer(
        enforcing: Callable[..., Awaitable[Worker]], make_worker: Callable[..., Awaitable[Worker]]) -> None:
    a, b = await make_worker(key_prefix="rmq-a"), await enforcing("rmq-b")
    with pytest.raises(ClientError) as raised:
        await compare(addr(a), addr(b))
    said = str(raised.value)
    assert said.startswith(addr(b)) and "closed before any answer: does it take TLS only?" in said


async def test_the_command_reads_a_plain_nameserver_and_an_enforcing_one_with_tls_b(
        enforcing: Callable[..., Awaitable[Worker]], make_worker: Callable[..., Awaitable[Worker]],
        certs: Certs) -> None:
    a, b = await make_worker(key_prefix="rmq-a"), await enforcing("rmq-b")
    await registered(a, master(TABLE))
    await registered(b, master(TABLE), tls=insecure_client())
    code, out, err = await command("--tls-b", "--tls-trust-cert", str(certs.ca), addr(a), addr(b))
    assert code == 0, err
    assert f"{addr(a)} and {addr(b)}: 3 topics compared, no differences" in out


async def test_the_command_refuses_a_certificate_the_trusted_ca_did_not_sign_unless_insecure(
        make_worker: Callable[..., Awaitable[Worker]], certs: Certs, closing: None) -> None:
    """A worker's own self-signed certificate: refused against the CA in one line, exit 2;
    read with --tls-insecure (tls.client.authServer=false, RocketMQ's default)."""
    a = await make_worker(key_prefix="rmq-a", remoting_tls_mode="enforcing")
    code, _, err = await command("--tls", "--tls-trust-cert", str(certs.ca), addr(a), addr(a))
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"compare: {addr(a)}: TLS handshake failed: ") and "CERTIFICATE_VERIFY_FAILED" in err
    code, out, err = await command("--tls", "--tls-insecure", addr(a), addr(a))
    assert code == 0 and "no differences" in out, err


@pytest.fixture(scope="module")
def encrypted_key(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client's key, encrypted with the password `pw-1`."""
    path = tmp_path_factory.mktemp("encrypted") / "client-encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(certs.client_key), "-aes256", "-passout", "pass:pw-1",
                    "-out", str(path)], check=True, capture_output=True, timeout=30)
    return path


@pytest.mark.parametrize("key", ["plain", "encrypted"])
async def test_the_command_shows_a_client_certificate_to_a_nameserver_that_asks_for_one(
        enforcing: Callable[..., Awaitable[Worker]], certs: Certs, encrypted_key: Path, key: str) -> None:
    a = await enforcing("rmq-a", client_ca=True)
    path, env = (certs.client_key, {}) if key == "plain" else (encrypted_key, {"RMQ_COMPARE_TLS_KEY_PASSWORD": "pw-1"})
    tls = ["--tls", "--tls-trust-cert", str(certs.ca)]
    code, _, err = await command(*tls, addr(a), addr(a))
    assert code == 2 and err.count("\n") == 1, err  # no certificate: the worker ends the handshake
    code, out, err = await command(*tls, "--tls-cert", str(certs.client), "--tls-key", str(path), addr(a), addr(a),
                                   env=env)
    assert code == 0 and "no differences" in out, err


@pytest.mark.parametrize("args, env, says", [
    (["--tls-trust-cert", "ca.pem"], {}, "--tls-trust-cert needs --tls (or --tls-a, --tls-b)"),
    (["--tls", "--tls-cert", "{client}"], {}, "--tls-cert and --tls-key go together"),
    (["--tls", "--tls-insecure", "--tls-trust-cert", "{ca}"], {}, "--tls-insecure checks no certificate"),
    (["--tls", "--tls-trust-cert", "/nonexistent/ca.pem"], {}, "TLS: /nonexistent/ca.pem: No such file or directory"),
    (["--tls", "--tls-trust-cert", "{client_key}"], {}, "no certificate or crl found"),
    (["--tls", "--tls-cert", "{client}", "--tls-key", "{encrypted}"], {},
     "the key is encrypted: give its password in RMQ_COMPARE_TLS_KEY_PASSWORD"),
    (["--tls", "--tls-cert", "{client}", "--tls-key", "{encrypted}"], {"RMQ_COMPARE_TLS_KEY_PASSWORD": "pw-wrong-7"},
     "not a PEM certificate and its PEM key, or a wrong key password"),
], ids=["tls option without tls", "cert without key", "insecure and trust", "missing file", "not a certificate",
        "encrypted key without password", "wrong password"])
def test_a_bad_tls_option_is_refused_in_one_line_with_exit_2(
        certs: Certs, encrypted_key: Path, args: list[str], env: dict[str, str], says: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"client": certs.client, "client_key": certs.client_key, "ca": certs.ca, "encrypted": encrypted_key}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:  # the command's own parser, in this process: no NameServer is read
        main(["compare", *(a.format(**files) for a in args), "127.0.0.1:1", "127.0.0.1:2"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert exited.value.code == 2 and out == "" and says in lines[-1], err
    assert "pw-wrong-7" not in err and "pw-1" not in err  # no password shown
    assert all(line.startswith("usage:") or line.startswith(" ") for line in lines[:-1]), err
