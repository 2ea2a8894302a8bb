"""Engine stand-ins for in-process tests of the hub, where no Docker runs."""


class GoneEngine:
    """An engine whose containers are gone by the time anyone asks."""

    def containers(self, look_past=None):
        return []

    def unreachable(self):
        return {}

    def remove_server(self, hub, spawner_id, container_ids=()):
        return True
