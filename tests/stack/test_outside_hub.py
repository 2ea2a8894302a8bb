"""GPUs used outside JupyterHub, in every form Docker gives them, stay out of the pool.

A colleague's `docker run` next to the hub keeps exactly the GPUs it can reach
out of the pool while it runs (state "external", `used_outside_hub_by` naming
the container), and they come back when it goes. What it can reach is read
here from Docker's own answer: the NVIDIA_VISIBLE_DEVICES that Docker's nvidia
driver gave the container's init process (TESTBED fact 10).

Not run here, because this dockerd (20.10) or this machine cannot run them;
`tests/engine/test_docker.py` reads them from `docker inspect` in its table:
- privileged containers: runc cannot apply all capabilities inside this
  machine's own container ("unable to apply caps: operation not permitted");
- CDI names, as a `cdi` device request or `--device nvidia.com/gpu=0`:
  dockerd 20.10 creates the container but cannot start it ("could not select
  device driver "cdi"", "error gathering device information"); CDI arrived
  in dockerd 25;
- GPU device nodes (`--device /dev/nvidia0`): this machine has none.
"""

from pathlib import Path

import docker
import pytest
from books import assert_books_hold
from realhub import BASE_IMAGE, LIGHT_SERVER, SIMULATED_MACHINE, Hub

from gpuspawner.engine.base import LookPast
from gpuspawner.engine.docker import DockerEngine

# The books are what these tests are about, not JupyterLab: their servers are light.
CONFIG = f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.monitor_interval = 0.5
c.GPUSpawner.profiles = [{{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True,
                           "spawner_override": {LIGHT_SERVER!r}}}]
c.GPUSpawner.ignore_gpu_containers.append("*-dcgm-exporter:*")
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("ann")
    return hub


def one_entry(hub: Hub, name: str, entry: str) -> str:
    """A container started with docker-py, its device IDs in one comma-separated entry."""
    container = hub.docker.containers.run(
        BASE_IMAGE,
        ["sleep", "300"],
        name=f"{hub.prefix}-{name}",
        detach=True,
        remove=True,
        device_requests=[docker.types.DeviceRequest(device_ids=[entry], capabilities=[["gpu"]])],
    )
    return container.id


# form → how to start it (GPU UUIDs by index given), and the indices of the GPUs it reaches
FORMS = {
    "--gpus all": (lambda hub, gpus: hub.docker_run("all", "--gpus", "all"), [0, 1, 2, 3]),
    "--gpus 2": (lambda hub, gpus: hub.docker_run("two", "--gpus", "2"), [0, 1]),
    "one DeviceIDs entry 1,3": (lambda hub, gpus: one_entry(hub, "entry", "1,3"), [1, 3]),
    "an index": (lambda hub, gpus: hub.docker_run("index", "--gpus", '"device=2"'), [2]),
    "a UUID": (lambda hub, gpus: hub.docker_run("uuid", "--gpus", f"device={gpus[3]}"), [3]),
}


def given_by_docker(hub: Hub, container_id: str, gpus: list[str]) -> set[str]:
    """The GPUs Docker's nvidia driver gave the container (its init process's environment,
    once the process has become the container's command: runc's own comes first)."""
    pid = hub.docker.api.inspect_container(container_id)["State"]["Pid"]

    def visible() -> str | None:
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        name = "NVIDIA_VISIBLE_DEVICES="
        return next((e.removeprefix(name) for e in environ if e.startswith(name)), None)

    value = hub.wait_for(visible, timeout=10, what="the container's command running")
    if value == "all":
        return set(gpus)
    return {gpus[int(d)] if d.isdigit() else d for d in value.split(",")}


@pytest.mark.parametrize("form", FORMS)
def test_a_container_outside_the_hub_keeps_exactly_its_gpus_out_while_it_runs(hub: Hub, form):
    gpus = [g["uuid"] for g in hub.pool()["gpus"]]
    start, indices = FORMS[form]
    reached = {gpus[i] for i in indices}
    container_id = start(hub, gpus)
    try:
        assert given_by_docker(hub, container_id, gpus) == reached
        name = hub.docker.containers.get(container_id).name
        hub.wait_for(lambda: hub.used_outside() == dict.fromkeys(reached, f"container {name}"))
        if len(reached) < len(gpus):
            hub.spawn_ready("ann", profile="gpu-1")
            assert not set(hub.held_uuids("ann")) & reached
            assert_books_hold(hub)
            hub.stop_server("ann")
        else:
            assert hub.spawn("ann", profile="gpu-1").status_code == 409
    finally:
        hub.docker.api.remove_container(container_id, force=True)
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="the GPUs back after the container went")


class Counting(docker.APIClient):
    """Docker's client, noting each container it inspects."""

    def __init__(self) -> None:
        super().__init__(version="auto")
        self.inspected: list[str] = []

    def inspect_container(self, container: str) -> dict:
        self.inspected.append(container)
        return super().inspect_container(container)


def test_a_monitoring_container_the_admin_names_keeps_nothing_out_and_is_not_inspected(hub: Hub):
    gpus = [g["uuid"] for g in hub.pool()["gpus"]]
    exporter_image = f"{hub.prefix}-dcgm-exporter:test"
    hub.docker.images.get(BASE_IMAGE).tag(exporter_image)
    started = []
    try:
        started.append(hub.docker_run("exporter", "--gpus", "all", image=exporter_image))
        started.append(hub.docker_run("job", "--gpus", '"device=0"'))
        hub.wait_for(lambda: hub.used_outside(), what="the monitor seeing both containers")
        assert hub.used_outside() == {gpus[0]: f"container {hub.prefix}-job"}
        # Each monitor tick lists the containers: the one looked past is not asked about.
        client = Counting()
        seen = DockerEngine(client).containers(LookPast(("*-dcgm-exporter:*",), hub.prefix))
        assert [c.name for c in seen if c.name.startswith(hub.prefix)] == [f"{hub.prefix}-job"]
        assert started[0] not in client.inspected and started[1] in client.inspected
    finally:
        for container_id in started:
            hub.docker.api.remove_container(container_id, force=True)
        hub.docker.images.remove(exporter_image)
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="the GPU back after the job went")


def test_two_hubs_that_simulate_two_machines_on_one_engine_leave_each_other_alone(
    hub: Hub, hub_factory
):
    """c.GPUSpawner.simulated_machine's promise: another name is another machine, whose
    servers reach none of this one's GPUs (they used to count as reaching them all)."""
    other = hub_factory(CONFIG + f"c.GPUSpawner.simulated_machine = '{SIMULATED_MACHINE}-b'\n")
    other.add_users("bob")
    other.spawn_ready("bob", profile="gpu-1")
    ours, theirs = ([g["uuid"] for g in h.pool()["gpus"]] for h in (hub, other))
    assert not set(other.held_uuids("bob")) & set(ours)  # another machine's UUIDs
    started = []
    try:
        # A colleague's container on each machine's last GPU, started after the other
        # machine's server: once a hub's monitor sees its colleague, it has looked at that
        # server too, and only the colleague keeps a GPU out.
        started.append(hub.docker_run("colleague", "--gpus", f"device={ours[3]}"))
        hub.wait_for(lambda: hub.used_outside(), what="the monitor's look at both containers")
        assert hub.used_outside() == {ours[3]: f"container {hub.prefix}-colleague"}
        hub.spawn_ready("ann", profile="gpu-1")
        started.append(other.docker_run("colleague", "--gpus", f"device={theirs[3]}"))
        other.wait_for(lambda: other.used_outside(), what="the monitor's look at both")
        assert other.used_outside() == {theirs[3]: f"container {other.prefix}-colleague"}
        assert other.pool()["free"] == 2  # bob's and the colleague's: ann's is another's
        hub.stop_server("ann")
    finally:
        for container_id in started:
            hub.docker.api.remove_container(container_id, force=True)
    other.stop_server("bob")
