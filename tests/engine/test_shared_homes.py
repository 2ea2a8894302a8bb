"""The hub's look at shared storage for homes when it starts: a path it cannot use stops
it with one line; the marker that tells nodes' mounts of it apart is written once."""

import os

import pytest

from gpuspawner.core.errors import GPUConfigError
from gpuspawner.engine.shared_homes import MARKER, PROBES, ready


def test_the_marker_is_written_once_and_the_probes_folder_is_the_notebook_users(tmp_path):
    token = ready(str(tmp_path), 1000, 100)
    assert (tmp_path / MARKER).read_text().strip() == token and len(token) == 32
    assert ready(str(tmp_path), 1000, 100) == token  # the next start keeps it
    probes = (tmp_path / PROBES).stat()
    if os.geteuid() == 0:
        assert (probes.st_uid, probes.st_gid) == (1000, 100)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("homes", "give the plain absolute path"),
        ("/mnt/../dev", "give the plain absolute path"),
        ("/proc", "give the plain absolute path"),
        ("/no/such/storage", "/no/such/storage is not a folder on the hub's host"),
    ],
)
def test_a_path_that_cannot_hold_homes_is_refused_with_the_fix(path, says):
    with pytest.raises(GPUConfigError, match=r"c\.SwarmGPUSpawner\.shared_homes") as refused:
        ready(path, 1000, 100)
    assert says in str(refused.value)
