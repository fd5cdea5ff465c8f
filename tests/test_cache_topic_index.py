"""The route answers' count by topic (service/cache/budget.py TopicLRU), which a change's
eviction intersects with its topics: it follows every way an answer comes and goes, the
LRU's own evictions included, so a change drops every answer it names that is held."""

from __future__ import annotations

from collections import Counter

from service.cache.answers import ROUTE_KINDS, Answer
from service.cache.budget import TopicLRU


def answer() -> Answer:
    return Answer(1, 200, b"{}", ("g",))


def test_the_topic_count_follows_inserts_removals_and_lru_evictions() -> None:
    cache = TopicLRU(50)
    for i in range(200):  # 4 kinds' worth of keys through a cache of 50: most are evicted
        cache[(ROUTE_KINDS[i % len(ROUTE_KINDS)], f"T{i % 70}")] = answer()
        if i % 7 == 0:
            cache.pop((ROUTE_KINDS[0], f"T{i % 70}"), None)
    assert cache.topics == dict(Counter(topic for _, topic in cache))


def test_drop_topics_drops_every_kind_of_a_held_topic_and_nothing_else() -> None:
    cache = TopicLRU(100)
    for kind in ROUTE_KINDS:
        for topic in ("A", "B", "C"):
            cache[(kind, topic)] = answer()
    dropped = cache.drop_topics({"A", "C", "NotHeld"}, ROUTE_KINDS)
    assert dropped == 2 * len(ROUTE_KINDS)
    assert sorted(cache) == sorted((kind, "B") for kind in ROUTE_KINDS)
    assert cache.topics == {"B": len(ROUTE_KINDS)}
