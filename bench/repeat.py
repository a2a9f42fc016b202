"""``python -m bench --repeat N``: every selected scenario N times, interleaved (1, 4, 5, 1, 4, 5, ...), so each
scenario sees the machine's noise as the others do; every figure is then reported as the median of the N runs with
its spread (min, max, the values), and a target is judged on that median."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def _at(doc: Any, path: Sequence[str | int]) -> Any:
    for key in path:
        try:
            doc = doc[key]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def _is_figure(doc: Any) -> bool:
    return isinstance(doc, dict) and "value" in doc and "unit" in doc


def merge(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first run's document with every figure replaced by the median over ``runs`` (with ``target``/``met``
    recomputed on it) plus ``"spread": {"min", "max", "values"}``; anything else is the first run's."""
    if not runs:
        raise ValueError("no runs")

    def walk(doc: Any, path: list[str | int]) -> Any:
        if _is_figure(doc):
            values = [float(f["value"]) for f in (_at(r, path) for r in runs) if _is_figure(f)]
            med = statistics.median(values)
            out = {**doc, "value": round(med, 3)}
            if "target" in doc:
                out["met"] = med >= doc["target"] if doc.get("bound") == "min" else med <= doc["target"]
            out["spread"] = {"min": round(min(values), 3), "max": round(max(values), 3),
                             "values": [round(v, 3) for v in values]}
            return out
        if isinstance(doc, dict):
            return {k: walk(v, [*path, k]) for k, v in doc.items()}
        if isinstance(doc, list):
            return [walk(v, [*path, i]) for i, v in enumerate(doc)]
        return doc

    return dict(walk(runs[0], []))


def spread_text(fig: dict[str, Any]) -> str:
    """`` (min-max, N runs)`` for a merged figure, empty for a single run's."""
    s = fig.get("spread")
    if not s or len(s["values"]) < 2:
        return ""
    return f"  ({s['min']:g}-{s['max']:g}, {len(s['values'])} runs)"
