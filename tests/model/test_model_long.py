"""The model test's long run, by hand: more and longer runs, with registrations of 8,000 and
20,000 topics. RMQ_MODEL_LONG=1 runs it once (12 runs of 30 steps); RMQ_MODEL_MINUTES=60
makes it an hour's run (tests/model/run.py). Not in the suite's tiers while it finds
differences still open (README, "Tests": what its runs found), so that the full tier does
not pass or fail by the draw."""

from __future__ import annotations

import os

import pytest

from tests.model.run import Budget, run

MINUTES = float(os.environ.get("RMQ_MODEL_MINUTES", 0))


@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("RMQ_MODEL_LONG") == "1" or MINUTES),
                    reason="the model's long run is by hand: RMQ_MODEL_LONG=1 or RMQ_MODEL_MINUTES=60")
@pytest.mark.timeout(int(MINUTES * 60) + 1800)
def test_registry_answers_as_the_model_over_a_long_random_run(fleet) -> None:
    redis_url, workers = fleet
    assert run(redis_url, workers, Budget.from_env(examples=12, steps=30, minutes=0, big=True)) >= 1
