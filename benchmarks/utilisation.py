"""Utilisation over a week (issue #16): how busy are the GPUs, and how long do people wait?

Replays a trace of demand (who wanted how many GPUs when, and what the GPUs did
while they had them) through gpuspawner's real core — pool, placement, limits,
culling decisions — on a simulated clock, once per sharing policy, and prints
for each: the share of held GPU-hours that were busy, the share of the
machine's GPU-hours that were busy, and the p50/p95 wait for a GPU.

    .venv/bin/python benchmarks/utilisation.py                  # the documented team week
    .venv/bin/python benchmarks/utilisation.py --seed 7         # another generated week
    .venv/bin/python benchmarks/utilisation.py --trace mine.csv --site mine.json

On the documented week it also replays ten other generated weeks for the
spread, and writes the table into benchmarks/README.md and the plot beside it.
The trace format, the site file and the model's assumptions: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from figures import machine
from simulation.model import replay
from simulation.plot import plot_week
from simulation.policies import policies
from simulation.report import Result, demand, spread, table, verdict, write_readme
from simulation.site import load_site
from simulation.synthetic import generate
from simulation.trace import read_trace, write_trace

HERE = Path(__file__).resolve().parent
TEAM_WEEK = HERE / "simulation" / "team-week.csv"
SITE = HERE / "simulation" / "site.json"
PLOT = HERE / "utilisation-week.png"
SPREAD_SEEDS = list(range(1, 11))
HEADER = """The documented synthetic week of benchmarks/README.md ("Utilisation over a week"):
8 GPUs, 12 people, Monday 2026-11-30 to Sunday. Written by
benchmarks/utilisation.py --generate (seed {seed}); replace it with your own week."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, help="a trace file (default: the team week)")
    parser.add_argument("--site", type=Path, default=SITE, help="the hub's GPUs and limits")
    parser.add_argument("--seed", type=int, help="replay a newly generated week instead")
    parser.add_argument("--generate", type=Path, help="write the generated week here, and stop")
    parser.add_argument("--plot", type=Path, help=f"where the plot goes (default: {PLOT.name})")
    args = parser.parse_args()

    if args.generate:
        seed = 1 if args.seed is None else args.seed
        write_trace(args.generate, generate(seed), HEADER.format(seed=seed))
        print(f"wrote {args.generate}")
        return
    documented = args.trace is None and args.seed is None
    if args.seed is not None:
        sessions, source = generate(args.seed), f"generated week, seed {args.seed}"
    else:
        trace = args.trace or TEAM_WEEK
        shown = trace.relative_to(HERE.parent) if trace.is_relative_to(HERE.parent) else trace
        sessions, source = read_trace(trace), str(shown)
    site = load_site(args.site)
    site.check(sessions)

    started = time.perf_counter()
    others = [generate(seed) for seed in SPREAD_SEEDS] if documented else []
    results = [
        Result(p, replay(sessions, site, p), tuple(replay(w, site, p) for w in others))
        for p in policies(site)
    ]
    took = time.perf_counter() - started

    block = "\n\n".join(
        part
        for part in (
            f"Trace: {source}: {demand(sessions)}.",
            table(results),
            verdict(results),
            spread(results, SPREAD_SEEDS),
        )
        if part
    )
    print(f"machine: {machine()}; {site.gpus} GPUs")
    print(block)
    weeks = 1 + len(others)
    print(f"\nreplayed {len(results)} policies × {weeks} week(s) in {took:.1f} s")
    stem = args.trace.stem if args.trace else f"seed{args.seed}"
    plot = args.plot or (PLOT if documented else Path(f"utilisation-{stem}.png"))
    start = sessions[0].arrival.replace(hour=0, minute=0)
    plot_week(results, site.gpus, start, plot)
    print(f"plot: {plot}")
    if documented:
        write_readme(HERE / "README.md", block)
        print("table written into benchmarks/README.md")


if __name__ == "__main__":
    main()
