"""NOTIFY_MIN_BROKER_ID_CHANGE (905): RocketMQ 5's NameServer tells a group's brokers when
the group's smallest brokerId changes (``notifyMinBrokerIdChanged``, off by default), so an
acting-master slave learns at once that it now leads, or no longer does. The scripts find
the changes (lua/_groups.lua ``note_min_change``); this sends them, oneway, each on a short
connection of its own to the broker's address (RocketMQ sends on its client channel, with a
300 ms timeout, and does not wait for an answer either)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from service.remoting import codec, codes
from service.remoting.client import parse_address
from service.remoting.codec import Command

log = logging.getLogger(__name__)

# Notices in flight at once; past it a notice waits (a group's few brokers each time).
IN_FLIGHT = 16
SEND_TIMEOUT_S = 1.0


def notice_frame(notice: dict[str, Any]) -> bytes:
    """The request as RouteInfoManager.notifyMinBrokerIdChanged builds it: NotifyMinBrokerIdChangeRequestHeader's
    minBrokerId, minBrokerAddr, offlineBrokerAddr and haBrokerAddr, the absent ones left out."""
    ext = {"minBrokerId": str(notice["minBrokerId"]), "minBrokerAddr": notice["minBrokerAddr"]}
    for field in ("offlineBrokerAddr", "haBrokerAddr"):
        if notice.get(field):
            ext[field] = notice[field]
    return codec.encode(Command(code=codes.NOTIFY_MIN_BROKER_ID_CHANGE, version=codes.V5_3_3, flag=codec.FLAG_ONEWAY,
                                ext_fields=ext))


class MinBrokerIdNotifier:
    """The registry's notice hook: each notice goes to its targets in the background."""

    def __init__(self) -> None:
        self._slots = asyncio.Semaphore(IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0

    def __call__(self, notices: list[dict[str, Any]]) -> None:
        for notice in notices:
            log.info("smallest brokerId of %s is now %s (%s)%s: telling %s", notice.get("brokerName"),
                     notice["minBrokerId"], notice["minBrokerAddr"],
                     f", {notice['offlineBrokerAddr']} left" if notice.get("offlineBrokerAddr") else "",
                     ", ".join(notice["targets"]))
            frame = notice_frame(notice)
            for target in notice["targets"]:
                task = asyncio.ensure_future(self._send(target, frame))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, target: str, frame: bytes) -> None:
        async with self._slots:
            try:
                host, port = parse_address(target)
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), SEND_TIMEOUT_S)
                try:
                    writer.write(frame)
                    await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)
                    self.sent += 1
                finally:
                    writer.close()
            except (OSError, ValueError, asyncio.TimeoutError) as e:
                log.warning("could not tell %s of its group's new smallest brokerId: %s", target, e or "timed out")

    async def close(self) -> None:
        """Waits for the notices under way (a stopping worker sends what it found)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2 * SEND_TIMEOUT_S)
