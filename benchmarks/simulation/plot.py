"""The week as a picture: per policy, GPUs held and busy over time, and GPUs people were
waiting for. One panel per policy on the same axes, so the idle area (held, not busy)
and the waiting line compare at a glance. Averaged over 30-minute bins to stay small.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from .report import Result

BIN = 30  # minutes


def plot_week(results: Sequence[Result], gpus: int, start: datetime, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        len(results), 1, figsize=(10, 1.7 * len(results) + 0.6), sharex=True, sharey=True
    )
    for ax, result in zip(axes, results, strict=True):
        o = result.outcome
        days = [i * BIN / 1440 for i in range(len(bins(o.held)))]
        ax.fill_between(days, bins(o.held), step="post", color="#c6dbef", label="held")
        ax.fill_between(days, bins(o.busy), step="post", color="#2171b5", label="busy")
        ax.step(days, bins(o.wanted), where="post", color="#cb181d", lw=1, label="waited for")
        ax.axhline(gpus, color="0.4", lw=0.6, ls=":")
        ax.set_title(result.policy.name, loc="left", fontsize=9)
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=8)
    top = max(gpus, *(max(bins(r.outcome.wanted), default=0) for r in results))
    axes[0].set_ylim(0, top + 0.5)
    labels = [(start + timedelta(days=d)).strftime("%a") for d in range(round(days[-1]) + 1)]
    axes[-1].set_xticks(range(len(labels)), labels)
    axes[-1].set_xlim(0, len(o.held) / 1440)
    axes[0].legend(loc="upper right", fontsize=7, ncols=3, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def bins(series: Sequence[int], size: int = BIN) -> list[float]:
    """`series` (a value a minute) averaged over bins of `size` minutes."""
    return [
        sum(series[i : i + size]) / len(series[i : i + size]) for i in range(0, len(series), size)
    ]
