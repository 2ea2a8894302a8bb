"""Headless Chromium (Debian's chromium and chromium-driver), driven by Selenium."""

from __future__ import annotations

import tempfile
from pathlib import Path

from artefacts import track_browser
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

FLAGS = [
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


def chromium() -> webdriver.Chrome:
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='gpuspawner-chromium-')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # for a failure's artefacts
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    track_browser(driver)
    return driver


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
