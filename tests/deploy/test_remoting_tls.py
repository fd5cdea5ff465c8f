"""The remoting-tls variant (k8s/variants/remoting-tls): rendered by kustomize from an
overlay outside k8s/ as docs/deploy.md shows, valid against the Kubernetes schemas, and
wired: the TLS Secret's two keys are mounted read-only where the ConfigMap's
RMQ_REMOTING_TLS_CERT / RMQ_REMOTING_TLS_KEY point, and the settings pass the worker's
own check with a real certificate and key at those names."""

from __future__ import annotations

import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import tests.deploy.test_manifests as m
from tests.deploy.test_remoting_external import build
from tests.settings_env import settings_from
from tests.tls_certs import make_certs

VARIANT = m.K8S / "variants" / "remoting-tls"
SECRET = "rmq-registry-remoting-tls"


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return build(tmp_path_factory.mktemp("tls"), VARIANT)


def test_the_component_lists_every_file_of_its_folder() -> None:
    comp = yaml.safe_load((VARIANT / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    listed = set(comp.get("resources", [])) | {p["path"] for p in comp.get("patches", [])}
    assert listed == {p.name for p in VARIANT.glob("*.y*ml") if p.name not in m.KUSTOMIZE_FILES}


@pytest.mark.parametrize("version", m.K8S_VERSIONS)
def test_the_variant_is_valid_against_the_schemas(docs: list[dict], version: str) -> None:
    for d in docs:
        kubernetes_validate.validate(d, version, strict=True)


def mounted_files(docs: list[dict]) -> dict[str, str]:
    """Secret key -> the file a worker sees it as."""
    pod = m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["spec"]
    volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == SECRET)
    container = next(c for c in pod["containers"] if c["name"] == "registry")
    mount = next(vm for vm in container["volumeMounts"] if vm["name"] == volume["name"])
    assert mount["readOnly"] is True and "subPath" not in mount  # a renewal reaches the pod
    return {item["key"]: f"{mount['mountPath']}/{item['path']}" for item in volume["secret"]["items"]}


def test_the_settings_point_at_the_mounted_secrets_keys(docs: list[dict]) -> None:
    config = m.one("ConfigMap", "rmq-registry-config", docs=docs)["data"]
    files = mounted_files(docs)
    assert (config["RMQ_REMOTING_TLS_CERT"], config["RMQ_REMOTING_TLS_KEY"]) == (files["tls.crt"], files["tls.key"])
    assert config["RMQ_REMOTING_TLS_MODE"] in ("permissive", "enforcing")


def test_the_rendered_settings_pass_the_workers_check_given_a_real_certificate(docs: list[dict], tmp_path: Path) -> None:
    config = dict(m.one("ConfigMap", "rmq-registry-config", docs=docs)["data"])
    certs = make_certs(tmp_path / "certs")
    for setting, source in (("RMQ_REMOTING_TLS_CERT", certs.server), ("RMQ_REMOTING_TLS_KEY", certs.server_key)):
        # the same file name under a folder of the test's own (the pod's path is not writable here)
        target = tmp_path / Path(config[setting]).relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
        config[setting] = str(target)
    settings = settings_from({**config, "REDIS_URL": "redis://:x@redis:6379/0"})
    assert settings.remoting_tls_cert and settings.remoting_tls_cert.endswith("/tls.crt")


def test_the_base_serves_tls_with_a_self_signed_certificate_by_default() -> None:
    settings = settings_from({**m.CONFIG["data"], "REDIS_URL": "redis://:x@redis:6379/0"})
    assert (settings.remoting_tls_mode, settings.remoting_tls_cert) == ("permissive", None)
