"""A start gpuspawner refuses is the user's to fix: the hub's log says so at warning, once,
without the traceback JupyterHub adds to a spawn that failed."""

import logging
import sys

from jupyterhub.spawner import SpawnException

from gpuspawner.hub.books.refusals import RefusalsAreNotFaults, failed_start, refused_start


def logged(error: Exception) -> logging.LogRecord:
    try:
        raise error
    except Exception:
        record = logging.LogRecord(
            "JupyterHub", logging.ERROR, "pages.py", 357, "Failed to spawn", (), sys.exc_info()
        )
    assert RefusalsAreNotFaults().filter(record)
    return record


def test_a_refused_start_is_a_warning_without_a_traceback():
    record = logged(refused_start("job-3 is a GPU job's server", "job_server", 409))
    assert (record.levelname, record.exc_info, record.getMessage()) == (
        "WARNING",
        None,
        "Failed to spawn",
    )


def test_a_start_that_failed_keeps_its_traceback_at_error():
    failures = (failed_start("Docker refused", "storage", 500), SpawnException("x", reason="y"))
    for error in failures:
        record = logged(error)
        assert record.levelname == "ERROR" and record.exc_info is not None
