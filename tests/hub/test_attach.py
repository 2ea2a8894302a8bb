"""The start-up adapter's guard: a JupyterHub that starts differently stops the hub loudly."""

import os

import pytest
from jupyterhub import version_info
from jupyterhub.app import JupyterHub

from gpuspawner.hub.attach import (
    UnsupportedJupyterHub,
    check_start_sequence,
    install,
    with_ours,
)
from gpuspawner.hub.engines.docker import GPUSpawner
from gpuspawner.hub.web.pages import TEMPLATES


class Hub6:
    """The start sequence the adapter was written for, in miniature."""

    async def initialize(self, argv=None):
        await self.init_role_creation()
        self.init_tornado_application()
        await self.init_spawners()

    async def init_role_creation(self):
        pass

    async def init_spawners(self):
        pass

    def init_tornado_application(self):
        pass


class SpawnersBeforeTheWebApp(Hub6):
    async def initialize(self, argv=None):
        await self.init_spawners()
        self.init_tornado_application()


class SpawnersNoLongerStarted(Hub6):
    async def initialize(self, argv=None):
        self.init_tornado_application()
        await self.init_users()

    async def init_users(self):
        pass


class RolesAfterTheSpawners(Hub6):
    async def initialize(self, argv=None):
        self.init_tornado_application()
        await self.init_spawners()
        await self.init_role_creation()


class TemplatesBeforeTheRoles(Hub6):
    async def initialize(self, argv=None):
        self.init_tornado_settings()
        await self.init_role_creation()
        self.init_tornado_application()
        await self.init_spawners()

    def init_tornado_settings(self):
        pass


class SynchronousInitSpawners(Hub6):
    def init_spawners(self):  # type: ignore[override]
        pass


def test_the_installed_jupyterhub_starts_as_the_adapter_expects():
    check_start_sequence(JupyterHub, tuple(version_info[:3]))


def test_the_miniature_of_that_sequence_passes():
    check_start_sequence(Hub6, (6, 1, 1))


@pytest.mark.parametrize(
    "app_class, message",
    [
        (SpawnersBeforeTheWebApp, "no longer runs init_spawners after init_tornado_application"),
        (SpawnersNoLongerStarted, "no longer runs init_spawners after init_tornado_application"),
        (SynchronousInitSpawners, "init_spawners is no longer a coroutine method"),
        (RolesAfterTheSpawners, r"no longer loads its roles \(init_role_creation\) before"),
        (TemplatesBeforeTheRoles, r"reads its templates \(init_tornado_settings\) before"),
    ],
)
def test_a_jupyterhub_whose_start_sequence_moved_is_refused(app_class, message):
    with pytest.raises(UnsupportedJupyterHub, match=message):
        check_start_sequence(app_class, (6, 2, 0))


def test_another_major_version_is_refused_by_name():
    with pytest.raises(UnsupportedJupyterHub, match=r"supports JupyterHub 6\.x, not 7\.0\.0"):
        check_start_sequence(Hub6, (7, 0, 0))


def test_installing_twice_wraps_init_spawners_once():
    install(GPUSpawner)
    wrapped = JupyterHub.init_spawners
    install(GPUSpawner)
    assert JupyterHub.init_spawners is wrapped
    assert wrapped.gpuspawner
    assert not getattr(wrapped.__wrapped__, "gpuspawner", False)
    assert JupyterHub.init_role_creation.__wrapped__.__name__ == "init_role_creation"
    assert not hasattr(JupyterHub.init_role_creation.__wrapped__, "__wrapped__")


def test_the_installed_jupyterhubs_default_templates_are_where_attach_looks():
    app = JupyterHub()
    assert app._template_paths_default() == [os.path.join(app.data_files_path, "templates")]


@pytest.mark.parametrize(
    ("configured", "searched"),
    [
        ([], [TEMPLATES]),  # JupyterHub appends its own after
        (["/admin"], ["/admin", TEMPLATES]),
        (
            ["/admin", "/share/templates", "/late"],
            ["/admin", TEMPLATES, "/share/templates", "/late"],
        ),
        (["/admin", TEMPLATES], ["/admin", TEMPLATES]),
    ],
)
def test_gpuspawners_templates_come_after_the_admins_and_before_jupyterhubs(configured, searched):
    assert with_ours(configured, "/share") == searched
