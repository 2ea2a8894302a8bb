"""Headless Chromium (Debian's chromium and chromium-driver), driven by Selenium, in a
network namespace of its own.

Chromium ends every request in flight, loopback ones too, with ERR_NETWORK_CHANGED
whenever the host's network interfaces change, and Docker adds and removes one (a veth)
for every container it starts and stops. In a whole run, where the other workers start and
stop containers all the time, JupyterLab's requests failed at random: its stylesheet
("Error Loading Theme"), its API calls ("Server unavailable or unreachable"), the Create
Job dialog's. A person's browser runs on their own machine and never sees this; a test's
must not either. So, where this runs as root with `pasta` (passt, which scripts/testbed
installs), each worker's browsers run in a namespace whose interfaces never change, and
pasta carries their connections to the hubs (this worker's port range) out to the host's
loopback, and Selenium's to chromedriver in. Elsewhere they run on the host, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from artefacts import track_browser
from realhub import FIRST_PORT, PORTS_PER_WORKER, WORKER
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

# A host name of another site for the browser, on this machine's loopback: pages "on another
# site" are served there (the browsers' namespace reaches the host's 127.0.0.1 only).
OTHER_SITE = "other-site.test"
FLAGS = [
    f"--host-resolver-rules=MAP {OTHER_SITE} 127.0.0.1",
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]

# The README's pictures: written by the browser tests that show those pages, at one window
# size, so that each run's pictures look alike and a diff shows only what changed.
# What a wait on a page that redraws itself looks past: an element read mid-redraw is stale.
STALE = (StaleElementReferenceException,)
DOCS_IMAGES = Path(__file__).parents[1] / "docs" / "images"
SCREENSHOT_SIZE = (1280, 900)


NAMESPACE = f"gsbrowser{WORKER}"
PASTA_PID = Path(tempfile.gettempdir()) / f"gpuspawner-{NAMESPACE}-pasta.pid"
# chromedriver's ports, forwarded into the namespace: a few per worker, below the ephemeral
# ports and above every worker's hub ports
DRIVER_PORTS = range(30000 + WORKER * 20, 30000 + WORKER * 20 + 20)
_driver_ports = itertools.cycle(DRIVER_PORTS)
IN_NAMESPACE = str(Path(__file__).with_name("chromedriver-in-namespace"))
_namespace_made = False


class Chromium(webdriver.Chrome):
    """A browser whose profile (tens of MB under /tmp) goes when it quits."""

    def __init__(self, profile: str, **kwargs: Any) -> None:
        self.profile = profile
        super().__init__(**kwargs)

    def quit(self) -> None:
        try:
            super().quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


def chromium() -> webdriver.Chrome:
    options = Options()
    profile = tempfile.mkdtemp(prefix="gpuspawner-chromium-")
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for a failure's artefacts
    said = Path(profile) / "chromedriver.log"  # what chromedriver (or `ip netns`) said
    if isolating():
        make_namespace()
        env = {**os.environ, "GPUSPAWNER_BROWSER_NAMESPACE": NAMESPACE}
        service = Service(IN_NAMESPACE, port=next(_driver_ports), env=env, log_output=str(said))
    else:
        service = Service("/usr/bin/chromedriver", log_output=str(said))
    try:
        driver = Chromium(profile, options=options, service=service)
    except WebDriverException as error:
        words = said.read_text(errors="replace")[-2000:] if said.exists() else "(nothing)"
        shutil.rmtree(profile, ignore_errors=True)
        raise WebDriverException(f"{error.msg}; it said: {words.strip()}") from error
    except BaseException:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    track_browser(driver)
    return driver


def isolating() -> bool:
    """Whether browsers run in a namespace of their own here (root, with ip and pasta)."""
    return os.geteuid() == 0 and all(map(shutil.which, ("ip", "pasta")))


def make_namespace() -> None:
    """This worker's namespace, and pasta carrying its connections, once per process (one
    a crashed run left is made anew)."""
    global _namespace_made
    if _namespace_made and _namespace_alive():
        return
    if _namespace_made:  # what ended it is a bug to find: say so where the test's output is
        print(f"browser.py: {NAMESPACE} or its pasta was gone; made anew", file=sys.stderr)
    remove_namespace()
    subprocess.run(["ip", "netns", "add", NAMESPACE], check=True, capture_output=True)
    hubs = f"{FIRST_PORT}-{FIRST_PORT + PORTS_PER_WORKER - 1}"
    drivers = f"127.0.0.1/{DRIVER_PORTS.start}-{DRIVER_PORTS.stop - 1}"
    subprocess.run(
        ["pasta", "--quiet", "--runas", "0", "--config-net", "--pid", str(PASTA_PID),
         "--tcp-ports", drivers, "--tcp-ns", hubs, "--netns", NAMESPACE],
        check=True, capture_output=True,
    )  # fmt: skip
    _namespace_made = True
    atexit.register(remove_namespace)


def _pasta() -> int | None:
    """This worker's pasta, if it runs: its pid file's process, if that is a pasta still (a
    pid is reused once free)."""
    try:
        pid = int(PASTA_PID.read_text())
        running = Path(f"/proc/{pid}/comm").read_text().startswith(("pasta", "passt"))
    except (OSError, ValueError):
        return None
    return pid if running else None


def _namespace_alive() -> bool:
    return _pasta() is not None and Path(f"/run/netns/{NAMESPACE}").exists()


def remove_namespace() -> None:
    """The namespace and its pasta gone (a no-op where there is none)."""
    global _namespace_made
    pasta = _pasta()
    if pasta is not None:
        with contextlib.suppress(OSError):
            os.kill(pasta, signal.SIGTERM)
    PASTA_PID.unlink(missing_ok=True)
    if Path(f"/run/netns/{NAMESPACE}").exists():
        subprocess.run(["ip", "netns", "del", NAMESPACE], capture_output=True)
    _namespace_made = False


def log_in(driver: webdriver.Chrome, hub_url: str, user: str, password: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{hub_url}/hub/login")
    driver.find_element(By.ID, "username_input").send_keys(user)
    driver.find_element(By.ID, "password_input").send_keys(password)
    driver.find_element(By.ID, "login_submit").click()
    # Logged in once the hub has answered the form: a page asked for sooner may find no cookie.
    WebDriverWait(driver, 30).until(lambda d: "/hub/login" not in d.current_url)


def text_of(driver: webdriver.Chrome, css: str) -> str:
    """The text of the first element `css` finds, if it is shown; else ""."""
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found and found[0].is_displayed() else ""


def screenshot_for_docs(driver: webdriver.Chrome, name: str) -> Path:
    """Saves what `driver` shows as docs/images/NAME.png, at SCREENSHOT_SIZE."""
    driver.set_window_size(*SCREENSHOT_SIZE)
    driver.execute_script(  # the page laid out again at the new size before the picture
        "return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    target = DOCS_IMAGES / f"{name}.png"
    assert driver.save_screenshot(str(target)), f"no screenshot written to {target}"
    return target
