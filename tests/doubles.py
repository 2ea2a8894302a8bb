"""Stand-ins for gpuspawner's seams in tests, in one place: engines, and an engine adapter as
the doctor sees one. Each offers everything its protocol states (`Engine`, `EngineAdapter`):
tests/architecture/conformance.py (mypy) and test_conformance.py (at run time) hold them to
it, so a double cannot lack what the code it stands in for would be asked."""

import copy
import json
import threading

import requests


class GoneEngine:
    """An engine whose containers are gone by the time anyone asks."""

    def containers(self, look_past=None):
        return []

    def stopped_since(self, hub, since):
        return {}

    def unreachable(self):
        return {}

    def cluster_nodes(self):
        return None

    def remove_server(self, hub, spawner_id, container_ids=()):
        return True


class Removals(GoneEngine):
    """An engine that records what it is asked to remove, and confirms nothing gone."""

    def __init__(self):
        self.asked = []
        self.was_asked = threading.Event()

    def remove_server(self, hub, spawner_id, container_ids=()):
        self.asked.append((hub, spawner_id, container_ids))
        self.was_asked.set()
        return False


class Cluster(GoneEngine):
    """Machines the engine says are down or drained, as a swarm's manager would."""

    def __init__(self):
        self.down: dict[str, str] = {}

    def unreachable(self):
        return dict(self.down)


class Adapter:
    """An engine adapter as the doctor asks it: its engine (or the error making it raises),
    and no GPU source of its own (so no agent lines)."""

    prefix = "jupyter"
    object_id = ""
    shared_homes = ""
    homes_on_nodes = False

    def __init__(self, engine=None, error=None, runs_on_nodes=False):
        self.engine, self.error, self.runs_on_nodes = engine, error, runs_on_nodes

    def make_engine(self):
        if self.error:
            raise self.error
        return self.engine

    def make_gpu_source(self, engine):
        return None  # without agents: no agent lines

    def check_storage(self):
        pass

    def home_mover(self, engine):
        return None

    def images_offered(self):
        return ["*"]

    def home(self):
        return None

    async def prepare_storage(self):
        pass

    async def prepare_image(self):
        pass


class DockerAnswers:
    """docker-py's low-level client as far as a look at the containers asks it (`docker ps`,
    `inspect`, `events`, `info`), over running containers given as `docker inspect` answers.
    It counts what it is asked; `tell` queues the events the next question about them gets,
    `mute` makes that question fail."""

    def __init__(self, *running: dict, default_runtime: str = "nvidia") -> None:
        self.running = {c["Id"]: c for c in running}
        self.default_runtime = default_runtime
        self.infos = 0
        self.inspected: list[str] = []
        self.told: list[dict] = []
        self.muted = False

    def info(self) -> dict:
        self.infos += 1
        return {"DefaultRuntime": self.default_runtime}

    def containers(self, all: bool = False, filters: dict | None = None) -> list[dict]:
        return [
            {"Id": i, "Names": [c["Name"]], "State": c["State"]["Status"], "Labels": {}}
            for i, c in self.running.items()
        ]

    def inspect_container(self, container_id: str) -> dict:
        self.inspected.append(container_id)
        return copy.deepcopy(self.running[container_id])  # each answer a new one, as Docker's

    def tell(self, *container_ids: str) -> None:
        self.told += [{"Type": "container", "Actor": {"ID": i}} for i in container_ids]

    def mute(self) -> None:
        self.muted = True

    # Events are asked over HTTP with the client's timeout, as docker-py's events() cannot.
    base_url, api_version, timeout = "http+docker://localhost", "1.41", 60

    def get(self, url: str, params: dict | None = None, timeout: float | None = None):
        assert url.endswith("/events") and params and params["until"] >= params["since"]
        assert timeout == self.timeout, "without the client's timeout a held question waits on"
        if self.muted:
            raise requests.exceptions.ReadTimeout("Docker held the question")
        told, self.told = self.told, []
        return Answer("".join(json.dumps(event) + "\n" for event in told))


class Answer:
    """An HTTP answer of 200, as far as the engine reads one."""

    def __init__(self, text: str) -> None:
        self.text = text

    def raise_for_status(self) -> None:
        pass
