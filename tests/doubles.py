"""Stand-ins for gpuspawner's seams in tests, in one place: engines, and an engine adapter as
the doctor sees one. Each offers everything its protocol states (`Engine`, `EngineAdapter`):
tests/architecture/conformance.py (mypy) and test_conformance.py (at run time) hold them to
it, so a double cannot lack what the code it stands in for would be asked."""

import threading


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
