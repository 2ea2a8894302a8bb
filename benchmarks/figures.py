"""Shared by the benchmarks: where the test harness lives, and how figures are printed."""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # realhub: the real hub the tests drive


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(values: Sequence[float], unit: str = "s", scale: float = 1.0) -> str:
    """Median and range, e.g. "4.21 s (3.98 – 4.60, n=10)"."""
    scaled = [v * scale for v in values]
    return (
        f"{statistics.median(scaled):.3g} {unit} "
        f"({min(scaled):.3g} – {max(scaled):.3g}, n={len(scaled)})"
    )


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
