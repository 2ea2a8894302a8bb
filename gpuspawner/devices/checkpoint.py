"""The CUDA driver's checkpoint API: park a process's GPU work in host memory, bring it back.

The driver (>= 550) acts on a process by PID from outside it. `lock` waits for the work
already queued and makes the process's further CUDA calls block; `checkpoint` copies its
device memory to host RAM and releases the GPU (no memory, no context left on it);
`restore` copies it back, at the same addresses, on the same GPU; `unlock` lets its calls
through again. A process is RUNNING, LOCKED, CHECKPOINTED or FAILED, and the driver alone
knows which: after a hub restart, residency is read back here, never remembered.

Five C functions with an int and an optional struct each are the whole surface we need, so
they are called through ctypes on the driver's own library rather than through
cuda-bindings: no CUDA toolkit version to match, nothing to install on a GPU host (the
driver brings libcuda), and the device check runs on a bare machine.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, Protocol

from ..core.errors import GPUConfigError


class ProcessState(Enum):
    """CUprocessState, as the driver numbers it."""

    RUNNING = 0
    LOCKED = 1
    CHECKPOINTED = 2
    FAILED = 3


# CUresult values the checkpoint calls answer with (cuda.h), by name.
ERRORS = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    401: "CUDA_ERROR_ILLEGAL_STATE",
    600: "CUDA_ERROR_NOT_READY",
    800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED",
    909: "CUDA_ERROR_TIMEOUT",
    999: "CUDA_ERROR_UNKNOWN",
}
CODES = {name: code for code, name in ERRORS.items()}


class CheckpointError(Exception):
    """A checkpoint call the driver refused: `code` is its CUresult."""

    def __init__(self, action: str, pid: int, code: int) -> None:
        self.action, self.pid, self.code = action, pid, code
        self.name = ERRORS.get(code, f"CUresult {code}")
        call = f"cuCheckpointProcess{action[0].upper()}{action[1:]} of process {pid}"
        super().__init__(f"{call if pid else action}: {self.name}")


class CheckpointDriver(Protocol):
    """The driver's five checkpoint calls, by process ID; each raises CheckpointError."""

    def state(self, pid: int) -> ProcessState: ...

    def lock(self, pid: int, timeout_ms: int) -> None:
        """Waits up to `timeout_ms` for the process's queued work (0: no limit)."""
        ...

    def checkpoint(self, pid: int) -> None: ...

    def restore(self, pid: int) -> None: ...

    def unlock(self, pid: int) -> None: ...


ContainerPids = Callable[[Mapping[str, list[str]]], dict[str, list[int]]]  # key → its PIDs


class CheckpointHost(Protocol):
    """Where a server's processes run, and the driver's calls on them are made: this host
    (`OnThisHost`), or a swarm node through its agent (`devices.agent_host.AgentHost`).
    Each call raises CheckpointError for the driver's refusal, HostUnreachable where the
    host could not be asked."""

    def park(self, pids: Sequence[int], timeout_ms: int) -> None:
        """`park` below, on that host."""
        ...

    def unpark(self, pids: Sequence[int]) -> None:
        """`unpark` below, on that host."""
        ...

    def parked(self, containers: Mapping[str, list[str]], settle: bool) -> dict[str, list[int]]:
        """The checkpointed CUDA processes of each container that has some (by a key, from
        its names and ids). `settle`: a process left locked (a park or restore a previous
        hub did not finish) is on its GPU, and is unlocked to run on."""
        ...


HostOf = Callable[[str], CheckpointHost]  # where a node's driver calls are made ("": one host)


class HostUnreachable(Exception):
    """The host that must make a driver call could not be asked (a node's agent did not
    answer, or refused the hub): what its driver did, if anything, is not known."""


class OnThisHost:
    """The driver calls made here, on this host's processes (`container_pids` finds them)."""

    def __init__(self, driver: CheckpointDriver, container_pids: ContainerPids) -> None:
        self.driver, self.container_pids = driver, container_pids

    def park(self, pids: Sequence[int], timeout_ms: int) -> None:
        park(self.driver, pids, timeout_ms)

    def unpark(self, pids: Sequence[int]) -> None:
        unpark(self.driver, pids)

    def parked(self, containers: Mapping[str, list[str]], settle: bool) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for key, pids in self.container_pids(containers).items():
            said = states(self.driver, pids)
            for pid in (p for p, state in said.items() if settle and state is ProcessState.LOCKED):
                with contextlib.suppress(CheckpointError):  # it ended meanwhile
                    self.driver.unlock(pid)
            held = [pid for pid, state in said.items() if state is ProcessState.CHECKPOINTED]
            if held:
                found[key] = held
        return found


class _LockArgs(ctypes.Structure):
    _fields_ = [
        ("timeoutMs", ctypes.c_uint),
        ("reserved0", ctypes.c_uint),
        ("reserved1", ctypes.c_uint64 * 7),
    ]


class CudaDriver:
    """The real driver, through libcuda.so.1."""

    def __init__(self, library: str = "libcuda.so.1") -> None:
        try:
            self._cuda = ctypes.CDLL(library)
        except OSError as error:
            raise CheckpointError(f"no {library}", 0, CODES["CUDA_ERROR_NO_DEVICE"]) from error
        if not hasattr(self._cuda, "cuCheckpointProcessGetState"):
            raise CheckpointError("driver < 550", 0, CODES["CUDA_ERROR_NOT_SUPPORTED"])
        if (code := self._cuda.cuInit(0)) != 0:
            raise CheckpointError("cuInit", 0, code)

    def state(self, pid: int) -> ProcessState:
        state = ctypes.c_int()
        self._call("getState", pid, self._cuda.cuCheckpointProcessGetState, ctypes.byref(state))
        return ProcessState(state.value)

    def lock(self, pid: int, timeout_ms: int) -> None:
        args = _LockArgs(timeoutMs=timeout_ms)
        self._call("lock", pid, self._cuda.cuCheckpointProcessLock, ctypes.byref(args))

    def checkpoint(self, pid: int) -> None:
        self._call("checkpoint", pid, self._cuda.cuCheckpointProcessCheckpoint, None)

    def restore(self, pid: int) -> None:
        self._call("restore", pid, self._cuda.cuCheckpointProcessRestore, None)

    def unlock(self, pid: int) -> None:
        self._call("unlock", pid, self._cuda.cuCheckpointProcessUnlock, None)

    @staticmethod
    def _call(action: str, pid: int, function: Any, args: Any) -> None:
        if (code := function(ctypes.c_int(pid), args)) != 0:
            raise CheckpointError(action, pid, code)


def park(driver: CheckpointDriver, pids: Sequence[int], timeout_ms: int) -> None:
    """Parks every CUDA process of one server or job, or none: all are locked before any is
    checkpointed (a process still running could wait on one already parked), and on a
    refusal those already parked are restored and all are unlocked, so the work stays
    resident and running. Raises the refusal."""
    locked: list[int] = []
    parked: list[int] = []
    try:
        for pid in pids:
            driver.lock(pid, timeout_ms)
            locked.append(pid)
        for pid in pids:
            driver.checkpoint(pid)
            parked.append(pid)
    except CheckpointError:
        for pid in reversed(parked):
            driver.restore(pid)
        for pid in reversed(locked):
            driver.unlock(pid)
        raise


def unpark(driver: CheckpointDriver, pids: Sequence[int]) -> None:
    """Brings every process back onto its GPU, then lets them all run. A refusal is raised
    as it comes: a process that cannot be restored is not unlocked, and its owner must be
    stopped (its work cannot go on without its memory)."""
    for pid in pids:
        if driver.state(pid) is ProcessState.CHECKPOINTED:
            driver.restore(pid)
    for pid in pids:
        if driver.state(pid) is ProcessState.LOCKED:
            driver.unlock(pid)


def states(driver: CheckpointDriver, pids: Iterable[int]) -> dict[int, ProcessState]:
    """The driver's word on each CUDA process among `pids` (it refuses the others)."""
    found = {}
    for pid in pids:
        try:
            found[pid] = driver.state(pid)
        except CheckpointError:
            continue  # not a CUDA process
    return found


def cuda_driver() -> CudaDriver:
    """The NVIDIA driver's checkpoint API on this host; GPUConfigError in one line where it
    is not there (no libcuda, or a driver before 550)."""
    try:
        return CudaDriver()
    except CheckpointError as error:
        raise GPUConfigError(
            f"c.GPUSpawner.parking needs the NVIDIA driver's checkpoint API (driver 550 or "
            f"later) on the hub's host: {error}"
        ) from None


def on_this_host(driver: CheckpointDriver, container_pids: ContainerPids) -> HostOf:
    """Every driver call made here, whatever the node (one host's are all "")."""
    here = OnThisHost(driver, container_pids)
    return lambda node: here
