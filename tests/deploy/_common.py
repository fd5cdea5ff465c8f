"""What the deployment tests share: repo paths, the API contract's operational
paths, and the routes the real application serves."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
K8S = ROOT / "k8s"

# Operational endpoints promised by docs/api.md ("Operations").
API_MD_OPERATION_PATHS = {"/healthz", "/readyz", "/metrics", "/v1/openapi.json"}


@functools.cache
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@functools.cache
def app_paths() -> frozenset[str]:
    """Canonical paths of every route of the real aiohttp app (no server started)."""
    from service.worker import create_app
    from service.config import Settings

    app = create_app(Settings())
    return frozenset(r.canonical for r in app.router.resources())


def default_port() -> int:
    from service.config import Settings

    return Settings().port
