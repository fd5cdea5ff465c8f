"""scripts/test's --dist loadgroup: pytest-xdist's group scheduling with the groups named by
path (tests/conftest.py, ONE_PROCESS) instead of by xdist_group marks. Those reach the
scheduler as a suffix pytest-xdist 3.8 writes into each node id, which pytest 9.2 no longer
lets it write: the marks are silently ignored (pytest-dev/pytest-xdist#1386), and two
processes built the wheel in one build/ folder at once. Imported only where xdist is."""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling


class OneProcessScheduling(LoadGroupScheduling):
    """A work unit per test, except one per ONE_PROCESS group, handed out in collection
    order (the larger units first) to whichever process is free."""

    def __init__(self, config, log, groups: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        self.groups = groups

    def _split_scope(self, nodeid: str) -> str:  # LoadScopeScheduling's one point of extension
        where = nodeid.removeprefix("tests/")
        return next((group for prefix, group in self.groups.items() if where.startswith(prefix)), nodeid)
