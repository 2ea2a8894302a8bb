"""Imports cost what they use: the core, the culler's hook and `gpuspawner --help` load no hub."""

import json
import subprocess
import sys

import pytest

HEAVY = ("jupyterhub", "dockerspawner", "docker", "pynvml", "traitlets", "tornado", "jinja2")


def modules_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return {name.split(".")[0] for name in json.loads(out.splitlines()[-1])}


@pytest.mark.parametrize(
    "code",
    [
        "import gpuspawner.core.pool, gpuspawner.core.limits, gpuspawner.core.profiles",
        "import gpuspawner.core.placement, gpuspawner.core.reach, gpuspawner.core.culling",
        "import gpuspawner.core.budgets, gpuspawner.core.usage",
        # what jupyterhub-idle-culler's process loads for its hook
        "from gpuspawner.core.culling import idle_arbiter",
        "import gpuspawner",
    ],
)
def test_the_core_loads_nothing_but_the_standard_library(code):
    assert not modules_after(code) & set(HEAVY)


def test_the_command_lines_help_loads_no_hub_and_no_docker():
    code = (
        "import contextlib, io\n"
        "from gpuspawner.admin.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])"
    )
    assert not modules_after(code) & {"jupyterhub", "dockerspawner", "docker", "pynvml"}


def test_the_usage_report_loads_no_hub_unless_it_reads_a_config():
    assert not modules_after("import gpuspawner.admin.usage") & {"jupyterhub", "docker"}


def test_the_spawner_is_still_there_for_jupyterhub():
    assert "jupyterhub" in modules_after("from gpuspawner import GPUSpawner")
