"""Parking a server's or a job's CUDA processes: all of them or none, on the driver's word."""

import json

import pytest

from gpuspawner.devices.checkpoint import (
    CheckpointError,
    CudaDriver,
    ProcessState,
    park,
    states,
    unpark,
)
from gpuspawner.devices.simulated import FIRST_SIMULATED_PID, SimulatedSource
from gpuspawner.devices.simulated_checkpoint import SimulatedCheckpointDriver, SimulatedProcess

GIB = 2**30
GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


def driver_with(*processes: SimulatedProcess) -> SimulatedCheckpointDriver:
    driver = SimulatedCheckpointDriver(gpu_memory_bytes=80 * GIB)
    for pid, process in enumerate(processes, start=100):
        driver.start(pid, process)
    return driver


def test_a_parked_program_holds_no_gpu_memory_and_comes_back_where_it_was():
    driver = driver_with(SimulatedProcess(GPU, 30 * GIB), SimulatedProcess(GPU, 10 * GIB))
    assert driver.free_bytes(GPU) == 40 * GIB
    park(driver, [100, 101], timeout_ms=5000)
    assert states(driver, [100, 101]) == {
        100: ProcessState.CHECKPOINTED,
        101: ProcessState.CHECKPOINTED,
    }
    assert driver.free_bytes(GPU) == 80 * GIB  # the GPU is free for someone else
    unpark(driver, [100, 101])
    assert states(driver, [100, 101]) == {100: ProcessState.RUNNING, 101: ProcessState.RUNNING}
    assert driver.free_bytes(GPU) == 40 * GIB


@pytest.mark.parametrize(
    "second",
    [
        SimulatedProcess(GPU, GIB, shared_context=True),  # a multi-process program's rank
        SimulatedProcess("MIG-bbbbbbbb-0000-0000-0000-000000000000", GIB, on_mig=True),
    ],
    ids=["multi-process", "mig"],
)
def test_work_the_driver_cannot_park_stays_resident_and_running(second):
    driver = driver_with(SimulatedProcess(GPU, 30 * GIB), second)
    with pytest.raises(CheckpointError) as refused:
        park(driver, [100, 101], timeout_ms=5000)
    assert refused.value.name == "CUDA_ERROR_NOT_SUPPORTED"
    assert "cuCheckpointProcessLock of process 101" in str(refused.value)
    assert set(states(driver, [100, 101]).values()) == {ProcessState.RUNNING}
    assert driver.free_bytes(GPU) < 80 * GIB


def test_a_checkpoint_refused_halfway_brings_back_what_was_already_parked():
    driver = driver_with(SimulatedProcess(GPU, 30 * GIB), SimulatedProcess(GPU, 10 * GIB))
    driver.refuse("checkpoint", "CUDA_ERROR_UNKNOWN", pid=101)
    with pytest.raises(CheckpointError, match="CUDA_ERROR_UNKNOWN"):
        park(driver, [100, 101], timeout_ms=5000)
    assert set(states(driver, [100, 101]).values()) == {ProcessState.RUNNING}
    assert driver.free_bytes(GPU) == 40 * GIB


def test_a_restore_without_room_on_the_gpu_leaves_the_process_failed_for_good():
    """Why the hub must look at the GPU's free memory before it restores anything."""
    driver = driver_with(SimulatedProcess(GPU, 50 * GIB))
    park(driver, [100], timeout_ms=5000)
    driver.start(200, SimulatedProcess(GPU, 40 * GIB))  # a job took the GPU meanwhile
    with pytest.raises(CheckpointError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        unpark(driver, [100])
    assert driver.state(100) is ProcessState.FAILED
    with pytest.raises(CheckpointError, match="CUDA_ERROR_ILLEGAL_STATE"):
        driver.restore(100)


def test_parked_work_is_read_back_from_the_driver_not_remembered():
    """After a hub restart nothing of ours survives but the driver's own state."""
    driver = driver_with(SimulatedProcess(GPU, GIB), SimulatedProcess(GPU, GIB))
    park(driver, [101], timeout_ms=5000)
    assert states(driver, [100, 101]) == {100: ProcessState.RUNNING, 101: ProcessState.CHECKPOINTED}
    unpark(driver, [100, 101])  # a resident process is left as it is
    assert set(states(driver, [100, 101]).values()) == {ProcessState.RUNNING}


def test_a_process_that_is_not_a_cuda_process_is_named_in_the_refusal():
    driver = driver_with()
    with pytest.raises(CheckpointError) as refused:
        driver.state(4321)
    assert (refused.value.pid, refused.value.name) == (4321, "CUDA_ERROR_INVALID_VALUE")


def test_without_an_nvidia_driver_the_real_driver_says_so():
    with pytest.raises(CheckpointError, match="CUDA_ERROR_NO_DEVICE"):
        CudaDriver("libcuda-that-is-not-here.so.1")


def test_on_a_simulated_host_a_parked_process_leaves_nvmls_view_with_its_memory(tmp_path):
    """The hub's double: what the load file lists is a CUDA process; parked, it is gone
    from the GPU's processes and memory, as NVML would show it, and comes back."""
    load = tmp_path / "load.json"
    host = SimulatedSource(1, seed="parking", load_file=str(load))
    [gpu] = host.list_gpus()
    job = {"container": "job-7", "memory_gib": 30}
    person = {"container": "alice", "memory_gib": 10}
    load.write_text(json.dumps({"0": {"memory_used_gib": 40, "processes": [job, person]}}))
    driver = SimulatedCheckpointDriver(host=host)
    job_pid, person_pid = host.sample([gpu.uuid])[gpu.uuid].processes

    park(driver, [job_pid], timeout_ms=5000)
    seen = host.sample([gpu.uuid])[gpu.uuid]
    assert (seen.processes, seen.memory_used_bytes) == ((person_pid,), 10 * GIB)
    assert driver.free_bytes(gpu.uuid) == 70 * GIB

    unpark(driver, [job_pid])
    seen = host.sample([gpu.uuid])[gpu.uuid]
    assert (seen.processes, seen.memory_used_bytes) == ((job_pid, person_pid), 40 * GIB)


def test_on_a_simulated_host_the_load_file_names_the_calls_the_driver_refuses(tmp_path):
    load = tmp_path / "load.json"
    host = SimulatedSource(1, seed="parking", load_file=str(load))
    refused = {"container": "job-7", "refuse": {"restore": "CUDA_ERROR_UNKNOWN"}}
    load.write_text(json.dumps({"0": {"memory_used_gib": 30, "processes": [refused]}}))
    driver = SimulatedCheckpointDriver(host=host)
    [pid] = host.sample([host.uuid(0)])[host.uuid(0)].processes
    park(driver, [pid], timeout_ms=5000)
    with pytest.raises(CheckpointError, match="CUDA_ERROR_UNKNOWN"):
        unpark(driver, [pid])
    assert driver.state(pid) is ProcessState.CHECKPOINTED  # still parked, its work kept
    with pytest.raises(CheckpointError, match="CUDA_ERROR_INVALID_VALUE"):
        driver.state(FIRST_SIMULATED_PID + 99)  # listed nowhere: not a CUDA process
