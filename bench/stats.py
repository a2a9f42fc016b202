"""Summaries of samples, and the ``{"value", "unit", "target", "met"}`` figures of results.json."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def figure(value: float, unit: str = "s", target: float | None = None, *, at_least: bool = False) -> dict[str, Any]:
    """A figure; with ``target`` (an upper bound, or a lower bound with ``at_least``, then marked
    ``"bound": "min"``) it carries ``target`` and ``met``."""
    out: dict[str, Any] = {"value": round(value, 3), "unit": unit}
    if target is not None:
        out["target"] = target
        out["met"] = value >= target if at_least else value <= target
        if at_least:
            out["bound"] = "min"
    return out


def summary(samples: Sequence[float], unit: str = "s", target: float | None = None) -> dict[str, Any]:
    """Median (the figure a target applies to), min, max and the raw samples."""
    if not samples:
        raise ValueError("no samples")
    return {
        "median": figure(statistics.median(samples), unit, target),
        "min": figure(min(samples), unit),
        "max": figure(max(samples), unit),
        "samples": [round(s, 3) for s in samples],
    }


def median_of_dicts(items: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per key median over the dicts that have the key (milestones / phases of several runs)."""
    keys: list[str] = []
    for d in items:
        keys += [k for k in d if k not in keys]
    return {k: round(statistics.median([d[k] for d in items if k in d]), 3) for k in keys}


def targets(doc: Any) -> list[dict[str, Any]]:
    """Every figure with a target anywhere in ``doc``."""
    found: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        if "target" in doc and "met" in doc and "value" in doc:
            found.append(doc)
        for v in doc.values():
            found += targets(v)
    elif isinstance(doc, list):
        for v in doc:
            found += targets(v)
    return found
