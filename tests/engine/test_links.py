"""Host paths behind links: judged where the kernel will open them, named as they resolve.

Every link here is made in tmp_path; real system paths are only ever its targets.
"""

from pathlib import Path

import pytest

from gpuspawner.core.errors import UnsafeContainerConfig
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.engine import docker as engine
from gpuspawner.engine.escapes import find_escapes, settings_escapes
from gpuspawner.engine.storage import Mount, Owner, StorageProblem, prepare

GRANT = Grant(Holder(1, 1, "alice"), (bare("GPU-a"),), 100.0)


def link(tmp_path: Path, name: str, target: str) -> str:
    path = tmp_path / name
    path.symlink_to(target)
    return str(path)


def binds(*binds: str) -> dict:
    return {"host_config": {"Binds": list(binds)}}


def test_a_volume_linked_to_the_root_is_refused_naming_where_it_leads(tmp_path):
    root = link(tmp_path, "link", "/")
    settings = {"volumes": {"gpuspawner-home-{username}": "/home/jovyan", root: "/host"}}
    assert settings_escapes(settings, "c.GPUSpawner.") == [
        f"c.GPUSpawner.volumes sets mounts of {root} (a link to /), "
        "which expose host devices, processes or Docker"
    ]


@pytest.mark.parametrize("setting", ["volumes", "read_only_volumes"])
def test_a_link_to_dev_in_either_volume_setting_is_refused(tmp_path, setting):
    dev = link(tmp_path, "dev-link", "/dev")
    [problem] = settings_escapes({setting: {dev: "/d"}}, "c.GPUSpawner.")
    assert problem.startswith(f"c.GPUSpawner.{setting} sets mounts of {dev} (a link to /dev)")


def test_every_level_of_a_path_is_followed(tmp_path):
    """A chain of links, and a link part-way along the path, both lead to what they expose."""
    chain = link(tmp_path, "first", link(tmp_path, "second", "/"))
    midway = f"{link(tmp_path, 'up', '/')}/var/run/docker.sock"
    problems = find_escapes(binds(f"{chain}:/a", f"{midway}:/b"))
    assert f"{chain} (a link to /)" in problems[0]
    assert f"{midway} (a link to /" in problems[0]  # /run/docker.sock where /var/run is a link


def test_binds_and_mounts_in_extra_host_config_are_followed_too(tmp_path):
    proc = link(tmp_path, "proc", "/proc")
    device_folder = link(tmp_path, "devices", "/dev")
    host_config = {
        "binds": [f"{proc}:/p:ro"],
        "mounts": [
            {"type": "bind", "source": proc, "target": "/q"},
            {
                "type": "volume",
                "source": "devs",
                "target": "/d",
                "volume_options": {
                    "driver_config": {"options": {"o": "bind", "device": device_folder}}
                },
            },
        ],
    }
    [problem] = settings_escapes({"extra_host_config": host_config}, "c.GPUSpawner.")
    assert f"{proc} (a link to /proc)" in problem
    assert f"{device_folder} (a link to /dev)" in problem


def test_a_device_linked_to_a_gpu_is_refused(tmp_path):
    gpu = link(tmp_path, "accelerator", "/dev/nvidia0")
    problems = find_escapes({"host_config": {"Devices": [f"{gpu}:/dev/x:rwm"]}})
    assert problems == [f"devices ['{gpu} (a link to /dev/nvidia0)'] (GPU devices)"]


def test_a_link_to_an_ordinary_folder_is_fine(tmp_path):
    data = tmp_path / "datasets"
    data.mkdir()
    assert find_escapes(binds(f"{link(tmp_path, 'data', str(data))}:/data:ro")) == []


def test_a_link_repointed_after_the_hub_started_is_refused_at_the_create(tmp_path):
    """The hub's start-up check passed: the link pointed at a plain folder then."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    scratch = link(tmp_path, "scratch-link", str(folder))
    assert settings_escapes({"volumes": {scratch: "/scratch"}}, "c.GPUSpawner.") == []
    Path(scratch).unlink()
    Path(scratch).symlink_to("/")
    with pytest.raises(UnsafeContainerConfig, match=rf"{scratch} \(a link to /\)"):
        engine.isolate({"image": "notebook", **binds(f"{scratch}:/scratch")}, GRANT, "jupyter")


def test_storage_makes_nothing_where_a_link_leads_to_the_host(tmp_path):
    """A home under a link to /proc: refused before any folder is made or handed over."""
    homes = link(tmp_path, "homes", "/proc")
    owner = Owner("alice", 3, "jupyter", uid=1000, gid=1000)
    with pytest.raises(StorageProblem) as refused:
        prepare(None, [Mount(f"{homes}/alice", "/home/jovyan", False, True)], owner)
    assert str(refused.value).startswith(
        f"/home/jovyan would mount the host's {homes}/alice (a link to /proc/alice)"
    )
