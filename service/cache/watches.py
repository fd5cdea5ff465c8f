"""The watch registry: long polls waiting for a route to change, found by the topic and
the broker groups of the answer they hold, so a change wakes only those it may concern."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from service.cache.answers import Answer, Stats


@dataclass(eq=False)
class Watcher:
    """One long poll waiting for a route to change."""

    topic: str
    groups: tuple[str, ...]
    event: asyncio.Event



class Watches:
    """Long polls by topic and by group (a part of ReadCache: ``_init_watches`` sets it up;
    ``_may_have_changed`` is the cache's)."""

    stats: Stats

    def _init_watches(self) -> None:
        self.watch_topics: dict[str, set[Watcher]] = {}
        self.watch_groups: dict[str, set[Watcher]] = {}

    def _may_have_changed(self, topic: str, answer: Answer) -> bool:
        raise NotImplementedError

    def watch(self, topic: str, answer: Answer) -> Watcher:
        """Registers a long poll on `topic`, holding `answer`: its event is set by the next
        change that may alter that answer (at once if one came since its read began)."""
        watcher = Watcher(topic, answer.groups, asyncio.Event())
        if self._may_have_changed(topic, answer):
            watcher.event.set()
            return watcher
        self.watch_topics.setdefault(topic, set()).add(watcher)
        for group in answer.groups:
            self.watch_groups.setdefault(group, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        for index, name in [(self.watch_topics, watcher.topic)] + [(self.watch_groups, g) for g in watcher.groups]:
            held = index.get(name)
            if held is not None:
                held.discard(watcher)
                if not held:
                    del index[name]

    def _wake(self, watchers: set[Watcher] | None) -> None:
        for watcher in list(watchers or ()):
            watcher.event.set()
            self.unwatch(watcher)
            self.stats.watchers_woken += 1

    def _wake_negative(self) -> None:
        """Wakes the long polls holding a TOPIC_NOT_EXIST answer (the ones naming no group)."""
        for watchers in list(self.watch_topics.values()):
            self._wake({w for w in watchers if not w.groups})

    @property
    def watchers(self) -> int:
        return sum(len(w) for w in self.watch_topics.values())

    def wake_all(self) -> None:
        """Every long poll answers now (a flush, or the worker is stopping)."""
        for watchers in list(self.watch_topics.values()):
            self._wake(watchers)

