"""Fenced code blocks of the project's Markdown, as the docs-that-are-tests read them
(tests/test_readme.py, tests/test_api_examples.py): each block with its language, the
line it starts on, the heading it is under and the HTML comment right above it, which
is where a document says why a block is not run (``<!-- not run by the tests: ... -->``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run by the tests:\s*(.+?)\s*-->\s*\Z", re.S)


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int
    heading: str
    not_run: str | None  # why the document says it is not run, or None

    def where(self, path: Path) -> str:
        return f"{path.name}:{self.line} ({self.heading})"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()]
        headings = re.findall(r"^#{1,6} (.+)$", before, re.M)
        note = NOT_RUN.search(before.rstrip("\n").rsplit("\n\n", 1)[-1] if "\n\n" in before else before)
        found.append(Block(m.group(1), m.group(2), before.count("\n") + 1, headings[-1] if headings else "",
                           note.group(1) if note else None))
    return found


# ------------------------------------------------------------------ JSON with placeholders
class _Any:
    """A documented value written `<what it is>`: any value matches it."""

    def __repr__(self) -> str:
        return "<any>"


ANY = _Any()
_SENTINEL = "\u0000any\u0000"
_PLACEHOLDER = re.compile(r'([:\[,]\s*)<[^<>"\n]*>')


def parse_documented(text: str) -> Any:
    """A documented JSON body: JSON, where an unquoted `<...>` stands for any value
    (`"now": <Redis time, ms>`)."""

    def hook(value: Any) -> Any:
        if value == _SENTINEL:
            return ANY
        if isinstance(value, list):
            return [hook(v) for v in value]
        if isinstance(value, dict):
            return {k: hook(v) for k, v in value.items()}
        return value

    return hook(json.loads(_PLACEHOLDER.sub(lambda m: m.group(1) + json.dumps(_SENTINEL), text)))


def differences(shown: Any, actual: Any, at: str = "$") -> list[str]:
    """Where an answer differs from the documented one: every key shown must be there
    and every key there must be shown; lists have the same length; values are equal."""
    if shown is ANY:
        return []
    if isinstance(shown, dict) and isinstance(actual, dict):
        out = [f"{at}.{k}: documented, not in the answer" for k in shown.keys() - actual.keys()]
        out += [f"{at}.{k}: in the answer ({actual[k]!r}), not documented" for k in actual.keys() - shown.keys()]
        for k in shown.keys() & actual.keys():
            out += differences(shown[k], actual[k], f"{at}.{k}")
        return out
    if isinstance(shown, list) and isinstance(actual, list):
        if len(shown) != len(actual):
            return [f"{at}: {len(shown)} items documented, {len(actual)} answered"]
        return [d for i, (s, a) in enumerate(zip(shown, actual)) for d in differences(s, a, f"{at}[{i}]")]
    if type(shown) is not type(actual) or shown != actual:
        return [f"{at}: documented {shown!r}, answered {actual!r}"]
    return []
