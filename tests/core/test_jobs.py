"""Jobs in the core: what a submission may be, how a job's state moves, who gives way."""

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuspawner.core.errors import LimitsConfigError
from gpuspawner.core.give_way import RunningJob, giving_way
from gpuspawner.core.job_hints import GPUUse, hints
from gpuspawner.core.job_rules import DEFAULT_PREEMPT_GRACE, job_rules
from gpuspawner.core.jobs import (
    FINAL,
    IGNORED,
    MAX_SPEC_BYTES,
    TRANSITIONS,
    Event,
    InvalidJob,
    JobSpec,
    JobState,
    is_job_name,
    job_id_of,
    parse_submission,
    step,
)
from gpuspawner.core.limits import Limited, LimitsTable
from gpuspawner.core.pool import Holder, Pool
from gpuspawner.core.units import Request

# --- submissions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "spec"),
    [
        ({"profile": "1gpu", "notebook": "train.ipynb"}, JobSpec("1gpu", notebook="train.ipynb")),
        (
            {"profile": "1gpu", "notebook": "runs/./a/../train.ipynb"},
            JobSpec("1gpu", notebook="runs/train.ipynb"),
        ),
        (
            {"profile": "2gpu", "script": "train.py", "args": ["--epochs", "3"]},
            JobSpec("2gpu", script="train.py", args=("--epochs", "3")),
        ),
        ({"profile": "2gpu", "script": "run.sh"}, JobSpec("2gpu", script="run.sh")),
    ],
)
def test_a_submission_names_what_runs_in_the_home(body, spec):
    assert parse_submission(body) == spec


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "JSON object"),
        ({"notebook": "a.ipynb"}, '"profile"'),
        ({"profile": "1gpu"}, "exactly one"),
        ({"profile": "1gpu", "notebook": "a.ipynb", "script": "b.py"}, "exactly one"),
        ({"profile": "1gpu", "notebook": "/etc/passwd.ipynb"}, "inside your home"),
        ({"profile": "1gpu", "notebook": "../bob/secret.ipynb"}, "inside your home"),
        ({"profile": "1gpu", "notebook": "train.py"}, ".ipynb"),
        ({"profile": "1gpu", "notebook": "a.ipynb", "args": []}, "takes none"),
        ({"profile": "1gpu", "script": "a.py", "args": "--fast"}, "list of strings"),
        ({"profile": "1gpu", "script": "a.py", "image": "evil"}, "'image'"),
        ({"profile": "1gpu", "script": ""}, "path in your home"),
    ],
)
def test_a_bad_submission_says_what_to_fix(body, says):
    with pytest.raises(InvalidJob, match=re.escape(says)):
        parse_submission(body)


HUGE = "x" * 20_000_000  # what an attack run sent: no answer may carry it back whole


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"profile": "1gpu", "script": "a.py", HUGE: 1}, "Unknown key 'xxxx"),
        ({"profile": "1gpu", "notebook": HUGE[:1000] + ".py"}, "must be a .ipynb file"),
        ({"profile": "1gpu", "notebook": "../" + HUGE[:1000]}, "inside your home"),
        ({"profile": HUGE, "notebook": "a.ipynb"}, "may be at most 64 KiB"),
    ],
)
def test_a_refusal_quotes_only_a_short_prefix_of_what_was_sent(body, says):
    with pytest.raises(InvalidJob, match=re.escape(says)) as refused:
        parse_submission(body)
    assert len(str(refused.value)) < 400


@pytest.mark.parametrize(
    ("args", "fits"),
    [
        (["x" * (MAX_SPEC_BYTES - 100)], True),
        (["x" * 200_000], False),  # one 200 kB argument: more than one environment string holds
        (["é" * 12_000], False),  # 24 kB as UTF-8, but 72 kB as the runner is told it (\u00e9)
        (["y" * 2_000] * 40, False),
    ],
)
def test_a_job_must_fit_the_environment_its_container_is_told_it_in(args, fits):
    body = {"profile": "1gpu", "script": "a.py", "args": args}
    if fits:
        assert parse_submission(body).args == tuple(args)
        return
    with pytest.raises(InvalidJob, match="a job may be at most 64 KiB") as refused:
        parse_submission(body)
    assert "Put long inputs in a file" in str(refused.value)


@pytest.mark.parametrize(
    ("server", "hubs", "job_id"),
    [
        ("job-7", True, 7),
        ("job-0", True, 0),
        ("job-9223372036854775807", True, 2**63 - 1),
        ("job-9223372036854775808", True, None),  # past SQLite's integers: no job has it
        ("job-99999999999999999999999", True, None),
        ("job-", False, None),
        ("job-7a", False, None),
        ("job-٣", False, None),  # Unicode digits are not an id's
        ("job--7", False, None),
        ("jobs-7", False, None),
        ("train", False, None),
    ],
)
def test_the_job_names_are_the_hubs_whether_or_not_such_a_job_exists(server, hubs, job_id):
    assert is_job_name(server) is hubs
    assert job_id_of(server) == job_id


def test_the_runner_is_told_the_job_and_where_its_outputs_go():
    told = JobSpec("1gpu", script="train.py", args=("-v",)).for_runner(7, attempt=2)
    assert told == {
        "id": "job-7",
        "script": "train.py",
        "args": ["-v"],
        "outputs": "jobs/job-7",
        "attempt": 2,
        "linger": 600,
    }


# --- states ----------------------------------------------------------------------------


def test_a_final_state_has_no_way_out():
    assert all(state not in TRANSITIONS for state in FINAL)


@pytest.mark.parametrize(
    ("events", "end"),
    [
        ([Event.DISPATCHED, Event.UP, Event.FINISHED], JobState.DONE),
        ([Event.DISPATCHED, Event.UP, Event.BROKE], JobState.FAILED),
        ([Event.DISPATCHED, Event.START_FAILED], JobState.FAILED),
        ([Event.START_FAILED], JobState.FAILED),  # the hub could not start it at all
        ([Event.DISPATCHED, Event.UP, Event.OVER_RUNTIME], JobState.FAILED),
        ([Event.DISPATCHED, Event.UP, Event.ENDED], JobState.FAILED),
        ([Event.CANCEL], JobState.CANCELLED),
        # giving way: back to waiting once gone, then on again
        (
            [Event.DISPATCHED, Event.UP, Event.GIVE_WAY, Event.BROKE, Event.ENDED],
            JobState.WAITING,
        ),
        (
            [Event.DISPATCHED, Event.UP, Event.GIVE_WAY, Event.ENDED, Event.DISPATCHED, Event.UP],
            JobState.RUNNING,
        ),
        ([Event.DISPATCHED, Event.UP, Event.GIVE_WAY, Event.FINISHED], JobState.DONE),
        # the hub's shutdown stopped its server: it waits for the next hub, parked or not
        ([Event.DISPATCHED, Event.UP, Event.HUB_STOPPED], JobState.WAITING),
        ([Event.DISPATCHED, Event.UP, Event.PARK, Event.HUB_STOPPED], JobState.WAITING),
        # a late word changes nothing once ended
        ([Event.DISPATCHED, Event.UP, Event.CANCEL, Event.FINISHED], JobState.CANCELLED),
    ],
)
def test_a_job_moves_through_its_states(events, end):
    state = JobState.WAITING
    for event in events:
        state = step(state, event) or state
    assert state is end


@given(st.lists(st.sampled_from(list(Event)), max_size=12))
def test_every_job_that_ends_stays_ended(events):
    state, ended = JobState.WAITING, False
    for event in events:
        state = step(state, event) or state
        ended = ended or state in FINAL
        assert not ended or state in FINAL


# --- the rules of a user's groups ---------------------------------------------------------


def table(groups, default=None):
    return LimitsTable.parse(groups, default or {}, ["1gpu"])


def test_job_rules_are_the_most_generous_of_a_users_groups():
    rules = job_rules(
        table(
            {
                "students": {"max_jobs": 1, "max_runtime": 3600, "jobs_give_way": True},
                "staff": {"max_jobs": 4, "max_runtime": 7200, "job_priority": 5},
            }
        ),
        ["students", "staff"],
    )
    assert rules.max_jobs.value == 4 and rules.max_jobs.group == "staff"
    assert rules.max_runtime.value == 7200
    assert rules.priority == 5
    assert rules.give_way and rules.preempts
    assert rules.preempt_grace == DEFAULT_PREEMPT_GRACE


def test_a_group_whose_jobs_never_give_way_keeps_its_members_jobs_running():
    rules = job_rules(table({"prod": {"jobs_give_way": False}, "all": {}}), ["prod", "all"])
    assert not rules.give_way


def test_a_user_in_no_listed_group_has_default_limits_rules():
    rules = job_rules(table({}, {"max_jobs": 0}), ["nobody"])
    assert rules.max_jobs.value == 0 and rules.max_jobs.group == "default_limits"


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_jobs", -1), ("max_jobs", 1.5), ("preempt_grace", -5), ("jobs_give_way", "yes")],
)
def test_a_bad_job_rule_stops_the_hub_with_its_place(key, value):
    with pytest.raises(LimitsConfigError, match=rf"group_limits\['g'\]\['{key}'\]"):
        table({"g": {key: value}})


# --- who gives way -----------------------------------------------------------------------


def job(key, units, priority=0, started=0.0, user_id=None, **rules):
    user = 100 + key if user_id is None else user_id
    return RunningJob(key, user, frozenset(units), priority, started, **rules)


def needs(count, free=()):
    """`fits` for a start asking `count` whole GPUs, with `free` GPUs free now."""
    return lambda freed: len(set(free) | freed) >= count


def keys(chosen):
    return [j.key for j in chosen]


def test_the_lowest_priority_then_the_youngest_job_gives_way():
    running = [job(1, "a", priority=1, started=0), job(2, "b", started=10), job(3, "c", started=5)]
    assert keys(giving_way(running, needs(1), now=100, for_user=0)) == [2]
    assert keys(giving_way(running, needs(2), now=100, for_user=0)) == [2, 3]


def test_no_more_jobs_give_way_than_the_start_needs():
    # the youngest holds one GPU, an older one two: a 2-GPU start stops only the older one
    running = [job(1, "a", started=10), job(2, "bc", started=5)]
    assert keys(giving_way(running, needs(2), now=100, for_user=0)) == [2]


def test_free_gpus_count_towards_the_start():
    running = [job(1, "a", started=10), job(2, "b", started=5)]
    assert keys(giving_way(running, needs(2, free="z"), now=100, for_user=0)) == [1]


@pytest.mark.parametrize(
    "protected",
    [
        job(1, "a", started=95, min_runtime=60),  # younger than its min_runtime
        job(1, "a", gives_way=False),  # its group's jobs do not give way
        job(1, "a", preemptions=3, max_preemptions=3),  # it gave way often enough
        job(1, "a", user_id=7),  # the start is its own user's
    ],
)
def test_a_protected_job_is_never_chosen(protected):
    assert giving_way([protected], needs(1), now=100, for_user=7) == []


def test_when_no_choice_makes_the_start_fit_nobody_gives_way():
    assert giving_way([job(1, "a"), job(2, "b")], needs(3), now=100, for_user=0) == []


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 100), st.integers(1, 3)), max_size=6),
    st.integers(1, 8),
)
def test_what_gives_way_is_enough_and_none_of_it_is_spare(jobs, count):
    running, gpu = [], 0
    for key, (priority, started, size) in enumerate(jobs):
        running.append(job(key, {f"g{gpu + i}" for i in range(size)}, priority, started))
        gpu += size
    fits = needs(count)
    chosen = giving_way(running, fits, now=1000, for_user=-1)
    freed = frozenset().union(*(j.units for j in chosen))
    if chosen:
        assert fits(freed)
        assert all(not fits(freed - j.units) for j in chosen)
    else:
        assert not fits(frozenset().union(*(j.units for j in running)))


def test_the_pool_says_what_would_fit_were_a_jobs_gpus_free():
    pool = Pool(["g0", "g1"])
    grant = pool.allocate(Holder(1, 1, "alice", "job-1"), 2)
    assert not pool.fits_if_freed(Request(gpus=1), frozenset())
    assert pool.fits_if_freed(Request(gpus=2), frozenset(u.id for u in grant.units))
    pool.begin_release(1)  # stopping: free soon, so counted when named, never otherwise
    ids = frozenset(u.id for u in grant.units)
    assert pool.fits_if_freed(Request(gpus=2), ids)
    assert not pool.fits_if_freed(Request(gpus=1), frozenset())
    # what a start ahead will take is not counted twice
    taken = pool.would_take(Request(gpus=1), ids)
    assert taken is not None and len(taken) == 1
    assert pool.fits_if_freed(Request(gpus=1), ids, claimed=taken)
    assert not pool.fits_if_freed(Request(gpus=2), ids, claimed=taken)


# --- hints ---------------------------------------------------------------------------------
GIB = 1 << 30


@pytest.mark.parametrize(
    ("gpus", "cpu_busy", "says"),
    [
        ([GPUUse("GPU-a", 90.0, 78 * GIB, 80 * GIB)], 0.2, ["Close to out of memory: GPU-a"]),
        ([GPUUse("GPU-a", 10.0, 8 * GIB, 80 * GIB)], 0.97, ["Your GPU waits for data loading"]),
        ([GPUUse("GPU-a", 10.0, 8 * GIB, 80 * GIB)], 0.5, []),  # the CPUs are not the limit
        ([GPUUse("GPU-a", 95.0, 8 * GIB, 80 * GIB)], 0.97, []),  # a busy GPU waits for nothing
        ([GPUUse("GPU-a", None, None, 80 * GIB)], 0.97, []),  # nothing measured, nothing said
        ([GPUUse("GPU-a", 5.0, 79 * GIB, 80 * GIB)], None, ["Close to out of memory"]),
    ],
)
def test_a_hint_is_given_only_where_the_numbers_say_so(gpus, cpu_busy, says):
    found = hints(gpus, cpu_busy)
    assert len(found) == len(says)
    assert all(text.startswith(start) for text, start in zip(found, says, strict=True))


def test_max_jobs_a_group_leaves_to_default_limits_is_said_to_come_from_there():
    """Issue 47: default_limits sets max_jobs and max_age, students sets neither. Both come
    from default_limits (max_jobs was once said to be the group's own)."""
    limits = table({"students": {}}, {"max_jobs": 2, "max_age": 3600})
    rules = job_rules(limits, ["students"])
    assert rules.max_jobs == Limited(2, "default_limits")
    assert limits.for_user({"students"}).duration("max_age") == Limited(3600.0, "default_limits")


def test_an_event_a_state_does_not_list_changes_nothing_and_is_counted_and_logged(caplog):
    """Issue 47: `step` once dropped such events without a word."""
    before = IGNORED[JobState.CANCELLED, Event.FINISHED]
    with caplog.at_level(logging.INFO, logger="gpuspawner"):
        assert step(JobState.CANCELLED, Event.FINISHED) is None
        assert step(JobState.RUNNING, Event.FINISHED) is JobState.DONE
    assert IGNORED[JobState.CANCELLED, Event.FINISHED] == before + 1
    assert caplog.messages == [
        "gpuspawner: a job that is cancelled ignores the event 'finished': nothing changes"
    ]
