"""Running the model test: how long, from the tier or the environment.

RMQ_MODEL_EXAMPLES: runs (each a fresh store and model) per round; RMQ_MODEL_STEPS: steps
per run; RMQ_MODEL_MINUTES: keep starting rounds until that many minutes have passed (an
hour's run by hand: RMQ_MODEL_MINUTES=60); RMQ_MODEL_BIG=1: registrations of 8,000 and
20,000 topics too (the long run has them)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.fleet import Worker
from tests.model.machine import make_machine


@dataclass(frozen=True)
class Budget:
    examples: int
    steps: int
    minutes: float
    big: bool

    @classmethod
    def from_env(cls, examples: int, steps: int, minutes: float, big: bool) -> "Budget":
        env = os.environ
        return cls(int(env.get("RMQ_MODEL_EXAMPLES", examples)), int(env.get("RMQ_MODEL_STEPS", steps)),
                   float(env.get("RMQ_MODEL_MINUTES", minutes)), env.get("RMQ_MODEL_BIG", "1" if big else "") == "1")


def run(redis_url: str, workers: list[Worker], budget: Budget) -> int:
    """Rounds of `budget.examples` runs until `budget.minutes` have passed (one round at
    least); the number of rounds. A failure raises, shrunk, with the steps that show it."""
    machine = make_machine(redis_url, workers, budget.big)
    chosen = settings(max_examples=budget.examples, stateful_step_count=budget.steps, deadline=None,
                      suppress_health_check=list(HealthCheck), print_blob=True,
                      # no example database: a stored example would replay under another size
                      # set or code than it was drawn for; what a run found is kept as a plain
                      # test instead (test_regressions.py)
                      database=None,
                      # RMQ_MODEL_SHRINK=0: report the first failure as found (shrinking
                      # re-runs it many times, each failing attempt waiting out the settle bound)
                      phases=[p for p in Phase if p is not Phase.shrink or os.environ.get("RMQ_MODEL_SHRINK") != "0"],
                      verbosity=Verbosity.debug if os.environ.get("RMQ_MODEL_TRACE") == "1" else Verbosity.normal)
    end = time.monotonic() + budget.minutes * 60
    rounds = 0

    def new_machine() -> Any:
        # a function, not the class, for Hypothesis to digest: inspect finds a class's source
        # with ast.parse, which failed once in a CI run here on CPython 3.11.7 ("SystemError:
        # AST constructor recursion depth mismatch", an interpreter bug of the family of
        # python/cpython#106905); a function's source is found without parsing
        return machine()

    try:
        while True:
            run_state_machine_as_test(new_machine, settings=chosen)
            rounds += 1
            if time.monotonic() >= end:
                return rounds
    finally:
        machine.fronts.close()  # type: ignore[attr-defined]
        machine.loop.close()  # type: ignore[attr-defined]
