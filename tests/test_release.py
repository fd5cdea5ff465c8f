"""A release names itself in one place: pyproject.toml's version, as the installed
distribution records it (importlib.metadata), is what `rmq-registry --version`, `GET
/healthz` and `/metrics`' rmq_build_info say, and CHANGELOG.md's newest entry is it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest
import yaml
from aiohttp.test_utils import TestClient

import service
from tests.processes import ROOT

PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# the release before this one, which CHANGELOG.md names and tests/test_previous_release.py runs
PREVIOUS_RELEASE = "3fcd6f1"


def test_the_version_is_the_installed_distributions() -> None:
    assert service.__version__ == metadata.version("rmq-registry")


def test_the_installed_distribution_is_built_from_this_pyproject() -> None:
    # an editable install of another checkout (a shared venv) records that checkout's version
    direct = metadata.distribution("rmq-registry").read_text("direct_url.json")
    source = json.loads(direct).get("url", "") if direct else ""
    if source.startswith("file://") and source.removeprefix("file://").rstrip("/") != str(ROOT):
        pytest.skip(f"rmq-registry is installed from {source}, not from this checkout")
    assert metadata.version("rmq-registry") == PYPROJECT_VERSION


def test_the_command_line_prints_the_version() -> None:
    done = subprocess.run([sys.executable, "-m", "service", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rmq-registry {service.__version__}"


async def test_metrics_label_the_workers_release(client: TestClient) -> None:
    text = await (await client.get("/metrics")).text()
    assert f'rmq_build_info{{version="{service.__version__}"}} 1.0' in text.splitlines()


def test_the_changelogs_newest_entry_is_this_release_and_names_the_previous_one() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)", changelog, re.M)
    assert releases[:2] == [PYPROJECT_VERSION, "0.1.0"], releases
    newest = changelog.split(f"## {releases[1]}")[0]
    assert PREVIOUS_RELEASE in newest
    assert "### Upgrading" in newest and "### Rolling back" in newest


def test_the_manifests_deploy_the_images_of_this_release() -> None:
    kustomization = yaml.safe_load((ROOT / "k8s" / "kustomization.yaml").read_text())
    assert {image["name"]: image["newTag"] for image in kustomization["images"]} == {
        "rmq-registry": PYPROJECT_VERSION, "rmq-registry-analytics": PYPROJECT_VERSION}
