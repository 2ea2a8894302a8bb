"""Moving a user's home to another node of a swarm whose nodes keep their own homes
(`gpuspawner move-home`, scripts):

    POST /hub/api/gpu-homes/USER   {"to": NODE, "empty_old": false}
                                   (custom:gpus:admin and admin:users)

The home is copied to NODE and checked there; only then does the hub write NODE down as
the home's (the user's next servers start there) and, with "empty_old", empty the old
copy. 200 with the home as it is now; 409 with the reason while the user has a server or
a job holding GPUs (stop it first), and whenever the copy did not hold (the home stays
where it was). The user's starts are refused, and their jobs wait, while the copy runs.
"""

from __future__ import annotations

from jupyterhub.utils import url_path_join
from tornado import web

from ...core.jobs import HOLDING
from ..base import access
from ..base.answers import JSONHandler
from ..books.broker import Broker
from ..books.served import Route, Served, routes
from .nodes import MoveFailed, homes_json

KEYS = {"to", "empty_old"}


class HomeHandler(Served, JSONHandler):
    async def post(self, name: str) -> None:
        access.require(self, access.ADMIN)
        access.require(self, "admin:users")  # it copies and empties a user's files
        broker = self.broker
        if not broker.homes.on_nodes:
            raise web.HTTPError(404, "Homes are not each node's own on this hub: none moves")
        user = self.find_user(name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {name}")
        body = self.get_json_body() or {}
        if not isinstance(body, dict) or set(body) - KEYS:
            raise web.HTTPError(400, 'The body must be {"to": NODE} and may add "empty_old"')
        node, empty_old = body.get("to"), body.get("empty_old", False)
        nodes = sorted({gpu.node for gpu in broker.site.gpus})
        if node not in nodes:
            raise web.HTTPError(400, f"'to' must be one of the nodes: {', '.join(nodes)}")
        if not isinstance(empty_old, bool):
            raise web.HTTPError(400, "'empty_old' must be true or false")
        running = sorted(s.name or "(default)" for s in user.spawners.values() if s.active)
        jobs = broker.jobs.unfinished() if broker.jobs is not None else []
        running += [j.server for j in jobs if j.user_id == user.id and j.state in HOLDING]
        if running:
            raise web.HTTPError(
                409, f"Stop {name}'s servers first ({', '.join(running)}): they use the home"
            )
        try:
            await broker.homes.move(user.name, node, empty_old, broker.clock())
        except MoveFailed as failed:
            raise web.HTTPError(409, str(failed)) from None
        self.log.info("gpuspawner: %s moved %s's home to %s", self.current_user.name, name, node)
        [moved] = [h for h in homes_json(broker.homes) if h["user"] == user.name]
        self._answer({**moved, "old_emptied": empty_old})


def handlers(hub_prefix: str, broker: Broker) -> list[Route]:
    return routes(broker, (url_path_join(hub_prefix, "api/gpu-homes/([^/]+)"), HomeHandler))
