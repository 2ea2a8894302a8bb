from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import artefacts
import docker
import pytest
from browser import NAMESPACE, chromium, remove_namespace
from dockerfaults import DockerFaults
from realhub import SESSION_PREFIXES, SESSION_PROXY_PORTS, SESSION_WORKDIRS, Hub, processes_in


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine-alone",
        choices=("include", "exclude", "only"),
        default="include",
        help="the tests marked engine_alone (they restart dockerd): run them with the rest "
        "(the default), leave them out (the parallel part of scripts/test), or run only them",
    )


# Module-scoped fixtures that each pytest-xdist worker may make for itself: a module whose
# tests use only these (and function-scoped ones) spreads its tests over the workers.
PER_WORKER = {"hub_factory", "load_file"}


def worker_group(item: pytest.Item, fixtures: Any) -> str:
    """For pytest-xdist's --dist loadgroup: which tests must run on one worker. The swarm
    bed's (one bed per session), and a module's that share a module-scoped fixture (its
    hub: started once, and what one test leaves is what the next expects); any other test
    goes wherever a worker is free."""
    if item.get_closest_marker("swarm") or "swarm" in fixtures:
        return "swarm"
    info = getattr(item, "_fixtureinfo", None)
    shared = info is not None and any(
        defs[-1].scope == "module" and name not in PER_WORKER
        for name, defs in info.name2fixturedefs.items()
    )
    return item.nodeid.partition("::")[0] if shared else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "hub_factory" in fixtures:
            item.add_marker(pytest.mark.docker)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        if config.pluginmanager.hasplugin("xdist"):  # its mark, known only with it (-p no:xdist)
            item.add_marker(pytest.mark.xdist_group(worker_group(item, fixtures)))
    wanted = config.getoption("engine_alone")
    if wanted == "include":
        return
    only = wanted == "only"
    keep = [item for item in items if bool(item.get_closest_marker("engine_alone")) == only]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing test on real hubs or in a browser saves what it saw (tests/artefacts.py)
    and says where, with the gist, in its report."""
    report = yield
    real = any(item.get_closest_marker(m) for m in ("docker", "swarm", "browser"))
    if report.failed and call.when in ("setup", "call") and real:
        report.sections.append(("what the test saw", artefacts.save(item.nodeid, call.when)))
    return report


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium for one test."""
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def hub_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Hub]]:
    """Start real hubs for a test module; stop them and remove their containers and their
    users' homes after."""
    hubs: list[Hub] = []

    def make(config: str, start: bool = True, env: dict[str, str] | None = None) -> Hub:
        hub = Hub(tmp_path_factory.mktemp("hub"), config, env=env or {})
        hubs.append(hub)
        return hub.start() if start else hub

    yield make
    for hub in hubs:
        hub.stop()
        hub.remove_containers()
        hub.remove_volumes()


@pytest.fixture(scope="module")
def faults() -> Iterator[DockerFaults]:
    """The fault-injecting proxy in front of dockerd, for a module's hub (`DOCKER_HOST`):
    ask for it before the hub, so that it outlives the hub."""
    with DockerFaults() as faults:
        yield faults


@pytest.fixture(scope="module")
def load_file(tmp_path_factory: pytest.TempPathFactory):
    """The simulated GPUs' load file (c.GPUSpawner.simulated_load_file): idle to begin with."""
    path = tmp_path_factory.mktemp("load") / "load.json"
    path.write_text("{}")
    return path


PROCESSES = ("proxy processes", "hub services")  # this session's by port or folder already


def leftovers() -> dict[str, set[str]]:
    """This session's proxies and hub services still running, and its containers, volumes
    and networks."""
    found: dict[str, set[str]] = {
        "proxy processes": set(),
        "hub services": set(processes_in(SESSION_WORKDIRS).values()),
    }
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ports = {
            command[i + 1].decode() for i, arg in enumerate(command[:-1]) if arg == b"--api-port"
        }
        if (
            any(b"configurable-http-proxy" in arg for arg in command)
            and ports & SESSION_PROXY_PORTS
        ):
            found["proxy processes"].add(b" ".join(command).decode())
    try:
        client = docker.from_env().api
        found["containers"] = {
            n.lstrip("/") for c in client.containers(all=True) for n in c["Names"]
        }
        found["volumes"] = {v["Name"] for v in client.volumes()["Volumes"] or []}
        found["networks"] = {n["Name"] for n in client.networks()}
    except docker.errors.DockerException:
        pass  # no Docker engine: a unit-test run
    prefixes = tuple(SESSION_PREFIXES)
    return {
        kind: {n for n in names if kind in PROCESSES or (prefixes and n.startswith(prefixes))}
        for kind, names in found.items()
    }


@pytest.fixture(scope="session", autouse=True)
def the_run_leaves_nothing_behind() -> Iterator[None]:
    """No proxy, container, volume or network of the tests outlives the run, nor this
    worker's browsers' network namespace (tests/browser.py), removed here."""
    yield
    remove_namespace()
    left = {kind: names for kind, names in leftovers().items() if names}
    if Path(f"/run/netns/{NAMESPACE}").exists():
        left["browser namespace"] = {NAMESPACE}
    assert not left, f"the tests left behind: {left}"
