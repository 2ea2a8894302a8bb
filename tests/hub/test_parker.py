"""The hub's parker, in process: which work it parks and why not, its settings' checks, and
the driver's word read back after a restart (the real stack: tests/stack/test_parking_hub.py)."""

import asyncio
import json
import logging
import threading
from dataclasses import replace

import pytest
from brokers import HUB, a_broker

from gpuspawner.config.parking import memory_limit
from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.errors import GPUConfigError
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.parking import IllegalMove, Residency
from gpuspawner.core.pool import Holder
from gpuspawner.core.units import Request
from gpuspawner.devices.checkpoint import HostUnreachable, OnThisHost, ProcessState
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated_checkpoint import SimulatedCheckpointDriver, SimulatedProcess
from gpuspawner.devices.swarm import AgentAccess, SwarmSource
from gpuspawner.engine import docker as engine
from gpuspawner.hub.reclaim.parking import Parker, RestoreFailed
from gpuspawner.hub.watch.monitor import Observation

GIB = 2**30
JOB = Holder(1, 10, "bob", "job-1", job=True)
LOG = logging.getLogger("test")


def container(grant) -> object:
    return engine.seen(
        {
            "Id": "c1",
            "Name": "/jupyter-bob--job-1",
            "Config": {"Labels": engine.labels(grant, HUB), "Image": "notebook"},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": engine.device_requests(grant.uuids)},
        }
    )


def here(driver, pids: dict[str, list[int]] | None = None, every: tuple[int, ...] = ()):
    """Driver calls made on this host, whose containers run `pids` (by key), or `every`
    container asked about runs those."""
    on_host = OnThisHost(driver, lambda asked: pids or {key: list(every) for key in asked})
    return lambda node: on_host


def driver_of(parker: Parker):
    return parker.hosts("").driver


def parker_seeing(pids: tuple[int, ...], memory_gib: int = 20, limit_gib: int = 64):
    broker = a_broker(gpus=1)
    grant = broker.take_now(JOB, 1)
    [uuid] = grant.uuids
    sample = Telemetry(90.0, memory_gib * GIB, processes=pids)
    owners = dict.fromkeys(pids, "jupyter-bob--job-1")
    host = here(SimulatedCheckpointDriver(), every=pids)  # its container runs them
    parker = Parker(broker, host, limit_gib * GIB, LOG)
    parker.observed(Observation({uuid: sample}, [container(grant)], owners=owners))
    return parker, grant


@pytest.mark.parametrize(
    ("pids", "memory", "says"),
    [
        ((), 20, "it has no CUDA process to park"),
        ((5, 6), 20, "it runs 2 CUDA processes, and the driver cannot yet checkpoint"),
        ((5,), 70, "its 70 GiB of GPU memory would take parked work past park_memory_limit"),
        ((5,), 20, ""),
    ],
)
def test_work_is_parked_only_where_the_driver_can_take_it_whole(pids, memory, says):
    parker, grant = parker_seeing(pids, memory)
    assert (parker.why_not(grant) == says) if not says else says in parker.why_not(grant)


def test_before_the_monitors_first_look_nothing_is_parked():
    broker = a_broker(gpus=1)
    grant = broker.take_now(JOB, 1)
    parker = Parker(broker, here(SimulatedCheckpointDriver()), 64 * GIB, LOG)
    assert parker.why_not(grant) == "which processes it runs on its GPUs is not known yet"


def test_a_mig_instance_is_never_parked():
    broker = a_broker(GPUSettings(simulated_host=[{"mig": ["3g.40gb"]}]))
    grant = broker.take_now(JOB, Request(mig_profile="3g.40gb"))
    parker = Parker(broker, here(SimulatedCheckpointDriver()), 64 * GIB, LOG)
    assert "MIG instance or a shared GPU" in parker.why_not(grant)


def test_the_driver_refusing_leaves_the_work_running_and_says_why():
    parker, grant = parker_seeing((5,))
    driver_of(parker).start(5, _process(grant))
    driver_of(parker).refuse("checkpoint", "CUDA_ERROR_UNKNOWN")
    refusal = asyncio.run(parker.park(grant))
    assert "the driver refused" in refusal and "CUDA_ERROR_UNKNOWN" in refusal
    assert driver_of(parker).state(5) is ProcessState.RUNNING
    assert not parker.broker.grant_of(grant.key).parked and parker.parked_bytes() == 0


def _process(grant) -> SimulatedProcess:
    return SimulatedProcess(grant.uuids[0], 20 * GIB)


def test_after_a_restart_the_driver_says_what_is_parked_and_unlocks_what_was_left_locked(
    tmp_path,
):
    state = tmp_path / "load.json.checkpoints"
    broker = a_broker(gpus=1)
    grant = broker.take_now(JOB, 1)
    before = SimulatedCheckpointDriver(state_file=str(state))
    for pid in (5, 6):
        before.start(pid, _process(grant))
    before.lock(5, 0)
    before.checkpoint(5)  # parked
    before.lock(6, 0)  # a park the last hub never finished
    assert json.loads(state.read_text()).keys() == {"5", "6"}

    after = SimulatedCheckpointDriver(state_file=str(state))
    parker = Parker(broker, here(after, pids={"1": [5, 6, 7]}), 64 * GIB, LOG)
    parked = parker.read_back([container(grant)])
    assert parked == {1: (5,)}
    assert after.state(6) is ProcessState.RUNNING


def test_parking_settings_that_cannot_work_are_refused_in_one_line():
    host = a_broker(gpus=1).site.source
    with pytest.raises(GPUConfigError, match="parks simulated GPUs' work only"):
        NvmlSource().checkpoint_hosts("simulated")
    with pytest.raises(GPUConfigError, match="needs the NVIDIA driver's checkpoint API"):
        host.checkpoint_hosts("cuda")  # no libcuda on this machine
    with pytest.raises(GPUConfigError, match="park_memory_limit must be memory"):
        memory_limit("lots")
    assert memory_limit("64G") == 64 * GIB and memory_limit("") > 0


def test_on_a_swarm_parking_needs_the_agents_and_each_nodes_memory_limit():
    without_token = SwarmSource(list, AgentAccess(9401))
    with pytest.raises(GPUConfigError, match="agent_port and agent_token"):
        without_token.checkpoint_hosts("auto")
    with pytest.raises(GPUConfigError, match="how much host memory each node may give"):
        memory_limit("", on_swarm=True)
    assert memory_limit("32G", on_swarm=True) == 32 * GIB


class HeldDriver(SimulatedCheckpointDriver):
    """The double, whose checkpoint waits until the test lets it go: a park in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def checkpoint(self, pid: int) -> None:
        self.go.wait(10)
        super().checkpoint(pid)


async def parking_in_flight(changes_meanwhile):
    """A park held in the driver while `changes_meanwhile(broker, grant)` happens: the parker,
    the grant, and (what was seen while it was under way, what the park answered)."""
    parker, grant = parker_seeing((5,))
    parker.hosts("").driver = HeldDriver()
    driver_of(parker).start(5, _process(grant))
    parking = asyncio.ensure_future(parker.park(grant))
    while not parker.parking_now(grant.key):
        await asyncio.sleep(0)
    seen = (parker.parking_now(grant.key), parker.parked_bytes())
    changes_meanwhile(parker.broker, grant)
    driver_of(parker).go.set()
    return parker, grant, (seen, await parking)


def test_a_park_in_flight_counts_its_memory_and_is_known_to_be_under_way():
    """A cell run meanwhile must wake it (its GPU calls would wait), and a second park must
    not take host memory past park_memory_limit."""
    parker, grant, (seen, refusal) = asyncio.run(parking_in_flight(lambda broker, grant: None))
    assert seen == (True, 20 * GIB) and refusal == ""
    assert not parker.parking_now(grant.key) and parker.parked_bytes() == 20 * GIB


def test_a_server_that_stops_while_it_is_parked_is_brought_back_not_lent():
    parker, _, (_, refusal) = asyncio.run(
        parking_in_flight(lambda broker, grant: broker._pool.begin_release(grant.key))
    )
    assert refusal.startswith("it changed meanwhile")
    assert driver_of(parker).state(5) is ProcessState.RUNNING and parker.parked_bytes() == 0


def test_work_found_parked_after_a_restart_comes_back_once_its_gpus_run_nothing():
    """The driver does not say how much memory it parked; NVML's used memory is never 0."""
    parker, grant = parker_seeing((5,))
    parker.broker._pool.park(grant.key)
    parker.adopted({grant.key: (5,)})
    parked = parker.broker.grant_of(grant.key)
    [uuid] = grant.uuids
    parker.broker.note_telemetry({uuid: Telemetry(0.0, GIB, processes=(9,))})
    assert parker.waits_for(parked) == f"processes run on its GPUs ({uuid})"
    parker.broker.note_telemetry({uuid: Telemetry(0.0, GIB)})  # reserved memory, no process
    assert parker.waits_for(parked) == ""


def test_work_just_restored_can_be_parked_again_before_the_monitor_looks_again():
    """The monitor's last look saw it parked (no process); a person's return right after its
    restore must park it again, not give it SIGTERM for want of a process."""
    parker, grant = parker_seeing((5,))
    driver_of(parker).start(5, _process(grant))
    assert asyncio.run(parker.park(grant)) == ""
    [uuid] = grant.uuids
    parked = parker.broker.grant_of(grant.key)
    parker.observed(Observation({uuid: Telemetry(0.0, 0)}, [container(parked)], owners={}))
    assert parker.why_not(parked) == "it has no CUDA process to park"
    assert asyncio.run(parker.restore(parked))
    assert parker.why_not(parker.broker.grant_of(grant.key)) == ""


def test_in_turns_the_one_who_joined_waits_parked_and_either_is_parked_with_no_cuda_process():
    """Two people in turns on one GPU: the second waits parked from the start, with nothing
    in the driver; the first, who runs no CUDA process, is parked for the second's turn all
    the same (nothing of it is on the GPU), though a job with none gives way instead."""
    broker = a_broker(gpus=1)
    turns = Request(1, turns=True)
    alice = broker.take_now(Holder(2, 20, "alice"), turns)
    bob = broker.take_now(Holder(3, 30, "bob"), turns)
    assert bob.parked and bob.uuids == alice.uuids
    [uuid] = alice.uuids
    parker = Parker(broker, here(SimulatedCheckpointDriver()), 64 * GIB, LOG, turn_quantum=60)
    seen = [engine.seen(_person_container(g)) for g in (alice, bob)]
    parker.observed(Observation({uuid: Telemetry(0.0, 0)}, seen, owners={}))
    assert parker.since(bob.key) == bob.since  # parked since it joined
    assert parker.waits_for(bob) == f"its GPUs are in use ({uuid})"
    assert parker.why_not(alice) == "it has no CUDA process to park"
    assert asyncio.run(parker.park(alice, for_turn=True)) == ""
    assert broker.grant_of(alice.key).parked and parker.waits_for(bob) == ""
    assert asyncio.run(parker.restore(bob))
    assert broker.pool.holder_of(uuid) == broker.grant_of(bob.key)
    assert parker.parked_bytes() == 0


def _person_container(grant) -> dict:
    name = f"jupyter-{grant.holder.user}"
    return {
        "Id": f"id-{grant.holder.user}",
        "Name": f"/{name}",
        "Config": {"Labels": engine.labels(grant, HUB), "Image": "notebook"},
        "State": {"Running": True},
        "HostConfig": {"DeviceRequests": engine.device_requests(grant.uuids)},
    }


class Unreachable:
    """A swarm node whose agent does not answer."""

    def park(self, *args):
        raise HostUnreachable("the agent on node n2 did not answer: timed out")

    unpark = parked = park


def test_work_whose_process_ended_while_parked_is_lost_not_restored():
    """The driver's checkpoint is its process's: a container restarted while parked (or its
    kernel restarted) runs other processes, and nothing can come back. A person's server has
    its GPU back with nothing restored, and is told; a job's run is over."""
    for holder in (Holder(2, 20, "alice"), JOB):
        broker = a_broker(gpus=1)
        grant = broker.take_now(holder, 1)
        [uuid] = grant.uuids
        driver = SimulatedCheckpointDriver()
        driver.start(5, _process(grant))
        parker = Parker(broker, here(driver, every=(5,)), 64 * GIB, LOG)
        seen = [container(grant)]
        sample = {uuid: Telemetry(0.0, GIB, processes=(5,))}
        parker.observed(Observation(sample, seen, owners={5: "c1"}))
        assert asyncio.run(parker.park(grant)) == ""
        parker.hosts = here(driver, every=(6,))  # another process of it now: 5 is gone
        parked = broker.grant_of(grant.key)
        if holder.job:
            with pytest.raises(RestoreFailed, match="its GPU work was lost while parked"):
                asyncio.run(parker.restore(parked))
            continue
        assert asyncio.run(parker.restore(parked)) and parker.lost(grant.key)
        assert not broker.grant_of(grant.key).parked
        assert driver.state(5) is ProcessState.CHECKPOINTED  # never asked to restore
        parker.forget(grant.key)  # its server stopped: a next one starts afresh
        assert not parker.lost(grant.key)


def test_work_on_a_node_whose_agent_does_not_answer_stays_where_it_is():
    """Not parked when the agent cannot be asked to park it. A restore whose agent does not
    answer may have been made: its GPU is its own again, lent to nobody (a job lent it could
    run out of memory beside the restored work), and the restore is asked again until the
    agent answers; nothing is stopped (a silent agent is not a failed restore)."""
    parker, grant = parker_seeing((5,))
    on_host, silent = parker.hosts(""), Unreachable()
    parker.hosts = lambda node: silent
    assert asyncio.run(parker.park(grant)) == "the agent on node n2 did not answer: timed out"
    assert not parker.broker.grant_of(grant.key).parked and parker.parked_bytes() == 0

    parker.hosts = lambda node: on_host
    on_host.driver.start(5, _process(grant))
    assert asyncio.run(parker.park(grant)) == ""
    parked = parker.broker.grant_of(grant.key)
    parker.hosts = lambda node: silent
    assert asyncio.run(parker.restore(parked)) is False
    [uuid] = grant.uuids
    assert parker.unsure(grant.key) and not parker.broker.grant_of(grant.key).parked
    assert parker.broker.pool.holder_of(uuid).key == grant.key  # lent to nobody
    assert on_host.driver.state(5) is ProcessState.CHECKPOINTED

    parker.hosts = lambda node: on_host
    assert asyncio.run(parker.restore(parker.broker.grant_of(grant.key)))
    assert on_host.driver.state(5) is ProcessState.RUNNING and not parker.unsure(grant.key)


def test_on_gpus_of_unknown_memory_parked_work_comes_back_once_they_run_nothing():
    """A swarm node's GPUs without a gpu-memory label: free memory cannot be weighed."""
    parker, grant = parker_seeing((5,))
    driver_of(parker).start(5, _process(grant))
    assert asyncio.run(parker.park(grant)) == ""
    [uuid] = grant.uuids
    parker.broker.site.gpus[0] = replace(parker.broker.site.gpus[0], memory_total_bytes=0)
    parked = parker.broker.grant_of(grant.key)
    parker.broker.note_telemetry({uuid: Telemetry(0.0, GIB, processes=(9,))})
    assert parker.waits_for(parked) == f"processes run on its GPUs ({uuid})"
    parker.broker.note_telemetry({uuid: Telemetry(0.0, 0)})
    assert parker.waits_for(parked) == ""


def test_parked_work_moves_through_the_cores_table_and_an_illegal_move_raises():
    """Issue 47: the parker keeps no residency of its own; each move is the core's
    (`core.parking.after`), and one the table does not allow raises, as h11's does."""
    parker, grant = parker_seeing((5,))
    driver_of(parker).start(5, _process(grant))
    assert parker.residency(grant.key) is Residency.RESIDENT
    assert asyncio.run(parker.park(grant)) == ""
    assert parker.residency(grant.key) is Residency.PARKED
    with pytest.raises(IllegalMove, match="'park' cannot happen to a holder that is parked"):
        parker._move(grant.key, "park")
    [uuid] = grant.uuids
    parker.broker.note_telemetry({uuid: Telemetry(0.0, 0)})  # its GPU is free, with room
    assert asyncio.run(parker.restore(parker.broker.grant_of(grant.key)))
    assert parker.residency(grant.key) is Residency.RESIDENT
    with pytest.raises(IllegalMove, match="'restored' cannot happen to a holder that is resident"):
        parker._move(grant.key, "restored")
