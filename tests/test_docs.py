"""The documents stand on their own in a clone: every relative link of every tracked
Markdown file reaches a file of the repository (and a heading, when it names one),
nothing tracked cites this project's own issue numbers, which a reader cannot see, and
docs/design.md's layout names every top-level module of service/."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# "issue 12", "issues 4 and 7", "Issue #13": a tracker's numbers; upstream projects are
# cited by address (github.com/apache/rocketmq/issues/1234), which this does not match
ISSUE = re.compile(r"(?i)(?<![/\w])issues?\s+#?\d+")
HASH_NUMBER = re.compile(r"(?<![\w/&])#\d{1,5}\b")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def prose(text: str) -> str:
    """Markdown without its fenced code blocks (their brackets are code, not links)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(path.read_text(encoding="utf-8")))]


MARKDOWN = tracked("*.md") + [p for p in (ROOT / "docs").glob("*.md") if p not in tracked("*.md")]


def test_the_link_finder_finds_links_and_anchors() -> None:
    text = "a [x](docs/a.md#b-c) ![img](p.png) [`y`](../z) `[no](code)`\n```\n[no](block)\n```\n"
    assert [m.group(1) for m in LINK.finditer(prose(text))] == ["docs/a.md#b-c", "p.png", "../z", "code"]
    assert slug("Deploy on `Kubernetes` (k8s/)") == "deploy-on-kubernetes-k8s"


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, broken


def test_the_issue_finder_finds_tracker_numbers_only() -> None:
    assert ISSUE.search("as issue 12 measured") and ISSUE.search("Issues #4") and HASH_NUMBER.search("see #19.")
    assert not ISSUE.search("github.com/apache/rocketmq/issues/1234") and not HASH_NUMBER.search("color: #fff; &#39;")


def test_nothing_tracked_cites_this_projects_issue_numbers() -> None:
    cited = []
    for path in tracked("*.md", "*.py", "*.lua", "*.yaml", "*.yml", "*.toml", "*.sh", "*.js", "Dockerfile", "scripts/*"):
        if "node_modules" in path.parts or path.name == "package-lock.json" or path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE.search(line) or (path.suffix == ".md" and HASH_NUMBER.search(prose(line))):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not cited, cited


def test_the_http_contract_documents_every_path_a_worker_serves() -> None:
    from tests.deploy._common import app_paths

    api = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"`(?:[A-Z]+ )?(/[^`?\s]*)", api)) | set(re.findall(r"^#+ [A-Z]+ (/\S*)", api, re.M))
    missing = {p for p in app_paths() if p not in documented and not p.startswith("/ui/")}
    assert not missing, sorted(missing)


def test_the_design_layout_names_every_top_level_module_of_service() -> None:
    layout = (ROOT / "docs" / "design.md").read_text().split("## 4. Layout", 1)[1]
    named = set(re.findall(r"^  (\w+\.py|\w+/) ", layout, re.M))
    service = ROOT / "service"
    modules = {p.name for p in service.glob("*.py") if p.name != "__init__.py"}
    modules |= {p.parent.name + "/" for p in service.glob("*/__init__.py")}
    assert modules - named == set(), "modules of service/ missing from docs/design.md's layout"
    assert named - modules == set(), "docs/design.md's layout names modules service/ does not have"
