"""The simulator's week on the real stack (issue 48): a slice of the trace played through a
real hub, proxy and dockerd on simulated GPUs, with parking over the simulated checkpoint
driver, time running `--factor` times faster; its figures beside the simulator's for the
same slice and factor, and the invariants sampled from Docker every second.

    .venv/bin/python benchmarks/week_on_stack.py --day 2026-12-01 --hours 9-11
    .venv/bin/python benchmarks/week_on_stack.py --hours 9-11 --kill-hub-at 120 --out run/

Needs what the stack tests need (dockerd, the notebook image, configurable-http-proxy; see
TESTBED.md), and the machine to itself: on a shared Docker, take its lock first (`flock
-o /tmp/gpuspawner-docker.lock …`). Without --day: the busiest weekday of the trace.
Without --hours: the whole day (at 30×, 48 minutes).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

from simulation.jobs import read_jobs
from simulation.site import load_site
from simulation.trace import read_trace
from stack.plot import plot_slice
from stack.tally import side_by_side
from stack.timescale import scale, unscaled_table
from stack.window import busiest_day, cut, policy, simulated, window

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"  # realhub and jobkit: how the tests start real hubs
SIMULATION = HERE / "simulation"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--day", type=date.fromisoformat, help="YYYY-MM-DD (default: busiest)")
    parser.add_argument("--hours", default="0-24", help="FROM-TO of the day, e.g. 9-11")
    parser.add_argument("--factor", type=float, default=30.0, help="time runs this much faster")
    parser.add_argument("--trace", type=Path, default=SIMULATION / "team-week.csv")
    parser.add_argument("--jobs", type=Path, default=SIMULATION / "team-jobs.csv")
    parser.add_argument("--site", type=Path, default=SIMULATION / "site.json")
    parser.add_argument("--no-parking", action="store_true", help="jobs give way by SIGTERM")
    parser.add_argument(
        "--jupyterlab", action="store_true", help="people's servers run JupyterLab, not a stub"
    )
    parser.add_argument(
        "--kill-hub-at", type=float, metavar="SECONDS", help="kill -9 the hub so far in, restart"
    )
    parser.add_argument(
        "--out", type=Path, help="write figures.json, samples.csv and slice.png here"
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    sessions, backlog = read_trace(args.trace), read_jobs(args.jobs)
    site = load_site(args.site)
    slice_ = window(args.day or busiest_day(sessions, backlog), args.hours)
    the_cut = cut(sessions, backlog, slice_)
    parking = not args.no_parking
    theirs = simulated(the_cut, slice_, site, policy(site, parking))
    raw = json.loads(args.site.read_text(encoding="utf-8"))
    scaled = scale(args.factor, raw, the_cut.people, the_cut.jobs, start=slice_.start)
    seconds = slice_.minutes * 60 / args.factor
    print(f"{slice_}: {len(the_cut.people)} sessions, {len(the_cut.jobs)} jobs; "
          f"{args.factor:g}× faster: {seconds / 60:.1f} minutes here", flush=True)  # fmt: skip

    sys.path.append(str(TESTS))
    from stack.runner import Options, replay  # needs tests/ on the path

    options = Options(parking, args.kill_hub_at, light=not args.jupyterlab)
    ours = replay(scaled, site.profiles, options, seconds)
    rows = ours.pop("rows")
    report = {"slice": str(slice_), "factor": args.factor, "parking": parking,
              "stack": ours, "simulator": theirs}  # fmt: skip
    print()
    print(side_by_side(ours["figures"], theirs))
    print(f"\ninvariant breaches (samples in breach, of {ours['samples']}): {ours['breaches']}")
    for said in ours["breaches_said"]:
        print(f"  {said}")
    for what, found in ours["checks"].items():
        print(f"{what}: {found or 'as they should be'}")
    print(f"the hub's log: {ours['hub_log']}")
    print("\n" + unscaled_table(scaled))
    if args.out:
        write(args.out, report, rows)
        plot_slice(rows, theirs["series"], site.gpus, args.factor, slice_.start,
                   args.out / "slice.png")  # fmt: skip
    breached = any(ours["breaches"].values()) or any(ours["checks"].values())
    return 1 if breached else 0


def write(folder: Path, report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "figures.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    with (folder / "samples.csv").open("w", newline="", encoding="utf-8") as out:
        fields = list(rows[0]) if rows else ["at"]
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {folder / 'figures.json'} and {folder / 'samples.csv'}")


if __name__ == "__main__":
    sys.exit(main())
