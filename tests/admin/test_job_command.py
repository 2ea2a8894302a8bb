"""`gpuspawner job` in process, with the hub's answers stood in for (`job.call`): a list asks
for the page it was told to and says how to list the ended jobs after it; a script's logs
point at its log, not at a notebook (the real hub: tests/stack/test_jobs_hub.py)."""

import pytest

from gpuspawner.admin import cli, job

WHERE = ["job", "--api-url", "http://hub/hub/api", "--token", "t", "--user", "bob"]
RUNNING = {
    "id": 9, "state": "running", "place": None, "profile": "gpu-1", "script": "train.py",
    "args": [], "progress": {}, "gpus": ["GPU-a"], "reason": "", "outputs": "jobs/job-9",
}  # fmt: skip
ENDED = {**RUNNING, "id": 4, "state": "done", "gpus": [], "reason": "Its run ended well."}


@pytest.fixture
def hub(monkeypatch):
    """The URLs the command asked for, and the pages it is answered with, in turn."""
    asked, answers = [], []

    def call(method, url, token, body=None, timeout=30):
        asked.append(url)
        return answers.pop(0)

    monkeypatch.setattr(job, "call", call)
    return asked, answers


@pytest.mark.parametrize(
    ("options", "query", "next_after", "last_line"),
    [
        ([], "", 4, "More ended jobs: gpuspawner job list --after 4"),
        (["--limit", "1"], "?limit=1", 4, "More ended jobs: gpuspawner job list --after 4"),
        (["--after", "7", "--limit", "5"], "?limit=5&after=7", None, "4 done"),  # the last page
    ],
)
def test_a_list_asks_for_its_page_and_says_how_to_go_on(
    hub, capsys, options, query, next_after, last_line
):
    asked, answers = hub
    answers.append({"jobs": [RUNNING, ENDED], "next_after": next_after})
    assert cli.main([*WHERE, "list", *options]) == 0
    assert asked == [f"http://hub/hub/api/users/bob/gpu-jobs{query}"]
    shown = capsys.readouterr().out.splitlines()
    assert [row.split()[:2] for row in shown[1:3]] == [["9", "running"], ["4", "done"]]
    assert shown[-1] == last_line or shown[-1].split()[:2] == last_line.split()


@pytest.mark.parametrize(
    ("runs", "wrote"),
    [
        ({"script": "train.py"}, "(log.txt)"),
        ({"notebook": "train.ipynb", "script": None}, "(log.txt, and the executed notebook)"),
    ],
)
def test_a_jobs_logs_point_at_what_it_wrote(hub, capsys, runs, wrote):
    hub[1].append({**ENDED, **runs})
    assert cli.main([*WHERE, "logs", "4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"outputs: ~/jobs/job-9/ {wrote}"
