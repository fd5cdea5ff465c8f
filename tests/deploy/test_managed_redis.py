"""docs/deploy.md's managed-Redis entries, added to its walkthrough overlay, both read from
the Markdown and rendered by kustomize beside a clone of this repository: the bundled Redis
is gone, and the workers and the analytics job use the one URL the entries give, with the
Secret's password defined before it."""

from __future__ import annotations

import re
from pathlib import Path

import redis
import yaml

import tests.deploy.test_manifests as m
from tests.deploy.test_redis_sentinel import render
from tests.deploy.test_walkthrough import DEPLOY_MD, overlay

SECTION = DEPLOY_MD.split("## A managed Redis or a Redis Cluster instead", 1)[1]
ENTRIES = yaml.safe_load(re.search(r"```yaml\n(.*?)```", SECTION, re.S).group(1))


def managed(tmp_path: Path) -> list[dict]:
    prod = overlay(tmp_path, [])
    kz = yaml.safe_load((prod / "kustomization.yaml").read_text())
    for key in ("patches", "replacements"):
        kz[key] = kz.get(key, []) + ENTRIES[key]
    (prod / "kustomization.yaml").write_text(yaml.safe_dump(kz, sort_keys=False))
    return render(prod)


def redis_url_of(container: dict) -> str:
    env = container["env"]
    names = [e["name"] for e in env]
    url = m.env_of(container)["REDIS_URL"]["value"]
    assert "REDIS_PASSWORD" in names[:names.index("REDIS_URL")], "$(REDIS_PASSWORD) is defined after the URL"
    return url


def test_the_bundled_redis_is_gone(tmp_path: Path) -> None:
    docs = managed(tmp_path)
    assert not [d for d in docs if d["metadata"]["name"] == "redis"]
    assert m.one("Deployment", "rmq-registry", docs=docs)


def test_the_workers_and_the_analytics_job_use_the_documented_url(tmp_path: Path) -> None:
    docs = managed(tmp_path)
    (shown,) = {url for p in ENTRIES["patches"] for url in re.findall(r'value: "(rediss?://[^"]+)"', p["patch"])}
    registry = next(c for c in m.pod_template(m.one("Deployment", "rmq-registry", docs=docs))["spec"]["containers"]
                    if c["name"] == "registry")
    analytics = m.pod_template(m.one("CronJob", "rmq-analytics", docs=docs))["spec"]["containers"][0]
    assert redis_url_of(registry) == redis_url_of(analytics) == shown
    parsed = redis.connection.parse_url(shown.replace("$(REDIS_PASSWORD)", "secret"))
    assert parsed["host"] != "redis" and parsed["password"] == "secret"
