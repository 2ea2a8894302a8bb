"""The swarm as the books know it: a machine per hostname, whatever the manager lists, and
each task with the container that runs it there."""

from dataclasses import replace

from gpuspawner.engine.shared_homes import NOT_SHARED, NOT_WRITABLE, MountWatch
from gpuspawner.engine.swarm import SwarmEngine, read_node, task_seen


def node(node_id: str, hostname: str, state: str, availability: str = "active") -> dict:
    return {
        "ID": node_id,
        "Description": {"Hostname": hostname},
        "Spec": {"Availability": availability},
        "Status": {"State": state, "Addr": "10.0.0.1"},
    }


class Manager:
    def __init__(self, *nodes: dict) -> None:
        self.listed = list(nodes)

    def nodes(self) -> list[dict]:
        return self.listed


def test_a_machine_that_rejoined_is_its_ready_entry_not_its_stale_one():
    engine = SwarmEngine(Manager(node("old", "gpu-1", "down"), node("new", "gpu-1", "ready")))
    assert [n.id for n in engine.nodes()] == ["new"]
    assert engine.unreachable() == {}


def test_nodes_down_or_drained_are_unreachable_and_say_why():
    engine = SwarmEngine(
        Manager(
            node("a", "gpu-1", "down"),
            node("b", "gpu-2", "ready", availability="drain"),
            node("c", "gpu-3", "ready"),
        )
    )
    assert engine.unreachable() == {
        "gpu-1": "node gpu-1 is down",
        "gpu-2": "node gpu-2 is set to drain",
    }


def test_a_task_is_known_by_its_container_too_as_a_nodes_agent_names_gpu_processes():
    container = "c" * 64
    task = {
        "ID": "task1",
        "NodeID": "a",
        "Spec": {"ContainerSpec": {"Image": "notebook", "Env": ["NVIDIA_VISIBLE_DEVICES=GPU-1"]}},
        "Status": {"State": "running", "ContainerStatus": {"ContainerID": container}},
    }
    seen = task_seen(task, None, {"a": read_node(node("a", "gpu-1", "ready"))})
    assert (seen.id, seen.container_id, seen.node) == ("task1", container, "gpu-1")


def test_a_node_that_lost_the_shared_homes_mount_is_kept_out_of_new_starts_and_asked_again():
    """Asked at most every `every` seconds (a task on each node); a node found without the
    storage is unreachable for new servers, with the reason, until a later look finds it."""
    mounted = {"gpu-1": 0, "gpu-2": NOT_SHARED, "gpu-3": NOT_WRITABLE}
    asked: list[str] = []

    def probe(node) -> int | str:
        asked.append(node.hostname)
        return mounted[node.hostname]

    watch = MountWatch(probe, "/mnt/homes", 1000, every=300)
    ready = [node(i, f"gpu-{n}", "ready") for n, i in enumerate("abc", 1)]
    engine = SwarmEngine(Manager(*ready), also_unreachable=watch.lost)
    assert engine.unreachable() == {
        "gpu-2": "node gpu-2 does not mount the shared homes: /mnt/homes there is not the hub's "
        "shared storage (the hub's marker is missing)",
        "gpu-3": "node gpu-3 does not mount the shared homes: uid 1000 (the notebook user) "
        "cannot write in its own folder of /mnt/homes there",
    }
    assert sorted(asked) == ["gpu-1", "gpu-2", "gpu-3"]
    engine.unreachable()
    assert len(asked) == 3  # not asked again within `every`
    mounted.update({"gpu-2": 0, "gpu-3": 0})
    nodes = engine.nodes()
    assert watch.lost(nodes, 10**9) == {}  # the next look: mounted again
    down = [*nodes[:2], replace(nodes[2], state="down")]
    assert watch.lost(down, 2 * 10**9) == {} and len(asked) == 8  # a down node is not asked
