"""Reading the hub's jupyterhub_config.py without a hub."""

import ast
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from gpuspawner.admin import hubconfig
from gpuspawner.admin.hubconfig import ConfigError, HubAddress
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated import SimulatedSource

EXAMPLE = Path(__file__).parents[2] / "jupyterhub_config.py"


def write(tmp_path: Path, body: str, spawner: str = "gpu") -> Path:
    path = tmp_path / "jupyterhub_config.py"
    header = f"c = get_config()\nc.JupyterHub.spawner_class = {spawner!r}\n"
    path.write_text(header + textwrap.dedent(body))
    return path


def test_the_example_config_offers_only_what_a_small_machine_can_serve(monkeypatch):
    """A profile bigger than the machine would stop the hub: on 2 GPUs, no "4 GPUs"."""
    monkeypatch.setenv("GPUSPAWNER_SIMULATE_GPUS", "2")
    monkeypatch.setenv("GPUSPAWNER_HUB_IP", "172.17.0.1")
    spawner = hubconfig.load(EXAMPLE).spawner
    offered = ["cpu", "gpu-1", "gpu-2", "gpu-1-turns"]
    assert [p["slug"] for p in spawner.profiles] == offered
    assert spawner.group_limits["researchers"]["profiles"] == offered


def test_the_example_config_imports_only_gpuspawners_public_face():
    """gpuspawner's layers are its own to move: a config takes what it needs from the top."""
    tree = ast.parse(EXAMPLE.read_text())
    imported = {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
    }
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported - set(sys.stdlib_module_names) == {"gpuspawner"}


def test_the_example_config_loads(monkeypatch):
    monkeypatch.setenv("GPUSPAWNER_SIMULATE_GPUS", "4")
    monkeypatch.setenv("GPUSPAWNER_HUB_IP", "172.17.0.1")  # so loading it needs no Docker
    site = hubconfig.load(EXAMPLE)
    assert site.spawner.simulate_gpus == 4
    slugs = ["cpu", "gpu-1", "gpu-2", "gpu-4", "gpu-1-turns"]  # turns: with parking
    assert [p["slug"] for p in site.spawner.profiles] == slugs
    assert site.hub_address() == HubAddress("172.17.0.1", 8081, "172.17.0.1", 8081)
    assert site.spawner.volumes == {"gpuspawner-home-{username}": "/home/jovyan"}
    assert site.spawner.read_only_volumes == {}


def test_a_site_that_sets_nothing_keeps_each_users_files_in_a_home(tmp_path):
    spawner = hubconfig.load(write(tmp_path, "")).spawner
    assert spawner.volumes == {"gpuspawner-home-{username}": "/home/jovyan"}
    assert spawner.notebook_dir == "/home/jovyan"  # the file browser opens where files are kept


def test_the_notebook_opens_in_the_home_the_admin_chose(tmp_path):
    body = 'c.GPUSpawner.volumes = {"/srv/home/{username}": {"bind": "/home/jovyan/work"}}'
    assert hubconfig.load(write(tmp_path, body)).spawner.notebook_dir == "/home/jovyan/work"
    body = 'c.GPUSpawner.volumes = {}\nc.GPUSpawner.read_only_volumes = {"/srv/data": "/data"}'
    assert hubconfig.load(write(tmp_path, body)).spawner.notebook_dir == ""


def test_images_are_the_default_the_profiles_and_the_allowed_ones(tmp_path):
    site = hubconfig.load(
        write(
            tmp_path,
            """
            c.GPUSpawner.image = "gpu:1"
            c.GPUSpawner.profiles = [
                {"display_name": "CPU", "slug": "cpu", "gpus": 0,
                 "spawner_override": {"image": "cpu:1"}},
                {"display_name": "GPU", "slug": "gpu", "gpus": 1,
                 "spawner_override": {"image": "gpu:1", "mem_limit": "8G"}},
            ]
            c.GPUSpawner.allowed_images = {"Torch": "torch:2", "Plain": "gpu:1"}
            """,
        )
    )
    assert site.images == ["gpu:1", "cpu:1", "torch:2"]


@pytest.mark.parametrize(
    ("body", "address"),
    [
        ("", HubAddress("127.0.0.1", 8081, "127.0.0.1", 8081)),
        (
            "c.JupyterHub.hub_ip = '0.0.0.0'\nc.JupyterHub.hub_port = 9000",
            HubAddress("0.0.0.0", 9000, socket.gethostname(), 9000),
        ),
        (
            "c.JupyterHub.hub_ip = '0.0.0.0'\nc.JupyterHub.hub_connect_ip = '172.17.0.1'",
            HubAddress("0.0.0.0", 8081, "172.17.0.1", 8081),
        ),
        (
            "c.JupyterHub.hub_bind_url = 'http://10.0.0.5:8085'\n"
            "c.JupyterHub.hub_connect_url = 'http://hub.internal:8085'",
            HubAddress("10.0.0.5", 8085, "hub.internal", 8085),
        ),
    ],
)
def test_the_hub_address_is_computed_as_the_hub_does(tmp_path, body, address):
    assert hubconfig.load(write(tmp_path, body)).hub_address() == address


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.py does not exist"):
        hubconfig.load(tmp_path / "nope.py")


def test_an_exception_in_the_file_names_its_line(tmp_path):
    path = write(tmp_path, "x = 1\nraise RuntimeError('the LDAP server is down')\n")
    with pytest.raises(ConfigError) as error:
        hubconfig.load(path)
    assert str(error.value) == f"{path}, line 4: RuntimeError: the LDAP server is down"


def test_a_syntax_error_names_its_line(tmp_path):
    path = write(tmp_path, "c.GPUSpawner.profiles = [\n")
    with pytest.raises(ConfigError, match=r", line 3: SyntaxError"):
        hubconfig.load(path)


def test_a_hub_with_another_spawner_is_refused(tmp_path):
    path = write(tmp_path, "", spawner="dockerspawner.DockerSpawner")
    with pytest.raises(ConfigError, match=r"would use DockerSpawner, not GPUSpawner.*= \"gpu\""):
        hubconfig.load(path)


def test_a_spawner_with_gpuspawners_settings_but_no_engine_is_refused(tmp_path):
    """The admin tools ask the spawner for its engine and its GPUs (`EngineAdapter`); they
    never probe whether it has them: a class that lacks them is refused here, by name."""
    body = (
        "from jupyterhub.spawner import Spawner\n"
        "from gpuspawner.config.settings import GPUSettings\n"
        "class Settings(GPUSettings, Spawner):\n"
        "    start = stop = poll = None\n"
        "c.JupyterHub.spawner_class = Settings\n"
    )
    with pytest.raises(
        ConfigError, match=r"Settings is no engine adapter \(it lacks .*make_engine"
    ):
        hubconfig.load(write(tmp_path, body))


def test_an_unknown_spawner_class_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"spawner_class.*'nosuchspawner' could not be imported"):
        hubconfig.load(write(tmp_path, "", spawner="nosuchspawner"))


def test_simulation_from_the_command_line_wins_over_the_file(tmp_path):
    path = write(tmp_path, "c.GPUSpawner.simulate_gpus = 8\n")
    assert hubconfig.load(path, simulate_gpus=2).spawner.simulate_gpus == 2
    real = hubconfig.load(path, simulate_gpus=0)
    assert isinstance(hubconfig.gpu_source(real, 0), NvmlSource)
    simulated = hubconfig.gpu_source(hubconfig.load(path), None, "load.json")
    assert isinstance(simulated, SimulatedSource)
    assert (simulated.count, simulated.load_file) == (8, "load.json")
    assert isinstance(hubconfig.gpu_source(None, 3), SimulatedSource)
    assert isinstance(hubconfig.gpu_source(None, None), NvmlSource)
