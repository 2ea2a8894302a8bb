"""The replay runner's pure parts: the slice and the simulator's figures for it, the hub's
config from the scaled site, the invariants over samples, and the figures from events."""

from __future__ import annotations

import json
import threading
import time
from datetime import date, datetime
from pathlib import Path

import pytest
from simulation.jobs import TrainingJob, read_jobs
from simulation.measures import Outcome
from simulation.site import load_site
from simulation.trace import Session, parse_pattern, read_trace
from stack.hubsetup import LIGHT, groups_of, hub_config
from stack.invariants import Gpu, Running, Sample, Watch, books_differ, gpus_of, row
from stack.life import Clock, Life
from stack.lost_work import lost_work
from stack.person import Start
from stack.plot import BIN, stack_bins
from stack.script import script_of
from stack.tally import JobEnd, busy_seconds, far_apart, figures, parks, side_by_side
from stack.timescale import scale
from stack.window import busiest_day, cut, figures_of, policy, simulated, window

SIMULATION = Path(__file__).resolve().parents[2] / "benchmarks" / "simulation"
SITE = json.loads((SIMULATION / "site.json").read_text())
TUESDAY = date(2026, 12, 1)


def session(user: str, at: str, gpus: int, pattern: str, then: str = "stop") -> Session:
    arrival = datetime.strptime(f"2026-12-01 {at}", "%Y-%m-%d %H:%M")
    groups = ("researchers",) if user.startswith("r") else ("students",)
    return Session(user, groups, "", arrival, gpus, parse_pattern(pattern), then, True)


# --- the slice -------------------------------------------------------------------------------
def test_a_slice_is_hours_of_one_day_and_a_bad_one_says_how_to_write_it():
    assert str(window(TUESDAY, "9-11")) == "Tue 2026-12-01 09:00–11:00"
    assert window(TUESDAY, "9:30-11:15").minutes == 105
    assert window(TUESDAY).minutes == 24 * 60
    for bad in ("9", "11-9", "9-25"):
        with pytest.raises(ValueError, match="--hours"):
            window(TUESDAY, bad)


def test_the_slice_holds_what_arrives_in_it_split_into_people_and_jobs_as_the_simulator_does():
    sessions = [
        session("ann", "08:59", 1, "B10"),  # before the slice
        session("ann", "09:10", 1, "I5 B20"),
        session("rob", "09:20", 2, "B30 I10 A60", "close"),  # a training start: a job
        session("sue", "10:00", 1, "I5 A40", "close"),  # its run left going: a job too
        session("tom", "11:00", 1, "B10"),  # at the slice's end: out
    ]
    runs = [TrainingJob("rob", ("researchers",), datetime(2026, 12, 1, 10, 30), 4, 120, 30)]
    the_cut = cut(sessions, runs, window(TUESDAY, "9-11"))
    assert [s.user for s in the_cut.sessions] == ["ann", "rob", "sue"]
    assert [s.user for s in the_cut.people] == ["ann", "sue"]
    assert [(j.user, j.gpus, j.minutes) for j in the_cut.jobs] == [
        ("rob", 2, 90), ("sue", 1, 40), ("rob", 4, 120),
    ]  # fmt: skip
    assert the_cut.people[1].pattern == parse_pattern("I5")


def test_the_busiest_weekday_asks_for_the_most_gpu_minutes():
    sessions = [session("ann", "09:00", 1, "B100")]
    weekend = TrainingJob("rob", (), datetime(2026, 12, 5, 9, 0), 8, 600, 30)  # a Saturday
    assert busiest_day(sessions, [weekend]) == TUESDAY
    monday = TrainingJob("rob", (), datetime(2026, 11, 30, 9, 0), 1, 200, 30)
    assert busiest_day(sessions, [monday]) == date(2026, 11, 30)


def test_the_simulators_figures_are_read_for_the_slices_minutes_only():
    o = Outcome(gpus=2, busy=[2] * 60 + [1] * 120, waits=[0.0, 60.0, 300.0])
    o.parked["jobs"] += 2
    o.run_lost = 30
    found = figures_of(o, offset=60, minutes=120)
    assert found["gpu_hours_busy"] == 2.0 and found["machine_busy"] == 0.5
    assert found["wait_granted"] == {"p50": 60.0, "p95": 300.0, "max": 300.0}
    assert found["parked_jobs"] == 2 and found["gpu_hours_lost"] == 0.5


def test_the_plot_bins_the_stacks_samples_in_simulated_minutes_as_the_simulators():
    # at 30x a sample a second is half a simulated minute: a bin holds 2 * BIN of them
    rows = [{"at": i, "held": 4, "busy": i % 2 * 2, "parked": 0} for i in range(4 * BIN)]
    rows.append({"at": 10 * BIN, "held": 8, "busy": 8, "parked": 1})  # past the slice
    found = stack_bins(rows, factor=30, minutes=2 * BIN + 1)
    assert found["held"] == [4.0, 4.0, 0.0]  # the third bin, one minute long, unsampled
    assert found["busy"] == [1.0, 1.0, 0.0] and found["parked"] == [0.0] * 3


def test_the_simulator_replays_the_documented_slice():
    sessions = read_trace(SIMULATION / "team-week.csv")
    runs = read_jobs(SIMULATION / "team-jobs.csv")
    site = load_site(SIMULATION / "site.json")
    slice_ = window(TUESDAY, "9-11")
    found = simulated(cut(sessions, runs, slice_), slice_, site, policy(site, parking=True))
    assert found["starts"] == 6 and 0 < found["machine_busy"] <= 1
    assert len(found["series"]["held"]) == slice_.minutes == 120
    with pytest.raises(ValueError, match="nothing arrives"):
        simulated(cut(sessions, runs, window(TUESDAY, "3-4")), window(TUESDAY, "3-4"), site,
                  policy(site, parking=False))  # fmt: skip


# --- the hub's config ----------------------------------------------------------------------
def test_the_hubs_config_holds_the_scaled_site_intervals_culler_and_parking(tmp_path):
    scaled = scale(30, SITE, [session("ann", "09:00", 1, "B10")])
    text = hub_config(scaled, tmp_path / "load.json", parking=True)
    assert "c.GPUSpawner.simulate_gpus = 8" in text
    assert "'gpu_idle_timeout': 120.0" in text and "'preempt_grace': 4.0" in text
    assert "c.GPUSpawner.monitor_interval = 0.3333333333333333" in text
    assert "c.JupyterHub.last_activity_interval = 10" in text
    assert "idle_culler_service(timeout=2880, cull_every=2)" in text
    assert 'c.GPUSpawner.checkpoint_driver = "simulated"' in text
    assert repr(LIGHT["cmd"]) in text
    assert "checkpoint_driver" not in hub_config(scaled, tmp_path / "l.json", parking=False)
    compile(text, "jupyterhub_config.py", "exec")


def test_groups_come_from_each_users_groups():
    members = {"bob": ("researchers",), "ann": ("students", "tas")}
    assert groups_of(members) == {"students": ["ann"], "tas": ["ann"], "researchers": ["bob"]}


# --- the invariants ------------------------------------------------------------------------
ANN, JOB = ("ann", ""), ("rob", "job-1")


def gpu(uuid: str, state: str = "free", holder=None, parked=(), busy=False) -> Gpu:
    return Gpu(uuid, state, holder, tuple(parked), busy)


def sample(at: float, pool: list[Gpu], docker: list[Running], before=None) -> Sample:
    return Sample(at, tuple(before or pool), tuple(docker), tuple(pool))


def test_two_holders_on_a_gpu_breach_unless_the_books_say_one_is_parked_there():
    watch = Watch()
    both = [Running(*ANN, ("GPU-0",)), Running(*JOB, ("GPU-0",))]
    parked = [gpu("GPU-0", "allocated", ANN, [JOB])]
    assert watch.check(sample(1, parked, both))["two_holders"] == 0
    unparked = [gpu("GPU-0", "allocated", ANN)]
    assert watch.check(sample(2, unparked, both))["two_holders"] == 1
    assert watch.counts["two_holders"] == 1
    assert watch.details == [
        "2.00 s: two_holders on GPU-0: pool allocated (before: allocated), holder ('ann', ''), "
        "parked []; Docker runs [('ann', ''), ('rob', 'job-1')]"
    ]


def test_a_running_container_on_a_gpu_free_in_both_reads_breaches():
    watch = Watch()
    on = [Running(*ANN, ("GPU-0",))]
    free, held = [gpu("GPU-0")], [gpu("GPU-0", "allocated", ANN)]
    assert watch.check(sample(1, free, on, before=held))["running_on_free"] == 0  # released now
    assert watch.check(sample(2, free, on))["running_on_free"] == 1
    assert watch.check(sample(3, free, []))["running_on_free"] == 0
    both_parked = [gpu("GPU-0", "free", None, [ANN, JOB])]
    two = [*on, Running(*JOB, ("GPU-0",))]
    found = watch.check(sample(4, both_parked, two))
    assert (found["running_on_free"], found["parked_on_free"]) == (0, 1)
    said_parked = [gpu("GPU-0", "parked", None, [ANN])]  # free to take, ann's work on it
    found = watch.check(sample(5, said_parked, on))
    assert (found["running_on_free"], found["parked_on_free"]) == (0, 0)
    found = watch.check(sample(6, said_parked, two))  # rob's job on it, parked nowhere
    assert (found["running_on_free"], found["parked_on_free"]) == (1, 0)


def test_a_gpu_held_past_the_grace_after_its_container_went_breaches_and_a_start_does_not():
    watch = Watch(grace=5)
    held = [gpu("GPU-0", "allocated", ANN)]
    assert watch.check(sample(0, held, []))["held_after_gone"] == 0  # granted, not started
    assert watch.check(sample(10, held, []))["held_after_gone"] == 0  # still starting
    watch.check(sample(11, held, [Running(*ANN, ("GPU-0",))]))
    assert watch.check(sample(12, held, []))["held_after_gone"] == 0  # gone: within grace
    assert watch.check(sample(18, held, []))["held_after_gone"] == 1


def test_the_books_equal_dockers_word_gpu_by_gpu():
    pool = [gpu("GPU-0", "allocated", ANN, [JOB]), gpu("GPU-1")]
    docker = [Running(*ANN, ("GPU-0",)), Running(*JOB, ("GPU-0",))]
    assert books_differ(pool, docker) == []
    assert books_differ(pool, docker[:1]) == [
        "GPU-0: books [('ann', ''), ('rob', 'job-1')], Docker [('ann', '')]"
    ]
    stray = [*docker, Running("eve", "", ("GPU-1", "GPU-9"))]
    assert books_differ(pool, stray)[0].startswith("GPU-1: books [], Docker [('eve', '')]")
    assert books_differ(pool, stray)[1] == "GPU-9: not in the books, Docker [('eve', '')]"


def test_the_pool_report_is_read_with_busy_from_the_hubs_telemetry():
    report = {"gpus": [
        {"uuid": "GPU-0", "state": "allocated", "holder": {"user": "ann", "server": ""},
         "parked": [{"user": "rob", "server": "job-1", "job": 1}],
         "telemetry": {"utilization_percent": 90.0}},
        {"uuid": "GPU-1", "state": "free", "holder": None, "parked": [], "telemetry": None},
    ]}  # fmt: skip
    assert gpus_of(report, 5.0) == (
        gpu("GPU-0", "allocated", ANN, [JOB], busy=True), gpu("GPU-1"),
    )  # fmt: skip
    taken = sample(101.0, list(gpus_of(report, 5.0)), [Running(*ANN, ("GPU-0",))])
    assert row(taken, {"two_holders": 1}, origin=100.0) == {
        "at": 1.0, "free": 1, "held": 1, "busy": 1, "parked": 1, "containers": 1,
        "two_holders": 1, "running_on_free": 0, "parked_on_free": 0, "held_after_gone": 0,
    }  # fmt: skip


# --- the figures -------------------------------------------------------------------------
def test_busy_gpu_seconds_weigh_each_sample_until_the_next():
    one, two = [gpu("GPU-0", busy=True)], [gpu("GPU-0", busy=True), gpu("GPU-1", busy=True)]
    samples = [sample(0, one, []), sample(2, two, []), sample(3, [], [])]
    assert busy_seconds(samples, end=10) == 1 * 2 + 2 * 1 + 0


def test_parks_count_parked_work_appearing_and_its_return():
    parked = [gpu("GPU-0", "allocated", ANN, [JOB])]
    job_runs = [Running(*JOB, ("GPU-0",))]
    samples = [sample(0, [], []), sample(1, parked, job_runs), sample(2, parked, job_runs),
               sample(3, [], job_runs)]  # fmt: skip
    assert parks(samples, {JOB}) == {"parked_jobs": 1, "parked_people": 0, "restored": 1}
    assert parks(samples, set())["parked_people"] == 1


def test_the_stacks_figures_in_the_traces_time():
    starts = [
        Start("", "gpu-1", 100.0, granted=101.0, ready=105.0),
        Start("", "gpu-1", 100.0, ready=102.0),  # granted before its stream opened
        Start("", "gpu-1", 150.0),  # never granted: waits until the end
    ]
    journal = lost_work([
        {"event": "start", "step": 0, "step_seconds": 1.0, "time": 0},
        {"event": "step", "step": 30, "time": 30},
        {"event": "end", "step": 30, "why": "sigterm", "time": 31},  # gave way, saved at 20
        {"event": "start", "step": 20, "time": 40},
        {"event": "step", "step": 40, "time": 60},
    ])  # fmt: skip
    jobs = {JOB: JobEnd(2, "running", 3, journal)}  # the hub counts its 2 parks too
    busy = [gpu("GPU-0", busy=True)]
    found = figures(30, 2, 100.0, 100.0, starts, [sample(100, busy, []), sample(150, [], [])],
                    0, [2.0], jobs)  # fmt: skip
    assert found["gpu_hours_busy"] == round(50 * 30 / 3600, 2)
    assert found["machine_busy"] == round(50 / 200, 4)
    assert found["wait_granted"] == {"p50": 60.0, "p95": 1500.0, "max": 1500.0}
    assert found["wait_ready"]["p50"] == 150.0 and found["never_granted"] == 1
    assert found["gave_way"] == 1 and found["preemptions"] == 3 and found["jobs_done"] == 0
    assert found["parked_jobs"] == 2  # parked between two samples: the hub's count
    assert found["gpu_hours_lost"] == round(10 * 2 * 30 / 3600, 2)  # 10 steps redone, 2 GPUs
    assert found["resume_wait_p95"] == 60.0


def test_the_side_by_side_marks_figures_over_5_points_or_twice_apart():
    assert far_apart(0.80, 0.88, share=True) and not far_apart(0.85, 0.88, share=True)
    assert far_apart(250, 120, share=False) and not far_apart(200, 120, share=False)
    assert not far_apart(1, 0, share=False)  # counts of 0 and 1: no factor to speak of
    starts = [Start("", "gpu-1", 0.0, granted=1.0, ready=4.0)]
    ours = figures(30, 1, 0.0, 60.0, starts, [], 0, [], {})
    table = side_by_side(ours, ours | {"machine_busy": 0.5})
    assert table.splitlines()[0] == "| figure | real stack | simulator | |"
    assert "| machine's GPU-hours busy | 0% | 50% | ⚠ |" in table
    assert "| wait request→ready p50 (s) | 120 | 120 |  |" in table


# --- a person's life, against a stand-in for the hub -------------------------------------
class Board:
    def __init__(self) -> None:
        self.said: list[bool] = []

    def kernel(self, user: str, server: str, busy: bool) -> None:
        self.said.append(busy)


class Hub:
    """The hub as one person sees it: their server's model, which it may drop (a stop by
    the hub), its residency, and their starts (the first one refused, if asked)."""

    def __init__(self, refuse_first: bool = False, parked: bool = False) -> None:
        self.name, self.board, self.starts = "ann", Board(), []
        self.running: str | None = None
        self.refuse, self.parked = refuse_first, parked
        self.calls: list[str] = []

    def model(self, server=""):
        return {"ready": True, "user_options": {"profile": self.running}} if self.running else None

    def start(self, server="", profile=""):
        now = time.time()
        begun = Start(server, profile, now)
        self.starts.append(begun)
        self.calls.append("start")
        if self.refuse:
            self.refuse, begun.failed = False, "409: no GPU"
            return begun
        self.running, begun.granted, begun.ready = profile, now, now
        return begun

    def stop(self, server=""):
        self.calls.append("stop")
        self.running = None

    def touch(self, server=""):
        self.calls.append("touch")

    def residency(self, server=""):
        return "parked" if self.parked else "resident"

    def run_cell(self, server="", busy=True):
        self.calls.append("cell")
        self.parked = False
        return 0.25


def a_life(hub: Hub, pattern: str, then: str = "stop", factor: float = 600.0) -> Life:
    [s] = scale(factor, SITE, [session("ann", "09:00", 1, pattern, then)]).sessions
    script = script_of(s, load_site(SIMULATION / "site.json").profiles)
    return Life(hub, (script,), Clock(time.time(), 30.0), 0.05, factor)  # type: ignore[arg-type]


def test_a_person_starts_plays_their_pattern_with_cells_and_stops():
    hub = Hub(parked=True)
    life = a_life(hub, "I1 B1")  # 0.1 s idle, 0.1 s busy
    life.run()
    assert hub.calls[0] == "start" and "cell" in hub.calls and hub.calls[-1] == "stop"
    assert hub.board.said == [False, True, False]  # idle, busy, idle as they leave
    assert life.resume_waits == [0.25] and life.interrupted == 0 and hub.running is None


def test_a_refused_start_is_asked_again_and_its_wait_runs_from_the_first_ask():
    hub = Hub(refuse_first=True)
    life = a_life(hub, "I1", then="close", factor=3000.0)  # asked again 0.1 s later
    life.run()
    assert hub.calls.count("start") == 2 and life.refusals == ["409: no GPU"]
    [start] = hub.starts
    assert start.wait_for_ready is not None and start.wait_for_ready >= 0.1
    assert hub.running == "gpu-1"  # closed, not stopped


def test_a_server_the_hub_stops_under_a_person_is_an_interruption_and_they_come_back():
    hub = Hub()
    life = a_life(hub, "B30 I1", factor=60.0)  # 30 s of busy work: the hub stops it at once
    clock = life.clock
    threading.Timer(0.3, hub.stop).start()
    threading.Timer(2.5, clock.stopped.set).start()
    life.run()
    assert life.interrupted == 1 and hub.calls.count("start") == 1  # back only after 30 s
