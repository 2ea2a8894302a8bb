"""What a failing stack or browser test leaves for its reader: one folder per failure, and
the gist of it in the failure's report, so that the cause can be read from the CI log alone.

For every browser the test still has open: a screenshot, the browser's console log, the
page's text and address. For every hub the test's module still runs: its log's tail. And
`docker ps -a` as the engine has it then. The folder is `test-artefacts/` at the top of the
repository (GPUSPAWNER_TEST_ARTEFACTS names another), one subfolder per failed test.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(
    os.environ.get("GPUSPAWNER_TEST_ARTEFACTS") or Path(__file__).parents[1] / "test-artefacts"
)
TAIL = 40  # lines of each log quoted in the report itself; the folder has more

# Live objects of this worker, registered as they are made (browser.chromium, realhub.Hub).
_browsers: list[weakref.ref[Any]] = []
_hubs: list[weakref.ref[Any]] = []


def track_browser(driver: Any) -> None:
    _browsers.append(weakref.ref(driver))


def track_hub(hub: Any) -> None:
    _hubs.append(weakref.ref(hub))


def _alive(refs: list[weakref.ref[Any]]) -> Iterator[Any]:
    """Those still there and still running (a browser that quit has no driver process)."""
    refs[:] = [r for r in refs if r() is not None and _running(r())]
    yield from (found for r in refs if (found := r()) is not None)


def _running(thing: Any) -> bool:
    process = getattr(getattr(thing, "service", None), "process", None)
    return process is None or process.poll() is None


def folder_for(nodeid: str, when: str) -> Path:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid.partition("@")[0])[-150:]
    folder = ROOT / f"{name}.{when}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save(nodeid: str, when: str) -> str:
    """Saves what the failure left into its folder, and returns the report's section: where
    the folder is and the lines a reader needs first."""
    folder = folder_for(nodeid, when)
    parts = [f"artefacts: {folder}"]
    for number, driver in enumerate(_alive(_browsers)):
        parts.append(_save_browser(driver, folder, f"browser{number}"))
    for hub in _alive(_hubs):
        parts.append(_save_hub(hub, folder))
    parts.append(_save_docker(folder))
    return "\n\n".join(p for p in parts if p)


def _save_browser(driver: Any, folder: Path, name: str) -> str:
    """The page as the person saw it. A browser that is gone, or that does not answer,
    says so instead."""
    try:
        url = driver.current_url
        driver.save_screenshot(str(folder / f"{name}.png"))
        text = driver.execute_script("return document.body ? document.body.innerText : ''")
        console = driver.get_log("browser")
    except Exception as error:  # the browser itself may be what broke
        return f"{name}: could not be read ({type(error).__name__}: {error})"
    (folder / f"{name}-page.txt").write_text(f"{url}\n\n{text}")
    lines = [f"[{e.get('level')}] {e.get('message')}" for e in console]
    (folder / f"{name}-console.log").write_text("\n".join(lines))
    errors = [line for line in lines if line.startswith(("[SEVERE]", "[WARNING]"))]
    shown = "\n".join(text.splitlines()[-TAIL:])
    return (
        f"{name} at {url} ({name}.png); the page's text ends:\n{shown}\n"
        f"{name}'s console, errors and warnings ({len(errors)} of {len(lines)} lines):\n"
        + "\n".join(errors[-TAIL:])
    )


def _save_hub(hub: Any, folder: Path) -> str:
    log = hub.log()
    name = f"hub-{hub.prefix}.log"
    (folder / name).write_text(log)
    running = hub.process is not None and hub.process.poll() is None
    state = "running" if running else "not running"
    tail = "\n".join(log.splitlines()[-TAIL:])
    return f"hub {hub.prefix} ({state}, {hub.url}; whole log in {name}); its log ends:\n{tail}"


def _save_docker(folder: Path) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listed = subprocess.run(
            ["docker", "ps", "-a", "--format", "{{.Names}}\t{{.Status}}\t{{.Image}}"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
        (folder / "docker-ps.txt").write_text(listed)
        return f"docker ps -a:\n{listed}"
    return "docker ps -a: no answer from Docker"
