"""gpuspawner homes and the homes part of cleanup: users' files are listed, never lost."""

import os
import re
import sqlite3

import docker
import pytest
from admintools import gpuspawner, servers, unique_prefix
from jupyterhub import orm
from realhub import CPU_IMAGE

from gpuspawner.admin import hubusers
from gpuspawner.admin.homes import Census, Home, deletable, folder_homes, node_homes, render
from gpuspawner.core.homes import Home as RecordedHome
from gpuspawner.engine.docker import LABEL_HUB
from gpuspawner.engine.storage import LABEL_HOME
from gpuspawner.records.homes import HomeRecord


def hub_database(folder, *names: str) -> str:
    """A hub database as JupyterHub creates it, with these users; its URL."""
    url = f"sqlite:///{folder}/jupyterhub.sqlite"
    db = orm.new_session_factory(url)()
    db.add_all([orm.User(name=name) for name in names])
    db.commit()
    db.close()
    return url


def test_users_are_read_from_the_hubs_database_without_changing_it(tmp_path):
    url = hub_database(tmp_path, "alice", "bob")
    before = (tmp_path / "jupyterhub.sqlite").read_bytes()
    assert sorted(hubusers.users(url).values()) == ["alice", "bob"]
    assert (tmp_path / "jupyterhub.sqlite").read_bytes() == before


def test_a_missing_database_is_named_not_created(tmp_path):
    with pytest.raises(hubusers.UsersUnknown, match=r"no hub database at .*pass --db-url"):
        hubusers.users(f"sqlite:///{tmp_path}/nope.sqlite")
    assert not (tmp_path / "nope.sqlite").exists()
    with pytest.raises(hubusers.UsersUnknown, match="cannot read the hub's users"):
        sqlite3.connect(tmp_path / "empty.sqlite").close()
        hubusers.users(f"sqlite:///{tmp_path}/empty.sqlite")
    with pytest.raises(hubusers.UsersUnknown, match="only in the hub's memory"):
        hubusers.users("sqlite:///:memory:")


def test_home_folders_are_matched_to_users_by_their_escaped_names(tmp_path):
    homes = tmp_path / "home"
    for name, size in (("alice", 5), ("dr-2eeve", 3), ("carol", 7)):
        (homes / name / "work").mkdir(parents=True)
        (homes / name / "work" / "result.txt").write_bytes(b"x" * size)
    (homes / "not-a-folder").write_text("")
    found = folder_homes(
        {f"{homes}/{{username}}": "/home/jovyan", "/srv/data": {"bind": "/data", "mode": "ro"}},
        lambda name: name.replace(".", "-2e"),
        {"alice", "dr.eve"},
        {"jupyter-alice": [f"{homes}/alice"]},
    )
    assert [(h.name, h.user, h.size, h.used_by, h.user_exists) for h in found] == [
        (f"{homes}/alice", "alice", 5, ("jupyter-alice",), True),
        (f"{homes}/carol", "carol", 7, (), False),
        (f"{homes}/dr-2eeve", "dr.eve", 3, (), True),
    ]


def test_only_a_named_orphaned_home_volume_may_be_deleted():
    census = Census(
        [
            Home("home-alice", "alice", False, 10, user_exists=True),
            Home("home-carol", "carol", False, 2_500_000, user_exists=False),
            Home("/srv/home/dave", "dave", True, 0, user_exists=False),
        ]
    )
    assert deletable(census, ["home-carol"]) == []
    assert deletable(census, ["home-alice", "/srv/home/dave", "home-zed"]) == [
        "home-alice: alice is still a user of the hub",
        "/srv/home/dave: gpuspawner does not delete folders; archive it, then remove it yourself",
        "home-zed: not a home gpuspawner knows (see gpuspawner homes)",
    ]
    unknown = Census([Home("home-carol", "carol", False, 1)], users_unknown="no database")
    assert deletable(unknown, ["home-carol"]) == [
        "home-carol: cannot confirm that carol is gone from the hub"
    ]
    shown = render(census)
    assert re.search(r"\nhome-carol +carol \(not in the hub\) +2\.5 MB +–\n", shown)
    assert "3 home(s), 2.5 MB." in shown


@pytest.fixture
def prefix():
    """Home volumes made for a test, as the hub makes them; all removed after."""
    made = unique_prefix("homes")
    yield made
    client = docker.from_env()
    for volume in client.volumes.list(filters={"label": f"{LABEL_HUB}={made}"}):
        volume.remove(force=True)


def home_volume(prefix: str, user: str) -> str:
    name = f"{prefix}-home-{user}"
    labels = {LABEL_HOME: user, LABEL_HUB: prefix, "gpuspawner.user-id": "1"}
    docker.from_env().api.create_volume(name, labels=labels)
    return name


@pytest.mark.docker
def test_homes_lists_sizes_users_and_orphans_and_cleanup_deletes_only_a_named_orphan(
    tmp_path, prefix
):
    hub_database(tmp_path, "alice")
    alice, carol = home_volume(prefix, "alice"), home_volume(prefix, "carol")
    with servers("homes") as made:
        made.create("alice", CPU_IMAGE, None, binds=[f"{alice}:/home/jovyan"])
        container = docker.from_env().containers.get(f"{made.prefix}-alice")
        container.exec_run(["sh", "-c", "head -c 3000000 /dev/zero > /home/jovyan/big"])

        listed = gpuspawner("homes", "--prefix", prefix, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line}
        assert rows[alice].split()[1:] == ["alice", "3.0", "MB", f"{made.prefix}-alice"]
        assert rows[carol].split()[1:5] == ["carol", "(not", "in", "the"]
        assert "1 home(s) of users no longer in the hub" in listed.stdout

        dry = gpuspawner("cleanup", "--prefix", prefix, "--yes", cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        assert "Homes of users no longer in the hub (1)" in dry.stdout
        assert f"  {carol}  volume of carol" in dry.stdout
        volumes = {v.name for v in docker.from_env().volumes.list()}
        assert {alice, carol} <= volumes  # --yes alone never deletes a home

        refused = gpuspawner(
            "cleanup", "--prefix", prefix, "--delete-home", alice, "--delete-home", carol,
            "--yes", cwd=tmp_path,
        )  # fmt: skip
        assert refused.returncode == 1
        assert f"{alice}: alice is still a user of the hub" in refused.stderr
        assert {alice, carol} <= {v.name for v in docker.from_env().volumes.list()}

        asked = gpuspawner("cleanup", "--prefix", prefix, "--delete-home", carol, cwd=tmp_path)
        assert asked.returncode == 0 and "Dry run" in asked.stdout
        assert carol in {v.name for v in docker.from_env().volumes.list()}

        done = gpuspawner(
            "cleanup", "--prefix", prefix, "--delete-home", carol, "--yes", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        assert f"Removed home {carol}" in done.stdout
        left = {v.name for v in docker.from_env().volumes.list()}
        assert alice in left and carol not in left


@pytest.mark.docker
def test_without_the_hubs_database_no_home_is_called_orphaned(tmp_path, prefix):
    carol = home_volume(prefix, "carol")
    done = gpuspawner("cleanup", "--prefix", prefix, "--delete-home", carol, "--yes", cwd=tmp_path)
    assert done.returncode == 1
    assert "cannot tell whose users are gone (no hub database at" in done.stdout
    assert f"{carol}: cannot confirm that carol is gone from the hub" in done.stderr
    assert carol in {v.name for v in docker.from_env().volumes.list()}
    assert os.listdir(tmp_path) == []  # no database was made where there was none


def test_on_a_swarm_each_home_is_listed_with_its_node_and_is_deleted_only_there(tmp_path):
    """The hub's record of where each home is (a swarm without shared storage)."""
    ledger = tmp_path / "usage.sqlite"
    record = HomeRecord(ledger)
    record.save(RecordedHome("ann", "gpuspawner-home-ann", "n2", 1_796_000_000.0, 1_796_500_000.0))
    record.save(RecordedHome("bo", "gpuspawner-home-bo", "n3", 1_796_000_000.0, 1_796_000_000.0))
    record.close()
    census = Census(node_homes(ledger, {"ann"}))
    shown = render(census)
    assert "NODE" in shown.splitlines()[0] and "LAST USED" in shown.splitlines()[0]
    assert re.search(r"\ngpuspawner-home-ann +ann +\? +– +n2 +2026-12-05T19:46:40Z\n", shown)
    assert "\n2 home(s).\n" in shown  # their sizes are their nodes' to tell
    assert re.search(r"\ngpuspawner-home-bo +bo \(not in the hub\) +\? +– +n3 ", shown)
    assert deletable(census, ["gpuspawner-home-bo"]) == [
        "gpuspawner-home-bo: it is on node n3; archive it, then remove it there "
        "(docker volume rm on that node)"
    ]
    assert node_homes(tmp_path / "none.sqlite", None) == []  # before the hub's first start
    assert not (tmp_path / "none.sqlite").exists()
