"""Which container a GPU process belongs to, from the host's /proc: a table of the cgroup
lines Docker writes, and a real container on the real dockerd."""

import docker
import pytest
from admintools import unique_prefix
from realhub import CPU_IMAGE

from gpuspawner.devices import processes

ID = "593499533b257eaa5079e6305c578508dd9e7f8b49f52600f9afad7a4fe81c22"


@pytest.mark.parametrize(
    ("cgroup", "owner"),
    [
        (f"12:memory:/docker/{ID}\n0::/docker/{ID}\n", ID),  # cgroup v1, cgroupfs driver
        (f"0::/system.slice/docker-{ID}.scope\n", ID),  # cgroup v2, systemd driver
        (f"0::/docker/{ID}\n", ID),  # cgroup v2, cgroupfs driver
        ("0::/user.slice/user-1000.slice/session-4.scope\n", None),  # a login session
        ("0::/\n", None),
    ],
)
def test_a_process_is_found_in_its_containers_cgroup(tmp_path, cgroup, owner):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(cgroup)
    assert processes.container_of(4242, tmp_path) == owner
    assert processes.owners([4242, 4243], tmp_path) == ({4242: owner} if owner else {})


def test_a_containers_processes_are_listed_for_the_driver_to_be_asked(tmp_path):
    """After a restart the hub asks the checkpoint driver about every process of each of its
    containers: those in its cgroup, and only those."""
    for pid, cgroup in ((10, f"0::/docker/{ID}\n"), (11, f"0::/docker/{ID}\n"), (12, "0::/\n")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    (tmp_path / "self").mkdir()
    found = processes.container_pids({"7": ["jupyter-ann", ID], "8": ["other"]}, tmp_path)
    assert {key: sorted(pids) for key, pids in found.items()} == {"7": [10, 11], "8": []}


@pytest.mark.docker
def test_a_real_containers_process_is_found():
    client = docker.from_env()
    box = client.containers.run(
        CPU_IMAGE, ["sleep", "60"], detach=True, remove=True, name=unique_prefix("proc")
    )
    try:
        box.reload()
        pid = box.attrs["State"]["Pid"]
        assert processes.owners([pid, 1]) == {pid: box.id}
        assert pid in processes.container_pids({"box": [box.name, box.id]})["box"]
    finally:
        box.remove(force=True)
