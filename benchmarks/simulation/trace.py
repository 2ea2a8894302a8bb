"""The simulator's input: a trace of demand, one CSV row per working session.

A trace says what people wanted, not what they got: when each person first
asked for a GPU server, how many GPUs, and what those GPUs would do from the
moment they had them. What they got (waits, culls, come-backs) is the
simulator's to work out, policy by policy, so the same trace replays under
each one. The format is in benchmarks/README.md ("Utilisation over a week"):

    user,groups,server,arrival,gpus,pattern,then,idle_processes
    alice,researchers,,2026-11-30 09:12,2,B40 I15 B25 A480,close,yes

`pattern` is the session in minutes from the grant on, segment by segment:
`B` the GPUs are busy while the person works at the notebook, `I` they are idle
while the person works (editing, reading, thinking), `A` they are busy while
the person is away (a run left going: no Jupyter activity). `then` is what the
person does when the pattern ends: `stop` the server, `close` the tab and leave
it running, or leave the tab `open`. `idle_processes` says whether idle GPUs
still show the kernel's compute process (a kernel that touched the GPU keeps
its CUDA context until it exits).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

COLUMNS = ("user", "groups", "server", "arrival", "gpus", "pattern", "then", "idle_processes")
KINDS = {"B": "busy, at the notebook", "I": "idle, at the notebook", "A": "busy, away"}
ENDINGS = ("stop", "close", "open")
TIME_FORMAT = "%Y-%m-%d %H:%M"


class TraceError(ValueError):
    """A trace that cannot be replayed: the message names the file, the line and the fix."""


class OfKind:
    """A stretch of a session by its kind (one of KINDS): what it means for the GPU and the
    person (a trace's Segment, in minutes; the stack replay's Part, in seconds)."""

    kind: str

    @property
    def busy(self) -> bool:
        return self.kind != "I"

    @property
    def present(self) -> bool:
        """Whether the person is at the notebook, which Jupyter counts as activity."""
        return self.kind != "A"


@dataclass(frozen=True)
class Segment(OfKind):
    kind: str  # one of KINDS
    minutes: int


@dataclass(frozen=True)
class Session:
    user: str
    groups: tuple[str, ...]
    server: str
    arrival: datetime
    gpus: int
    pattern: tuple[Segment, ...]
    then: str  # one of ENDINGS
    idle_processes: bool

    @property
    def minutes(self) -> int:
        return sum(s.minutes for s in self.pattern)


def parse_pattern(text: str) -> tuple[Segment, ...]:
    """ "B40 I15 A300" → segments; ValueError saying what is wrong."""
    segments = []
    for token in text.split():
        kind, digits = token[:1].upper(), token[1:]
        if kind not in KINDS or not digits.isdigit() or int(digits) == 0:
            raise ValueError(
                f"pattern segment {token!r} is not a letter ({', '.join(KINDS)}) "
                "followed by whole minutes > 0, such as B40"
            )
        segments.append(Segment(kind, int(digits)))
    if not segments:
        raise ValueError("pattern is empty: give at least one segment, such as B40")
    return tuple(segments)


def format_pattern(pattern: Iterable[Segment]) -> str:
    return " ".join(f"{s.kind}{s.minutes}" for s in pattern)


def read_trace(path: Path) -> list[Session]:
    """Every session of a trace file, in arrival order; TraceError on the first bad row.

    Lines starting with # before the header are comments (where the trace came from).
    """
    sessions = [_session(row, path, line) for row, line in read_rows(path, COLUMNS, "a trace")]
    if not sessions:
        raise TraceError(f"{path}: no sessions, only a header")
    return sorted(sessions, key=lambda s: s.arrival)


def read_rows(
    path: Path, columns: Sequence[str], kind: str
) -> list[tuple[dict[str, str | None], int]]:
    """The rows of a CSV file whose first lines may be # comments, each with its line
    number; TraceError if its header lacks one of `columns` (`kind`: "a trace")."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    comments = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    rows = csv.DictReader(lines[comments:])
    missing = [c for c in columns if c not in (rows.fieldnames or ())]
    if missing:
        raise TraceError(
            f"{path}: the header lacks column(s) {', '.join(missing)}; "
            f"{kind}'s header is: {','.join(columns)}"
        )
    return [(dict(row), comments + rows.line_num) for row in rows]


def _session(row: dict[str, str | None], path: Path, line: int) -> Session:
    def fail(column: str, problem: str) -> TraceError:
        return TraceError(f"{path}, line {line}, column {column}: {problem}")

    if None in row or any(row.get(c) is None for c in COLUMNS):
        raise TraceError(f"{path}, line {line}: expected {len(COLUMNS)} values, one per column")
    value = {c: (row[c] or "").strip() for c in COLUMNS}
    if not value["user"]:
        raise fail("user", "empty; name the person")
    try:
        arrival = datetime.strptime(value["arrival"], TIME_FORMAT)
    except ValueError:
        raise fail(
            "arrival", f"{value['arrival']!r} is not a time such as 2026-11-30 09:12"
        ) from None
    if not value["gpus"].isdigit():
        raise fail("gpus", f"{value['gpus']!r} is not a whole number of GPUs ≥ 0")
    try:
        pattern = parse_pattern(value["pattern"])
    except ValueError as problem:
        raise fail("pattern", str(problem)) from None
    if value["then"] not in ENDINGS:
        raise fail("then", f"{value['then']!r} is not one of {', '.join(ENDINGS)}")
    if value["idle_processes"] not in ("yes", "no"):
        raise fail("idle_processes", f"{value['idle_processes']!r} is not yes or no")
    return Session(
        user=value["user"],
        groups=tuple(g for g in value["groups"].split(";") if g),
        server=value["server"],
        arrival=arrival,
        gpus=int(value["gpus"]),
        pattern=pattern,
        then=value["then"],
        idle_processes=value["idle_processes"] == "yes",
    )


def write_trace(path: Path, sessions: Sequence[Session], header: str = "") -> None:
    """A trace file `read_trace` reads back; `header` lines go first, as # comments."""
    with path.open("w", newline="", encoding="utf-8") as file:
        for line in header.splitlines():
            file.write(f"# {line}".rstrip() + "\n")
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(COLUMNS)
        for s in sessions:
            writer.writerow(
                [
                    s.user,
                    ";".join(s.groups),
                    s.server,
                    s.arrival.strftime(TIME_FORMAT),
                    s.gpus,
                    format_pattern(s.pattern),
                    s.then,
                    "yes" if s.idle_processes else "no",
                ]
            )
