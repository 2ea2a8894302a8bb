"""`gpuspawner job`: a user's GPU jobs from a terminal, through the hub's REST API.

Inside a notebook server everything it needs is in the environment (the hub's
API, the server's own token, which may manage its user's jobs, and the user);
elsewhere, pass a token of one's own. What the hub refuses is printed as the
hub says it, and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode

from ..core.words import ordinal

COLUMNS = ("id", "state", "profile", "runs", "progress", "gpus", "reason")


class HubSaid(Exception):
    """The hub refused: its status and message."""


def reach(args: argparse.Namespace, needs_user: bool) -> tuple[str, str, str] | None:
    """The hub's API, a token and (`needs_user`) whose, from the options or else from the
    environment every notebook server has; None once it has said what is missing."""
    api = (args.api_url or os.environ.get("JUPYTERHUB_API_URL", "")).rstrip("/")
    token = args.token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
    user = getattr(args, "user", "") or os.environ.get("JUPYTERHUB_USER", "")
    if api and token and (user or not needs_user):
        return api, token, user
    names = ("--api-url, --token and --user", ", JUPYTERHUB_API_TOKEN and JUPYTERHUB_USER")
    if not needs_user:
        names = ("--api-url and --token", " and JUPYTERHUB_API_TOKEN")
    print(
        f"gpuspawner {args.command}: give {names[0]} (or run it inside a notebook server, "
        f"where JUPYTERHUB_API_URL{names[1]} are set)",
        file=sys.stderr,
    )
    return None


def main(args: argparse.Namespace) -> int:
    reached = reach(args, needs_user=True)
    if reached is None:
        return 2
    api, token, user = reached
    jobs = f"{api}/users/{quote(user, safe='')}/gpu-jobs"
    try:
        if args.action == "submit":
            body: dict[str, Any] = {"profile": args.profile}
            if args.path.endswith(".ipynb"):
                body["notebook"] = args.path
            else:
                body.update(script=args.path, args=args.args)
            print(line(call("POST", jobs, token, body)))
        elif args.action == "list":
            print(listing(call("GET", f"{jobs}{page_query(args)}", token)))
        elif args.action == "logs":
            print(logs(call("GET", f"{jobs}/{args.id}", token)))
        else:
            print(line(call("DELETE", f"{jobs}/{args.id}", token)))
    except HubSaid as said:
        print(f"gpuspawner job: {said}", file=sys.stderr)
        return 1
    return 0


def call(method: str, url: str, token: str, body: Any = None, timeout: float = 30) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read()).get("message", error.reason)
        except ValueError:
            message = error.reason
        raise HubSaid(f"{error.code}: {message}") from None
    except urllib.error.URLError as error:
        raise HubSaid(f"cannot reach the hub at {url}: {error.reason}") from None


def row(job: dict[str, Any]) -> dict[str, str]:
    progress = job.get("progress") or {}
    cells = progress.get("cells")
    state = job["state"] + (f" ({ordinal(job['place'])} in line)" if job.get("place") else "")
    return {
        "id": str(job["id"]),
        "state": state,
        "profile": job["profile"],
        "runs": job.get("notebook") or " ".join([job["script"], *job.get("args", [])]),
        "progress": f"cell {cells['done']} of {cells['total']}" if cells else "",
        "gpus": str(len(job["gpus"])) if job["gpus"] else "",
        "reason": job["reason"],
    }


def table(jobs: list[dict[str, Any]]) -> str:
    if not jobs:
        return "No jobs."
    rows = [dict(zip(COLUMNS, (c.upper() for c in COLUMNS), strict=True))]
    rows += [row(job) for job in jobs]
    widths = {c: max(len(r[c]) for r in rows) for c in COLUMNS[:-1]}
    return "\n".join(
        "  ".join([*(r[c].ljust(widths[c]) for c in COLUMNS[:-1]), r["reason"]]).rstrip()
        for r in rows
    )


def page_query(args: argparse.Namespace) -> str:
    """`?limit=…&after=…`, as far as they were given (the hub has its own default)."""
    asked = {name: getattr(args, name, None) for name in ("limit", "after")}
    given = {name: value for name, value in asked.items() if value is not None}
    return f"?{urlencode(given)}" if given else ""


def listing(page: dict[str, Any]) -> str:
    """A page of the user's jobs, and how to list the ended ones after it, if any follow."""
    shown = table(page["jobs"])
    after = page.get("next_after")
    return (
        shown if after is None else f"{shown}\nMore ended jobs: gpuspawner job list --after {after}"
    )


def line(job: dict[str, Any]) -> str:
    shown = row(job)
    return f"job {shown['id']} ({shown['runs']}): {shown['state']}" + (
        f" — {job['reason']}" if job["reason"] else ""
    )


def logs(job: dict[str, Any]) -> str:
    progress = job.get("progress") or {}
    parts = [line(job)]
    if row(job)["progress"]:
        parts.append(row(job)["progress"])
    if progress.get("error"):
        parts.append(f"error: {progress['error']}")
    parts.extend(progress.get("tail") or [])
    wrote = "log.txt, and the executed notebook" if job.get("notebook") else "log.txt"
    parts.append(f"outputs: ~/{job['outputs']}/ ({wrote})")
    return "\n".join(parts)
