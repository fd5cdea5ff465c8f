"""What the deployment tests share: repo paths, the API contract's operational
paths, the routes the real application serves, and the Secrets README's first Kubernetes
command creates."""

from __future__ import annotations

import functools
import re
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


README = ROOT / "README.md"
# a value made on the spot, never written down: `openssl rand` or Python's secrets module
GENERATED = re.compile(r'"?\$\((openssl rand|python3 -c [\'"]import secrets)[^)]*\)"?')


def readme_kubernetes_block() -> str:
    """README's first Kubernetes block: the one that runs `kubectl apply -k k8s/`."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    return next(b for b in blocks if "kubectl apply -k k8s/" in b)


def created_secrets(block: str) -> dict[str, dict[str, str]]:
    """The Secrets a shell block creates with `kubectl create secret generic`, each key with
    the shell text that gives its value (a literal's, or the line writing its file)."""
    lines = block.replace("\\\n", " ").splitlines()
    created: dict[str, dict[str, str]] = {}
    for number, line in enumerate(lines):
        found = re.search(r"create secret generic (\S+)(.*)", line)
        if not found:
            continue
        keys = created.setdefault(found.group(1), {})
        for key, value in re.findall(r'--from-literal=([\w.-]+)=("?\$\([^)]*\)"?|\S+)', found.group(2)):
            keys[key] = value
        for key, path in re.findall(r"--from-file=([\w.-]+)=(\S+)", found.group(2)):
            writers = [w for w in lines[:number] if re.search(rf">\s*{re.escape(path)}\b", w)]
            keys[key] = writers[-1] if writers else ""
    return created
