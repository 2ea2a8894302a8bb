"""The outside review's link: a host folder that is a link to / or /dev must never be mounted.

Real hubs on the real dockerd. The links live in tmp_path; / and /dev are only their targets.
"""

from pathlib import Path

import pytest
from realhub import Hub

HOME = '"{prefix}-home-{username}": "/home/jovyan"'


def link(path: Path, target: Path | str) -> str:
    """`path` made (or remade) a link to `target`, as an admin's `ln -sfn` does."""
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    return str(path)


def test_a_hub_with_a_volume_linked_to_the_root_does_not_start(hub_factory, tmp_path):
    root = link(tmp_path / "link", "/")
    config = (
        f"c.GPUSpawner.simulate_gpus = 2\nc.GPUSpawner.volumes = {{{HOME}, {root!r}: '/host'}}\n"
    )
    bad = hub_factory(config, start=False)
    bad.start(wait=False)
    assert bad.process.wait(60) != 0
    [line] = [x for x in bad.log().splitlines() if "gpuspawner:" in x]
    assert f"c.GPUSpawner.volumes sets mounts of {root} (a link to /), which expose" in line


@pytest.fixture(scope="module")
def linked(hub_factory, tmp_path_factory) -> tuple[Hub, Path, Path, Path]:
    """A hub whose two host folders are links to a plain folder when it starts: one in
    `volumes` (the hub makes its storage ready), one in `extra_host_config` binds (only the
    container create sees it)."""
    folders = tmp_path_factory.mktemp("linked")
    plain = folders / "scratch"
    plain.mkdir()
    scratch = link(folders / "scratch-link", plain)
    data = link(folders / "data-link", plain)
    hub = hub_factory(
        "c.GPUSpawner.simulate_gpus = 2\n"
        f"c.GPUSpawner.volumes = {{{HOME}, {scratch!r}: '/scratch'}}\n"
        f'c.GPUSpawner.extra_host_config = {{"binds": [{data + ":/data:ro"!r}]}}\n'
    )
    hub.add_users("alice")
    return hub, plain, Path(scratch), Path(data)


def refused_naming(hub: Hub, words: str) -> None:
    """alice's start is refused with `words` in its message, and nothing is left held."""
    refused = hub.spawn("alice")
    assert refused.status_code == 500, refused.text
    assert words in refused.json()["message"]
    hub.wait_gone("alice")
    assert hub.pool()["free"] == 2
    assert not hub.containers(all=True)


def test_links_repointed_after_the_hub_started_are_refused_at_each_start(linked):
    hub, plain, scratch, data = linked
    link(scratch, "/")
    refused_naming(hub, f"/scratch would mount the host's {scratch} (a link to /)")
    link(scratch, plain)
    link(data, "/dev")
    refused_naming(hub, f"mounts of {data} (a link to /dev), which expose host devices")
    link(data, plain)
    hub.spawn_ready("alice")  # back to a plain folder: the same hub starts servers again
    assert hub.container_of("alice").exec_run(["ls", "/data"]).exit_code == 0
    hub.stop_server("alice")
