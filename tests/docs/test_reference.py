"""The configuration reference is generated from the settings, and none lacks help."""

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuspawner.config.settings import GPUSettings
from gpuspawner.hub.engines.docker import GPUSpawner

DOCS = Path(__file__).parents[2] / "docs"
OWN = {**GPUSettings.class_own_traits(config=True), **GPUSpawner.class_own_traits(config=True)}


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_setting_has_help_an_admin_can_use(name):
    help_text = " ".join(OWN[name].help.split())
    assert len(help_text) >= 60, f"c.GPUSpawner.{name} needs real help text, got {help_text!r}"


def test_the_built_reference_lists_every_setting_with_its_help(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-W", "-n", "-b", "html", str(DOCS), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    page = (tmp_path / "reference" / "index.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for name, trait in OWN.items():
        assert f"c.GPUSpawner.{name} =" in text
        first_line = " ".join(trait.help.strip().splitlines()[0].replace("`", "").split())
        assert first_line.rstrip(".") in " ".join(text.split()), name
