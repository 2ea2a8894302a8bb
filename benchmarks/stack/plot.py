"""The replay as a picture: the real stack's GPUs held and busy over the slice, above the
simulator's for the same slice, on the same axes (hours of the simulated day), so that
what the stack loses shows as the gap between the two panels. The stack's samples (one a
second here, `factor` simulated seconds each) and the simulator's minutes are averaged
over the same bins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from simulation.plot import bins

BIN = 15  # simulated minutes


def plot_slice(
    rows: Sequence[Mapping[str, Any]],
    simulated: Mapping[str, Sequence[int]],
    gpus: int,
    factor: float,
    start: datetime,
    path: Path,
) -> None:
    """Write the two panels to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = len(simulated["held"])
    stack = stack_bins(rows, factor, minutes)
    theirs = {what: bins(simulated[what], BIN) for what in ("held", "busy", "wanted")}
    hours = [start.hour + start.minute / 60 + i * BIN / 60 for i in range(len(theirs["held"]))]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 4.2), sharex=True, sharey=True)
    panels = (
        (top, "real stack (hub, proxy, dockerd; samples every second)", stack, "parked"),
        (bottom, "simulator (the same slice, the policy of jobs that park)", theirs, "wanted"),
    )
    for ax, title, series, line in panels:
        n = len(series["held"])
        shown = [*hours[:n], hours[0] + n * BIN / 60]  # the last bin drawn to its end

        def closed(what: str, series: dict[str, list[float]] = series) -> list[float]:
            return [*series[what], series[what][-1]]

        ax.fill_between(shown, closed("held"), step="post", color="#c6dbef", label="held")
        ax.fill_between(shown, closed("busy"), step="post", color="#2171b5", label="busy")
        words = "parked" if line == "parked" else "waited for"
        ax.step(shown, closed(line), where="post", color="#cb181d", lw=1, label=words)
        ax.xaxis.set_major_formatter(lambda h, _: f"{int(h):02d}:{round(h % 1 * 60):02d}")
        ax.axhline(gpus, color="0.4", lw=0.6, ls=":")
        ax.set_title(title, loc="left", fontsize=9)
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(loc="upper right", fontsize=7, ncols=3, frameon=False)
    top.set_ylim(0, gpus + 0.5)
    bottom.set_xlabel(f"{start:%a %Y-%m-%d}, hour (simulated; the stack ran {factor:g}× faster)")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def stack_bins(
    rows: Sequence[Mapping[str, Any]], factor: float, minutes: int
) -> dict[str, list[float]]:
    """The samples' held, busy and parked counts, averaged per bin of simulated minutes."""
    count = -(-minutes // BIN)
    sums = {what: [0.0] * count for what in ("held", "busy", "parked")}
    seen = [0] * count
    for row in rows:
        at = int(float(row["at"]) * factor / 60 // BIN)
        if 0 <= at < count:
            seen[at] += 1
            for what, totals in sums.items():
                totals[at] += float(row[what])
    return {what: [s / n if n else 0.0 for s, n in zip(totals, seen, strict=True)]
            for what, totals in sums.items()}  # fmt: skip
