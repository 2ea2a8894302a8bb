"""The utilisation simulator's input and arithmetic: the trace format, the site file, the
figures read from a replay. Its replays are in test_utilisation_replay.py."""

import re
from datetime import datetime
from pathlib import Path

import pytest
from simulation.measures import Outcome
from simulation.site import load_site, site_from
from simulation.synthetic import generate
from simulation.trace import Segment, Session, TraceError, read_trace, write_trace

from gpuspawner.core.errors import GPUConfigError, LimitsConfigError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HEADER = "user,groups,server,arrival,gpus,pattern,then,idle_processes\n"
GOOD = "alice,researchers;admins,train,2026-11-30 09:12,2,I5 B40 A300,close,yes\n"


def trace_file(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("# where this came from\n" + header + "".join(rows))
    return path


def test_a_trace_row_reads_as_the_session_it_describes(tmp_path):
    (session,) = read_trace(trace_file(tmp_path, GOOD))
    assert session == Session(
        user="alice",
        groups=("researchers", "admins"),
        server="train",
        arrival=datetime(2026, 11, 30, 9, 12),
        gpus=2,
        pattern=(Segment("I", 5), Segment("B", 40), Segment("A", 300)),
        then="close",
        idle_processes=True,
    )
    assert session.minutes == 345
    assert [s.busy for s in session.pattern] == [False, True, True]
    assert [s.present for s in session.pattern] == [True, True, False]


def test_a_written_trace_reads_back_the_same(tmp_path):
    sessions = generate(3)
    write_trace(tmp_path / "week.csv", sessions, "two\nlines of header")
    assert read_trace(tmp_path / "week.csv") == sessions


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("bob,,,2026-11-30 09:00,two,B5,stop,no\n", "line 4, column gpus: 'two' is not a whole"),
        ("bob,,,2026-11-30 09:00,1,X5,stop,no\n", "column pattern: pattern segment 'X5'"),
        ("bob,,,2026-11-30 09:00,1,B0,stop,no\n", "column pattern: pattern segment 'B0'"),
        ("bob,,,2026-11-30 09:00,1,,stop,no\n", "column pattern: pattern is empty"),
        ("bob,,,2026-11-30 09:00,1,B5,quit,no\n", "column then: 'quit' is not one of stop"),
        ("bob,,,2026-11-30 09:00,1,B5,stop,maybe\n", "column idle_processes: 'maybe'"),
        ("bob,,,30/11/2026 9am,1,B5,stop,no\n", "column arrival: '30/11/2026 9am' is not"),
        (",,,2026-11-30 09:00,1,B5,stop,no\n", "column user: empty"),
        ("bob,,,2026-11-30 09:00,1,B5\n", "line 4: expected 8 values"),
        ("bob,,,2026-11-30 09:00,1,B5,stop,no,extra\n", "line 4: expected 8 values"),
    ],
)
def test_a_malformed_row_is_refused_naming_its_line_and_column(tmp_path, row, expected):
    path = trace_file(tmp_path, GOOD, row)
    with pytest.raises(TraceError, match="^" + re.escape(str(path))) as refused:
        read_trace(path)
    assert expected in str(refused.value)


def test_a_trace_without_a_needed_column_or_rows_is_refused(tmp_path):
    with pytest.raises(TraceError, match=re.escape("lacks column(s) then, idle_processes")):
        read_trace(trace_file(tmp_path, header="user,groups,server,arrival,gpus,pattern\n"))
    with pytest.raises(TraceError, match="no sessions"):
        read_trace(trace_file(tmp_path))


def test_the_committed_team_week_is_what_the_generator_documents():
    committed = read_trace(BENCHMARKS / "simulation" / "team-week.csv")
    assert committed == generate(1)
    load_site(BENCHMARKS / "simulation" / "site.json").check(committed)


def test_a_session_the_hub_would_always_refuse_is_named_before_the_replay():
    site = site_from({"gpus": 4, "default_limits": {"profiles": ["cpu", "gpu-1"]}})
    session = generate(1)[0]
    two = Session("bob", (), "", session.arrival, 2, session.pattern, "stop", False)
    three = Session("bob", (), "", session.arrival, 3, session.pattern, "stop", False)
    with pytest.raises(TraceError, match=re.escape("bob (groups: none) asks for profile gpu-2")):
        site.check([two])
    with pytest.raises(TraceError, match="no profile offers that many"):
        site.check([three])


def test_a_site_file_is_checked_as_the_hub_checks_its_config():
    with pytest.raises(GPUConfigError, match=re.escape("unknown key(s) ['gpu_count']")):
        site_from({"gpu_count": 8})
    with pytest.raises(LimitsConfigError, match="max_gpus_per_usr"):
        site_from({"gpus": 8, "group_limits": {"students": {"max_gpus_per_usr": 1}}})


def outcome(held, busy, wanted=None, gpus=2):
    o = Outcome(gpus)
    for h, b, w in zip(held, busy, wanted or [0] * len(held), strict=True):
        o.record(h, b, w)
    return o


def test_held_busy_share_is_busy_gpu_minutes_over_held_ones():
    o = outcome(held=[2, 2, 1, 0], busy=[2, 1, 0, 0])
    assert o.held_busy_share == pytest.approx(3 / 5)
    assert o.held_gpu_hours == pytest.approx(5 / 60)
    assert outcome(held=[0, 0], busy=[0, 0]).held_busy_share == 1.0  # nothing held, nothing lost


def test_machine_busy_share_is_busy_gpu_minutes_over_all_the_machines():
    o = outcome(held=[2, 2, 1, 0], busy=[2, 1, 0, 0], gpus=2)
    assert o.machine_busy_share == pytest.approx(3 / 8)


def test_wait_percentiles_count_requests_never_granted_as_waiting_till_the_end():
    o = Outcome(8)
    o.waits = [0.0, 0.0, 600.0, 0.0]
    assert o.wait(0.5) == 0.0
    assert o.wait(0.95) == 600.0
    o.still_waiting = [7200.0]
    assert o.wait(0.95) == 7200.0
    assert Outcome(8).wait(0.95) == 0.0
