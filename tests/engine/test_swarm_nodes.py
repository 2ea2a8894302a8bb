"""The swarm as the books know it: a machine per hostname, whatever the manager lists, and
each task with the container that runs it there."""

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
