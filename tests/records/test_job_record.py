"""The jobs as written down: a restarted hub finds every unfinished job as it was, and a
user's ended jobs page by when they ended."""

import pytest

from gpuspawner.core.jobs import JobSpec, JobState
from gpuspawner.records.jobs import JobRecord


def test_jobs_outlive_the_hub_that_wrote_them(tmp_path):
    path = tmp_path / "usage.sqlite"
    record = JobRecord(path)
    waiting = record.add(7, "bob", JobSpec("gpu-1", notebook="a.ipynb"), now=100.0)
    running = record.add(7, "bob", JobSpec("gpu-2", script="t.py", args=("-v",)), now=101.0)
    done = record.add(8, "eve", JobSpec("gpu-1", notebook="b.ipynb"), now=102.0)
    running = running.but(
        state=JobState.RUNNING,
        started=110.0,
        attempts=2,
        preemptions=1,
        gpus=("GPU-a", "GPU-b"),
        progress={"state": "running", "tail": ["epoch 3"]},
    )
    record.save(running)
    record.save(done.but(state=JobState.DONE, ended=120.0, reason="Its run ended well."))
    record.close()  # as a kill -9 would leave it: every change was committed as made

    again = JobRecord(path)
    assert again.unfinished() == [waiting, running]
    assert again.ended_of(8, limit=10) == [again.get(done.id)]
    assert again.ended_of(7, limit=10) == []  # bob's jobs have not ended
    assert again.get(done.id).state is JobState.DONE
    assert again.get(running.id).spec.args == ("-v",)
    assert again.get(12345) is None


@pytest.fixture
def record(tmp_path):
    record = JobRecord(tmp_path / "usage.sqlite")
    yield record
    record.close()


def ended(record, user_id, submitted, at, state=JobState.DONE):
    job = record.add(user_id, "bob", JobSpec("gpu-1", script="t.py"), now=submitted)
    record.save(job.but(state=state, ended=at))
    return record.get(job.id)


def pages(record, user_id, limit):
    """Every page of the user's ended jobs, each `limit` long, by the cursor."""
    found, after = [], None
    while page := record.ended_of(user_id, limit, after):
        found.append([j.id for j in page])
        after = page[-1]
    return found


def test_ended_jobs_page_by_when_they_ended_and_a_job_ending_meanwhile_shifts_nothing(record):
    # submitted 1..5, ended in another order (a long run submitted first ends last)
    first = ended(record, 7, 1.0, at=500.0)
    rest = [ended(record, 7, float(n), at=100.0 + n) for n in range(2, 6)]
    ended(record, 8, 9.0, at=600.0)  # another user's: never in bob's pages
    tie = ended(record, 7, 6.0, at=105.0, state=JobState.CANCELLED)  # as rest[-1]: id breaks it
    running = record.add(7, "bob", JobSpec("gpu-1", script="t.py"), now=7.0)
    order = [first.id, tie.id, *(j.id for j in reversed(rest))]

    assert pages(record, 7, limit=2) == [order[0:2], order[2:4], order[4:6]]
    page = record.ended_of(7, 2)
    record.save(running.but(state=JobState.FAILED, ended=700.0))  # it ends between pages
    assert [j.id for j in record.ended_of(7, 2, after=page[-1])] == order[2:4]
    assert [j.id for j in record.ended_of(7, 1)] == [running.id]  # the top, for a new list
