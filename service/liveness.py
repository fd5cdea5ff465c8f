"""When a live member is *late*: past ``LATE_FRACTION`` of its heartbeat timeout since its
last heartbeat, not yet expired. One rule for the dashboard (``/v1/brokers/live`` hands
it the fraction) and for the gauge ``rmq_late_brokers`` (the scanner counts them each
pass), so that an alert can fire before the loss, while a member may still come back.

Counting reads only the members near their deadline: a member of timeout T is late once
its deadline is less than (1 - LATE_FRACTION) x T away, so the expiry index
(``Keys.expiry``, by deadline) is read up to (1 - LATE_FRACTION) x the longest timeout
looked for, and each member found there has its own timeout read (its live row). The
scanner looks for RMQ_BROKER_TIMEOUT_MS, the longest usual timeout (RocketMQ 5 brokers send
shorter ones, counted exactly); a member with a longer timeout of its own is counted late
only once its deadline is that close.
"""

from __future__ import annotations

from typing import Any

from service.store import Store

LATE_FRACTION = 0.8
# members read per count at most, nearest deadlines first: past it the gauge counts the
# late among those (a lower bound), and one pass costs no more than this
LATE_CANDIDATES = 10_000


def is_late(age_ms: int, timeout_ms: int) -> bool:
    """A member whose last heartbeat is `age_ms` old, of timeout `timeout_ms`, is late."""
    return LATE_FRACTION * timeout_ms < age_ms < timeout_ms


async def count_late(store: Store, now_ms: int, longest_timeout_ms: int, limit: int = LATE_CANDIDATES) -> int:
    """The live members late at Redis time `now_ms` (those with a timeout up to
    `longest_timeout_ms` exactly; at most `limit` members read)."""
    keys, redis = store.keys, store.redis
    window = int((1 - LATE_FRACTION) * longest_timeout_ms)
    near: list[tuple[Any, float]] = await store.call(redis.zrangebyscore(
        keys.expiry, f"({now_ms}", now_ms + window, start=0, num=limit, withscores=True))
    if not near:
        return 0
    pipe = redis.pipeline(transaction=False)
    for addr, _ in near:
        pipe.hget(keys.live(addr.decode() if isinstance(addr, bytes) else addr), "heartbeatTimeoutMillis")
    timeouts = await store.call(pipe.execute())
    late = 0
    for (_, deadline), timeout in zip(near, timeouts):
        if timeout is None:
            continue  # its live row went by its TTL: expired, the scanner's to remove
        timeout_ms = int(timeout)
        if is_late(now_ms - (int(deadline) - timeout_ms), timeout_ms):
            late += 1
    return late
