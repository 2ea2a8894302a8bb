"""Utilisation over a week (issue #16): how busy are the GPUs, and how long do people wait?

Replays a trace of demand (who wanted how many GPUs when, and what the GPUs did
while they had them) through gpuspawner's real core — pool, placement, limits,
culling decisions — on a simulated clock, once per sharing policy, and prints
for each: the share of held GPU-hours that were busy, the share of the
machine's GPU-hours that were busy, and the p50/p95 wait for a GPU.

    .venv/bin/python benchmarks/utilisation.py                  # the documented team week
    .venv/bin/python benchmarks/utilisation.py --seed 7         # another generated week
    .venv/bin/python benchmarks/utilisation.py --trace mine.csv --site mine.json
    .venv/bin/python benchmarks/utilisation.py --trace mine.csv --jobs runs.csv

A second table replays the training team's week (item 8): the same week plus a
backlog of training runs, run as notebook servers under today's policies and
as jobs, and says whether the jobs meet item 8's goal.

On the documented week it also replays ten other generated weeks for the
spread, and writes the tables into benchmarks/README.md and the plots beside it.
The replays run side by side, one process per core (--processes 1: one after another).
The trace formats, the site file and the model's assumptions: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from functools import cache
from pathlib import Path

from figures import machine
from simulation.jobs import TrainingJob, as_jobs, read_jobs, write_jobs
from simulation.measures import Outcome
from simulation.plot import plot_week
from simulation.policies import Policy, policies, training_policies
from simulation.report import (
    Result,
    backlog,
    demand,
    goal,
    parking_goal,
    spread,
    table,
    training_spread,
    training_table,
    turns_line,
    verdict,
    write_readme,
)
from simulation.site import load_site
from simulation.synthetic import generate, generate_backlog
from simulation.trace import Session, read_trace, write_trace
from simulation.week import check_jobs, replay_week

HERE = Path(__file__).resolve().parent
TEAM_WEEK = HERE / "simulation" / "team-week.csv"
TEAM_JOBS = HERE / "simulation" / "team-jobs.csv"
SITE = HERE / "simulation" / "site.json"
PLOT = HERE / "utilisation-week.png"
TRAINING_PLOT = HERE / "utilisation-training-week.png"
SPREAD_SEEDS = list(range(1, 11))
HEADER = """The documented synthetic week of benchmarks/README.md ("Utilisation over a week"):
8 GPUs, 12 people, Monday 2026-11-30 to Sunday. Written by
benchmarks/utilisation.py --generate (seed {seed}); replace it with your own week."""
JOBS_HEADER = """The documented training team's backlog of benchmarks/README.md ("The
training team's week"): the researchers' training runs of the week of team-week.csv. Written by
benchmarks/utilisation.py --generate-jobs (seed {seed}); replace it with your own runs."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, help="a trace file (default: the team week)")
    parser.add_argument("--site", type=Path, default=SITE, help="the hub's GPUs and limits")
    parser.add_argument("--seed", type=int, help="replay a newly generated week instead")
    parser.add_argument("--jobs", type=Path, help="training runs (default: the team's backlog)")
    parser.add_argument("--generate", type=Path, help="write the generated week here, and stop")
    parser.add_argument("--generate-jobs", type=Path, help="write its backlog here, and stop")
    parser.add_argument("--plot", type=Path, help=f"where the plot goes (default: {PLOT.name})")
    parser.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        help="replays run side by side, one a process (default: one per core)",
    )
    args = parser.parse_args()

    seed = 1 if args.seed is None else args.seed
    if args.generate or args.generate_jobs:
        if args.generate:
            write_trace(args.generate, generate(seed), HEADER.format(seed=seed))
        if args.generate_jobs:
            write_jobs(args.generate_jobs, generate_backlog(seed), JOBS_HEADER.format(seed=seed))
        print(f"wrote {args.generate or ''} {args.generate_jobs or ''}".strip())
        return
    documented = args.trace is None and args.seed is None
    runs: list[TrainingJob] = []
    runs_source = ""
    if args.seed is not None:
        sessions, source = generate(args.seed), f"generated week, seed {args.seed}"
        runs, runs_source = generate_backlog(args.seed), f"generated backlog, seed {args.seed}"
    else:
        sessions, source = read_trace(args.trace or TEAM_WEEK), shown(args.trace or TEAM_WEEK)
    if args.jobs or documented:
        runs, runs_source = read_jobs(args.jobs or TEAM_JOBS), shown(args.jobs or TEAM_JOBS)
    site = load_site(args.site)
    site.check(sessions)
    check_jobs(site, runs)
    check_jobs(site, as_jobs(sessions)[1])

    started = time.perf_counter()
    others = [(generate(s), generate_backlog(s)) for s in SPREAD_SEEDS] if documented else []
    with ProcessPoolExecutor(args.processes) as pool:  # the replays share nothing
        # the training weeks' replays first: the longest, so that no process is left with
        # one of them at the end while the others have nothing to do
        trained = (
            replaying(pool, training_policies(site), args.site, sessions, runs, others)
            if runs
            else []
        )
        people: list[tuple[list[Session], list[TrainingJob]]] = [(w, []) for w, _ in others]
        asked = replaying(pool, policies(site), args.site, sessions, [], people)
        results, training = compared(asked), compared(trained)
    took = time.perf_counter() - started

    parts = [
        f"Trace: {source}: {demand(sessions)}.",
        table(results),
        verdict(results),
        spread(results, SPREAD_SEEDS),
    ]
    if runs:
        parts += [
            "**The training team's week** (item 8), the same week with these runs. "
            + backlog(runs, runs_source, as_jobs(sessions)[1]),
            training_table(training),
            goal(training),
            parking_goal(training),
            turns_line(training),
            training_spread(training, SPREAD_SEEDS),
        ]
    block = "\n\n".join(part for part in parts if part)
    print(f"machine: {machine()}; {site.gpus} GPUs")
    print(block)
    weeks = 1 + len(others)
    replays = (len(results) + len(training)) * weeks
    print(
        f"\nreplayed {replays} weeks ({weeks} week(s), every policy) in {took:.1f} s, "
        f"{args.processes} at a time"
    )
    stem = args.trace.stem if args.trace else f"seed{args.seed}"
    plot = args.plot or (PLOT if documented else Path(f"utilisation-{stem}.png"))
    start = min([s.arrival for s in sessions] + [j.submitted for j in runs])
    start = start.replace(hour=0, minute=0)
    plot_week(results, site.gpus, start, plot)
    print(f"plot: {plot}")
    if training:
        both = plot.with_name(TRAINING_PLOT.name if documented else f"{plot.stem}-training.png")
        plot_week(training, site.gpus, start, both)
        print(f"plot: {both}")
    if documented:
        write_readme(HERE / "README.md", block)
        print("tables written into benchmarks/README.md")


def shown(path: Path) -> str:
    return str(path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path)


Replays = list[tuple[Policy, list["Future[Outcome]"]]]


def replaying(
    pool: Executor,
    chosen: tuple[Policy, ...],
    site: Path,
    sessions: list[Session],
    runs: list[TrainingJob],
    others: list[tuple[list[Session], list[TrainingJob]]],
) -> Replays:
    """Each policy on the week, and on the other weeks for the spread, asked of `pool`."""
    weeks = [(sessions, runs), *others]
    return [(p, [pool.submit(replayed, site, w, more, p) for w, more in weeks]) for p in chosen]


def replayed(
    site: Path, sessions: list[Session], runs: list[TrainingJob], policy: Policy
) -> Outcome:
    """One replay, in one of the pool's processes: the site read there from its file (the
    core's profiles do not pickle), once a process."""
    return replay_week(sessions, runs, site_in(site), policy)


site_in = cache(load_site)


def compared(asked: Replays) -> list[Result]:
    """The replays' outcomes, once done, in the order asked."""
    return [
        Result(p, first.result(), tuple(f.result() for f in rest)) for p, (first, *rest) in asked
    ]


if __name__ == "__main__":
    main()
