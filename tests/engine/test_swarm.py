"""A notebook's Swarm service spec and the manager's view of tasks, without Docker: what goes
in (isolate_service), what is refused, and how tasks, services and nodes read back as Seen."""

from dataclasses import replace

import docker.errors as engine_errors
import pytest
from docker.types import ContainerSpec, Mount, Placement, RestartPolicy, TaskTemplate

from gpuspawner.core.errors import UnsafeContainerConfig
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.reach import Reach
from gpuspawner.core.units import bare
from gpuspawner.engine.swarm import SwarmEngine, SwarmNode, holds, read_node, task_seen
from gpuspawner.engine.swarmspec import (
    isolate_service,
    job_service,
    pinned_node,
    service_escapes,
    spec_reach,
)

HUB = "jupyter"
NODE_ID = "nodeid2"
HOLDER = Holder(12, 3, "ann", "train")
GPU_GRANT = Grant(
    HOLDER, tuple(replace(bare(u), node="n2") for u in ("GPU-a", "GPU-b")), 100.0, "students"
)
CPU_GRANT = Grant(Holder(13, 3, "ann", "notes"), (), 100.0)


def service_kwargs(**container_spec):
    return {
        "name": "jupyter-ann-train",
        "task_template": {
            "ContainerSpec": {
                "Image": "notebook",
                "Env": ["JUPYTERHUB_API_TOKEN=t", "NVIDIA_VISIBLE_DEVICES=all"],
                **container_spec,
            },
            "Placement": {"Constraints": ["node.labels.gpu==yes"]},
            "RestartPolicy": {"Condition": "any"},
        },
        "labels": {"team": "vision"},
    }


def env(isolated):
    return dict(e.split("=", 1) for e in isolated["task_template"]["ContainerSpec"]["Env"])


def test_a_gpu_service_is_pinned_to_its_node_with_its_uuids_and_never_restarts():
    isolated = isolate_service(service_kwargs(), GPU_GRANT, HUB, NODE_ID, volume_mounts=False)
    template = isolated["task_template"]
    assert template["Placement"]["Constraints"] == ["node.labels.gpu==yes", "node.id==nodeid2"]
    assert template["RestartPolicy"] == {"Condition": "none"}
    assert isolated["mode"] == {"Replicated": {"Replicas": 1}}
    assert env(isolated) == {"JUPYTERHUB_API_TOKEN": "t", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert template["ContainerSpec"]["Mounts"] == []
    for labels in (isolated["labels"], template["ContainerSpec"]["Labels"]):
        assert labels["gpuspawner.gpus"] == "GPU-a,GPU-b"
        assert labels["gpuspawner.hub"] == HUB
        assert labels["gpuspawner.spawner-id"] == "12"
    assert isolated["labels"]["team"] == "vision"
    assert isolated["name"] == "jupyter-ann-train"


def test_with_volume_mounts_each_uuid_is_a_dev_null_bind_the_toolkit_reads_first():
    isolated = isolate_service(service_kwargs(), GPU_GRANT, HUB, NODE_ID, volume_mounts=True)
    assert isolated["task_template"]["ContainerSpec"]["Mounts"] == [
        {
            "Type": "bind",
            "Source": "/dev/null",
            "Target": f"/var/run/nvidia-container-devices/{u}",
            "ReadOnly": True,
        }
        for u in ("GPU-a", "GPU-b")
    ]
    assert env(isolated)["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"


@pytest.mark.parametrize("node_id", [None, NODE_ID])
def test_a_cpu_service_sees_no_gpu_whatever_the_image_says(node_id):
    isolated = isolate_service(service_kwargs(), CPU_GRANT, HUB, node_id, volume_mounts=True)
    assert env(isolated)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert isolated["task_template"]["ContainerSpec"]["Mounts"] == []
    pinned = ["node.id==nodeid2"] if node_id else []
    assert isolated["task_template"]["Placement"]["Constraints"] == [
        "node.labels.gpu==yes",
        *pinned,
    ]


def test_a_gpu_service_needs_its_node():
    with pytest.raises(ValueError, match="node_id is required"):
        isolate_service(service_kwargs(), GPU_GRANT, HUB, None, volume_mounts=False)


def test_every_spelling_of_a_field_set_is_replaced_not_left_beside_it():
    kwargs = {
        "task_template": {
            "container_spec": {"image": "x", "env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            "restartpolicy": {"condition": "any"},
            "PLACEMENT": {"constraints": ["node.role==worker"]},
        }
    }
    template = isolate_service(kwargs, GPU_GRANT, HUB, NODE_ID, volume_mounts=False)[
        "task_template"
    ]
    assert set(template) == {"ContainerSpec", "RestartPolicy", "Placement"}
    assert template["ContainerSpec"]["image"] == "x"
    assert "env" not in template["ContainerSpec"]
    assert template["Placement"]["Constraints"] == ["node.role==worker", "node.id==nodeid2"]


def test_the_callers_arguments_are_left_as_they_were():
    kwargs = service_kwargs()
    before = repr(kwargs)
    isolate_service(kwargs, GPU_GRANT, HUB, NODE_ID, volume_mounts=True)
    assert repr(kwargs) == before


def spec_with(**template):
    return {"task_template": {"ContainerSpec": {"Image": "x"}, **template}}


def container_with(**container):
    return {"task_template": {"ContainerSpec": {"Image": "x", **container}}}


BIND = {"Type": "bind", "Target": "/x"}
# Every way a service spec can reach GPUs, the host, or another node: escapes.py's checks where
# a service has the field, and what only a service has.
SERVICE_ESCAPES = [
    (container_with(Mounts=[{**BIND, "Source": "/var/run/docker.sock"}]), "docker.sock"),
    (
        container_with(mounts=[{"type": "BIND", "source": "//dev/./nvidia0", "target": "/d"}]),
        "/dev",
    ),
    (container_with(Mounts=[{**BIND, "Source": "/"}]), "mounts of /"),
    (container_with(Mounts=[{**BIND, "Source": "/proc"}]), "/proc"),
    (
        container_with(
            Mounts=[
                {
                    "Type": "volume",
                    "Target": "/d",
                    "VolumeOptions": {"DriverConfig": {"Options": {"o": "bind", "device": "/dev"}}},
                }
            ]
        ),
        "/dev",
    ),
    (
        container_with(
            Mounts=[{"Type": "bind", "Source": "/tmp", "Target": "/run/nvidia-container-devices/a"}]
        ),
        "NVIDIA device requests",
    ),
    (container_with(CapabilityAdd=["CAP_SYS_ADMIN"]), "SYS_ADMIN"),
    (container_with(Privileges={"Seccomp": {"Mode": "unconfined"}}), "seccomp=unconfined"),
    (container_with(Privileges={"AppArmor": {"Mode": "disabled"}}), "apparmor=unconfined"),
    (container_with(Privileges={"SELinuxContext": {"Disable": True}}), "label=disable"),
    (
        spec_with(
            Resources={
                "Reservations": {
                    "GenericResources": [
                        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 1}}
                    ]
                }
            }
        ),
        "generic resources",
    ),
    (
        spec_with(resources={"limits": {"generic_resources": [{"x": 1}]}}),
        "generic resources",
    ),
    (spec_with(Runtime="plugin", PluginSpec={"Name": "p"}), "plugin"),
    ({**spec_with(), "mode": {"Global": {}}}, "mode="),
    ({**spec_with(), "mode": {"replicated": {"Replicas": 2}}}, "mode="),
    ({**spec_with(), "mode": {"ReplicatedJob": {}}}, "mode="),
    ({"task_template": "x"}, "not a dict"),
    (spec_with(Placement={"Constraints": ["node.id==other"]}), "node.id==other"),
    (spec_with(Placement={"Constraints": [" NODE.ID != nodeid2 "]}), "NODE.ID"),
    (spec_with(Placement={"Constraints": ["node.hostname==n1"]}), "on node n2"),
    (spec_with(Placement={"Constraints": ["node.hostname!=N2"]}), "on node n2"),
    (spec_with(Placement={"Constraints": ["node.id"]}), "not key==value"),
]


@pytest.mark.parametrize(("kwargs", "named"), SERVICE_ESCAPES)
def test_every_way_to_gpus_the_host_or_another_node_is_refused(kwargs, named):
    with pytest.raises(UnsafeContainerConfig, match=named):
        isolate_service(kwargs, GPU_GRANT, HUB, NODE_ID, volume_mounts=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        container_with(Mounts=[{**BIND, "Source": "/home/ann"}], CapabilityAdd=["NET_ADMIN"]),
        container_with(Mounts=[{"Type": "volume", "Source": "home-ann", "Target": "/home"}]),
        container_with(Privileges={"Seccomp": {"Mode": "default"}}),
        spec_with(Placement={"Constraints": ["node.id==NODEID2", "node.hostname == n2"]}),
        spec_with(Placement={"Constraints": ["node.hostname!=n1", "node.platform.os==linux"]}),
        spec_with(Resources={"Limits": {"MemoryBytes": 2**30}}, Runtime="container"),
        {**spec_with(), "mode": {"replicated": {"Replicas": 1}}},
    ],
)
def test_ordinary_service_configs_pass(kwargs):
    assert service_escapes(kwargs) == []
    isolate_service(kwargs, GPU_GRANT, HUB, NODE_ID, volume_mounts=True)


def task_spec(env=(), mounts=(), constraints=()):
    return {
        "ContainerSpec": {"Image": "notebook", "Env": list(env), "Mounts": list(mounts)},
        "Placement": {"Constraints": list(constraints)},
    }


def named(kind, value):
    return {"NamedResourceSpec": {"Kind": kind, "Value": value}}


EVERY = Reach(every=True)
REACH = [
    (task_spec(), (), Reach()),
    (task_spec(env=["NVIDIA_VISIBLE_DEVICES=void"]), (), Reach()),
    (
        task_spec(env=["NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"]),
        (),
        Reach(frozenset({"GPU-a", "GPU-b"})),
    ),
    (task_spec(env=["NVIDIA_VISIBLE_DEVICES=all"]), (), EVERY),
    (task_spec(env=["DOCKER_RESOURCE_NVIDIA-GPU=GPU-c"]), (), Reach(frozenset({"GPU-c"}))),
    (task_spec(env=["DOCKER_RESOURCE_SSD=disk1,GPU-d"]), (), Reach(frozenset({"GPU-d"}))),
    (
        task_spec(
            mounts=[
                {
                    "Type": "bind",
                    "Source": "/dev/null",
                    "Target": "/var/run/nvidia-container-devices/GPU-e",
                }
            ]
        ),
        (),
        Reach(frozenset({"GPU-e"})),
    ),
    (
        task_spec(
            mounts=[
                {
                    "Type": "bind",
                    "Source": "/dev/null",
                    "Target": "/run/nvidia-container-devices/all",
                }
            ]
        ),
        (),
        EVERY,
    ),
    (
        task_spec(
            mounts=[{"Type": "bind", "Source": "/tmp/x", "Target": "/run/nvidia-container-devices"}]
        ),
        (),
        EVERY,
    ),
    (task_spec(mounts=[{"Type": "bind", "Source": "/dev", "Target": "/dev"}]), (), EVERY),
    (task_spec(mounts=[{"Type": "bind", "Source": "/home/ann", "Target": "/home"}]), (), Reach()),
    (
        task_spec(
            mounts=[
                {
                    "Type": "volume",
                    "Target": "/d",
                    "VolumeOptions": {"DriverConfig": {"Options": {"o": "bind", "device": "/dev"}}},
                }
            ]
        ),
        (),
        EVERY,
    ),
    (task_spec(), [named("NVIDIA-GPU", "GPU-f")], Reach(frozenset({"GPU-f"}))),
    (task_spec(), [named("SSD", "disk1")], Reach()),
    (task_spec(), [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": 2}}], EVERY),
    (task_spec(), [{"DiscreteResourceSpec": {"Kind": "ssd", "Value": 2}}], Reach()),
]


@pytest.mark.parametrize(("spec", "assigned", "reached"), REACH)
def test_every_way_a_task_reaches_gpus_is_read_from_its_spec(spec, assigned, reached):
    assert spec_reach(spec, assigned) == reached


def test_what_isolate_service_writes_reads_back_as_exactly_the_grant():
    for volume_mounts in (False, True):
        isolated = isolate_service(service_kwargs(), GPU_GRANT, HUB, NODE_ID, volume_mounts)
        reached = spec_reach(isolated["task_template"])
        assert reached == Reach(frozenset({"GPU-a", "GPU-b"}))
        assert pinned_node(isolated["task_template"]) == NODE_ID


def test_a_jobs_task_is_stopped_with_its_grace_and_labelled_and_still_holds_only_its_gpus():
    isolated = isolate_service(
        service_kwargs(stop_grace_period=10), GPU_GRANT, HUB, NODE_ID, volume_mounts=False
    )
    job = job_service(isolated, 7.5, {"gpuspawner.job": "42"})
    spec = job["task_template"]["ContainerSpec"]
    assert spec["StopGracePeriod"] == 7_500_000_000  # nanoseconds, as dockerd reads it
    assert "stop_grace_period" not in spec  # the config's spelling replaced, not beside it
    for labels in (job["labels"], spec["Labels"]):
        assert labels["gpuspawner.job"] == "42"
        assert labels["gpuspawner.gpus"] == "GPU-a,GPU-b"
    assert spec_reach(job["task_template"]) == Reach(frozenset({"GPU-a", "GPU-b"}))
    assert pinned_node(job["task_template"]) == NODE_ID
    assert "StopGracePeriod" not in isolated["task_template"]["ContainerSpec"]  # a copy


def node_json(node_id, hostname, state="ready", availability="active", manager=False):
    return {
        "ID": node_id,
        "Spec": {"Availability": availability, "Role": "manager" if manager else "worker"},
        "Description": {"Hostname": hostname, "Engine": {"EngineVersion": "20.10.24"}},
        "Status": {"State": state, "Addr": "10.0.0.2"},
        **({"ManagerStatus": {"Leader": True}} if manager else {}),
    }


NODES = {
    n.id: n
    for n in (
        read_node(node_json("id1", "n1", manager=True)),
        read_node(node_json("id2", "n2")),
        read_node(node_json("id3", "n3", state="down", availability="drain")),
    )
}


def test_nodes_read_as_the_books_name_them_by_hostname():
    assert NODES["id1"] == SwarmNode("id1", "n1", "ready", "active", "20.10.24", True, "10.0.0.2")
    assert NODES["id3"].state == "down" and not NODES["id3"].ready
    assert NODES["id3"].availability == "drain" and not NODES["id3"].manager


SERVICE = {"ID": "svc1", "Spec": {"Name": "jupyter-ann-train", "Labels": {"team": "vision"}}}


def task_json(
    state, node_id="id2", labels=None, timestamp="2026-12-01T10:00:00.123456789Z", **spec
):
    isolated = isolate_service(service_kwargs(), GPU_GRANT, HUB, "id2", volume_mounts=True)
    template = isolated["task_template"]
    if labels is not None:
        template["ContainerSpec"]["Labels"] = labels
    return {
        "ID": "task1",
        "ServiceID": "svc1",
        "NodeID": node_id,
        "Spec": {**template, **spec},
        "Status": {"State": state, "Timestamp": timestamp},
        "DesiredState": "running",
    }


# (task state, its node) → whether it holds its GPUs
HOLDING = [
    ("new", "", True),
    ("pending", "", True),
    ("assigned", "id2", True),
    ("preparing", "id2", True),
    ("starting", "id2", True),
    ("running", "id2", True),
    ("running", "id3", True),  # its node is down: it may still run there
    ("orphaned", "id3", True),
    ("orphaned", "id2", False),  # its node is back and says it is not running
    ("complete", "id2", False),
    ("shutdown", "id2", False),
    ("failed", "id2", False),
    ("rejected", "id2", False),
]


@pytest.mark.parametrize(("state", "node_id", "held"), HOLDING)
def test_a_task_holds_its_gpus_while_it_runs_or_may_run(state, node_id, held):
    seen = task_seen(task_json(state, node_id), SERVICE, NODES)
    assert seen.running is held
    assert seen.node == ("n3" if node_id == "id3" else "n2")  # unassigned: its pinned node
    assert seen.finished_at == (None if held else pytest.approx(1796119200.123456))


def test_our_task_reads_back_as_its_server_on_its_node():
    seen = task_seen(task_json("running"), SERVICE, NODES)
    assert (seen.id, seen.name, seen.image, seen.node) == (
        "task1",
        "jupyter-ann-train",
        "notebook",
        "n2",
    )
    assert seen.reach == Reach(frozenset({"GPU-a", "GPU-b"}))
    assert seen.server is not None and seen.label_problem is None
    assert (seen.server.hub, seen.server.spawner_id, seen.server.user) == (HUB, 12, "ann")
    assert seen.server.uuids == ("GPU-a", "GPU-b")


def test_labels_come_from_the_container_spec_else_the_service():
    only_service = {**SERVICE, "Spec": {**SERVICE["Spec"], "Labels": {"gpuspawner.user": "bob"}}}
    seen = task_seen(task_json("running", labels={}), only_service, NODES)
    assert seen.server is not None and seen.server.user == "bob"
    foreign = task_seen(task_json("running", labels={}), None, NODES)
    assert foreign.server is None and foreign.name == "svc1"


def test_unreadable_labels_are_named_not_fatal():
    bad = {"gpuspawner.user": "ann", "gpuspawner.spawner-id": "twelve"}
    seen = task_seen(task_json("running", labels=bad), SERVICE, NODES)
    assert seen.server is None and "twelve" in (seen.label_problem or "")


def test_a_task_on_an_unknown_node_has_no_node_name():
    seen = task_seen(task_json("running", node_id="gone"), SERVICE, NODES)
    assert seen.node == "" and seen.running


def test_holds_reads_only_the_state_and_the_node():
    assert holds({"Status": {"State": "running"}}, None)
    assert holds({"Status": {"State": "orphaned"}}, None)
    assert not holds({"Status": {}}, None)


class FakeManager:
    """A manager's low-level API, as far as SwarmEngine uses it, doing what dockerd 20.10 does
    (measured on the bed): a removed service's task stays listed until its node says its
    container exited, then goes; on a node that is down it stays, running."""

    def __init__(self, task_state="running", node_state="ready"):
        self.node = node_json("id2", "n2", state=node_state)
        self.task = task_json(task_state)
        self.service = {**SERVICE, "Version": {"Index": 5}, "Spec": {**SERVICE["Spec"]}}
        self.service["Spec"]["Labels"] = self.task["Spec"]["ContainerSpec"]["Labels"]
        self.calls = []

    def nodes(self):
        return [self.node]

    def services(self, filters=None):
        return [self.service] if self.service else []

    def tasks(self):
        task = self.task
        if task and task["DesiredState"] == "remove" and self.node["Status"]["State"] == "ready":
            if task["Status"]["State"] in HOLDING_STATES:
                task["Status"]["State"] = "shutdown"  # the container exits
            else:
                self.task = None  # and then the task goes
        return [self.task] if self.task else []

    def inspect_service(self, service_id):
        if not self.service or service_id != "svc1":
            raise engine_errors.NotFound("no such service")
        return self.service

    def inspect_task(self, task_id):
        if not self.task or task_id != "task1":
            raise engine_errors.NotFound("no such task")
        return self.task

    def update_service(self, service_id, version, mode, fetch_current_spec):
        self.calls.append(("scale", mode["Replicated"]["Replicas"]))
        self.service["Spec"]["Mode"] = mode
        if self.node["Status"]["State"] == "ready":
            self.task["Status"]["State"] = "shutdown"

    def remove_service(self, service_id):
        self.calls.append(("remove", service_id))
        self.service = None
        if self.task:
            self.task["DesiredState"] = "remove"
            if not self.task["NodeID"]:
                self.task = None


HOLDING_STATES = {s for s, _, held in HOLDING if held}


def test_a_running_tasks_service_is_removed_and_confirmed_once_its_task_is_gone():
    manager = FakeManager()
    listed = []
    tasks = manager.tasks

    def looked() -> list:
        found = tasks()
        listed.append([t["Status"]["State"] for t in found])
        return found

    manager.tasks = looked
    assert SwarmEngine(manager, poll=0).remove_server(HUB, 12)
    assert manager.calls == [("remove", "svc1")]
    assert listed == [["running"], ["shutdown"], []]


@pytest.mark.parametrize("known", [("svc1",), ("task1",), ("gone",), ()])
def test_a_server_is_found_by_its_labels_or_the_ids_known_to_be_its(known):
    manager = FakeManager(task_state="complete")
    assert SwarmEngine(manager, poll=0).remove_server(HUB, 12, known)
    assert manager.calls == [("remove", "svc1")]


def test_another_server_or_hub_is_left_alone():
    manager = FakeManager()
    engine = SwarmEngine(manager, poll=0)
    manager.services = lambda filters=None: []  # the manager filters by label
    assert engine.remove_server("otherhub", 12) and engine.remove_server(HUB, 99)
    assert manager.calls == [] and manager.service is not None


def test_a_task_on_a_node_that_is_down_is_never_confirmed_gone():
    manager = FakeManager(node_state="down")
    engine = SwarmEngine(manager, removal_timeout=0, poll=0)
    assert not engine.remove_server(HUB, 12)
    assert not engine.remove_server(HUB, 12, ("task1",))
    assert manager.calls == [("scale", 0)]  # once: the service stays, its task's record too
    assert manager.service is not None
    assert manager.task["Status"]["State"] == "running"
    manager.node["Status"]["State"] = "ready"
    manager.task["Status"]["State"] = "failed"  # the node is back: its dockerd was killed
    assert SwarmEngine(manager, poll=0).remove_server(HUB, 12)
    assert manager.calls[-1] == ("remove", "svc1") and manager.task is None


def test_a_task_not_yet_on_a_node_goes_with_its_service():
    manager = FakeManager(task_state="pending")
    manager.task["NodeID"] = ""
    assert SwarmEngine(manager, poll=0).remove_server(HUB, 12)
    assert manager.calls == [("remove", "svc1")]


def test_a_removal_not_confirmed_in_time_or_an_api_error_is_not_gone():
    manager = FakeManager()
    manager.tasks = lambda: [manager.task]  # the task never stops
    assert not SwarmEngine(manager, removal_timeout=0, poll=0).remove_server(HUB, 12)

    def broken(*args, **kwargs):
        raise engine_errors.APIError("500 Server Error")

    manager.tasks = broken
    assert not SwarmEngine(manager, poll=0).remove_server(HUB, 12)


def test_containers_and_stopped_since_read_the_managers_view():
    manager = FakeManager(task_state="complete")
    engine = SwarmEngine(manager)
    [seen] = engine.containers()
    assert (seen.node, seen.running, seen.name) == ("n2", False, "jupyter-ann-train")
    assert engine.stopped_since(HUB, 0) == {12: pytest.approx(1796119200.123456)}
    assert engine.stopped_since(HUB, 1796119201) == {}
    assert engine.stopped_since("otherhub", 0) == {}
    assert [(n.hostname, n.state) for n in engine.nodes()] == [("n2", "ready")]


def test_dockerspawners_swarm_shapes_are_isolated_too():
    """SwarmSpawner builds its spec from docker-py's types: dicts with dockerd's own keys."""
    template = TaskTemplate(
        container_spec=ContainerSpec(
            "notebook",
            env={"NVIDIA_VISIBLE_DEVICES": "all", "A": "1"},
            mounts=[Mount("/home/jovyan", "jupyterhub-user-ann")],
        ),
        placement=Placement(constraints=["node.hostname==n2"]),
        restart_policy=RestartPolicy(condition="any"),
    )
    kwargs = {"task_template": template, "name": "jupyter-ann", "mode": {"replicated": {}}}
    isolated = isolate_service(kwargs, GPU_GRANT, HUB, NODE_ID, volume_mounts=True)
    spec = isolated["task_template"]["ContainerSpec"]
    assert env(isolated) == {"A": "1", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}
    assert [m["Target"] for m in spec["Mounts"]] == [
        "/home/jovyan",
        "/var/run/nvidia-container-devices/GPU-a",
        "/var/run/nvidia-container-devices/GPU-b",
    ]
    assert isolated["task_template"]["Placement"]["Constraints"] == [
        "node.hostname==n2",
        "node.id==nodeid2",
    ]
    assert isolated["task_template"]["RestartPolicy"] == {"Condition": "none"}
    mounts = template["ContainerSpec"]["Mounts"]
    assert [m["Target"] for m in mounts] == ["/home/jovyan"]  # the caller's, untouched
