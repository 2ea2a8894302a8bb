"""The ways of sharing the machine the simulator compares, each as a few switches.

Every pool policy runs the same real core (pool, placement, limits); they
differ in who stops idle servers:
- nobody (people stop their own servers, or not);
- jupyterhub-idle-culler alone, as in a JupyterHub without gpuspawner's
  monitor: only Jupyter activity (a browser tab, a person at the notebook)
  keeps a server alive, so an unattended training run counts as idle;
- gpuspawner's monitor as well: busy GPUs count as activity, and
  gpu_idle_timeout / max_age stop servers through `culling.decide`. Once as
  the site says what a busy GPU is (as shipped: utilisation alone), once with
  compute processes counting too (gpu_processes_count_as_busy = True, the
  default until the first run of this simulator showed what it costs).
The baseline is the machine split up front: each person uses only the GPUs
dealt to them, which nobody else may take, all week.
The queue row adds gpuspawner's waiting line (core.line, whose hub side is
still to come) to the best of the culling policies: a start that finds no
room waits in line instead of being refused. The jobs row adds gpuspawner's
jobs to that (`board.JobsReplay`): training runs wait as jobs, fill the GPUs
nobody waits for, and give way to people's starts. There is no GPU slicing
yet: when it comes, it is one more row here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuspawner.core.culling import Busyness
from gpuspawner.core.parking import TURN_QUANTUM

from .site import Site


@dataclass(frozen=True)
class Policy:
    name: str
    fixed: bool = False  # GPUs dealt to people up front, instead of one shared pool
    culler: bool = False  # jupyterhub-idle-culler runs (idle_timeout, or its own --timeout)
    monitor: Busyness | None = None  # gpuspawner's GPU monitor, with what counts as busy
    queue: bool = False  # a start that finds no room waits in gpuspawner's line (core.line)
    shipped: bool = False  # what gpuspawner's example config runs: the targets apply to it
    jobs: bool = False  # training runs are jobs (with the line: they give way to its starts)
    grace: float | None = None  # jobs' preempt_grace in seconds, instead of the site's
    parking: bool = False  # jobs park for people, people park at their GPU-idle limit
    parks_nccl: bool = False  # with parking: multi-GPU (NCCL) runs park too (no driver yet)
    turns: bool = False  # with parking: two people's 1-GPU servers may share a GPU in turns
    turn_quantum: float = TURN_QUANTUM  # seconds: a person's turn while both want the GPU


def policies(site: Site) -> tuple[Policy, ...]:
    return (
        Policy("fixed GPUs per person", fixed=True),
        Policy("pool, no culling"),
        Policy("pool + idle culler", culler=True),
        Policy(
            "pool + GPU-aware culling (shipped)", culler=True, monitor=site.busyness, shipped=True
        ),
        Policy(
            "pool + GPU-aware, processes count as busy",
            culler=True,
            monitor=replace(site.busyness, processes_count=True),
        ),
        Policy("pool + queue + GPU-aware culling", culler=True, monitor=site.busyness, queue=True),
        with_jobs(site),
        with_parking(site),
    )


def with_jobs(site: Site, grace: float | None = None) -> Policy:
    shown = "" if grace is None else f", preempt_grace {grace:.0f} s"
    return Policy(
        f"pool + queue + GPU-aware culling + jobs{shown}",
        culler=True,
        monitor=site.busyness,
        queue=True,
        jobs=True,
        grace=grace,
    )


def training_policies(site: Site) -> tuple[Policy, ...]:
    """The training team's week: its runs as notebook servers under the shipped policy,
    against its runs as jobs: with the site's preempt_grace,
    and with one of a minute (what moves people's waits: a start that makes a job give way
    waits for its grace to run out, at most), and as jobs that park instead (issue #29):
    multi-GPU runs (NCCL programs, which today's driver cannot checkpoint) giving way by
    SIGTERM, and, for what a driver that could would give, parking too; and parking with
    turns between people (`turn_quantum`), an admin's choice."""
    return (
        Policy(
            "runs as servers: pool + GPU-aware culling (shipped)",
            culler=True,
            monitor=site.busyness,
        ),
        with_jobs(site),
        with_jobs(site, grace=60.0),
        with_parking(site),
        replace(with_parking(site), name=f"{with_parking(site).name}, NCCL too", parks_nccl=True),
        with_turns(site),
    )


def with_parking(site: Site) -> Policy:
    return replace(
        with_jobs(site), name="pool + queue + GPU-aware culling + jobs + parking", parking=True
    )


def with_turns(site: Site) -> Policy:
    parking = with_parking(site)
    return replace(
        parking,
        name=f"{parking.name} + turns of {parking.turn_quantum / 60:.0f} min",
        turns=True,
    )
