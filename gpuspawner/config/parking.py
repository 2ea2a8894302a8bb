"""The parking settings, as a mixin of GPUSettings: whether jobs give way by parking their GPU
work in host memory (the CUDA driver's checkpoint API), with which driver, within how much
host memory. Checked at hub start: `memory_limit` here, and where the driver's calls are
made by the GPU source itself (`GPUSource.checkpoint_hosts`: on one host, this host's
driver; on a swarm, each node's, through its agent), which also gives `gpuspawner status`
the driver's word on a container's processes."""

from __future__ import annotations

import math
import os
from typing import Any

from traitlets import Bool, Enum, Float, HasTraits, TraitError, Unicode, validate

from ..core.errors import GPUConfigError
from ..core.parking import TURN_QUANTUM
from ..core.units import parse_memory

DRIVERS = ("auto", "cuda", "simulated")


class ParkingSettings(HasTraits):
    parking = Bool(
        False,
        config=True,
        help="""Jobs give way to people by parking instead of stopping.

        When a person's start needs a GPU a job holds, the job's CUDA process is
        parked (its GPU memory copied to host RAM by the CUDA driver's checkpoint
        API, driver 550 or later): it loses nothing, and its calls wait. The person
        gets the GPU at once; the job is brought back onto the same GPU when the
        person's server ends. A job the driver cannot park (on a MIG instance or a
        shared GPU, several CUDA processes, none, or over `park_memory_limit`) gives
        way by SIGTERM and its group's preempt_grace, as without parking. On a swarm,
        each node's agent makes the driver's calls (it needs agent_port and agent_token).
        See docs/parking.md. Example:
        `c.GPUSpawner.parking = True`.""",
    )
    park_memory_limit = Unicode(
        "",
        config=True,
        help="""With parking: the host memory that parked GPU work may take in all, as
        memory such as "256G". A job whose GPU memory would take parked work past it is
        not parked (it gives way by SIGTERM) and the reason is shown. Empty: a quarter
        of the hub host's memory. On a swarm, each node's own, and it must be given.
        Example: `c.GPUSpawner.park_memory_limit = "512G"`.""",
    )
    checkpoint_driver = Enum(
        DRIVERS,
        "auto",
        config=True,
        help="""With parking: who parks and restores GPU work. "cuda": the NVIDIA driver's
        checkpoint API through libcuda.so.1 on the hub's host (the hub must run as root,
        or as the containers' processes' user). "simulated": a stand-in with the
        driver's states and error codes, for simulated GPUs. "auto": simulated with
        simulate_gpus or simulated_host, else cuda. On a swarm, each node's agent uses
        its node's driver (the stand-in with --simulated-load). Example:
        `c.GPUSpawner.checkpoint_driver = "cuda"`.""",
    )
    park_after = Float(
        600.0,
        config=True,
        help="""With parking: seconds a person's GPU must be idle, while a job parked for them
        waits to come back on it, before their own work is parked and the job goes on.
        Shorter than the groups' gpu_idle_timeout, so a job does not wait hours behind a
        notebook left open; the person's work comes back when they run a cell. More than
        0. Example: `c.GPUSpawner.park_after = 5 * 60`.""",
    )

    turn_quantum = Float(
        TURN_QUANTUM,
        config=True,
        help="""With parking and a profile's `turns`: seconds of a person's turn on a GPU
        they share in turns with one other person. While both run work on it, each has
        the GPU this long, then is parked (work kept in host memory) for the other; a
        person whose GPU is idle is parked at once when the other runs a cell. Shorter
        turns mean shorter waits for a cell, and more time spent moving memory. More
        than 0. Example: `c.GPUSpawner.turn_quantum = 10 * 60`.""",
    )

    @validate("park_after", "turn_quantum")
    def _positive_seconds(self, proposal: Any) -> float:
        value = proposal.value
        if not 0 < value < math.inf:
            raise TraitError(
                f"c.GPUSpawner.{proposal.trait.name} must be a number of seconds > 0, got {value!r}"
            )
        return float(value)


def memory_limit(setting: str, on_swarm: bool = False) -> int:
    """c.GPUSpawner.park_memory_limit in bytes (each node's, on a swarm); "" for a quarter of
    this host's memory, on one host."""
    if not setting.strip():
        if on_swarm:
            raise GPUConfigError(
                "c.GPUSpawner.park_memory_limit: on a swarm, say how much host memory each "
                'node may give parked work, such as "256G"'
            )
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    return parse_memory(setting, "c.GPUSpawner.park_memory_limit", GPUConfigError)
