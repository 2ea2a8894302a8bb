"""`gpuspawner calendar`, `book`, `drain` and `undrain`: the calendar through the hub's API.

The hub, and the token, come from --api-url and --token, else from JUPYTERHUB_API_URL and
JUPYTERHUB_API_TOKEN (set inside every notebook server). What the hub refuses is printed
as the hub says it, and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.words import count_gpus
from .job import HubSaid, call, reach

COLUMNS = ("ID", "KIND", "STATE", "GPUS", "FROM", "TO", "FOR / WHY")


def main(args: argparse.Namespace) -> int:
    reached = reach(args, needs_user=False)
    if reached is None:
        return 2
    api, token, _ = reached
    calendar = f"{api}/gpu-calendar"
    try:
        if args.command == "calendar":
            windows = call("GET", calendar, token)["windows"]
            print(json.dumps(windows, indent=1) if args.json else table(windows))
        elif args.command == "book":
            print(line(call("POST", f"{calendar}/bookings", token, booking(args))))
        elif args.command == "drain":
            print(line(call("POST", f"{calendar}/drains", token, drain(args))))
        else:
            print(line(call("DELETE", f"{calendar}/{args.id}", token)))
    except HubSaid as said:
        print(f"gpuspawner {args.command}: {said}", file=sys.stderr)
        return 1
    return 0


def booking(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"gpus": args.gpus, "start": args.start, "end": args.end}
    for key in ("user", "group", "profile", "model", "note"):
        if getattr(args, key):
            body[key] = getattr(args, key)
    if args.let_finish:
        body["let_finish"] = True
    return body


def drain(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"reason": args.reason, "start": args.start}
    if args.gpus:
        body["gpus"] = args.gpus
    elif args.model:
        body["model"] = args.model
    elif args.node:
        body["node"] = args.node
    else:
        body["all"] = True
    return body


def row(window: dict[str, Any]) -> tuple[str, ...]:
    holder = window["user"] or (f"group {window['group']}" if window["group"] else "")
    why = holder or window["reason"]
    return (
        str(window["id"]),
        window["kind"],
        window["state"],
        str(len(window["gpus"])),
        _clock(window["start"]),
        _clock(window["end"]),
        f"{why} ({window['asked']})" if window["asked"] else why,
    )


def table(windows: list[dict[str, Any]]) -> str:
    if not windows:
        return "No bookings or drains."
    rows = [COLUMNS, *(row(w) for w in windows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    )


def line(window: dict[str, Any]) -> str:
    """One window in a sentence, as `book`, `drain` and `undrain` echo what they did:
    "drain 4 (ended): 1 GPU from 2026-12-11 18:00 to 2026-12-11 19:30, new fan (…)"."""
    cells = row(window)
    until = f" to {cells[5]}" if cells[5] else ""
    gpus = count_gpus(len(window["gpus"]))
    return f"{cells[1]} {cells[0]} ({cells[2]}): {gpus} from {cells[4]}{until}, {cells[6]}"


def _clock(iso: str | None) -> str:
    """ "2026-12-10 09:00" from the API's "2026-12-10T09:00:00Z"."""
    return iso[:16].replace("T", " ") if iso else ""
