"""The README is short and points into docs/: its links land on files and headings that
exist, it still opens with the two commands that run the hub and the tests, and its
minimal config is one a hub takes."""

import re
from pathlib import Path

import pytest
from jupyterhub.app import JupyterHub
from jupyterhub.auth import Authenticator

from gpuspawner import public
from gpuspawner.admin import hubconfig
from gpuspawner.admin.checks import (
    Status,
    judge_container_settings,
    judge_gpu_settings,
    judge_users_outside_groups,
)
from gpuspawner.config.site import GPUSite
from gpuspawner.devices.simulated import SimulatedSource

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
LINKS = re.findall(r"\]\(([^)\s]+)\)", README)
# The pictures are written by the browser tests that show those pages (tests/browser.py).
PICTURES = {"docs/images/spawn-form.png": "spawn-form", "docs/images/gpus-page.png": "gpus-page"}


def slug(heading: str) -> str:
    """A heading's anchor, as MyST (myst_heading_anchors) and GitHub make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # not in code
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_opens_with_the_two_commands():
    first_block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines() == [
        "scripts/hub     # the example hub on http://127.0.0.1:8000 (simulated GPUs where "
        "the machine has none)",
        "scripts/test    # the whole test suite: unit tests and real hubs spawning real containers",
    ]
    assert README.index("```sh") < README.index("\n## ")


def test_the_readme_is_short():
    assert len(README.splitlines()) < 150


@pytest.mark.parametrize("link", [link for link in LINKS if "://" not in link])
def test_every_link_in_the_readme_lands(link):
    path, _, anchor = link.partition("#")
    if path in PICTURES:
        calls = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
        assert f'screenshot_for_docs(browser, "{PICTURES[path]}")' in calls
        return
    target = ROOT / path
    assert target.exists(), f"README links to {path}, which is not there"
    if anchor:
        assert anchor in headings(target), f"{path} has no heading #{anchor}"


def test_the_readme_links_every_docs_page():
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    pages |= {"docs/reference/index.md"}
    assert pages <= {link.partition("#")[0] for link in LINKS}


def minimal_config() -> str:
    """The README's config for the common case: its one Python block."""
    return README.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_minimal_config_is_at_most_15_lines():
    assert len(minimal_config().splitlines()) <= 15


def test_the_minimal_config_runs_an_8_gpu_server_for_two_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(public, "docker_bridge_gateway", lambda: "172.17.0.1")  # no dockerd
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(minimal_config())
    site = hubconfig.load(path)  # as JupyterHub loads it
    for configurable in (JupyterHub, Authenticator, type(site.spawner)):
        written = set(site.config[configurable.__name__])
        assert written <= set(configurable.class_traits(config=True)), configurable
    eight = SimulatedSource(8)
    for finding in (
        judge_gpu_settings(site, eight),
        judge_users_outside_groups(site),
        judge_container_settings(site),
    ):
        assert finding.status is Status.PASS, finding
    assert site.hub_address().connect_host == "172.17.0.1"
    # as the README's words say
    gpus = GPUSite.from_config(site.spawner, eight)
    assert [p.slug for p in gpus.profiles] == ["cpu", "gpu-1", "gpu-2", "gpu-4", "gpu-8"]
    student, researcher, other = (
        gpus.limits.for_user(g) for g in (["students"], ["researchers"], [])
    )
    assert (student.max_gpus_per_user.value, student.quotas) == (1, {"students": 4})
    assert student.duration("gpu_idle_timeout").value == 3600
    assert (researcher.max_gpus_per_user.value, other.max_gpus_per_user.value) == (4, 1)
    assert [s["name"] for s in site.config.JupyterHub.services] == ["idle-culler"]
