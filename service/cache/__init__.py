"""Per-worker cache of read answers (service/cache/read_cache.py has the whole story):
answers, their memory budget, the watch registry and the change-record follower, each in
its module; the fronts read through ``ReadCache.read_route`` / ``read_scoped``."""

from service.cache.answers import ANY, CLUSTER, ENTRY_OVERHEAD, ROUTE_KINDS, Answer, Fetch, Stats, make_answer
from service.cache.read_cache import RECENT, ReadCache
from service.cache.watches import Watcher

__all__ = ["ANY", "CLUSTER", "ENTRY_OVERHEAD", "RECENT", "ROUTE_KINDS", "Answer", "Fetch", "ReadCache", "Stats",
           "Watcher", "make_answer"]
