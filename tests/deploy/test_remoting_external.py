"""The remoting-external variant (k8s/variants/remoting-external, and its nodeport
Component): rendered by kustomize from an overlay outside k8s/ as docs/deploy.md shows,
valid against the Kubernetes schemas, and wired: the external Service keeps client
addresses and reaches the workers' RocketMQ port, the NetworkPolicy admits the brokers'
networks to that port only, and the whitelist the workers read covers those networks."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import tests.deploy.test_manifests as m
from service.addresses import AddressList
from tests.deploy.test_redis_sentinel import render
from tests.settings_env import settings_from

VARIANT = m.K8S / "variants" / "remoting-external"
NODEPORT = VARIANT / "nodeport"
REGISTRY_POD = {"app.kubernetes.io/name": "rmq-registry", "app.kubernetes.io/component": "registry"}


def build(tmp_path: Path, *components: Path) -> list[dict]:
    rel = os.path.relpath(m.K8S, tmp_path)
    listed = "".join(f"  - {os.path.relpath(c, tmp_path)}\n" for c in components)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n{listed}")
    return render(tmp_path)


@pytest.fixture(scope="module")
def lb(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return build(tmp_path_factory.mktemp("lb"), VARIANT)


@pytest.fixture(scope="module")
def nodeport(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return build(tmp_path_factory.mktemp("nodeport"), VARIANT, NODEPORT)


@pytest.mark.parametrize("folder", [VARIANT, NODEPORT], ids=["remoting-external", "nodeport"])
def test_each_component_lists_every_file_of_its_folder(folder: Path) -> None:
    comp = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert comp["kind"] == "Component"
    listed = set(comp.get("resources", [])) | {p["path"] for p in comp.get("patches", [])}
    assert listed == {p.name for p in folder.glob("*.y*ml") if p.name not in m.KUSTOMIZE_FILES}


@pytest.mark.parametrize("version", m.K8S_VERSIONS)
@pytest.mark.parametrize("which", ["lb", "nodeport"])
def test_the_variant_is_valid_against_the_schemas(request: pytest.FixtureRequest, which: str, version: str) -> None:
    for d in request.getfixturevalue(which):
        kubernetes_validate.validate(d, version, strict=True)
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == m.NAMESPACE, d["metadata"]["name"]


def service_reaches_the_remoting_port(docs: list[dict]) -> dict:
    svc = m.one("Service", "rmq-registry-remoting", docs=docs)
    pod = m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))
    assert m.selects(svc["spec"]["selector"], pod["metadata"]["labels"])
    (port,) = svc["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (9876, "remoting")
    assert m.container_ports(pod)["remoting"] == 9876
    # no SNAT: the whitelist sees the broker's address, not a node's
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    return svc


def test_a_load_balancer_keeps_the_brokers_addresses_and_reaches_the_workers(lb: list[dict]) -> None:
    assert service_reaches_the_remoting_port(lb)["spec"]["type"] == "LoadBalancer"


def test_the_nodeport_alternative_keeps_them_too_on_a_fixed_node_port(nodeport: list[dict]) -> None:
    svc = service_reaches_the_remoting_port(nodeport)
    assert svc["spec"]["type"] == "NodePort"
    assert 30000 <= svc["spec"]["ports"][0]["nodePort"] <= 32767


def test_the_cluster_ip_service_stays_for_clients_inside(lb: list[dict]) -> None:
    assert m.one("Service", "rmq-registry", docs=lb)["spec"]["type"] == "ClusterIP"


def test_the_default_build_exposes_nothing_outside() -> None:
    docs = render(m.K8S)
    assert [d for d in docs if d["kind"] == "Service" and d["spec"].get("type", "ClusterIP") != "ClusterIP"] == []
    assert "RMQ_REMOTING_WHITE_ADDRESSES" not in m.one("ConfigMap", "rmq-registry-config", docs=docs)["data"]


def external_networks(docs: list[dict]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    policy = m.one("NetworkPolicy", "rmq-registry-remoting-external", docs=docs)
    assert m.selects(policy["spec"]["podSelector"], REGISTRY_POD)
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "remoting", "protocol": "TCP"}]  # 9876 only, not HTTP
    assert all(set(peer) == {"ipBlock"} for peer in rule["from"])
    return [ipaddress.ip_network(peer["ipBlock"]["cidr"]) for peer in rule["from"]]


def test_the_brokers_networks_reach_the_remoting_port_only(lb: list[dict]) -> None:
    assert external_networks(lb)


def test_the_workers_settings_parse_and_whitelist_the_networks_the_policy_admits(lb: list[dict]) -> None:
    data = m.one("ConfigMap", "rmq-registry-config", docs=lb)["data"]
    settings = settings_from(data)  # StartupError, one line, on a bad pattern
    assert settings.remoting_white_addresses and settings.remoting_proxy_protocol is False
    white = AddressList.from_setting(settings.remoting_white_addresses)
    for network in external_networks(lb):
        for address in (network[0], network[network.num_addresses // 2], network[-1]):
            assert white.matches(str(address)), (str(address), str(white))


def test_docs_overlay_admits_and_whitelists_the_brokers_networks_it_names(tmp_path: Path) -> None:
    """docs/deploy.md's overlay, read from the file, beside a clone: its networks replace the
    Component's documentation range in the policy and the whitelist alike."""
    text = (m.K8S.parent / "docs" / "deploy.md").read_text()
    overlay = re.search(r"```yaml\n# my-overlay/kustomization.yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "rmq-registry").symlink_to(m.K8S.parent)
    (tmp_path / "my-overlay").mkdir()
    (tmp_path / "my-overlay" / "kustomization.yaml").write_text(overlay)
    docs = render(tmp_path / "my-overlay")
    networks = external_networks(docs)
    assert ipaddress.ip_network("198.51.100.0/24") not in networks and networks
    test_the_workers_settings_parse_and_whitelist_the_networks_the_policy_admits(docs)
