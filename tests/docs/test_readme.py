"""The README is short and points into docs/: its links land on files and headings that
exist, and it still opens with the two commands that run the hub and the tests."""

import re
from pathlib import Path

import pytest

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
