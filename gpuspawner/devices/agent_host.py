"""A swarm node's driver calls, made by its agent (`gpuspawner agent`) for the hub.

The hub's host cannot reach the CUDA processes of another machine, so on a swarm each
node's agent parks and restores its own containers' processes (their host PIDs, as its
monitor answers gave them) and reads back what its driver holds parked. The hub asks
with the agent token; the agent makes the calls with `checkpoint.OnThisHost`, one at a
time, and answers the driver's refusal with its CUresult, raised here as it would be on
one host.

A call that gets no answer is HostUnreachable. A park whose answer was lost may have
parked the work: the agent is asked at once to bring it back, so the work is resident
either way as far as anyone can tell, which is what a failed park must leave.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any
from urllib.error import HTTPError
from urllib.request import ProxyHandler, Request, build_opener

from .checkpoint import CheckpointError, HostUnreachable

PARK_PATH, UNPARK_PATH, PARKED_PATH = "/v1/park", "/v1/unpark", "/v1/parked"
REFUSED = 409  # the HTTP status of the driver's refusal: its CUresult is in the body
CALL_TIMEOUT = 300.0  # seconds: a park waits for queued GPU work, then copies GiBs
READ_BACK_TIMEOUTS = 5  # a read-back's time, in the agents' sample timeouts
DIRECT = build_opener(ProxyHandler({}))  # to the nodes, never through the hub's HTTP proxy


@dataclass(frozen=True)
class AgentAccess:
    """Where each node's agent listens, and the token it wants."""

    port: int = 0  # 0: no agents
    token: str = ""
    timeout: float = 2.0


NO_AGENTS = AgentAccess()


class AgentHost:
    """The driver calls on node `node`'s processes, made by its agent."""

    def __init__(self, node: str, address: Callable[[], str], agents: AgentAccess) -> None:
        self.node, self.address, self.agents = node, address, agents

    def park(self, pids: Sequence[int], timeout_ms: int) -> None:
        if not pids:
            return  # nothing on the GPU to park (a person parked for the other's turn)
        try:
            self._call(PARK_PATH, {"pids": list(pids), "timeout_ms": timeout_ms})
        except HostUnreachable:
            with contextlib.suppress(HostUnreachable, CheckpointError):  # its outcome unknown
                self._call(UNPARK_PATH, {"pids": list(pids)})
            raise

    def unpark(self, pids: Sequence[int]) -> None:
        if pids:  # none: a person who waited for a turn, whose work was never on the GPU
            self._call(UNPARK_PATH, {"pids": list(pids)})

    def parked(self, containers: Mapping[str, list[str]], settle: bool) -> dict[str, list[int]]:
        body = {"containers": dict(containers), "settle": settle}
        # Quick for the driver (states only): a node that is down must not hold a hub's
        # start for a park's timeout.
        answer = self._call(PARKED_PATH, body, self.agents.timeout * READ_BACK_TIMEOUTS)
        found = answer.get("parked")
        if not isinstance(found, Mapping) or not all(
            isinstance(pids, list) and all(isinstance(p, int) for p in pids)
            for pids in found.values()
        ):
            raise HostUnreachable(f"the agent on node {self.node} answered no list of PIDs")
        return {str(key): pids for key, pids in found.items()}

    def _call(
        self, path: str, body: dict[str, Any], timeout: float = CALL_TIMEOUT
    ) -> dict[str, Any]:
        where = f"the agent on node {self.node}"
        try:
            address = self.address()
        except Exception as error:  # the manager's answer, whatever went wrong with it
            raise HostUnreachable(f"{where} cannot be found: {error}") from None
        try:
            request = Request(
                f"http://{address}:{self.agents.port}{path}",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            if self.agents.token:
                request.add_header("Authorization", f"Bearer {self.agents.token}")
            with DIRECT.open(request, timeout=timeout) as reply:
                answer = json.loads(reply.read())
        except HTTPError as error:
            said = _json(error)
            if error.code == REFUSED and isinstance(said.get("code"), int):
                raise CheckpointError(
                    str(said.get("action", "")), int(said.get("pid", 0)), said["code"]
                ) from None
            raise HostUnreachable(f"{where} refused: {said.get('error', error)}") from None
        except (OSError, ValueError, HTTPException) as error:
            raise HostUnreachable(f"{where} did not answer: {error}") from None
        if not isinstance(answer, dict):
            raise HostUnreachable(f"{where} answered what no agent says")
        return answer


def refusal_json(error: CheckpointError) -> dict[str, Any]:
    """The driver's refusal as the agent answers it (`REFUSED`)."""
    return {"error": str(error), "action": error.action, "pid": error.pid, "code": error.code}


def _json(error: HTTPError) -> dict[str, Any]:
    try:
        said = json.loads(error.read())
    except (OSError, ValueError):
        return {}
    return said if isinstance(said, dict) else {}
