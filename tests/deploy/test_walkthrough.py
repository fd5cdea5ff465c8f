"""docs/deploy.md's walkthrough overlay, as written there, beside a clone of this
repository: it renders with kubectl's kustomize, alone and with each variant component
its table lists, uses the pushed images and ships no placeholder Secret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tests.deploy.test_manifests as m
from tests.deploy.test_redis_sentinel import render

DEPLOY_MD = (m.K8S.parent / "docs" / "deploy.md").read_text()
OVERLAY = re.search(r"cat > rmq-prod/kustomization.yaml <<'YAML'\n(.*?)\nYAML\n", DEPLOY_MD, re.S)
COMPONENTS = re.findall(r"^\| `(\.\./rmq-registry/k8s/[^`]+)` \|", DEPLOY_MD, re.M)


def overlay(tmp_path: Path, components: list[str]) -> Path:
    """The overlay next to a clone named rmq-registry, as the walkthrough lays them out."""
    assert OVERLAY, "docs/deploy.md has no rmq-prod/kustomization.yaml heredoc"
    (tmp_path / "rmq-registry").symlink_to(m.K8S.parent)
    prod = tmp_path / "rmq-prod"
    prod.mkdir()
    text = OVERLAY.group(1).replace("components: []", "components: [" + ", ".join(components) + "]")
    (prod / "kustomization.yaml").write_text(text)
    return prod


def test_the_components_the_walkthrough_lists_are_components_of_the_repository() -> None:
    found = {p.parent for p in m.K8S.rglob("kustomization.yaml") if "kind: Component" in p.read_text()}
    listed = {m.K8S.parent / c.removeprefix("../rmq-registry/") for c in COMPONENTS}
    assert listed and listed <= found, sorted(map(str, listed - found))


@pytest.mark.parametrize("component", [None, *COMPONENTS])
def test_the_walkthrough_overlay_renders_with_the_pushed_images_and_no_placeholder(
        tmp_path: Path, component: str | None) -> None:
    docs = render(overlay(tmp_path, [component] if component else []))
    assert not [d for d in docs if d["kind"] == "Secret"], "the placeholder Secrets must stay out"
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "StatefulSet", "CronJob")
              for c in m.pod_template(d)["spec"]["containers"] if "rmq-registry" in c["image"]}
    assert images and all(i.startswith("registry.example.com/team/rmq-registry") and i.endswith(":0.2.0")
                          for i in images), images
    assert all(d["metadata"].get("namespace") == m.NAMESPACE for d in docs if d["kind"] != "Namespace")


def test_a_worker_gives_up_on_redis_before_its_startup_probe_gives_up_on_it() -> None:
    """So that the pod's logs show the worker's own line about Redis, not a probe's kill."""
    config = m.one("ConfigMap", "rmq-registry-config")["data"]
    probe = m.pod_template(m.one("Deployment", "rmq-registry"))["spec"]["containers"][0]["startupProbe"]
    assert int(config["RMQ_REDIS_START_TIMEOUT_MS"]) < 1000 * probe["periodSeconds"] * probe["failureThreshold"]


def test_the_walkthrough_overlay_gives_the_spark_executors_the_pushed_analytics_image(tmp_path: Path) -> None:
    variant = next(c for c in COMPONENTS if c.endswith("/spark-on-k8s"))
    docs = render(overlay(tmp_path, [variant]))
    cron = m.one("CronJob", "rmq-analytics", docs=docs)
    container = m.pod_template(cron)["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/team/rmq-registry-analytics:0.2.0"
    assert m.env_of(container)["SPARK_EXECUTOR_IMAGE"]["value"] == container["image"]
    assert '--conf spark.kubernetes.container.image="$SPARK_EXECUTOR_IMAGE"' in container["args"][0]
