"""Users' storage made ready before Docker sees it: homes in host folders, shared data."""

import os
import stat

import pytest

from gpuspawner.engine.storage import Mount, Owner, StorageProblem, homes, mounts, prepare

ALICE = Owner("alice", 3, "jupyter", uid=1000, gid=1000)


def render(template: str) -> str:
    return template.format(username="alice", raw_username="Alice", prefix="jupyter")


def test_volumes_and_read_only_volumes_become_mounts_and_per_user_ones_are_homes():
    found = mounts(
        {
            "gpuspawner-home-{username}": "/home/jovyan",
            "/srv/scratch": {"bind": "/scratch", "mode": "rw"},
            "/srv/reference": {"bind": "/reference", "mode": "ro"},
        },
        {"/srv/data": "/data"},
        render,
    )
    assert found == [
        Mount("gpuspawner-home-alice", "/home/jovyan", read_only=False, per_user=True),
        Mount("/srv/scratch", "/scratch", read_only=False, per_user=False),
        Mount("/srv/reference", "/reference", read_only=True, per_user=False),
        Mount("/srv/data", "/data", read_only=True, per_user=False),
    ]
    assert [m.source for m in homes(found)] == ["gpuspawner-home-alice"]


def test_a_home_folder_is_created_for_the_notebook_user_and_only_for_it(tmp_path):
    home = tmp_path / "srv" / "home" / "alice"
    prepare(None, [Mount(str(home), "/home/jovyan", False, True)], ALICE)
    info = home.stat()
    assert (info.st_uid, info.st_gid) == (1000, 1000)
    assert stat.S_IMODE(info.st_mode) == 0o700
    parent = home.parent.stat()
    assert parent.st_uid == os.getuid() and stat.S_IMODE(parent.st_mode) & 0o755 == 0o755


def test_an_existing_folder_is_left_as_the_admin_made_it(tmp_path):
    home = tmp_path / "alice"
    home.mkdir(mode=0o750)
    (home / "thesis.tex").write_text("kept")
    prepare(None, [Mount(str(home), "/home/jovyan", False, True)], ALICE)
    assert home.stat().st_uid == os.getuid() and stat.S_IMODE(home.stat().st_mode) == 0o750
    assert (home / "thesis.tex").read_text() == "kept"


def test_missing_shared_data_is_a_clear_error_before_anything_is_made(tmp_path):
    home = tmp_path / "alice"
    with pytest.raises(StorageProblem, match=r"shared folder .*/nope \(read-only at /data\) does"):
        prepare(
            None,
            [
                Mount(str(home), "/home/jovyan", False, True),
                Mount(str(tmp_path / "nope"), "/data", True, False),
            ],
            ALICE,
        )
    assert not home.exists()


@pytest.mark.parametrize("source", ["/srv/home/../../etc", "/srv//home/alice", "/srv/home/./a"])
def test_a_host_path_that_is_not_plain_is_refused(source):
    with pytest.raises(StorageProblem, match="not a plain absolute path"):
        prepare(None, [Mount(source, "/home/jovyan", False, True)], ALICE)


def test_a_folder_that_cannot_be_made_says_so(tmp_path):
    blocker = tmp_path / "srv"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(StorageProblem, match=r"Could not create the folder .*/srv/home/alice"):
        prepare(None, [Mount(str(blocker / "home" / "alice"), "/home/jovyan", False, True)], ALICE)
