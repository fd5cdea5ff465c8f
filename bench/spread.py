"""Medians, ranges over repetitions, and same-repetition ratios against the Java NameServer."""

from __future__ import annotations

import statistics
from typing import Any

from bench.common import row

BASELINE = "java"


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def range_note(values: list[float], over: str = "") -> str:
    """"min-max over n" (the spread a median hides)."""
    s = spread(values)
    return f"{_fmt(s['min'])}-{_fmt(s['max'])} over {s['n']}{' ' + over if over else ''}"


def paired_ratios(samples: dict[str, list[float]], name: str) -> list[float]:
    """name's value over Java's, repetition by repetition (both measured in the same repetition)."""
    return [a / b for a, b in zip(samples[name], samples[BASELINE]) if b > 0]


def ratio_rows(what: str, samples: dict[str, list[float]], unit: str, ratios: bool = True) -> list[dict[str, Any]]:
    """One row per target (median, range in the note), then each registry's ratio to Java."""
    rows = []
    for name, values in samples.items():
        if values:
            rows.append(row(f"{what}: {name}", spread(values)["median"], unit, range_note(values)))
    if ratios and samples.get(BASELINE):
        for name in samples:
            if name == BASELINE or not samples[name]:
                continue
            r = paired_ratios(samples, name)
            if r:
                s = spread(r)
                rows.append(row(f"{what}: {name} / Java", s["median"], "x",
                                f"{s['min']:.2f}-{s['max']:.2f} over {s['n']} same-run pairs"))
    return rows
