import pytest

from gpuspawner import containers
from gpuspawner.pool import Grant, Holder

GPU_GRANT = Grant(Holder("ann", "train", "students"), ("GPU-a", "GPU-b"), 100.0)
CPU_GRANT = Grant(Holder("ann", "notes"), (), 100.0)


def create_kwargs(**host_config):
    return {
        "image": "notebook",
        "environment": {"JUPYTERHUB_API_TOKEN": "t", "NVIDIA_VISIBLE_DEVICES": "all"},
        "host_config": {"NetworkMode": "bridge", **host_config},
    }


def test_gpu_servers_get_a_device_request_by_uuid_and_labels():
    isolated = containers.isolate(create_kwargs(), GPU_GRANT)
    assert isolated["host_config"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["GPU-a", "GPU-b"], "Capabilities": [["gpu"]]}
    ]
    assert "NVIDIA_VISIBLE_DEVICES" not in isolated["environment"]
    assert isolated["environment"]["JUPYTERHUB_API_TOKEN"] == "t"
    assert isolated["labels"]["gpuspawner.gpus"] == "GPU-a,GPU-b"
    assert isolated["labels"]["gpuspawner.quota-group"] == "students"


def test_cpu_servers_see_no_gpu_whatever_the_image_says():
    isolated = containers.isolate(create_kwargs(), CPU_GRANT)
    assert isolated["host_config"]["DeviceRequests"] == []
    assert isolated["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_guarded_variables_are_dropped_from_list_environments():
    kwargs = {
        "environment": ["A=1", "DOCKER_RESOURCE_NVIDIA_GPU=GPU-x", "NVIDIA_DRIVER_CAPABILITIES=all"]
    }
    env = containers.isolate(kwargs, GPU_GRANT)["environment"]
    assert env == {"A": "1", "NVIDIA_DRIVER_CAPABILITIES": "all"}


@pytest.mark.parametrize(
    ("host_config", "named"),
    [
        ({"Privileged": True}, "privileged=True"),
        ({"Runtime": "nvidia"}, "runtime='nvidia'"),
        ({"DeviceRequests": [{"Count": -1}]}, "device_requests"),
        ({"Devices": [{"PathOnHost": "/dev/nvidia0"}]}, "GPU device nodes"),
        ({"DeviceCgroupRules": ["c 195:* rmw"]}, "device_cgroup_rules"),
        ({"Binds": ["/dev:/dev:rw"]}, "mounts of /dev"),
        ({"Mounts": [{"Source": "/dev/nvidia1", "Target": "/x"}]}, "mounts of /dev/nvidia1"),
    ],
)
def test_configs_that_would_leak_gpus_are_refused(host_config, named):
    with pytest.raises(containers.UnsafeContainerConfig, match=named):
        containers.isolate(create_kwargs(**host_config), GPU_GRANT)


def test_running_servers_are_read_back_from_labels_and_device_requests():
    inspected = {
        "Name": "/jupyter-ann-train",
        "Config": {"Labels": containers.labels(GPU_GRANT)},
        "HostConfig": {"DeviceRequests": [{"DeviceIDs": ["GPU-a", "GPU-b"]}]},
    }
    server = containers.read_server(inspected, {})
    assert server == containers.RunningServer(
        GPU_GRANT.holder, ("GPU-a", "GPU-b"), 100.0, "jupyter-ann-train"
    )


def test_foreign_containers_are_not_ours_but_their_devices_are_read():
    inspected = {
        "Name": "/preprocess",
        "Config": {"Labels": {}},
        "HostConfig": {"DeviceRequests": [{"DeviceIDs": ["1"]}]},
    }
    assert containers.read_server(inspected, {}) is None
    assert containers.requested_devices(inspected) == ["1"]
