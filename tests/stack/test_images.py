"""The images from images/ (scripts/testbed builds them) as real single-user servers under a hub."""

import re

import jupyterhub
import pytest
from in_container import run_in
from realhub import CPU_IMAGE, NOTEBOOK_IMAGE, Hub

CONFIG = f"""
c.GPUSpawner.simulate_gpus = 2
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0,
      "spawner_override": {{"image": {CPU_IMAGE!r}}}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
]
"""


# JupyterLab extensions each image ships (images/requirements, labextension/): the front end's
# name, and the Jupyter server extension beside it.
LAB_EXTENSIONS = {
    "gpuspawner-lab": "gpuspawner_lab",
    "@jupyter-server/resource-usage": "jupyter_resource_usage",
    "@jupyterlab/scheduler": "jupyter_scheduler",  # jobs from the Create Job dialog
}
GPU_LAB_EXTENSIONS = {"jupyterlab-nvdashboard": "jupyterlab_nvdashboard"}


def uncoloured(text: str) -> str:
    """Jupyter's listings colour "enabled" and "OK" even without a terminal."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(CONFIG)
    hub.add_users("ann")
    return hub


@pytest.mark.parametrize(
    ("profile", "image", "flavour"), [("gpu-1", NOTEBOOK_IMAGE, "gpu"), ("cpu", CPU_IMAGE, "cpu")]
)
def test_each_image_serves_jupyterlab_for_the_hub(hub: Hub, profile, image, flavour):
    hub.spawn_ready("ann", profile, profile=profile)
    container = hub.container_of("ann", profile)
    assert container.image.tags == [image]
    assert container.image.labels["gpuspawner.image"] == flavour

    session = hub.login("ann")
    landing = session.get(f"{hub.url}/user/ann/{profile}/")  # through the hub's OAuth
    assert landing.ok and landing.url.endswith(f"/user/ann/{profile}/lab")
    assert "JupyterLab" in landing.text

    def run(*command: str) -> str:
        result = run_in(container, list(command))
        assert result.exit_code == 0, result.output
        return result.output.strip()

    assert run("id", "-un") == "jovyan" and run("id", "-u") == "1000"
    # the user may pip install into the notebook's environment
    writable = "import os, site; print(os.access(site.getsitepackages()[0], os.W_OK))"
    assert run("python3", "-c", writable) == "True"
    assert run("jupyterhub-singleuser", "--version") == jupyterhub.__version__

    labextensions = uncoloured(run("jupyter", "labextension", "list"))
    server_extensions = uncoloured(run("jupyter", "server", "extension", "list"))
    wanted = {**LAB_EXTENSIONS, **(GPU_LAB_EXTENSIONS if flavour == "gpu" else {})}
    for frontend, server in wanted.items():
        assert re.search(rf"{re.escape(frontend)} v\S+ enabled OK", labextensions), labextensions
        assert re.search(rf"^ +{server} \S+ OK$", server_extensions, re.M), server_extensions
    if flavour == "cpu":
        assert "nvdashboard" not in labextensions

    # the lease, as JupyterLab reads it: through the notebook server, from the hub
    lease = session.get(f"{hub.url}/user/ann/{profile}/gpuspawner/lease")
    assert lease.ok, lease.text
    if flavour == "gpu":
        [uuid] = hub.held_uuids("ann", profile)
        assert [g["uuid"] for g in lease.json()["gpus"]] == [uuid]
        assert lease.json()["summary"] == "1 GPU"
    else:
        assert hub.visible_devices("ann", profile) == "void"
        assert lease.json()["summary"] == "CPU only" and lease.json()["gpus"] == []
    hub.stop_server("ann", profile)
