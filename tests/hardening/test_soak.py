"""A bounded soak (~35 s of load) with the invariant checker running all along; see soak.py.
bench/soak/run runs the same harness for longer (10 min by default)."""

from __future__ import annotations

import json
import os

from tests.hardening.soak import SoakConfig, run_soak

DURATION_S = float(os.environ.get("RMQ_SOAK_SECONDS", "35"))


def test_soak_three_workers_many_brokers_zero_violations() -> None:
    result = run_soak(SoakConfig(duration_s=DURATION_S))
    summary = {k: result[k] for k in ("seconds", "brokers", "operations", "expiries_scanner_removed", "silences",
                                      "silences_confirmed_gone", "unregisters", "errors", "violations")}
    print("\nsoak:", json.dumps(summary), json.dumps(result["checks"]))
    assert result["violations"] == 0, result["first_violations"]
    assert result["errors"] == 0, result["first_errors"]
    assert result["workers_alive"] and result["worker_errors_logged"] == 0, result.get("worker_log_tail")
    # the run did what it claims: many operations, 1,000+ topics, brokers expired and were seen gone
    assert result["operations"] > 1000, result
    assert result["checks"]["max topics"] >= 1000, result["checks"]
    assert result["silences_confirmed_gone"] > 0 and result["expiries_scanner_removed"] > 0, result
    assert result["checks"]["atomic checks"] > 20 and result["checks"]["live checked present"] > 100, result["checks"]
