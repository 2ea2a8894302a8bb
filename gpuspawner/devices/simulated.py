"""Simulated GPUs, for demos and tests on machines without GPUs: the pool, the form, the
limits and Docker's device requests work as on a GPU server.

Either N identical H100s (`simulate_gpus`), or a machine described GPU by GPU
(`simulated_host`): models, memory, MIG layouts. A host given as a JSON file is
read again on every look, so a MIG layout can change while the hub runs, as an
admin's `nvidia-smi mig` would change it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import InventoryConfigError
from ..core.gpus import GPU, MigInstance, Telemetry
from ..core.placement import Topology
from ..core.units import MIG_PROFILE, parse_memory
from .checkpoint import HostOf, cuda_driver, on_this_host
from .simulated_checkpoint import Listed, SimulatedCheckpointDriver

HOST_KEYS = ("model", "memory", "count", "mig", "mig_slices")
FIRST_SIMULATED_PID = 4_000_000  # above Linux's largest PID: never a real process
SIMULATED_PIDS = 1_000_000  # a container's simulated PID is among so many, by its name
MACHINE = "gpuspawner"  # the simulated machine's name, unless c.GPUSpawner.simulated_machine


class SimulatedSource:
    """GPUs that look real: stable UUIDs, models and memory, MIG instances.

    They idle at 0 % unless `load_file` says otherwise: a JSON object from a
    GPU's UUID or index, or a MIG instance's UUID or "index:position", to any of
    utilization_percent, memory_used_gib, temperature_celsius, power_watts,
    health (a reason: the GPU is then unhealthy) and processes. A process is a
    PID, or {"container": NAME, "utilization_percent": P}: a process of that
    container (its name or id) using P % of the GPU, which is how a simulated
    shared GPU says which of its servers is busy; a `name` tells apart several
    processes of one container, and a `run` (when the container started) the processes
    of its runs: a restarted container's are new ones. For the checkpoint driver's
    double, a process is a CUDA process holding `memory_gib` (else its share of
    the device's `memory_used_gib`), and `refuse` names calls the driver refuses it.
    Where a GPU's entry gives no utilization_percent or memory_used_gib, its processes
    make them up: those on it now, not those parked (`gpuspawner simulate` writes such).
    """

    MODEL = "NVIDIA H100 80GB HBM3"
    MEMORY_BYTES = 80 * 2**30
    names_only = True  # another simulated machine's GPUs are none of this one's
    IDLE = Telemetry(0.0, 0, 34.0, 70.0)

    def __init__(
        self,
        count: int = 0,
        seed: str = MACHINE,
        load_file: str = "",
        host: Sequence[Mapping[str, Any]] | str = (),
    ) -> None:
        self.seed = seed
        self.load_file = load_file
        self.host = host
        self._gpus = self._read_host() if host else self._identical(count)
        self._owners: dict[int, str] = {}  # simulated PIDs → their container
        self._pids: dict[str, int] = {}  # "container" or "container/name" → its simulated PID
        # Checkpointed simulated PIDs → the GPU memory they held: a checkpoint driver's word
        # (`SimulatedCheckpointDriver(host=...)`). NVML lists them no more, nor their memory.
        self.parked: Callable[[], Mapping[int, int]] = dict

    @property
    def count(self) -> int:
        return len(self._gpus)

    def list_gpus(self) -> list[GPU]:
        if isinstance(self.host, str) and self.host:
            with contextlib.suppress(InventoryConfigError):  # a file mid-rewrite: as last read
                self._gpus = self._read_host()
        return list(self._gpus)

    def topology(self, gpus: Sequence[GPU]) -> Topology:
        """Wired like a DGX board: NVLink pairs (0–1, 2–3 …) under PCIe switches of four."""
        return Topology.by_index({g.uuid: g.index for g in gpus})

    def uuid(self, index: int) -> str:
        return _uuid("GPU", f"{self.seed}:{index}")

    def _identical(self, count: int) -> list[GPU]:
        return [GPU(self.uuid(i), i, self.MODEL, self.MEMORY_BYTES) for i in range(count)]

    # --- the machine ------------------------------------------------------------------
    def _read_host(self) -> list[GPU]:
        where = "c.GPUSpawner.simulated_host"
        raw: Any = self.host
        if isinstance(raw, str):
            try:
                raw = json.loads(Path(raw).read_text())
            except (OSError, ValueError) as error:
                raise InventoryConfigError(f"{where}: cannot read {self.host}: {error}") from None
        if not isinstance(raw, list) or not raw:
            raise InventoryConfigError(f"{where} must be a non-empty list of GPUs (dicts)")
        gpus: list[GPU] = []
        for n, entry in enumerate(raw):
            gpus += self._describe(entry, f"{where}[{n}]", len(gpus))
        return gpus

    def _describe(self, entry: Any, where: str, first: int) -> list[GPU]:
        if not isinstance(entry, Mapping) or set(entry) - set(HOST_KEYS):
            raise InventoryConfigError(
                f"{where} must be a dict with keys among {', '.join(HOST_KEYS)}, got {entry!r}"
            )
        model = entry.get("model", self.MODEL)
        count, slices = entry.get("count", 1), entry.get("mig_slices", 7)
        if not isinstance(model, str) or not model:
            raise InventoryConfigError(f"{where}: model must be a GPU's name, got {model!r}")
        for key, value in (("count", count), ("mig_slices", slices)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
                raise InventoryConfigError(f"{where}: {key} must be 1 to 64, got {value!r}")
        memory = parse_memory(
            entry.get("memory", self.MEMORY_BYTES), f"{where}['memory']", InventoryConfigError
        )
        mig = entry.get("mig")
        gpus = []
        for index in range(first, first + count):
            uuid = self.uuid(index)
            instances = None if mig is None else _layout(mig, where, index, uuid, slices, memory)
            gpus.append(
                GPU(uuid, index, model, memory, instances is not None, tuple(instances or ()))
            )
        return gpus

    # --- telemetry ----------------------------------------------------------------------
    def sample(self, uuids: Sequence[str]) -> dict[str, Telemetry]:
        loads = self._loads()
        gpus = {g.uuid: g for g in self._gpus}
        migs = {m.uuid: (g, m) for g in self._gpus for m in g.mig}
        samples = {}
        for uuid in uuids:
            if uuid in migs:
                gpu, mig = migs[uuid]
                key = f"{gpu.index}:{mig.position}"
                samples[uuid] = self._sample_mig(loads.get(uuid) or loads.get(key) or {})
                health = self._health(loads, gpu)
                if health and not samples[uuid].health:
                    samples[uuid] = replace(samples[uuid], health=health)
                continue
            whole = gpus.get(uuid)
            load = loads.get(uuid) or (loads.get(str(whole.index)) if whole else None) or {}
            in_mig_mode = whole is not None and whole.mig_mode  # NVML: no utilisation then
            idle = replace(self.IDLE, utilization_percent=None) if in_mig_mode else self.IDLE
            samples[uuid] = replace(idle, **self._changes(load))
        return samples

    def _sample_mig(self, load: Mapping[str, Any]) -> Telemetry:
        """As NVML reports a MIG instance: memory and processes; idle with no process on it,
        else utilisation unknown; no temperature or power of its own."""
        changes = self._changes(load)
        busy = None if changes["processes"] else 0.0
        return Telemetry(
            busy,
            changes.get("memory_used_bytes", 0),
            processes=changes["processes"],
            health=changes.get("health"),
        )

    def _health(self, loads: Mapping[str, Any], gpu: GPU) -> str | None:
        load = loads.get(gpu.uuid) or loads.get(str(gpu.index)) or {}
        return load.get("health") if isinstance(load, Mapping) else None

    def _changes(self, load: Any) -> dict[str, Any]:
        if not isinstance(load, Mapping):
            return {"processes": ()}
        changes: dict[str, Any] = {k: v for k, v in load.items() if k in _SIMULATED_FIELDS}
        parked = self.parked()
        pids, shares, freed, held = [], [], 0, 0.0
        for pid, process in self._processes(load):
            if pid in parked:
                freed += parked[pid]
                continue
            pids.append(pid)
            if isinstance(process, Mapping):
                shares.append((pid, float(process.get("utilization_percent", 0.0))))
                held += float(process.get("memory_gib", 0.0))
        if "memory_used_gib" in load:
            changes["memory_used_bytes"] = max(0, int(load["memory_used_gib"] * 2**30) - freed)
        elif held:  # the processes' own, those on the GPU now
            changes["memory_used_bytes"] = int(held * 2**30)
        changes["processes"] = tuple(pids)
        if shares:
            changes["process_utilization"] = tuple(shares)
            if "utilization_percent" not in load:  # a parked process does no work
                changes["utilization_percent"] = min(100.0, sum(share for _, share in shares))
        return changes

    def _processes(self, load: Mapping[str, Any]) -> list[tuple[int, Any]]:
        listed = load.get("processes", ())
        return [
            (self._pid_of(p) if isinstance(p, Mapping) else int(p), p)
            for p in (listed if isinstance(listed, list) else ())
        ]

    def memory_free(self, uuid: str) -> int:
        """A GPU's or MIG instance's free memory, as NVML would report it now."""
        sizes = {g.uuid: g.memory_total_bytes for g in self._gpus}
        sizes |= {m.uuid: m.memory_total_bytes for g in self._gpus for m in g.mig}
        used = self.sample([uuid])[uuid].memory_used_bytes or 0
        return sizes.get(uuid, self.MEMORY_BYTES) - used  # one it does not describe: an H100

    def cuda_process(self, pid: int) -> Listed | None:
        """A simulated process the load file lists now, as a CUDA process; None if none
        lists it. A GPU it does not describe is one of a swarm node's (an agent's source
        lists none of its own), named by its UUID."""
        devices = {str(g.index): g.uuid for g in self._gpus} | {g.uuid: g.uuid for g in self._gpus}
        for g in self._gpus:
            devices |= {f"{g.index}:{m.position}": m.uuid for m in g.mig}
            devices |= {m.uuid: m.uuid for m in g.mig}
        migs = {m.uuid for g in self._gpus for m in g.mig}
        for key, load in self._loads().items():
            if not isinstance(load, Mapping):
                continue
            processes = self._processes(load)
            for found, process in processes:
                if found != pid:
                    continue
                said = process if isinstance(process, Mapping) else {}
                share = float(load.get("memory_used_gib", 0)) / len(processes)
                memory = int(float(said.get("memory_gib", share)) * 2**30)
                refuse = said.get("refuse", {})
                device = devices.get(key, key)
                return Listed(device, memory, device in migs, dict(refuse))
        return None

    def _pid_of(self, process: Mapping[str, Any]) -> int:
        """A listed process's simulated PID: the same for its container (and `name`, where a
        container runs several) on every look, and in the next hub's. A `run` of the
        container (when it started, as `gpuspawner simulate` writes it) is a process of its
        own: a restarted container runs new processes, as on a GPU server."""
        container = str(process.get("container", ""))
        key = f"{container}/{process['name']}" if process.get("name") else container
        key += f"@{process['run']}" if process.get("run") else ""
        if key in self._pids:
            return self._pids[key]
        digest = int(hashlib.sha256(key.encode()).hexdigest(), 16)
        pid = FIRST_SIMULATED_PID + digest % SIMULATED_PIDS
        while pid in self._owners:
            pid += 1
        self._owners[pid], self._pids[key] = container, pid
        return pid

    def container_pids(self, containers: Mapping[str, Iterable[str]]) -> dict[str, list[int]]:
        """The simulated processes the load file lists for each container (by a key, from
        its names and ids), whether or not they are parked now."""
        listed = [
            p
            for load in self._loads().values()
            if isinstance(load, Mapping)
            for p in load.get("processes", ())
            if isinstance(p, Mapping)
        ]
        return {
            key: [self._pid_of(p) for p in listed if str(p.get("container", "")) in set(names)]
            for key, names in containers.items()
        }

    def process_owners(self, pids: Iterable[int]) -> dict[int, str]:
        """The container (name or id) of each simulated process, as the load file names it."""
        return {pid: self._owners[pid] for pid in pids if pid in self._owners}

    def checkpoint_hosts(self, driver: str) -> HostOf:
        """Driver calls here: the stand-in ("auto" or "simulated"), whose states outlive the
        hub beside the load file; or the NVIDIA driver ("cuda") on the load file's PIDs."""
        if driver == "cuda":
            return on_this_host(cuda_driver(), self.container_pids)
        kept = f"{self.load_file}.checkpoints" if self.load_file else ""
        return on_this_host(
            SimulatedCheckpointDriver(host=self, state_file=kept), self.container_pids
        )

    def on_nodes(self) -> None:
        """One simulated host: no nodes."""
        return None

    def _loads(self) -> dict[str, Any]:
        if not self.load_file:
            return {}
        try:
            loads = json.loads(Path(self.load_file).read_text())
        except (OSError, ValueError):
            return {}
        return loads if isinstance(loads, dict) else {}


_SIMULATED_FIELDS = {"utilization_percent", "temperature_celsius", "power_watts", "health"}


def _uuid(kind: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{kind}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _layout(
    mig: Any, where: str, index: int, gpu: str, slices: int, memory: int
) -> list[MigInstance]:
    """The MIG instances an admin made on one simulated GPU, from their profile names."""
    if not isinstance(mig, list) or not all(isinstance(p, str) for p in mig):
        raise InventoryConfigError(
            f"{where}: mig must be a list of MIG profiles such as ['1g.10gb', '3g.40gb'] "
            "([] for MIG mode without instances)"
        )
    instances = []
    for position, profile in enumerate(mig):
        if not MIG_PROFILE.match(profile):
            raise InventoryConfigError(f"{where}: {profile!r} is not a MIG profile like 1g.10gb")
        compute, _, rest = profile.rpartition("c.") if "c." in profile else ("", "", profile)
        instance_slices, size = (int(x) for x in rest.split("+")[0][:-2].split("g."))
        instances.append(
            MigInstance(
                uuid=_uuid("MIG", f"{gpu}:{position}:{profile}"),
                profile=profile,
                memory_total_bytes=min(size * 2**30, memory),
                slices=int(compute or instance_slices),
                gpu_slices=slices,
                position=position,
            )
        )
    used = sum(i.slices for i in instances)
    if used > slices:
        raise InventoryConfigError(
            f"{where}: GPU {index}'s MIG instances use {used} slices; it has {slices}"
        )
    return instances
