"""What a job's owner reads about it says what is true of that job: a script has a log and no
notebook, a job that never ran wrote nothing, and a server its user stopped was not
stopped by an admin."""

import pytest

from gpuspawner.core.job_rules import job_rules
from gpuspawner.core.jobs import JobSpec
from gpuspawner.core.limits import LimitsTable
from gpuspawner.hub.jobs import words

NOTEBOOK = JobSpec("gpu-1", notebook="train.ipynb")
SCRIPT = JobSpec("gpu-1", script="train.py")


@pytest.mark.parametrize(
    ("spec", "says", "never"),
    [
        (NOTEBOOK, "The executed notebook keeps the cell that failed.", "log.txt"),
        (SCRIPT, "Its log (log.txt, in its folder) has the script's output.", "notebook"),
    ],
)
def test_a_failed_run_points_at_what_that_job_wrote(spec, says, never):
    reason = words.broke("ValueError: bad data", spec)
    assert reason.startswith("Its run failed: ValueError: bad data.")
    assert says in reason and never not in reason


@pytest.mark.parametrize(
    ("ran", "says"),
    [(True, "its outputs so far are kept"), (False, "it had not started, so it wrote nothing")],
)
def test_a_cancelled_job_says_whether_it_wrote_anything(ran, says):
    assert says in words.cancelled(0.0, ran)


def test_a_server_that_stopped_unannounced_is_not_blamed_on_an_admin_alone():
    reason = words.ended_unreported()
    assert "you or an admin" in reason and "stopped by an admin" not in reason


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (RuntimeError("alice/job-3 already holds ['GPU-a']"), "(alice/job-3 already holds"),
        (KeyError(), "(KeyError)"),  # a fault with no words of its own is still named
    ],
)
def test_a_job_the_hub_could_not_start_says_why_and_that_it_holds_nothing(error, says):
    reason = words.not_started(error)
    assert says in reason and "it holds no GPU" in reason


def test_a_submission_refused_for_max_jobs_from_default_limits_says_so():
    """Issue 47: with default_limits = {"max_jobs": 2, "max_age": 3600} and a group students
    that sets neither, the refusal once read "max_jobs of group students"."""
    limits = LimitsTable.parse({"students": {}}, {"max_jobs": 2, "max_age": 3600}, [])
    refusal = words.too_many(2, job_rules(limits, ["students"]).max_jobs)
    assert "(max_jobs from default_limits)" in refusal
    assert "students" not in refusal
