"""The memory budget of the cached route answers, in cachetools' LRUCache: positive answers
bounded in bytes (each answer's estimated ``size``) and in entries; TOPIC_NOT_EXIST answers
in an LRU of their own, so a stream of unknown topics cannot push routes out."""

from __future__ import annotations

from typing import Callable, Iterable

from cachetools import LRUCache

from service.cache.answers import Answer, RouteKey, Stats


class TopicLRU(LRUCache[RouteKey, Answer]):
    """An LRUCache of answers by (kind, topic) that also counts its entries by topic, so a
    change naming 10,000 topics finds the few it holds by a set intersection (in C) rather
    than by 10,000 lookups per kind on the event loop (23-29 ms, bench/README.md 7c).
    Every addition and removal, the LRU's own evictions included, goes through
    ``__setitem__`` / ``__delitem__``."""

    def __init__(self, maxsize: int, getsizeof: Callable[[Answer], int] | None = None) -> None:
        super().__init__(maxsize, getsizeof)
        self.topics: dict[str, int] = {}

    def __setitem__(self, key: RouteKey, value: Answer) -> None:
        new = key not in self
        super().__setitem__(key, value)  # cachetools' ValueError for a value too large: nothing held
        if new:
            self.topics[key[1]] = self.topics.get(key[1], 0) + 1

    def __delitem__(self, key: RouteKey) -> None:
        super().__delitem__(key)
        left = self.topics[key[1]] - 1
        if left:
            self.topics[key[1]] = left
        else:
            del self.topics[key[1]]

    def drop_topics(self, topics: Iterable[str], kinds: Iterable[str]) -> int:
        """Removes the answers of every kind of `topics`; how many there were."""
        dropped = 0
        for topic in self.topics.keys() & topics:
            for kind in kinds:
                if self.pop((kind, topic), None) is not None:
                    dropped += 1
        return dropped


def _answer_size(answer: Answer) -> int:
    return answer.size


class Budget:
    """The route answers by (kind, topic), within ``max_entries`` and ``max_bytes`` (a part
    of ReadCache: its state is set up by ``_init_budget``). Reading ``routes[key]`` or
    ``.get`` marks an answer used; ``key in routes`` does not."""

    stats: Stats

    def _init_budget(self, max_entries: int, max_bytes: int, negative_entries: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.negative_entries = negative_entries
        self._clear_routes()

    @property
    def bytes(self) -> int:
        """The estimated memory of the positive answers held."""
        return self.routes.currsize

    def _insert_route(self, key: RouteKey, answer: Answer) -> None:
        if answer.status != 200:
            self.stats.evictions += _put(self.negatives, key, answer)
            return
        self._drop_route(key)  # a TOPIC_NOT_EXIST answer of the topic too
        answer.size += len(key[1])
        evicted = _put(self.routes, key, answer)
        while len(self.routes) > self.max_entries:
            self.routes.popitem()  # the least recently used
            evicted += 1
        self.stats.evictions += evicted

    def _drop_route(self, key: RouteKey) -> bool:
        old = self.routes.pop(key, None)
        return (self.negatives.pop(key, None) is not None) or old is not None

    def _clear_routes(self) -> None:
        # cachetools bounds one measure, here the bytes; the entry count is kept by _insert_route
        self.routes = TopicLRU(self.max_bytes, getsizeof=_answer_size)
        self._clear_negatives()

    def _clear_negatives(self) -> None:
        # a new cache, not .clear(): in cachetools 5.5-7.0 that pops the entries one at a
        # time, on the event loop (0.15 s for 200,000 routes on 5.5.2)
        self.negatives = TopicLRU(self.negative_entries)


def _put(cache: LRUCache[RouteKey, Answer], key: RouteKey, answer: Answer) -> int:
    """Holds `answer` as the most recently used; how many answers the budget pushed out for
    it (counting itself when it alone is over the whole budget: it is then not held)."""
    held = len(cache) + (key not in cache)
    try:
        cache[key] = answer
    except ValueError:  # cachetools' "value too large"
        pass
    return held - len(cache)
