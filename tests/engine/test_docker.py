import pytest
from doubles import DockerAnswers

from gpuspawner.core.errors import UnsafeContainerConfig
from gpuspawner.core.gpus import GPU
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.reach import Reach
from gpuspawner.core.units import Sharing, bare, units_of
from gpuspawner.engine import docker as engine
from gpuspawner.engine.base import ServerLabels

HOLDER = Holder(12, 3, "ann", "train")
GPU_GRANT = Grant(HOLDER, (bare("GPU-a"), bare("GPU-b")), 100.0, "students")
CPU_GRANT = Grant(Holder(13, 3, "ann", "notes"), (), 100.0)
HUB = "jupyter"
MACHINE = ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
BY_INDEX = {str(i): u for i, u in enumerate(MACHINE)}


def create_kwargs(**host_config):
    return {
        "image": "notebook",
        "environment": {"JUPYTERHUB_API_TOKEN": "t", "NVIDIA_VISIBLE_DEVICES": "all"},
        "host_config": {"NetworkMode": "bridge", **host_config},
    }


def test_gpu_servers_get_a_device_request_by_uuid_and_labels():
    isolated = engine.isolate(create_kwargs(), GPU_GRANT, HUB)
    assert isolated["host_config"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-a", "GPU-b"], "Capabilities": [["gpu"]]}
    ]
    assert "NVIDIA_VISIBLE_DEVICES" not in isolated["environment"]
    assert isolated["environment"]["JUPYTERHUB_API_TOKEN"] == "t"
    labels = isolated["labels"]
    assert labels["gpuspawner.gpus"] == "GPU-a,GPU-b"
    assert labels["gpuspawner.quota-group"] == "students"
    assert (labels["gpuspawner.spawner-id"], labels["gpuspawner.user-id"]) == ("12", "3")
    assert labels["gpuspawner.hub"] == HUB


def test_cpu_servers_see_no_gpu_whatever_the_image_says():
    isolated = engine.isolate(create_kwargs(), CPU_GRANT, HUB)
    assert isolated["host_config"]["DeviceRequests"] == []
    assert isolated["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_guarded_variables_are_dropped_from_list_environments():
    kwargs = {
        "environment": ["A=1", "DOCKER_RESOURCE_NVIDIA_GPU=GPU-x", "NVIDIA_DRIVER_CAPABILITIES=all"]
    }
    env = engine.isolate(kwargs, GPU_GRANT, HUB)["environment"]
    assert env == {"A": "1", "NVIDIA_DRIVER_CAPABILITIES": "all"}


# Every way into GPUs or the host that a container config can take, in the spellings
# docker-py passes through and dockerd accepts (JSON field names match in any case).
ESCAPES = [
    ({"host_config": {"Privileged": True}}, "privileged=True"),
    ({"host_config": {"privileged": True}}, "privileged=True"),
    ({"host_config": {"PRIVILEGED": 1}}, "privileged=True"),
    ({"host_config": {"Runtime": "nvidia"}}, "runtime='nvidia'"),
    ({"runtime": "nvidia"}, "runtime='nvidia'"),
    ({"host_config": {"device_requests": [{"Count": -1}]}}, "device_requests"),
    ({"host_config": {"devices": ["/dev/nvidia0:/dev/nvidia0:rwm"]}}, "GPU devices"),
    ({"host_config": {"Devices": [{"PathOnHost": "//dev/./nvidia1"}]}}, "GPU devices"),
    ({"host_config": {"Devices": [{"PathOnHost": "/dev/char/195:0"}]}}, "GPU devices"),
    ({"host_config": {"Devices": [{"PathOnHost": "/dev/dri/card0"}]}}, "GPU devices"),
    ({"host_config": {"Devices": [{"PathOnHost": "nvidia.com/gpu=all"}]}}, "GPU devices"),
    ({"host_config": {"DeviceCgroupRules": ["c 195:* rmw"]}}, "device_cgroup_rules"),
    ({"host_config": {"cap_add": ["SYS_ADMIN"]}}, r"cap_add \['SYS_ADMIN'\]"),
    ({"host_config": {"CapAdd": ["cap_sys_admin"]}}, r"cap_add \['SYS_ADMIN'\]"),
    ({"host_config": {"CapAdd": ["ALL"]}}, r"cap_add \['ALL'\]"),
    ({"host_config": {"security_opt": ["apparmor=unconfined"]}}, "security_opt"),
    ({"host_config": {"SecurityOpt": ["seccomp:unconfined"]}}, "security_opt"),
    ({"host_config": {"SecurityOpt": ["systempaths=unconfined"]}}, "security_opt"),
    ({"host_config": {"pid_mode": "host"}}, "pid_mode='host'"),
    ({"host_config": {"PidMode": "HOST"}}, "pid_mode='host'"),
    ({"host_config": {"Binds": ["/:/host"]}}, "mounts of /"),
    ({"host_config": {"Binds": ["/dev:/dev:rw"]}}, "mounts of /dev"),
    ({"host_config": {"binds": ["//dev:/x"]}}, "mounts of /dev"),
    ({"host_config": {"Binds": ["/./dev/../dev:/x"]}}, "mounts of /dev"),
    ({"host_config": {"Binds": ["/dev/char/195:0:/x"]}}, "mounts of /dev/char"),
    ({"host_config": {"Binds": ["/var/run/docker.sock:/s"]}}, "mounts of /var/run/docker.sock"),
    ({"host_config": {"Binds": ["/run:/r"]}}, "mounts of /run"),
    ({"host_config": {"Binds": ["/proc:/p"]}}, "mounts of /proc"),
    (
        {"host_config": {"Mounts": [{"Source": "/dev/nvidia1", "Target": "/x", "Type": "bind"}]}},
        "mounts of /dev/nvidia1",
    ),
    (
        {
            "host_config": {
                "mounts": [
                    {
                        "type": "volume",
                        "source": "v",
                        "target": "/d",
                        "volume_options": {
                            "driver_config": {
                                "name": "local",
                                "options": {"type": "none", "o": "bind", "device": "/dev"},
                            }
                        },
                    }
                ]
            }
        },
        "mounts of /dev",
    ),
    (
        {
            "host_config": {
                "Mounts": [
                    {
                        "Type": "volume",
                        "Target": "/d",
                        "VolumeOptions": {
                            "DriverConfig": {"Options": {"o": "rbind", "device": "/var/run"}}
                        },
                    }
                ]
            }
        },
        "mounts of /var/run",
    ),
    (
        {"host_config": {"Mounts": [{"Target": "/d", "VolumeOptions": ["o=bind"]}]}},
        "a mount whose volumeoptions is a list, not a dict",
    ),
    ({"host_config": {"PidMode": "container:other"}}, "pid_mode='container:other'"),
    ({"host_config": {"VolumesFrom": ["other:ro"]}}, "volumes_from"),
    (
        {"host_config": {"Binds": ["/dev/null:/var/run/nvidia-container-devices/GPU-c"]}},
        "NVIDIA device requests",
    ),
    ({"host_config": {"Annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}}}, "CDI"),
]


@pytest.mark.parametrize(("create", "named"), ESCAPES)
def test_every_way_to_gpus_or_the_host_is_refused(create, named):
    with pytest.raises(UnsafeContainerConfig, match=named):
        engine.isolate({"image": "notebook", **create}, GPU_GRANT, HUB)


@pytest.mark.parametrize(
    "host_config",
    [
        {"Binds": ["/srv/home/ann:/home/jovyan/work:rw", "/data:/data:ro"]},
        {"Binds": ["gpuspawner-home-ann:/home/jovyan/work"]},
        {"CapAdd": ["SYS_PTRACE"], "SecurityOpt": ["no-new-privileges"]},
        {"Devices": [{"PathOnHost": "/dev/fuse"}]},
        {"Mounts": [{"Type": "tmpfs", "Target": "/tmp"}]},
    ],
)
def test_ordinary_configs_pass(host_config):
    engine.isolate(create_kwargs(**host_config), GPU_GRANT, HUB)


def inspected(labels=None, running=True, **host_config):
    return {
        "Id": "c0ffee",
        "Name": "/jupyter-ann--train",
        "Config": {"Labels": labels or {}, "Image": "notebook", "Env": []},
        "State": {"Running": running},
        "HostConfig": host_config,
    }


def test_our_servers_are_read_back_from_labels_and_device_requests():
    seen = engine.seen(
        inspected(
            engine.labels(GPU_GRANT, HUB),
            DeviceRequests=[{"Driver": "nvidia", "DeviceIDs": ["GPU-a", "GPU-b"]}],
        )
    )
    assert seen.server == ServerLabels(
        HUB, 12, 3, "ann", "train", ("GPU-a", "GPU-b"), 100.0, "students", ("GPU-a", "GPU-b")
    )
    assert seen.reach.uuids(BY_INDEX, MACHINE) == {"GPU-a", "GPU-b"}
    assert seen.name == "jupyter-ann--train" and seen.running and seen.label_problem is None


@pytest.mark.parametrize(
    ("state", "finished_at"),
    [
        ({"Running": False, "FinishedAt": "2026-11-30T14:02:03.123456789Z"}, 1796047323.123456),
        ({"Running": False, "FinishedAt": "0001-01-01T00:00:00Z"}, None),  # never ran
        ({"Running": False}, None),
        ({"Running": True, "FinishedAt": "2026-11-30T14:02:03Z"}, None),  # ran again since
    ],
)
def test_a_stopped_container_says_when_it_stopped(state, finished_at):
    """What the ledger's recovery ends a grant with, where the hub was away when it stopped."""
    container = {**inspected(engine.labels(GPU_GRANT, HUB)), "State": state}
    assert engine.seen(container).finished_at == finished_at


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"gpuspawner.since": "yesterday"}, "could not convert"),
        ({"gpuspawner.since": "inf"}, "gpuspawner.since='inf' is not a time"),
        ({"gpuspawner.since": "nan"}, "is not a time"),
        ({"gpuspawner.since": "1e300"}, "gpuspawner.since='1e300' is not a time"),
        ({"gpuspawner.since": "-5"}, "is not a time"),
        (
            {"gpuspawner.spawner-id": "12; rm -rf"},
            "gpuspawner.spawner-id='12; rm -rf' is not an id",
        ),
        ({"gpuspawner.user-id": "-1"}, "is not an id"),
    ],
)
def test_unreadable_labels_are_named_not_fatal(bad, problem):
    seen = engine.seen(inspected({**engine.labels(GPU_GRANT, HUB), **bad}))
    assert seen.server is None
    assert problem in seen.label_problem


def test_labels_of_gpuspawner_0_1_have_names_but_no_ids():
    labels = {"gpuspawner.user": "ann", "gpuspawner.server": "", "gpuspawner.gpus": "GPU-a"}
    server = engine.seen(inspected(labels)).server
    assert (server.spawner_id, server.user_id, server.hub, server.user) == (None, None, "", "ann")


# How containers started by hand reach GPUs: every form Docker knows.
REACH = [
    ({"DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]}, MACHINE),
    (
        {"DeviceRequests": [{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]},
        ["GPU-a", "GPU-b"],
    ),
    ({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["2"]}]}, ["GPU-c"]),
    (
        {"DeviceRequests": [{"Driver": "", "DeviceIDs": ["0,3"], "Capabilities": [["gpu"]]}]},
        ["GPU-a", "GPU-d"],
    ),
    ({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["GPU-b"]}]}, ["GPU-b"]),
    ({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["all"]}]}, MACHINE),
    ({"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["GPU-elsewhere"]}]}, MACHINE),
    ({"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=1"]}]}, ["GPU-b"]),
    ({"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}]}, MACHINE),
    ({"Devices": [{"PathOnHost": "nvidia.com/gpu=GPU-c"}]}, ["GPU-c"]),
    ({"Devices": [{"PathOnHost": "/dev/nvidia3"}]}, MACHINE),
    ({"Privileged": True}, MACHINE),
    ({"Runtime": "nvidia"}, []),  # no NVIDIA_VISIBLE_DEVICES: the toolkit gives none
    ({"DeviceRequests": [{"Driver": "other", "DeviceIDs": ["x"]}]}, []),
    ({}, []),
]


@pytest.mark.parametrize(("host_config", "reached"), REACH)
def test_every_way_a_container_reaches_gpus_is_read(host_config, reached):
    assert engine.reach(inspected(**host_config)).uuids(BY_INDEX, MACHINE) == set(reached)


def test_a_name_a_real_machine_does_not_know_reaches_all_of_it_a_simulated_ones_none():
    """On real GPUs an unknown device name may still reach a GPU (a MIG instance made again),
    so it counts as every GPU; a simulated machine's GPUs exist only by their own names, so
    another simulated machine's GPU is none of its own (two demo hubs on one engine)."""
    elsewhere = engine.reach(
        inspected(DeviceRequests=[{"Driver": "nvidia", "DeviceIDs": ["GPU-elsewhere", "1"]}])
    )
    assert elsewhere.uuids(BY_INDEX, MACHINE) == set(MACHINE)
    assert elsewhere.uuids(BY_INDEX, MACHINE, names_only=True) == {"GPU-b"}  # its index stays


def test_an_nvidia_runtime_reads_the_containers_visible_devices():
    container = inspected(Runtime="nvidia")
    container["Config"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=1,GPU-d"]
    assert engine.reach(container).uuids(BY_INDEX, MACHINE) == {"GPU-b", "GPU-d"}
    # where nvidia is Docker's default runtime, a container without a runtime gets it too
    container = inspected()
    container["Config"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=all"]
    assert engine.reach(container) == Reach()
    assert engine.reach(container, default_runtime="nvidia").uuids(BY_INDEX, MACHINE) == set(
        MACHINE
    )
    container["Config"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=void"]
    assert not engine.reach(container, default_runtime="nvidia")


def visible_to_all(container_id: str, **host_config) -> dict:
    """A running container whose environment asks for every GPU, as `docker inspect` says."""
    container = inspected(**host_config) | {"Id": container_id, "Name": f"/{container_id}"}
    container["State"]["Status"] = "running"
    container["Config"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=all"]
    return container


def test_the_engines_default_runtime_is_asked_only_for_a_container_created_without_one():
    """Docker writes the runtime into each container it creates, so a look at the containers
    costs no `docker info` (the dearest call of the monitor's tick); a container that lacks
    one (an older engine) still gets the engine's default, and with it every GPU."""
    answers = DockerAnswers(visible_to_all("plain", Runtime="runc"))
    assert engine.DockerEngine(answers).containers() == []  # it reaches nothing: not listed
    assert answers.infos == 0

    answers = DockerAnswers(
        visible_to_all("plain", Runtime="runc"), visible_to_all("old"), visible_to_all("older")
    )
    found = {c.id: c.reach for c in engine.DockerEngine(answers).containers()}
    assert answers.infos == 1
    assert "plain" not in found
    assert found["old"].uuids(BY_INDEX, MACHINE) == found["older"].uuids(BY_INDEX, MACHINE)
    assert found["old"].uuids(BY_INDEX, MACHINE) == set(MACHINE)


def test_each_unit_held_is_labelled_so_a_shared_gpus_slot_can_be_told():
    l40s = units_of(GPU("GPU-l", 3, "NVIDIA L40S", 48 * 2**30), Sharing(4, 10 * 2**30))
    grant = Grant(HOLDER, (l40s[2],), 100.0)
    isolated = engine.isolate({"environment": {}}, grant, HUB)
    assert isolated["host_config"]["DeviceRequests"][0]["DeviceIDs"] == ["GPU-l"]
    assert isolated["labels"]["gpuspawner.units"] == "GPU-l#3"
    assert isolated["labels"]["gpuspawner.gpus"] == "GPU-l"
    # with MPS, the slot's memory cap, for the one GPU the container sees
    assert isolated["environment"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240MB"
    assert engine.read_labels(isolated["labels"]).units == ("GPU-l#3",)
    plain = engine.isolate({}, Grant(HOLDER, units_of(GPU("GPU-m", 0, "L4", 2**30)), 1.0), HUB)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in plain["environment"]


def test_a_mig_device_named_by_index_reaches_its_whole_gpu():
    reach = engine.reach(
        {"HostConfig": {"DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": ["1:3"]}]}}
    )
    assert reach.uuids({"0": "GPU-a", "1": "GPU-b"}, ["GPU-a", "GPU-b", "MIG-x"]) == {"GPU-b"}
