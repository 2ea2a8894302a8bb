"""The `gpuspawner` command: tools for the admin of the server a gpuspawner hub runs on.

Each subcommand lives in the module of its name and is imported only when
run, so `gpuspawner --help` stays quick.
"""

from __future__ import annotations

import argparse
import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuspawner",
        description="Admin tools for a JupyterHub that shares this server's GPUs with gpuspawner.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_installed()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser(
        "doctor",
        help="check this host, the hub's config and its images; exit 1 on any failure",
        description="Check Docker, the NVIDIA Container Toolkit, the driver and GPUs, the hub's "
        "config, its images and whether containers reach the hub. One PASS, WARN or FAIL line "
        "per check, with the fix; exit status 1 if any check fails.",
    )
    _config_options(doctor)

    status = commands.add_parser(
        "status",
        help="each GPU, who holds it, and its load (works while the hub is down)",
        description="Show the GPU pool from Docker's container labels and the GPUs' telemetry, "
        "without asking the hub.",
    )
    _config_options(status)
    _prefix_option(status)

    homes = commands.add_parser(
        "homes",
        help="each user's home: its size, the containers using it, whether its user exists",
        description="List users' homes: the volumes the hub made for them and the host folders "
        "the config's volumes name, with their sizes and the containers that mount them. Homes "
        "whose user is no longer in the hub (read from its database) are marked.",
    )
    _home_options(homes)
    _prefix_option(homes)

    cleanup = commands.add_parser(
        "cleanup",
        help="remove stopped gpuspawner containers and the dangling images they leave",
        description="List (or with --yes, remove) stopped containers of gpuspawner servers, and "
        "dangling images that they used or that were built from images/. Images any other "
        "container still uses are kept. Users' homes are never cleaned up: those whose user is "
        "no longer in the hub are listed, and deleted only when named with --delete-home.",
    )
    _home_options(cleanup)
    _prefix_option(cleanup)
    cleanup.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only containers and images that also carry this label (repeatable)",
    )
    cleanup.add_argument(
        "--delete-home",
        action="append",
        default=[],
        metavar="NAME",
        help="also delete this home volume, whose user is no longer in the hub (repeatable; "
        "with --yes). Back it up first: this deletes the user's files",
    )
    cleanup.add_argument("--yes", action="store_true", help="remove them; without it, only list")

    agent = commands.add_parser(
        "agent",
        help="on each GPU node of a swarm: answer the hub's monitor with its GPUs' telemetry, "
        "and park its containers' GPU work when the hub asks",
        description="Serve this node's GPU telemetry, and the container of each GPU process, to "
        "a hub on another machine (SwarmGPUSpawner's agent_port). With the environment "
        "variable GPUSPAWNER_AGENT_TOKEN set, only requests carrying it are answered; with "
        "it, and c.GPUSpawner.parking on, the agent also parks and restores the GPU work of "
        "this node's containers with the CUDA driver (run it as root in the host's PID "
        "namespace for that).",
    )
    agent.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    agent.add_argument("--port", type=int, default=9401, help="port to listen on (default: 9401)")
    agent.add_argument(
        "--proc",
        default="/proc",
        help="the host's /proc (mount it read-only into the agent's container, e.g. at "
        "/host/proc), to tell which container runs each GPU process",
    )
    agent.add_argument(
        "--simulated-load",
        default="",
        metavar="FILE",
        help="for a node without GPUs (tests): read telemetry from a simulated GPUs' load file "
        "(c.GPUSpawner.simulated_load_file's format) instead of NVML",
    )

    simulate = commands.add_parser(
        "simulate",
        help="on simulated GPUs: play their work for a demo hub (scripts/hub starts it)",
        description="Write c.GPUSpawner.simulated_load_file from the hub's running servers, "
        "every few seconds: one CUDA process on each GPU a server holds, idle for a person's "
        "server (a kernel waiting for its user), busy for a job's. The simulated GPUs and the "
        "checkpoint driver's stand-in read it, so parking and GPU-idle limits act as on GPUs.",
    )
    _config_file(simulate)
    simulate.add_argument(
        "--simulated-load",
        default="",
        metavar="FILE",
        help="the load file to write (default: c.GPUSpawner.simulated_load_file)",
    )
    simulate.add_argument(
        "--interval", type=float, default=2.0, help="seconds between looks (default: 2)"
    )
    simulate.add_argument("--once", action="store_true", help="write it once, then exit")
    simulate.add_argument(
        "hub_arguments",
        nargs="*",
        metavar="-- JUPYTERHUB-ARGUMENTS",
        help="after --: the settings given to jupyterhub on its command line "
        "(--DockerSpawner.prefix=demo-b), which override the config file's as they do the hub's",
    )

    usage = commands.add_parser(
        "usage",
        help="GPU-hours held and busy per user or group, from the usage ledger",
        description="GPU-hours held, GPU-hours busy and busy over held, per user or per quota "
        "group charged, from the hub's usage ledger (read-only; works while the hub is down). "
        "Columns of csv and json: user or group, held_gpu_hours, busy_gpu_hours, busy_ratio.",
    )
    _config_file(usage, ", for its usage_ledger_file")
    usage.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        help="the usage ledger file (default: the config's c.GPUSpawner.usage_ledger_file, "
        "relative to this directory as it is to the hub's: run this in the hub's working "
        "directory, or name the file)",
    )
    usage.add_argument(
        "--since",
        default="7d",
        metavar="WHEN",
        help="from when: a time before now (7d, 24h, 90m, 2w) or a date or time in UTC "
        "(2026-11-01, 2026-11-01T08:00); default 7d",
    )
    usage.add_argument(
        "--by",
        choices=("user", "group"),
        default="user",
        help="one row per user (default) or "
        "per quota group charged ((none) for grants charged to none)",
    )
    usage.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="default: table"
    )
    _job_commands(commands)
    _calendar_commands(commands)
    move = commands.add_parser(
        "move-home",
        help="move a user's home to another swarm node: copied, checked, then recorded",
        description="Through the hub's REST API (admins): copy USER's home volume to NODE, "
        "check the copy entry by entry, and only then make NODE their home's node; with "
        "--empty-old, then empty the old copy. Stop the user's servers first.",
    )
    move.add_argument("user", help="whose home")
    move.add_argument("--to", required=True, help="the node to move it to, e.g. n3")
    move.add_argument("--empty-old", action="store_true", help="empty the old copy after")
    move.add_argument("--api-url", default="", help="the hub's API (JUPYTERHUB_API_URL)")
    move.add_argument("--token", default="", help="an admin's API token (JUPYTERHUB_API_TOKEN)")
    return parser


def _job_commands(commands: Any) -> None:
    job = commands.add_parser(
        "job",
        help="submit, list, follow and cancel GPU jobs through the hub's API (docs/jobs.md)",
        description="A user's GPU jobs, through the hub's REST API. The hub, the token and the "
        "user come from --api-url, --token and --user, else from JUPYTERHUB_API_URL, "
        "JUPYTERHUB_API_TOKEN and JUPYTERHUB_USER (set inside every notebook server).",
    )
    job.add_argument("--api-url", default="", help="the hub's API, e.g. http://hub:8081/hub/api")
    job.add_argument("--token", default="", help="an API token (default: JUPYTERHUB_API_TOKEN)")
    job.add_argument("--user", default="", help="whose jobs (default: JUPYTERHUB_USER)")
    actions = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    submit = actions.add_parser(
        "submit",
        help="run a notebook (.ipynb) or a script from your home as a job",
        description="Submit a notebook (run cell by cell) or a script, a path relative to your "
        "home; arguments after -- go to the script.",
    )
    submit.add_argument("--profile", required=True, help="the GPU profile's slug, e.g. gpu-1")
    submit.add_argument("path", help="the notebook or script, relative to your home")
    submit.add_argument("args", nargs="*", help="the script's arguments (after --)")
    listing = actions.add_parser(
        "list",
        help="your jobs: every one that has not ended, then those that ended latest",
        description="Every job of yours that has not ended (newest first), then the ones that "
        "ended latest; where more ended ones follow, the last line says how to list them.",
    )
    listing.add_argument("--limit", type=int, help="how many ended jobs (1 to 500; default 50)")
    listing.add_argument("--after", type=int, help="the ended jobs after this one, as a list said")
    for name, what in (("logs", "its state, progress and last output lines"), ("cancel", "")):
        action = actions.add_parser(name, help=what or "cancel a job (its outputs are kept)")
        action.add_argument("id", type=int, help="the job's number")


def _calendar_commands(commands: Any) -> None:
    """`calendar`, `book`, `drain` and `undrain`: the calendar, through the hub's API."""
    found = [
        commands.add_parser(
            "calendar",
            help="the GPUs' bookings and drains, open now or ahead (docs/calendar.md)",
            description="List the calendar's bookings and drains through the hub's REST API.",
        ),
        book := commands.add_parser(
            "book",
            help="book GPUs ahead for a user or a group",
            description="Book GPUs for a window: for yourself where your group's max_booking "
            "allows, or as an admin for anyone.",
        ),
        drain := commands.add_parser(
            "drain",
            help="take GPUs, a model, a node or the machine out for maintenance (admins)",
            description="From --start (default now), no new start lands on the GPUs and "
            "servers on them are stopped, files kept, with the reason.",
        ),
        undrain := commands.add_parser(
            "undrain", help="end a drain or a booking now, or cancel one ahead"
        ),
    ]
    for parser in found:
        parser.add_argument("--api-url", default="", help="the hub's API (JUPYTERHUB_API_URL)")
        parser.add_argument("--token", default="", help="an API token (JUPYTERHUB_API_TOKEN)")
    found[0].add_argument("--json", action="store_true", help="print the API's JSON")
    book.add_argument("--gpus", type=int, required=True, help="how many GPUs")
    book.add_argument("--start", required=True, help="ISO 8601, e.g. 2026-12-10T09:00 (UTC)")
    book.add_argument("--end", required=True, help="ISO 8601")
    book.add_argument("--user", default="", help="for whom (admins; others book for themselves)")
    book.add_argument("--group", default="", help="for a group's members instead")
    book.add_argument("--profile", default="", help="GPUs a whole-GPU profile may use")
    book.add_argument("--model", default="", help="GPUs of one model, e.g. 'NVIDIA H100'")
    book.add_argument("--let-finish", action="store_true", help="running servers run on")
    book.add_argument("--note", default="", help="what it is for")
    which = drain.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpu", action="append", dest="gpus", help="a GPU's UUID (repeatable)")
    which.add_argument("--model", help="every GPU of this model")
    which.add_argument("--node", help="every GPU of this swarm node")
    which.add_argument("--all", action="store_true", help="every GPU")
    drain.add_argument("--start", default="now", help="ISO 8601 (default: now)")
    drain.add_argument("--reason", required=True, help="what users read, e.g. 'driver update'")
    undrain.add_argument("id", type=int, help="the window's number (gpuspawner calendar)")


def _config_file(parser: argparse.ArgumentParser, why: str = "") -> None:
    parser.add_argument(
        "-f",
        "--config",
        type=Path,
        metavar="PATH",
        help=f"the hub's jupyterhub_config.py{why} (default: ./jupyterhub_config.py)",
    )


def _home_options(parser: argparse.ArgumentParser) -> None:
    _config_file(parser, ", for its database and host-folder homes")
    parser.add_argument(
        "--db-url",
        default="",
        metavar="URL",
        help="the hub's database, to tell which homes' users are gone (default: the config's "
        "c.JupyterHub.db_url, else sqlite:///jupyterhub.sqlite in this directory)",
    )


def _config_options(parser: argparse.ArgumentParser) -> None:
    _config_file(parser)
    parser.add_argument(
        "--simulate",
        type=count,
        metavar="N",
        help="use N simulated GPUs instead of NVML (overrides c.GPUSpawner.simulate_gpus; "
        "0 asks NVML)",
    )
    parser.add_argument(
        "--simulated-load",
        default="",
        metavar="FILE",
        help="a JSON file that makes simulated GPUs look busy, hot or broken, for demos and "
        'tests: {"0": {"utilization_percent": 90, "health": "lost"}, …} '
        "(default: c.GPUSpawner.simulated_load_file)",
    )


def _prefix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix",
        default="",
        help="only the servers of the hub with this c.DockerSpawner.prefix, where several "
        "hubs share one Docker engine (another hub's servers count as used outside it)",
    )


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _installed() -> str:
    """The installed version; a node may run the agent from a checkout it never installed
    (python3 -m gpuspawner.admin.cli agent, with the checkout on PYTHONPATH)."""
    try:
        return version("gpuspawner")
    except PackageNotFoundError:
        return "(not installed: run from a source checkout)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = {"book": "calendar", "drain": "calendar", "undrain": "calendar"}.get(
        args.command, args.command.replace("-", "_")
    )
    command = importlib.import_module(f"gpuspawner.admin.{module}")
    try:
        return int(command.main(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
