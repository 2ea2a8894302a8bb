"""`gpuspawner simulate`: the GPU work of a hub on simulated GPUs, so that a demo on a machine
without GPUs behaves as a GPU server would.

Each running server of the hub that holds GPUs runs one CUDA process on each of them: a
person's server a kernel that has loaded a model and waits for its user (6 GiB, idle),
a job's server a training run (20 GiB, 95 %). A person who joined a GPU in turns (the
second on it) runs its cells on the CPU: its kernel opens no GPU before a cell wakes it, and
a process of it on the GPU would wake it at once. They are written into the hub's
c.GPUSpawner.simulated_load_file, which the simulated GPUs (NVML's stand-in) and the
checkpoint driver's stand-in read. With parking on, the demo then shows what the hub does
on GPUs: a job parked for a person's start and back when they leave, a person's idle
server parked at its group's GPU-idle limit while a job runs on its GPU, and woken by a
cell run. Without it, people's servers are stopped at that limit as usual.

It owns the load file: every look rewrites it from the containers Docker runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
from docker.errors import DockerException

from ..core.jobs import SERVER_PREFIX
from ..engine.base import LookPast, Seen
from ..engine.docker import DockerEngine
from . import hubconfig

PERSON = {"memory_gib": 6, "utilization_percent": 0}  # a kernel with a model loaded, waiting
JOB = {"memory_gib": 20, "utilization_percent": 95}  # a training run


def main(args: argparse.Namespace) -> int:
    try:
        site = hubconfig.load(args.config or hubconfig.DEFAULT_PATH, None, args.hub_arguments)
    except hubconfig.ConfigError as error:
        print(f"gpuspawner simulate: {error}", file=sys.stderr)
        return 1
    spawner = site.spawner
    load_file = args.simulated_load or spawner.simulated_load_file
    if not load_file:
        print(
            "gpuspawner simulate: the hub reads no load file: set "
            "c.GPUSpawner.simulated_load_file, or pass --simulated-load FILE",
            file=sys.stderr,
        )
        return 1
    engine = DockerEngine(docker.from_env().api)
    look = LookPast(tuple(spawner.ignore_gpu_containers), spawner.prefix)
    print(f"gpuspawner simulate: the work of {spawner.prefix}'s servers into {load_file}")
    written = None
    while True:
        try:
            load = work(engine.containers(look), spawner.prefix)
        except DockerException as error:  # dockerd restarting: the last work stays
            print(f"gpuspawner simulate: Docker did not answer: {error}", file=sys.stderr)
        else:
            if load != written:
                write(Path(load_file), load)
                written = load
        if args.once:
            return 0
        time.sleep(args.interval)


def work(containers: Iterable[Seen], hub: str) -> dict[str, Any]:
    """The load file's content: by GPU (or MIG instance) UUID, one process per running
    server of `hub` holding it."""
    ours = [
        (seen, seen.server)
        for seen in containers
        if seen.running and seen.server is not None and seen.of_hub(hub)
    ]
    first_in_turns: dict[str, float] = {}  # by GPU: when the first person in turns on it began
    for _, server in ours:
        for device in server.uuids if server.turns else ():
            since = server.since or 0.0
            first_in_turns[device] = min(first_in_turns.get(device, since), since)
    load: dict[str, Any] = {}
    for container, server in ours:
        if server.turns and any(first_in_turns[d] < (server.since or 0.0) for d in server.uuids):
            continue  # joined in turns: no CUDA process until a cell wakes it
        kind = JOB if server.server.startswith(SERVER_PREFIX) else PERSON
        for device in server.uuids:
            device_load = load.setdefault(device, {"processes": []})
            # a process of this run of the container: a restart ends it, and starts another
            process = {"container": container.id, "run": container.started_at, **kind}
            device_load["processes"].append(process)
    return load


def write(path: Path, load: dict[str, Any]) -> None:
    """All at once (a rename): the hub never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as out:
        json.dump(load, out, indent=1, sort_keys=True)
    os.replace(out.name, path)
