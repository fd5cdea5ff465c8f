"""Certificates for the TLS tests, made with the openssl command: a CA, a server certificate
for localhost / 127.0.0.1 and a client certificate, both signed by the CA."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certs:
    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path

    def client_context(self, *, own_certificate: bool = False) -> ssl.SSLContext:
        """A client that checks the server against the CA (and shows its own certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if own_certificate:
            context.load_cert_chain(str(self.client), str(self.client_key))
        return context


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed (apt-get install openssl)")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=30)


def make_certs(folder: Path) -> Certs:
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl("req", "-x509", *EC, "-days", "2", "-subj", "/CN=rmq-test-ca", "-keyout", str(ca_key), "-out", str(ca))
    out = {}
    for name, san in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"), ("client", "subjectAltName=DNS:client")):
        key, csr, cert, ext = (folder / f"{name}.{s}" for s in ("key", "csr", "pem", "ext"))
        ext.write_text(san + "\n")
        _openssl("req", *EC, "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-days", "2", "-extfile", str(ext), "-out", str(cert))
        out[name] = (cert, key)
    return Certs(ca, out["server"][0], out["server"][1], out["client"][0], out["client"][1])


def insecure_client() -> ssl.SSLContext:
    """A client that checks no server certificate: a RocketMQ client's default with
    -Dtls.enable=true (tls.client.authServer=false)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
