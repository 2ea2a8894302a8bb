"""GPUSpawner's own settings, as a mixin: the hub's spawner and the admin tools both read them.

Every trait reads as admin documentation: what it does, its unit, an example.
"""

from __future__ import annotations

import math
from typing import Any

from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    HasTraits,
    Integer,
    List,
    TraitError,
    Unicode,
    Union,
    validate,
)

from ..core.limit_keys import help_lines
from ..core.line import DEFAULT_RESERVE_AFTER
from ..core.placement import PLACEMENT_POLICIES
from ..devices.simulated import MACHINE
from .parking import ParkingSettings

# The number settings: each one's unit, and whether 0 is allowed (none may be infinite).
FINITE_NUMBERS = {
    "monitor_interval": ("seconds", False),
    "usage_retention_days": ("days", False),
    "usage_half_life_days": ("days", False),
    "line_reserve_after": ("seconds", True),
    "warn_before_cull": ("seconds", True),
    "calendar_warning": ("seconds", True),
}


class GPUSettings(ParkingSettings, HasTraits):
    simulate_gpus = Integer(
        0,
        config=True,
        help="""Run on this many simulated GPUs instead of asking NVML.

        For demos and tests on machines without GPUs: the pool, the form, the
        limits and the Docker device requests work as on a GPU server. Leave at
        0 on a real GPU server. Example: `c.GPUSpawner.simulate_gpus = 8`.
        """,
    )
    simulated_host = Union(
        [List(Dict()), Unicode()],
        default_value=[],
        config=True,
        help="""Instead of simulate_gpus: a simulated machine described GPU by GPU, for demos
        and tests of mixed hosts (models, memory, MIG layouts) on machines without GPUs.

        A list of dicts, each for `count` GPUs (default 1) of a `model` (default an
        H100) with `memory` (such as "80G"); `mig`, a list of MIG profiles, puts
        them in MIG mode with those instances (`mig_slices`: the GPU's compute
        slices, 7 unless said). Or the path of a JSON file holding such a list,
        read again on every monitor tick, so a MIG layout can change while the hub
        runs. Which GPUs are shared is `shared_gpus`'s business, as on real GPUs.
        Example (2 exclusive H100s, an A100 cut in 7, an L40S to share)::

            c.GPUSpawner.simulated_host = [
                {"model": "NVIDIA H100 80GB HBM3", "memory": "80G", "count": 2},
                {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["1g.10gb"] * 7},
                {"model": "NVIDIA L40S", "memory": "48G"},
            ]
            c.GPUSpawner.shared_gpus = {3: 4}
        """,
    )
    shared_gpus = Dict(
        config=True,
        help="""GPUs several servers use at once, by index or UUID: GPU → number of slots.

        Each slot goes to one server; the servers on one GPU take turns on it
        (time-slicing) and share its memory with NO isolation: one server can use
        up the memory the others need, and see their activity. Where that is not
        acceptable, use MIG instead. A slot counts as 1/slots of a GPU in limits.
        A value may also be a dict with `slots` and, for sites that run NVIDIA
        MPS on the GPU, `mps_memory_limit` (such as "10G"): each server's
        container then gets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which CUDA clients
        honour. A GPU in MIG mode cannot be shared. Example::

            c.GPUSpawner.shared_gpus = {3: 4, "GPU-8f2c…": {"slots": 2, "mps_memory_limit": "20G"}}
        """,
    )
    simulated_load_file = Unicode(
        "",
        config=True,
        help="""With simulate_gpus: a JSON file that makes simulated GPUs look busy, hot or broken.

        An object from a GPU's UUID or index (or a MIG instance's UUID or
        "index:position") to any of `utilization_percent`, `memory_used_gib`,
        `temperature_celsius`, `power_watts`, `processes` and `health` (a reason:
        the GPU is then unhealthy). A process is a PID, or
        `{"container": NAME, "utilization_percent": P}`: a process of that container
        (its name or id) using P % of the GPU, which is how a simulated shared GPU
        says which of its servers is busy. Read on every monitor tick. Example:
        `{"0": {"utilization_percent": 95}}`.
        """,
    )
    simulated_machine = Unicode(
        MACHINE,
        config=True,
        help="""With simulate_gpus or simulated_host: the simulated machine's name, from which
        its GPUs' UUIDs are made. Hubs with the same name simulate the same GPUs, so two
        hubs on one Docker engine see each other's servers as GPU use outside JupyterHub,
        as on one real machine; give each its own name to simulate two machines (the test
        suite's parallel workers do). Example: `c.GPUSpawner.simulated_machine = "demo-2"`.
        """,
    )
    monitor_interval = Float(
        10.0,
        config=True,
        help="""Seconds between two looks at Docker and NVML (telemetry, health,
        GPUs used outside JupyterHub, GPU activity, containers still to remove).
        More than 0. Example: `c.GPUSpawner.monitor_interval = 5`.""",
    )

    usage_ledger_file = Unicode(
        "gpuspawner-usage.sqlite",
        config=True,
        help="""The usage ledger: an SQLite file recording every grant's start, end, GPUs
        and busy time, for the waiting line's fair order, GPU-hour budgets and
        `gpuspawner usage`. A relative path is relative to the hub's working
        directory, like JupyterHub's own database. Back it up with the hub's
        database. Example: `c.GPUSpawner.usage_ledger_file = "/var/lib/jupyterhub/usage.sqlite"`.
        """,
    )
    usage_retention_days = Float(
        180.0,
        config=True,
        help="""Days the usage ledger keeps a grant after it ended; older ones are dropped
        (hourly), so the file stays small. Reports and budgets look no further back.
        Example: `c.GPUSpawner.usage_retention_days = 365`.""",
    )

    usage_half_life_days = Float(
        7.0,
        config=True,
        help="""Half-life, in days, of the recent GPU use that orders the waiting line.

        Within one group priority, whoever used fewer GPU-hours recently starts first;
        each GPU-hour counts less as it ages, by half per half-life (Slurm's
        PriorityDecayHalfLife, also 7 days by default). Shorter forgets sooner: 1
        makes last week's heavy user nearly equal again by Monday. Read from the
        usage ledger, so a hub restart forgets nothing. More than 0.
        Example: `c.GPUSpawner.usage_half_life_days = 3`.""",
    )
    line_reserve_after = Float(
        DEFAULT_RESERVE_AFTER,
        config=True,
        help="""Seconds the head of the waiting line waits before GPUs are kept for it.

        Until then, anyone further back whose request fits starts on freed GPUs at
        once (backfill: no GPU idles while someone it fits waits). After it, freed
        GPUs gather for the head until it can start, so a 4-GPU request is never
        starved by a stream of 1-GPU ones. Shorter favours big requests, longer
        keeps GPUs busier. 0 or more. Example: `c.GPUSpawner.line_reserve_after = 300`.""",
    )

    ignore_gpu_containers = List(
        Unicode(),
        config=True,
        help="""Containers that reach GPUs only to watch them, which must not keep GPUs
        out of the pool: by container name or image, shell-style wildcards allowed.

        A container started outside JupyterHub that can reach a GPU (`--gpus all`,
        `--gpus 2`, a device ID, a CDI name, an NVIDIA runtime, a GPU device node,
        privileged mode) keeps that GPU out of the pool while it runs. Monitoring
        agents reach every GPU without using it: name them here. The hub does not
        inspect them on its looks at Docker, and never looks past one of its own
        servers, whatever its name. Example::

            c.GPUSpawner.ignore_gpu_containers = [
                "dcgm-exporter", "*/k8s/dcgm-exporter:*",
            ]
        """,
    )
    avoid_gpus_with_foreign_processes = Bool(
        False,
        config=True,
        help="""Keep a free GPU out of new allocations while NVML shows compute
        processes on it that no server of the hub runs (a colleague's job
        started outside JupyterHub). GPUs named in other containers' device
        requests are always kept out.""",
    )
    gpu_busy_threshold = Float(
        5.0,
        config=True,
        help="""Percent GPU utilisation at or above which a GPU counts as busy: its
        server counts as active for the idle culler, and its gpu_idle_timeout
        clock stops.""",
    )
    gpu_processes_count_as_busy = Bool(
        False,
        config=True,
        help="""Count a GPU with compute processes as busy, whatever its utilisation.

        Off by default: a notebook kernel that once touched the GPU keeps a CUDA
        context (a process) while it sits idle, so with this on an idle notebook
        never counts as idle and gpu_idle_timeout never returns its GPU
        (benchmarks/README.md, "Utilisation over a week", measures the cost:
        16 % of held GPU-hours busy, against 56 % with it off). Turn it on to
        spare servers that keep a model loaded between runs. Example:
        `c.GPUSpawner.gpu_processes_count_as_busy = True`.""",
    )
    warn_before_cull = Float(
        900.0,
        config=True,
        help="""Seconds before the hub stops a GPU server for its max_age or
        gpu_idle_timeout that its user is warned, in JupyterLab (the gpuspawner-lab
        extension in the notebook images). The status bar shows the time left all
        along; the warning is a notification that stays until closed. 0: no
        warning. Example: `c.GPUSpawner.warn_before_cull = 30 * 60`.""",
    )
    calendar_warning = Float(
        3600.0,
        config=True,
        help="""Seconds before a booking or a drain of the calendar opens on a running
        server's GPUs that its user is warned in JupyterLab: the server stops when the
        window opens (files kept), unless the booking lets running servers finish. The
        lease shows the stop all along. 0: no warning. Example:
        `c.GPUSpawner.calendar_warning = 2 * 3600` (see docs/calendar.md).""",
    )

    @validate(*FINITE_NUMBERS)
    def _finite_number(self, proposal: Any) -> float:
        unit, zero_allowed = FINITE_NUMBERS[proposal.trait.name]
        value = proposal.value
        if not ((value >= 0 if zero_allowed else value > 0) and value < math.inf):
            raise TraitError(
                f"c.GPUSpawner.{proposal.trait.name} must be a number of {unit} "
                f"{'≥ 0' if zero_allowed else '> 0'}, got {value!r}"
            )
        return float(value)

    exclude_gpus = List(
        Union([Unicode(), Integer()]),
        config=True,
        help="""GPUs to keep out of the pool, by UUID ("GPU-…") or NVML index.

        For a GPU reserved for the host's display or for jobs outside
        JupyterHub. Example: `c.GPUSpawner.exclude_gpus = [7]`.
        """,
    )
    placement = Enum(
        list(PLACEMENT_POLICIES),
        "packed",
        config=True,
        help="""How to choose GPUs for a server.

        "packed" (default) fills partly used GPU pairs and quads first, keeping
        whole aligned blocks free for multi-GPU servers, and puts MIG instances
        and shared slots on the GPU already most used; "spread" keeps servers
        apart instead. Where one pool spans several machines, a server's GPUs
        come from one: "packed" the machine with the fewest free that fit,
        "spread" the one with the most.
        """,
    )
    profiles = List(
        Dict(),
        config=True,
        help="""The choices on the spawn form, in KubeSpawner's profile_list shape.

        Each entry: `display_name`, `slug`, `description`, `default`,
        `spawner_override` (settings for that profile, such as `image`,
        `mem_limit`, `cpu_limit`), and what GPU it gets, one of: `gpus` (a number
        of whole GPUs), `mig_profile` (one MIG instance, such as "1g.10gb"),
        `shared` (True: one slot of a shared GPU); narrowed by `gpu_model` (a
        pattern such as "*A100*"), `min_gpu_memory` (such as "40G") and `nodes`
        (the machines it may run on, such as ["gpu-new-1"]: where one pool spans
        several; a machine not there now is no error, and a user's groups'
        `nodes` apply too). `turns` (True, on a 1-GPU profile, with `parking`): when no
        GPU is free, share one with one other person in turns of `turn_quantum`
        (docs/parking.md). Empty:
        CPU only, 1, 2, 4 and all whole GPUs, one MIG instance of each profile the
        machine has, a shared slot if any GPU is shared. Example::

            c.GPUSpawner.profiles = [
                {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
                {"display_name": "1 × H100", "slug": "gpu-1", "gpus": 1, "default": True,
                 "gpu_model": "*H100*", "spawner_override": {"mem_limit": "64G"}},
                {"display_name": "A slice", "slug": "slice", "mig_profile": "1g.10gb"},
                {"display_name": "Shared GPU", "slug": "shared", "shared": True},
            ]
        """,
    )
    group_limits = Dict(
        config=True,
        help="Limits per JupyterHub group: group name → dict of limits.\n\n"
        "GPUs are counted in GPU-equivalents (a whole GPU 1, a MIG instance its share of its "
        "GPU's compute slices, a shared GPU's slot 1/slots); GPU-hours count the "
        "GPU-equivalents held (a 1/7 MIG instance held an hour is 1/7 GPU-hour). The keys "
        '(docs/configuration.md, "Limits per group", has them as a table):\n\n'
        + help_lines()
        + """ Example::

    c.GPUSpawner.group_limits = {
        "students": {"max_gpus_per_user": 1, "max_gpus_group": 4,
                     "gpu_hours_per_week": 40},
        "researchers": {"max_gpus_per_user": 4, "max_wait": 1800,
                        "max_waiting_per_user": 2},
    }
""",
    )
    default_limits = Dict(
        config=True,
        help="""Limits for users in no group listed in `group_limits`, and the
        defaults for keys a listed group leaves out. Same keys as
        `group_limits`; `max_gpus_group` and `gpu_hours_per_week_group` here cap
        all users in no listed group together. Empty: unlimited (`gpuspawner
        doctor` warns where `group_limits` lists groups).
        """,
    )
    limit_admins = Bool(
        False,
        config=True,
        help="Apply group limits to hub admins too. By default admins are unlimited.",
    )
    form_template_paths = List(
        Unicode(),
        config=True,
        help="""Folders searched for `gpuspawner_form.html` before the packaged
        template, to restyle the spawn form.""",
    )
    notebook_uid = Integer(
        1000,
        config=True,
        help="""The uid the notebook runs as inside its container (jovyan in gpuspawner's
        images and in Jupyter's docker-stacks).

        Host folders the hub creates for `volumes` (homes such as
        `/srv/home/{username}`) are given to this uid, mode 0700, so the notebook
        can write them. Folders that already exist are left as they are. Named
        volumes need nothing: Docker copies the image's folder, owner included,
        into an empty volume. Example: `c.GPUSpawner.notebook_uid = 1000`.""",
    )
    notebook_gid = Integer(
        1000,
        config=True,
        help="""The group id given, with `notebook_uid`, to host folders the hub creates for
        `volumes`. 1000 in gpuspawner's images; 100 (users) in Jupyter's docker-stacks.
        Example: `c.GPUSpawner.notebook_gid = 100`.""",
    )
