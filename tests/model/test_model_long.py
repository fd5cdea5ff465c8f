"""The model test's long run, in the full tier: more and longer runs than the quick tier's,
with registrations of 8,000 and 20,000 topics (6 runs of 30 steps). RMQ_MODEL_MINUTES=60
makes it an hour's run by hand (tests/model/run.py, README "Tests")."""

from __future__ import annotations

import os

import pytest

from tests.model.run import Budget, run

MINUTES = float(os.environ.get("RMQ_MODEL_MINUTES", 0))


@pytest.mark.processes  # two worker processes, started among the first (it takes minutes)
@pytest.mark.timeout(int(MINUTES * 60) + 1800)
def test_registry_answers_as_the_model_over_a_long_random_run(fleet) -> None:
    redis_url, workers = fleet
    assert run(redis_url, workers, Budget.from_env(examples=6, steps=30, minutes=0, big=True)) >= 1
