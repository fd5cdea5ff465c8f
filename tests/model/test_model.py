"""The registry against the reference model of RocketMQ 5.3.3's NameServer
(tests/model/reference.py): random operations on two real workers, every read of both
fronts compared after each step (tests/model/machine.py). Here a short run, for every
change; tests/model/test_model_long.py runs longer in the full tier; tests/model/run.py
says how to run it for an hour."""

from __future__ import annotations

from tests.model.run import Budget, run


def test_registry_answers_as_the_model_over_a_short_random_run(fleet) -> None:
    redis_url, workers = fleet
    assert run(redis_url, workers, Budget.from_env(examples=4, steps=12, minutes=0, big=False)) >= 1
