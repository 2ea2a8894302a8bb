"""`gpuspawner move-home USER --to NODE`: a user's home to another swarm node, through the
hub (which copies it, checks the copy and keeps the record of where each home is; see
`hub.homes.api`). The hub and an admin's token come from --api-url and --token, else from
JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN."""

from __future__ import annotations

import argparse
import sys
from urllib.parse import quote

from .job import HubSaid, call, reach

COPY_TIMEOUT = 4 * 3600  # seconds: a large home takes a while, and the hub answers at the end


def main(args: argparse.Namespace) -> int:
    reached = reach(args, needs_user=False)
    if reached is None:
        return 2
    api, token, _ = reached
    body = {"to": args.to, "empty_old": bool(args.empty_old)}
    url = f"{api}/gpu-homes/{quote(args.user, safe='')}"
    try:
        home = call("POST", url, token, body, timeout=COPY_TIMEOUT)
    except HubSaid as said:
        print(f"gpuspawner move-home: {said}", file=sys.stderr)
        return 1
    old = "emptied." if home["old_emptied"] else "kept: remove it on its node once unneeded."
    print(
        f"{home['user']}'s home {home['volume']} is on {home['node']} now; the old copy is {old}."
    )
    return 0
