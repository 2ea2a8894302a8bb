"""A training run for the replay on the real stack: trains in steps, checkpoints, gives way.

Run as a job's script (`{"profile": "gpu-1", "script": "train.py", "args": [...]}`) with
the notebook image's python3; standard library only. Each step sleeps (or, with `--work
cpu`, burns the CPU) `--step-seconds`. Every `--checkpoint-every` seconds of training it
writes a checkpoint. On SIGTERM (a job that gives way, is cancelled or reaches its
max_runtime: docs/jobs.md, "The SIGTERM contract") it ends the step under way unfinished,
saves a checkpoint (`--on-sigterm save`; `drop` loses the steps since the last one, as the
simulator assumes a run does) and exits 0. On start it resumes from its latest checkpoint.

Everything goes to one journal of JSON lines in the working folder (the user's home, for a
job), appended, never rewritten, so that a SIGKILL loses at most the line being written:

    {"event": "start", "attempt": 2, "step": 40, "trained_seconds": 4.1, "step_seconds": 0.1}
    {"event": "step", "step": 41}
    {"event": "checkpoint", "step": 50, "trained_seconds": 5.0, "why": "every"}
    {"event": "end", "step": 57, "why": "sigterm"}

each with its `time` (Unix seconds). The steps past the latest checkpoint tell what a stop
lost: `stack.lost_work` reads the journal into the figures. Its output lines ("attempt 2
resumes at step 40", "checkpoint at step 50") are what the job's log and progress show.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

JOURNAL = "train-journal.jsonl"
SLICE = 0.05  # seconds: how soon a SIGTERM ends the step under way


class Stopping:
    """SIGTERM came: the handler only notes it, the loop acts on it between slices."""

    requested = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.requested = True


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True, help="steps the whole run takes")
    parser.add_argument("--step-seconds", type=float, default=0.1, help="seconds per step")
    parser.add_argument(
        "--checkpoint-every", type=float, default=0.0, help="seconds of training (0: never)"
    )
    parser.add_argument("--journal", default=JOURNAL, help="its file, in the working folder")
    parser.add_argument("--on-sigterm", choices=("save", "drop"), default="save")
    parser.add_argument("--work", choices=("sleep", "cpu"), default="sleep")
    parser.add_argument("--say-every", type=int, default=0, help="steps between two lines "
                        "saying the step (0: only the checkpoints say it)")  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.steps - 1, args.checkpoint_every, args.say_every) < 0 or args.step_seconds <= 0:
        parser.error("--steps ≥ 1, --step-seconds > 0, --checkpoint-every and --say-every ≥ 0")
    return args


def read(path: Path) -> list[dict[str, Any]]:
    return parse(path.read_text()) if path.exists() else []


def parse(text: str) -> list[dict[str, Any]]:
    """A journal's lines; a torn or foreign line (a SIGKILL mid-write) is skipped."""
    lines = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("event"), str):
            lines.append(line)
    return lines


def write(path: Path, event: str, **fields: Any) -> None:
    with path.open("a") as journal:
        journal.write(json.dumps({"event": event, **fields, "time": time.time()}) + "\n")


def one_step(seconds: float, how: str, stopping: Stopping) -> bool:
    """One step of `seconds`; False where SIGTERM ended it unfinished."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if stopping.requested:
            return False
        if how == "sleep":
            time.sleep(min(SLICE, left))
        else:
            until = time.monotonic() + min(SLICE, left)
            while time.monotonic() < until:
                pass
    return not stopping.requested


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    path = Path(args.journal)
    stopping = Stopping()
    signal.signal(signal.SIGTERM, stopping)
    earlier = read(path)
    saved = [line for line in earlier if line["event"] == "checkpoint"]
    step = int(saved[-1]["step"]) if saved else 0
    trained = float(saved[-1]["trained_seconds"]) if saved else 0.0
    attempt = 1 + sum(line["event"] == "start" for line in earlier)
    write(path, "start", attempt=attempt, step=step, trained_seconds=trained,
          step_seconds=args.step_seconds, steps=args.steps)  # fmt: skip
    print(f"attempt {attempt} resumes at step {step} of {args.steps}", flush=True)

    def checkpoint(why: str) -> None:
        write(path, "checkpoint", step=step, trained_seconds=round(trained, 3), why=why)
        print(f"checkpoint at step {step} ({why})", flush=True)

    since_checkpoint = 0.0
    while step < args.steps:
        began = time.monotonic()
        if not one_step(args.step_seconds, args.work, stopping):
            break
        took = time.monotonic() - began
        step, trained, since_checkpoint = step + 1, trained + took, since_checkpoint + took
        write(path, "step", step=step)
        if args.say_every and step % args.say_every == 0:
            print(f"step {step}", flush=True)
        if args.checkpoint_every and since_checkpoint >= args.checkpoint_every:
            checkpoint("every")
            since_checkpoint = 0.0
    why = "done" if step >= args.steps else "sigterm"
    if why == "done" or args.on_sigterm == "save":
        checkpoint(why)
    write(path, "end", step=step, why=why)
    print(f"attempt {attempt} ends at step {step}: {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
