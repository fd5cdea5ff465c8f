"""The memory budget of the cached route answers: positive answers are an LRU bounded in
entries and bytes; TOPIC_NOT_EXIST answers have their own small LRU, so a stream of
unknown topics cannot push routes out."""

from __future__ import annotations

from collections import OrderedDict

from service.cache.answers import Answer, RouteKey, Stats


class Budget:
    """The route answers by (kind, topic), within ``max_entries`` and ``max_bytes`` (a part
    of ReadCache: its state is set up by ``_init_budget``)."""

    stats: Stats

    def _init_budget(self, max_entries: int, max_bytes: int, negative_entries: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.negative_entries = negative_entries
        self.routes: OrderedDict[RouteKey, Answer] = OrderedDict()
        self.negatives: OrderedDict[RouteKey, Answer] = OrderedDict()
        self.bytes = 0

    def _insert_route(self, key: RouteKey, answer: Answer) -> None:
        if answer.status != 200:
            self.negatives[key] = answer
            self.negatives.move_to_end(key)
            while len(self.negatives) > self.negative_entries:
                self.negatives.popitem(last=False)
                self.stats.evictions += 1
            return
        self._drop_route(key)
        answer.size += len(key[1])
        self.routes[key] = answer
        self.bytes += answer.size
        while self.routes and (len(self.routes) > self.max_entries or self.bytes > self.max_bytes):
            _, old = self.routes.popitem(last=False)
            self.bytes -= old.size
            self.stats.evictions += 1

    def _drop_route(self, key: RouteKey) -> bool:
        old = self.routes.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        return (self.negatives.pop(key, None) is not None) or old is not None

    def _clear_routes(self) -> None:
        self.routes.clear()
        self.negatives.clear()
        self.bytes = 0

