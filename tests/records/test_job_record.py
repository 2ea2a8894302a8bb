"""The jobs as written down: a restarted hub finds every unfinished job as it was."""

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
    assert [j.id for j in again.of_user(7)] == [running.id, waiting.id]
    assert again.get(done.id).state is JobState.DONE
    assert again.get(running.id).spec.args == ("-v",)
    assert again.get(12345) is None
