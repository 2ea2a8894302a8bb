"""gpuspawner simulate: the demo hub's simulated GPUs run what its servers would run on
real ones, read back through the simulated GPUs as the hub reads them."""

import json

import pytest
from admintools import gpuspawner, servers
from realhub import CPU_IMAGE, SIMULATED_MACHINE

from gpuspawner.admin.simulate import PERSON, work, write
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.engine.base import Seen
from gpuspawner.engine.docker import device_requests, labels, seen

GIB = 2**30


@pytest.mark.docker
def test_each_server_runs_one_process_on_each_of_its_gpus(tmp_path):
    load = tmp_path / "load.json"
    source = SimulatedSource(4, SIMULATED_MACHINE, load_file=str(load))
    uuids = [g.uuid for g in source.list_gpus()]
    with servers("simulate") as made:
        config = tmp_path / "jupyterhub_config.py"
        config.write_text(
            'c.JupyterHub.spawner_class = "gpu"\n'
            f"c.DockerSpawner.prefix = {made.prefix!r}\n"
            f"c.GPUSpawner.simulated_load_file = {str(load)!r}\n"
        )
        person = Grant(Holder(1, 1, "ann", ""), tuple(map(bare, uuids[0:2])), 0)
        job = Grant(Holder(2, 2, "bob", "job-7"), tuple(map(bare, uuids[2:3])), 0)
        made.create("ann", CPU_IMAGE, person)
        made.create("bob--job-7", CPU_IMAGE, job)
        made.create("cpu", CPU_IMAGE, Grant(Holder(3, 3, "cat", ""), (), 0))
        made.create(
            "gone", CPU_IMAGE, Grant(Holder(4, 4, "dan", ""), (bare(uuids[3]),), 0), start=False
        )
        done = gpuspawner("simulate", "-f", str(config), "--once", cwd=tmp_path)
    assert done.returncode == 0, done.stderr

    seen = source.sample(uuids)
    for uuid in uuids[0:2]:  # ann's kernel on each of her GPUs, waiting for her
        assert (seen[uuid].utilization_percent, seen[uuid].memory_used_bytes) == (0, 6 * GIB)
        assert len(seen[uuid].processes) == 1
    assert (seen[uuids[2]].utilization_percent, seen[uuids[2]].memory_used_bytes) == (95, 20 * GIB)
    assert seen[uuids[3]].processes == ()  # dan's container is stopped: nothing runs
    assert set(json.loads(load.read_text())) == set(uuids[:3])


def test_without_a_load_file_to_write_it_says_which_setting(tmp_path):
    config = tmp_path / "jupyterhub_config.py"
    config.write_text('c.JupyterHub.spawner_class = "gpu"\n')
    done = gpuspawner("simulate", "-f", str(config), "--once", cwd=tmp_path)
    assert done.returncode == 1
    assert "set c.GPUSpawner.simulated_load_file, or pass --simulated-load FILE" in done.stderr


def container(uuid: str, key: int, user: str, since: float, started: str = "") -> Seen:
    """A person's server of hub "jupyter" on one GPU, in turns, as `docker inspect` shows it."""
    grant = Grant(Holder(key, key, user, ""), (bare(uuid),), since, turns=True)
    return seen(
        {
            "Id": f"id-{user}",
            "Name": f"/jupyter-{user}",
            "Config": {"Labels": labels(grant, "jupyter"), "Image": "notebook"},
            "State": {"Running": True, "StartedAt": started},
            "HostConfig": {"DeviceRequests": device_requests(grant.uuids)},
        }
    )


def test_a_person_who_joined_a_gpu_in_turns_runs_no_cuda_process_until_woken():
    """Its kernel opens no GPU before a cell wakes it: a process of it would wake it at once."""
    [uuid] = [g.uuid for g in SimulatedSource(1).list_gpus()]
    load = work([container(uuid, 2, "gina", 200.0), container(uuid, 1, "frank", 100.0)], "jupyter")
    assert load == {uuid: {"processes": [{"container": "id-frank", "run": None, **PERSON}]}}


def test_a_restarted_container_runs_new_processes(tmp_path):
    """`docker restart` ends a container's processes: the checkpoint driver's double must not
    take the new run's kernel for the process it parked (a real driver's checkpoint belongs
    to the process, which is gone)."""
    load = tmp_path / "load.json"
    source = SimulatedSource(1, load_file=str(load))
    [uuid] = [g.uuid for g in source.list_gpus()]

    def kernel_after(started: str) -> list[int]:
        write(load, work([container(uuid, 1, "frank", 100.0, started)], "jupyter"))
        return source.container_pids({"frank": ["id-frank"]})["frank"]

    first = kernel_after("2026-12-07T10:00:00.000000000Z")
    assert kernel_after("2026-12-07T10:00:00.000000000Z") == first  # every look alike
    assert kernel_after("2026-12-07T11:30:00.000000000Z") != first  # restarted


@pytest.mark.docker
def test_the_hubs_command_line_settings_reach_it_as_they_reach_the_hub(tmp_path):
    """scripts/hub passes its arguments to both: a demo hub started with another prefix is
    the one whose servers it plays."""
    config = tmp_path / "jupyterhub_config.py"
    config.write_text('c.JupyterHub.spawner_class = "gpu"\n')
    load = tmp_path / "load.json"
    settings = ["--DockerSpawner.prefix=demo-b", f"--GPUSpawner.simulated_load_file={load}"]
    done = gpuspawner(
        "simulate", "-f", str(config), "--once", "--", *settings, "--debug", cwd=tmp_path
    )
    assert f"the work of demo-b's servers into {load}" in done.stdout, done.stderr
    refused = gpuspawner("simulate", "-f", str(config), "--once", "--", "--nonsense", cwd=tmp_path)
    assert refused.returncode == 1
    assert "jupyterhub would not take '--nonsense'" in refused.stderr
