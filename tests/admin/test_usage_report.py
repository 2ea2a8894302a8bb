"""`gpuspawner usage`, run as an admin runs it, on a usage ledger the hub's own code wrote."""

import csv
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from admintools import GPUSPAWNER, gpuspawner

from gpuspawner.core.pool import Grant, Holder
from gpuspawner.records.ledger import Ledger

HOUR = 3600.0
NOW = time.time()


@pytest.fixture(scope="module")
def hubdir(tmp_path_factory):
    """A hub's working directory: its config names the ledger relative to it."""
    where = tmp_path_factory.mktemp("hub")
    (where / "jupyterhub_config.py").write_text(
        'c.JupyterHub.spawner_class = "gpu"\n'
        "c.GPUSpawner.simulate_gpus = 4\n"
        'c.GPUSpawner.usage_ledger_file = "data/usage.sqlite"\n'
    )
    (where / "data").mkdir()
    ledger = Ledger(where / "data" / "usage.sqlite")
    ann = Grant(Holder(1, 10, "ann", "train"), ("GPU-a", "GPU-b"), NOW - 30 * HOUR, "students")
    ledger.opened(ann, 2)
    ledger.seen(NOW - 28 * HOUR, {1: True})  # 2 h busy of its 3 h
    ledger.ended(1, NOW - 27 * HOUR)
    bob = Grant(Holder(2, 11, "bob"), ("GPU-c",), NOW - 10 * 24 * HOUR, None)
    ledger.opened(bob, 1)
    ledger.seen(NOW - 10 * 24 * HOUR + HOUR, {2: True})
    ledger.ended(2, NOW - 10 * 24 * HOUR + 4 * HOUR)  # more than a week ago
    ledger.close()
    return where


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_by_user_has_the_documented_columns_and_the_last_week(hubdir):
    done = gpuspawner("usage", "--format", "csv", cwd=hubdir)
    assert done.returncode == 0, done.stderr
    assert rows_of(done.stdout) == [
        {"user": "ann", "held_gpu_hours": "6.0", "busy_gpu_hours": "4.0", "busy_ratio": "0.6667"}
    ]


def test_since_reaches_further_back_and_by_group_names_the_quota_group(hubdir):
    done = gpuspawner("usage", "--since", "2w", "--by", "group", "--format", "csv", cwd=hubdir)
    assert rows_of(done.stdout) == [
        {
            "group": "students",
            "held_gpu_hours": "6.0",
            "busy_gpu_hours": "4.0",
            "busy_ratio": "0.6667",
        },
        {"group": "(none)", "held_gpu_hours": "4.0", "busy_gpu_hours": "1.0", "busy_ratio": "0.25"},
    ]


def test_json_and_table_say_the_window_and_the_ledger(hubdir):
    found = json.loads(
        gpuspawner("usage", "--format", "json", "--since", "2020-01-01", cwd=hubdir).stdout
    )
    assert found["since"] == "2020-01-01T00:00:00Z" and found["by"] == "user"
    assert found["ledger"] == str(hubdir / "data" / "usage.sqlite")
    assert [row["user"] for row in found["rows"]] == ["ann", "bob"]
    table = gpuspawner("usage", cwd=hubdir).stdout
    assert table.splitlines()[0].split() == ["USER", "GPU-HOURS", "HELD", "BUSY", "BUSY", "SHARE"]
    assert "ann" in table and "67 %" in table and "total" in table
    assert f"from the usage ledger {hubdir / 'data' / 'usage.sqlite'}" in table


def test_the_ledger_can_be_named_and_is_only_read(hubdir, tmp_path):
    ledger = hubdir / "data" / "usage.sqlite"
    before = ledger.stat().st_mtime_ns
    done = gpuspawner("usage", "--ledger", str(ledger), "--format", "csv", cwd=tmp_path)
    assert done.returncode == 0 and "ann" in done.stdout
    assert ledger.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no usage ledger at {here}/gpuspawner-usage.sqlite: run this in the hub's working"),
        (["--ledger", "nothing.sqlite"], "no usage ledger at {here}/nothing.sqlite"),
        (["--since", "last week"], "--since 'last week' is neither a time before now"),
        (["--since", "800000d"], "--since '800000d' is neither a time before now"),
        (["--since", "0001-01-01T00:00+05:00"], "--since '0001-01-01T00:00+05:00' is neither"),
        (["--since", "2999-01-01"], "--since '2999-01-01' is in the future"),
        (["-f", "missing.py"], "missing.py does not exist"),
    ],
)
def test_what_cannot_be_read_is_said_and_nothing_is_made(tmp_path, args, message):
    done = gpuspawner("usage", *args, cwd=tmp_path)
    assert done.returncode == 1
    assert message.format(here=tmp_path) in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def shared_folder():
    """A folder everyone may read and only root may write (pytest's own are root's only)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuspawner-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the report as another user: needs root")
def test_an_admin_who_may_not_write_the_hubs_folder_reads_the_ledger_while_the_hub_is_down(
    hubdir, shared_folder
):
    """The ledger is in WAL mode; with the hub down, its shared-memory file is gone, and a
    plain read-only open would need to make one in a folder this admin may not write."""
    folder = shared_folder
    shutil.copy(hubdir / "data" / "usage.sqlite", folder / "usage.sqlite")
    (folder / "usage.sqlite").chmod(0o644)
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if subprocess.run([*nobody, "test", "-x", str(GPUSPAWNER)]).returncode:
        pytest.skip(f"another user may not run {GPUSPAWNER} (a checkout in a private folder)")
    command = [*nobody, str(GPUSPAWNER), "usage", "--ledger", str(folder / "usage.sqlite")]
    done = subprocess.run(command, cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ann" in done.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["usage.sqlite"]
