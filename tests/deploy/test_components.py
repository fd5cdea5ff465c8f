"""Every kustomize Component under k8s/, listed alone beside k8s/ in an overlay outside it
(as docs/deploy.md has them used): it changes what is rendered, or kustomize refuses the
build, never a silent no-op (a patch whose target is not there is skipped silently by a
`target:` selector). Each patch target it selects is a resource of what it renders."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

import tests.deploy.test_manifests as m
from tests.deploy.test_redis_sentinel import render

COMPONENTS = sorted(p.parent for p in m.K8S.rglob("kustomization.yaml")
                    if yaml.safe_load(p.read_text()).get("kind") == "Component")


def overlay(tmp_path: Path, component: Path) -> Path:
    rel = os.path.relpath(m.K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {m.NAMESPACE}\nresources:\n  - {rel}\ncomponents:\n  - {os.path.relpath(component, tmp_path)}\n")
    return tmp_path


def build(target: Path) -> subprocess.CompletedProcess[str]:
    cmd = m._kustomize()
    if cmd is None:
        pytest.skip("neither kustomize nor kubectl on PATH")
    return subprocess.run([*cmd, str(target)], capture_output=True, text=True, timeout=120)


def test_there_are_components_and_the_nodeport_one_is_among_them() -> None:
    assert m.K8S / "variants" / "remoting-external" / "nodeport" in COMPONENTS


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda p: str(p.relative_to(m.K8S)))
def test_a_component_alone_changes_the_build_or_fails_it(tmp_path: Path, component: Path) -> None:
    alone = build(overlay(tmp_path, component))
    if alone.returncode != 0:
        assert "no matches" in alone.stderr or "not find" in alone.stderr, alone.stderr
        return
    base = build(m.K8S)
    assert base.returncode == 0, base.stderr
    assert alone.stdout != base.stdout, f"{component.relative_to(m.K8S)} alone renders k8s/ unchanged"


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda p: str(p.relative_to(m.K8S)))
def test_every_patch_target_of_a_component_is_rendered(tmp_path: Path, component: Path) -> None:
    targets = [p["target"] for p in yaml.safe_load((component / "kustomization.yaml").read_text()).get("patches", [])
               if "target" in p]
    if not targets:
        return
    docs = render(overlay(tmp_path, component))
    for t in targets:
        assert any(d["kind"] == t["kind"] and d["metadata"]["name"] == t["name"] for d in docs), (component, t)


def test_the_nodeport_component_alone_fails_the_build_naming_its_missing_service(tmp_path: Path) -> None:
    alone = build(overlay(tmp_path, m.K8S / "variants" / "remoting-external" / "nodeport"))
    assert alone.returncode != 0 and "rmq-registry-remoting" in alone.stderr
