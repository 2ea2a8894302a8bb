import logging

from traitlets.config import Config

from gpuspawner import GPUSpawner, containers
from gpuspawner.hubgpus import HubGPUs
from gpuspawner.pool import DeviceState, Grant, Holder

LOG = logging.getLogger("test")


def hub_with(gpus: int = 4) -> HubGPUs:
    config = Config()
    config.GPUSpawner.simulate_gpus = gpus
    return HubGPUs.from_config(GPUSpawner.from_config(config))


def ours(user: str, server: str, uuids: tuple[str, ...], name: str) -> dict:
    grant = Grant(Holder(user, server), uuids, 100.0)
    return {
        "Name": f"/{name}",
        "Config": {"Labels": containers.labels(grant)},
        "HostConfig": {"DeviceRequests": containers.device_requests(uuids)},
    }


def foreign(name: str, *device_ids: str) -> dict:
    return {
        "Name": f"/{name}",
        "Config": {"Labels": {}},
        "HostConfig": {"DeviceRequests": [{"DeviceIDs": list(device_ids)}]},
    }


def test_recovery_adopts_known_servers_and_keeps_everything_else_out():
    hub = hub_with(4)
    u = hub.pool.uuids
    running = [
        ours("ann", "", (u[0], u[1]), "jupyter-ann"),
        ours("zed", "", (u[2],), "other-hub-zed"),  # labelled, but not a server of this hub
        foreign("preprocess", "3"),  # by index
    ]
    hub.recover(running, {("ann", "")}, LOG)
    assert hub.pool.grant_of("ann/").uuids == (u[0], u[1])
    assert hub.pool.grant_of("zed/") is None
    assert hub.pool.states() == {
        u[0]: DeviceState.ALLOCATED,
        u[1]: DeviceState.ALLOCATED,
        u[2]: DeviceState.EXTERNAL,
        u[3]: DeviceState.EXTERNAL,
    }
    assert hub.pool.external_user(u[2]) == "container other-hub-zed"


def test_gpus_come_back_when_the_outside_containers_go():
    hub = hub_with(2)
    u = hub.pool.uuids
    hub.recover([foreign("job", u[0])], set(), LOG)
    assert hub.pool.free_count() == 1
    hub.note_external([], {}, LOG)
    assert hub.pool.free_count() == 2


def test_a_container_holding_more_than_its_grant_keeps_the_extra_out():
    hub = hub_with(2)
    u = hub.pool.uuids
    hub.pool.allocate("ann", "", 1)
    granted = hub.pool.grant_of("ann/").uuids
    other = next(x for x in u if x not in granted)
    hub.note_external([ours("ann", "", (*granted, other), "jupyter-ann")], {}, LOG)
    assert hub.pool.states()[other] is DeviceState.EXTERNAL
