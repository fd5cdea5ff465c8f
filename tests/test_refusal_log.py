"""service.logs.RefusalLog: one line per refused request, at most one per client address
per window, the ones held back told with their count at the window's end."""

from __future__ import annotations

import asyncio
import logging

import pytest

from service.logs import OTHER_SOURCES, RefusalLog, printable
from service.store import Refusals
from tests.waits import BOUND_S, until

WINDOW = 0.3  # seconds; the worker's is 60


@pytest.fixture
def refusals(caplog: pytest.LogCaptureFixture) -> RefusalLog:
    caplog.set_level(logging.WARNING, logger="test.refusals")
    return RefusalLog(logging.getLogger("test.refusals"), every=WINDOW)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.refusals"]


async def wait_for_lines(caplog: pytest.LogCaptureFixture, n: int, bound: float = 10.0) -> list[str]:
    """The lines once there are `n` of them (within a generous bound: a slow machine only waits longer)."""
    await until(lambda: len(lines(caplog)) >= n, bound, f"{n} lines")
    return lines(caplog)


async def test_the_first_refusal_from_an_address_is_written_at_once(refusals: RefusalLog,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    refusals.refused("10.0.0.5", "RocketMQ REGISTER_BROKER from 10.0.0.5: why")
    assert lines(caplog) == ["refused RocketMQ REGISTER_BROKER from 10.0.0.5: why"]
    assert caplog.records[-1].levelno == logging.WARNING
    refusals.close()


async def test_refusals_in_the_window_are_held_and_told_at_its_end_in_one_line_with_their_count(
        refusals: RefusalLog, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(38):
        refusals.refused("10.0.0.5", f"request {i}")
    assert lines(caplog) == ["refused request 0"]
    assert await wait_for_lines(caplog, 2) == [
        "refused request 0",
        f"... and 37 more refusals from 10.0.0.5 in the last {WINDOW:g} s, the last: refused request 37"]
    refusals.close()


async def test_each_address_has_its_own_window(refusals: RefusalLog, caplog: pytest.LogCaptureFixture) -> None:
    refusals.refused("10.0.0.5", "a")
    refusals.refused("10.0.0.5", "a again")
    refusals.refused("10.0.0.6", "b")
    assert lines(caplog) == ["refused a", "refused b"]
    summaries = (await wait_for_lines(caplog, 3))[2:]
    assert summaries == [f"... and 1 more refusal from 10.0.0.5 in the last {WINDOW:g} s, the last: refused a again"]
    refusals.close()


async def test_an_address_quiet_for_a_whole_window_is_written_at_once_again(
        refusals: RefusalLog, caplog: pytest.LogCaptureFixture) -> None:
    refusals.refused("10.0.0.5", "first")
    await asyncio.sleep(WINDOW * 2)  # no summary: nothing was held back
    assert lines(caplog) == ["refused first"]
    refusals.refused("10.0.0.5", "second")
    assert lines(caplog) == ["refused first", "refused second"]
    refusals.close()


async def test_an_address_refused_all_the_time_gets_one_line_per_window(
        refusals: RefusalLog, caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - started < WINDOW * 3.5:
        refusals.refused("10.0.0.5", "again")
        await asyncio.sleep(0.01)
    written = lines(caplog)
    # the first at once, then a summary at the end of each of the 3 whole windows since (a
    # slow machine may have reached fewer windows' ends, never more)
    assert written[0] == "refused again"
    assert 1 <= len(written) - 1 <= 3
    assert all(line.startswith("... and ") and " more refusals from 10.0.0.5 " in line for line in written[1:])
    refusals.close()


async def test_past_the_tracked_addresses_the_others_share_one_tally(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="test.refusals")
    refusals = RefusalLog(logging.getLogger("test.refusals"), every=WINDOW, max_sources=2)
    for client in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"):
        refusals.refused(client, f"from {client}")
    assert lines(caplog) == ["refused from 10.0.0.1", "refused from 10.0.0.2", "refused from 10.0.0.3"]
    written = await wait_for_lines(caplog, 4)
    assert written[3] == (f"... and 2 more refusals from {OTHER_SOURCES} in the last {WINDOW:g} s, "
                          "the last: refused from 10.0.0.5")
    refusals.close()


async def test_closing_drops_the_pending_summaries(refusals: RefusalLog, caplog: pytest.LogCaptureFixture) -> None:
    refusals.refused("10.0.0.5", "a")
    refusals.refused("10.0.0.5", "b")
    refusals.close()
    await asyncio.sleep(WINDOW * 2)
    assert lines(caplog) == ["refused a"]


def test_a_clients_text_cannot_break_a_log_line() -> None:
    assert printable("broker-a\nWARNING forged line\r") == "broker-a?WARNING forged line?"
    assert printable("x" * 200, limit=5) == "xxxxx..."


async def test_redis_refusals_of_a_cause_in_a_burst_are_one_error_line_and_a_summary_at_its_end(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(Refusals, "BURST_S", WINDOW)
    caplog.set_level(logging.ERROR, logger="service.store")
    refusals = Refusals()
    for i in range(5):
        refusals.add("out of memory", f"OOM {i}")
    refusals.add("read only", "READONLY")
    written = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "service.store"]
    assert written == [(logging.ERROR, "Redis refuses writes: out of memory (OOM 0)"),
                       (logging.ERROR, "Redis refuses writes: read only (READONLY)")]
    await until(lambda: len([r for r in caplog.records if r.name == "service.store"]) == 3, BOUND_S, "the summary")
    assert caplog.records[-1].getMessage() == (f"... and 4 more refusals of this cause (out of memory) in the last "
                                               f"{WINDOW:g} s, the last: Redis refuses writes: out of memory (OOM 4)")
    refusals.lines.close()
