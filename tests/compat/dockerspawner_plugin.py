"""Our conftest for dockerspawner 14.0.0's own tests/test_dockerspawner.py, run on GPUSpawner.

`scripts/dockerspawner-suite` fetches that file from dockerspawner's sdist (which
ships no conftest.py) and runs it with this plugin. The plugin

- gives the fixtures the file uses, on JupyterHub's MockHub configured for
  GPUSpawner before it starts, so gpuspawner's start-up adapter starts the broker;
- swaps GPUSpawner in for the name `DockerSpawner` in the test module, so every
  `isinstance` check and every `DockerSpawner(...)` there is about GPUSpawner;
- creates a named server's database record on its first lookup, as JupyterHub
  before 6 did: four of the file's tests fail on JupyterHub 6.1 without it, for
  plain DockerSpawner too ("orm_spawner not found");
- tags our local notebook image as the images the tests name (there is no
  registry here), and removes those tags afterwards;
- skips exactly the tests whose expectations GPUSpawner breaks by design, each
  with the design choice named (docs/configuration.md lists them), and one that needs a
  registry this test bed cannot reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import docker as docker_py
import pytest
from conftest import the_run_leaves_nothing_behind  # noqa: F401  (our session's check)
from jupyterhub.tests.mocking import MockHub
from jupyterhub.tests.utils import add_user
from jupyterhub.user import User
from mockhub import gpu_hub_config, running_hub
from realhub import NOTEBOOK_IMAGE

from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.engines.docker import GPUSpawner

BASE_IMAGE = "gpuspawner-base:bookworm"  # scripts/testbed's Debian base: sh, ls, sleep
UPSTREAM = GPUSpawner.image.default_value.rpartition(":")[0]  # DockerSpawner's singleuser image
IMAGES = {  # the names the tests use → the local image that stands in
    GPUSpawner.image.default_value: NOTEBOOK_IMAGE,
    f"{UPSTREAM}:4.0": NOTEBOOK_IMAGE,
    f"{UPSTREAM}:4": NOTEBOOK_IMAGE,
    "busybox:1.29.1": BASE_IMAGE,
}

BY_DESIGN = {
    "test_start_stop[False]": (
        "remove=False: GPUSpawner always removes a server's container when it stops (the "
        "setting is refused), since a kept container would restart later with GPUs the pool "
        "may have given to someone else; users' files belong in volumes"
    ),
    "test_default_options_form": (
        "options form: GPUSpawner's form is its GPU profile form, not DockerSpawner's image list"
    ),
    "test_options_from_form": (
        "strict user_options: a form field sent twice is a list, refused as the form is sent "
        "(and at start, for the REST API), not cut to its first value"
    ),
}
NO_REGISTRY = {
    "test_image_pull_policy": (
        "pulls busybox:1.29.1 from Docker Hub: this test bed has no container registry "
        "(not a difference of GPUSpawner)"
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    # The marks of JupyterHub's test_api module, which the file imports helpers from.
    for mark in ("db", "role", "user", "slow", "group", "services"):
        config.addinivalue_line("markers", mark)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skips = {**BY_DESIGN, **NO_REGISTRY}
    names = {item.name for item in items}
    stale = sorted(set(skips) - names)
    if stale:
        raise pytest.UsageError(f"skips for tests that no longer exist: {stale}")
    for item in items:
        if item.name in skips:
            item.add_marker(pytest.mark.skip(reason=skips[item.name]))


@pytest.fixture(autouse=True)
def gpuspawner_as_dockerspawner(request: pytest.FixtureRequest) -> Iterator[None]:
    with mock.patch.object(request.module, "DockerSpawner", GPUSpawner):
        yield


@pytest.fixture(autouse=True)
def named_server_records_on_first_lookup() -> Iterator[None]:
    original = User._new_spawner

    def new_spawner(self: User, server_name: str, *args: Any, **kwargs: Any) -> Any:
        if server_name not in self.orm_spawners:
            self._new_orm_spawner(server_name, server_name)
        return original(self, server_name, *args, **kwargs)

    with mock.patch.object(User, "_new_spawner", new_spawner):
        yield


@pytest.fixture(autouse=True, scope="session")
def docker() -> Iterator[Any]:
    """A Docker client; the test images tagged for the session."""
    client = docker_py.from_env()
    added = []
    for name, local in IMAGES.items():
        with contextlib.suppress(docker_py.errors.ImageNotFound):
            client.images.get(name)
            continue
        repository, tag = name.rsplit(":", 1)
        client.images.get(local).tag(repository, tag)
        added.append(name)
    yield client
    for name in added:
        client.images.remove(name, noprune=True)


@pytest.fixture(scope="module")
async def app() -> Any:
    async with running_hub(gpu_hub_config(reachable_from_containers=True)) as hub:
        yield hub


@pytest.fixture(autouse=True)
async def stop_leftover_servers(request: pytest.FixtureRequest) -> Any:
    """As JupyterHub's own cleanup_after: servers a test left running are stopped."""
    yield
    if "app" not in request.fixturenames or not MockHub.initialized():
        return
    app = MockHub.instance()
    for user in list(app.users.values()):
        for name, spawner in list(user.spawners.items()):
            if spawner.active:
                await app.proxy.delete_user(user, name)
                await user.stop(name)
                await Broker.current().settled(spawner.orm_spawner.id)


@pytest.fixture
async def named_servers(app: MockHub) -> Any:
    with mock.patch.dict(
        app.tornado_settings, {"allow_named_servers": True, "named_server_limit_per_user": 2}
    ):
        yield


@pytest.fixture
async def dockerspawner_configured_app(app: MockHub, named_servers: None) -> Any:
    """The hub, whose spawner class is GPUSpawner from its start (see `app`)."""
    assert app.tornado_settings["spawner_class"] is GPUSpawner
    yield app


_usernames = iter(range(1, 1_000_000))


@pytest.fixture
def username() -> str:
    return f"testuser-{next(_usernames)}"


@pytest.fixture
def user(app: MockHub, username: str) -> User:
    return add_user(app.db, app, name=username)
