"""A checkpoint driver for machines without GPUs: the CUDA driver's states and refusals, so
parking is shown and tested end to end where no driver exists (the simulated GPUs'
sibling).

It keeps what the real driver keeps and refuses what the real one refuses, with its
CUresult codes: a call in the wrong state is CUDA_ERROR_ILLEGAL_STATE; a process that is
not a CUDA process is CUDA_ERROR_INVALID_VALUE; work on a MIG instance, or a process
that shares its GPU context with others (multi-process and NCCL programs), cannot be
locked (CUDA_ERROR_NOT_SUPPORTED, NVIDIA/cuda-checkpoint #27, #42); a restore onto a GPU
without room for the memory leaves the process FAILED for good (#44), which is why the
caller must look at the GPU's free memory first. `refuse` makes the next call of an
action (on one process, or on any) fail, as a driver may for reasons of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .checkpoint import CODES, CheckpointError, ProcessState

NEXT = {  # action → (the state it needs, the state it leaves)
    "lock": (ProcessState.RUNNING, ProcessState.LOCKED),
    "checkpoint": (ProcessState.LOCKED, ProcessState.CHECKPOINTED),
    "restore": (ProcessState.CHECKPOINTED, ProcessState.LOCKED),
    "unlock": (ProcessState.LOCKED, ProcessState.RUNNING),
}


@dataclass(frozen=True)
class Listed:
    """A process of the load file, as a CUDA process: on which GPU or MIG instance, with
    how much memory, and which checkpoint calls the driver refuses it, with which CUresult
    (`"refuse": {"restore": "CUDA_ERROR_UNKNOWN"}`)."""

    device: str
    memory_bytes: int
    on_mig: bool = False
    refuse: Mapping[str, str] = field(default_factory=dict)


class SimulatedHost(Protocol):
    """The simulated GPUs whose processes the double parks (`devices.simulated`)."""

    parked: Callable[[], Mapping[int, int]]  # the double tells it what is off its GPUs

    def memory_free(self, uuid: str) -> int: ...

    def cuda_process(self, pid: int) -> Listed | None: ...


@dataclass
class SimulatedProcess:
    gpu: str  # the UUID of the GPU (or MIG instance) it was created with
    memory_bytes: int
    on_mig: bool = False
    shared_context: bool = False  # one of several CUDA processes of one program
    state: ProcessState = ProcessState.RUNNING


class SimulatedCheckpointDriver:
    """CUDA processes on simulated GPUs of `gpu_memory_bytes` each, parked and restored.

    With a `host` (the hub's simulated GPUs), every process its load file lists is a CUDA
    process of the memory it says, the GPUs' free memory is what the host reports, and
    the host lists parked processes no more (their memory freed), as NVML would.
    """

    def __init__(
        self,
        gpu_memory_bytes: int = 80 * 2**30,
        host: SimulatedHost | None = None,
        state_file: str = "",
    ) -> None:
        """`state_file`: where the processes' states are kept across hub restarts, as the
        kernel driver keeps them (a JSON object); "" keeps them in memory only."""
        self.gpu_memory_bytes = gpu_memory_bytes
        self.processes: dict[int, SimulatedProcess] = {}
        self._refusals: dict[tuple[str, int | None], int] = {}  # (action, pid) → CUresult
        self.host = host
        self.state_file = state_file
        if host is not None:
            host.parked = self.parked_memory
        self._read_states()

    def parked_memory(self) -> dict[int, int]:
        """The processes whose memory is off their GPU (parked, or lost in a failed
        restore), with the bytes they held there."""
        return {
            pid: p.memory_bytes
            for pid, p in self.processes.items()
            if p.state in (ProcessState.CHECKPOINTED, ProcessState.FAILED)
        }

    def start(self, pid: int, process: SimulatedProcess) -> None:
        """A CUDA process opens its GPU, or fails to, as cudaMalloc would."""
        if process.memory_bytes > self.free_bytes(process.gpu):
            raise CheckpointError("start", pid, CODES["CUDA_ERROR_OUT_OF_MEMORY"])
        self.processes[pid] = process

    def end(self, pid: int) -> None:
        self.processes.pop(pid, None)

    def free_bytes(self, gpu: str) -> int:
        """What NVML would report free on `gpu`: parked processes hold none of it."""
        if self.host is not None:
            return self.host.memory_free(gpu)
        return self.gpu_memory_bytes - sum(
            p.memory_bytes
            for p in self.processes.values()
            if p.gpu == gpu and p.state in (ProcessState.RUNNING, ProcessState.LOCKED)
        )

    def refuse(self, action: str, name: str, pid: int | None = None) -> None:
        """The next `action` call on `pid` (None: on any process) answers CUresult `name`."""
        self._refusals[action, pid] = CODES[name]

    def state(self, pid: int) -> ProcessState:
        return self._process("getState", pid).state

    def lock(self, pid: int, timeout_ms: int) -> None:
        process = self._process("lock", pid)
        if process.on_mig or process.shared_context:
            raise CheckpointError("lock", pid, CODES["CUDA_ERROR_NOT_SUPPORTED"])
        self._move("lock", pid, process)

    def checkpoint(self, pid: int) -> None:
        self._move("checkpoint", pid, self._process("checkpoint", pid))

    def restore(self, pid: int) -> None:
        process = self._process("restore", pid)
        fits = process.memory_bytes <= self.free_bytes(process.gpu)
        if process.state is ProcessState.CHECKPOINTED and not fits:
            process.state = ProcessState.FAILED
            self._write_states()
            raise CheckpointError("restore", pid, CODES["CUDA_ERROR_OUT_OF_MEMORY"])
        self._move("restore", pid, process)

    def unlock(self, pid: int) -> None:
        self._move("unlock", pid, self._process("unlock", pid))

    def _process(self, action: str, pid: int) -> SimulatedProcess:
        code = self._refusals.pop((action, pid), None) or self._refusals.pop((action, None), None)
        if code is not None:
            raise CheckpointError(action, pid, code)
        listed = self.host.cuda_process(pid) if self.host is not None else None
        if listed is not None:
            if action in listed.refuse:
                raise CheckpointError(action, pid, CODES[listed.refuse[action]])
            if pid not in self.processes:
                self.processes[pid] = SimulatedProcess(
                    listed.device, listed.memory_bytes, listed.on_mig
                )
        if pid not in self.processes:
            raise CheckpointError(action, pid, CODES["CUDA_ERROR_INVALID_VALUE"])
        return self.processes[pid]

    def _move(self, action: str, pid: int, process: SimulatedProcess) -> None:
        needs, leaves = NEXT[action]
        if process.state is not needs:
            raise CheckpointError(action, pid, CODES["CUDA_ERROR_ILLEGAL_STATE"])
        process.state = leaves
        self._write_states()

    def _read_states(self) -> None:
        try:
            kept = json.loads(Path(self.state_file).read_text()) if self.state_file else {}
        except (OSError, ValueError):
            kept = {}
        for pid, p in kept.items() if isinstance(kept, dict) else ():
            self.processes[int(pid)] = SimulatedProcess(
                p["gpu"], p["memory_bytes"], p["on_mig"], False, ProcessState[p["state"]]
            )

    def _write_states(self) -> None:
        if self.state_file:
            kept = {
                str(pid): {
                    "gpu": p.gpu,
                    "memory_bytes": p.memory_bytes,
                    "on_mig": p.on_mig,
                    "state": p.state.name,
                }
                for pid, p in self.processes.items()
                if p.state is not ProcessState.RUNNING
            }
            Path(self.state_file).write_text(json.dumps(kept))
