"""What a newcomer and an attacker tried on 0.1: admins spawn, links on other sites start
nothing, and every shape of bad input is a short 400 that takes nothing."""

import http.server
import threading
from collections.abc import Iterator

import pytest
from browser import OTHER_SITE, log_in, screenshot_for_docs
from realhub import CPU_IMAGE, NOTEBOOK_IMAGE, PASSWORD, Hub, free_port
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

PROFILES = f"""
c.GPUSpawner.simulate_gpus = 4
c.GPUSpawner.profiles = [
    {{"display_name": "CPU only", "slug": "cpu", "gpus": 0,
      "spawner_override": {{"image": {CPU_IMAGE!r}}}}},
    {{"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}},
    {{"display_name": "2 GPUs", "slug": "gpu-2", "gpus": 2}},
]
# what made every admin spawn crash in 0.1: culling limits, which admins had none of
c.GPUSpawner.default_limits = {{
    "max_gpus_per_user": 1, "profiles": ["cpu", "gpu-1"],
    "idle_timeout": 7200, "gpu_idle_timeout": 3600,
}}
c.GPUSpawner.allowed_images = [{NOTEBOOK_IMAGE!r}, {CPU_IMAGE!r}]
"""


@pytest.fixture(scope="module")
def hub(hub_factory) -> Hub:
    hub = hub_factory(PROFILES)
    hub.add_users("admin", "alice")
    return hub


def test_an_admin_starts_every_profile_from_the_rest_api_and_the_form(hub: Hub):
    for profile in ("cpu", "gpu-1", "gpu-2"):  # gpu-2 is beyond default_limits: admins are not
        hub.spawn_ready("admin", profile, profile=profile)
    assert len(hub.held_by("admin")) == 3
    session = hub.login("admin")
    response = hub.submit_form(session, "admin", "", profile="gpu-1")
    assert response.ok, response.text
    hub.wait_ready("admin")
    assert len(hub.held_uuids("admin")) == 1
    state = hub.server_model("admin")["state"]
    assert state["idle_timeout"] == 3600 * 2 and state["idle_timeout_group"] == "default_limits"
    for server in ("cpu", "gpu-1", "gpu-2", ""):
        hub.stop_server("admin", server)
    assert hub.pool()["free"] == 4


def test_with_limit_admins_an_admin_gets_the_default_limits(hub_factory):
    limited = hub_factory(PROFILES + "c.GPUSpawner.limit_admins = True\n")
    limited.add_users("admin")
    refused = limited.spawn("admin", "big", profile="gpu-2")
    assert refused.status_code == 403, refused.text
    assert "not available to you" in refused.json()["message"]
    session = limited.login("admin")
    assert limited.submit_form(session, "admin", "", profile="gpu-1").ok
    limited.wait_ready("admin")
    assert limited.spawn("admin", "second", profile="gpu-1").status_code == 403
    limited.stop_server("admin")


class EvilSite:
    """Pages served from another origin, each sending the logged-in browser to the hub."""

    def __init__(self, hub_url: str) -> None:
        spawn = f"{hub_url}/hub/spawn/alice"
        self.pages = {
            "/link": f'<a id="go" href="{spawn}?profile=gpu-1">free GPUs</a>'
            "<script>document.getElementById('go').click()</script>",
            "/named": f"<script>location = '{spawn}/viaget?profile=gpu-1'</script>",
            "/get-form": f'<form id="f" method="GET" action="{spawn}/viaform">'
            '<input name="profile" value="gpu-1"></form>'
            "<script>document.getElementById('f').submit()</script>",
            "/post-form": f'<form id="f" method="POST" action="{spawn}/viapost">'
            '<input name="profile" value="gpu-1"></form>'
            "<script>document.getElementById('f').submit()</script>",
        }
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages[self.path].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://{OTHER_SITE}:{self.server.server_port}"  # another site to the hub
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def evil(hub: Hub) -> Iterator[EvilSite]:
    site = EvilSite(hub.url)
    yield site
    site.close()


def test_a_link_on_another_site_starts_nothing(hub: Hub, evil: EvilSite, browser):
    # The test before ran a second hub on this dockerd, with the same simulated GPUs: this
    # hub saw its server as GPU use outside JupyterHub until its next look after the stop.
    hub.wait_for(lambda: hub.pool()["free"] == 4, what="the other hub's GPU use gone")
    log_in(browser, hub.url, "alice", PASSWORD)
    WebDriverWait(browser, 20).until(expected_conditions.url_contains("/hub/"))
    for page in evil.pages:
        browser.get(f"{evil.url}{page}")
        WebDriverWait(browser, 20).until(expected_conditions.url_contains(hub.url))
        WebDriverWait(browser, 20).until(
            lambda driver: driver.execute_script("return document.readyState") == "complete"
        )
        assert hub.pool()["free"] == 4, page
        assert not hub.containers(all=True), page
    for server in ("", "viaget", "viaform", "viapost"):
        assert hub.server_model("alice", server) is None
    # the link lands on the form, its profile chosen, for alice to confirm
    browser.get(f"{hub.url}/hub/spawn/alice?profile=gpu-1")
    error = browser.find_element(By.CSS_SELECTOR, ".spawn-error-msg").text
    assert "A link cannot start a server" in error
    assert browser.find_element(By.CSS_SELECTOR, 'input[value="gpu-1"]').is_selected()
    browser.get(f"{hub.url}/hub/spawn/alice?opt-profile=cpu")  # JupyterHub's newer spelling
    assert (
        "A link cannot start a server"
        in browser.find_element(By.CSS_SELECTOR, ".spawn-error-msg").text
    )
    assert browser.find_element(By.CSS_SELECTOR, 'input[value="cpu"]').is_selected()
    browser.get(f"{hub.url}/hub/spawn/alice?profile=gpu-1")
    browser.find_element(By.CSS_SELECTOR, "#spawn_form button[type=submit]").click()
    hub.wait_started_by_browser("alice")
    assert len(hub.held_uuids("alice")) == 1
    hub.stop_server("alice")


def test_start_my_server_on_the_home_page_still_works(hub: Hub, browser):
    log_in(browser, hub.url, "alice", PASSWORD)
    browser.get(f"{hub.url}/hub/home")
    browser.find_element(By.ID, "start").click()
    WebDriverWait(browser, 20).until(
        expected_conditions.presence_of_element_located((By.ID, "spawn_form"))
    )
    screenshot_for_docs(browser, "spawn-form")  # the README's picture of the form
    # The form preselects the profile alice used last, which the tests before decide.
    gpu_1 = browser.find_element(By.CSS_SELECTOR, 'input[value="gpu-1"]')
    gpu_1.click()
    assert gpu_1.is_selected(), hub.pool()  # a disabled choice takes no click
    browser.find_element(By.CSS_SELECTOR, "#spawn_form button[type=submit]").click()
    hub.wait_started_by_browser("alice")
    assert len(hub.held_uuids("alice")) == 1
    hub.stop_server("alice")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"profile": "gpu-1", "image": ["x"]}, "image must be an image name (text), got a list"),
        ({"profile": "gpu-1", "image": {"x": 1}}, "got an object"),
        ({"profile": "gpu-1", "image": "evil:latest"}, "image 'evil:latest' is not offered"),
        ({f"k{i}": i for i in range(200_000)}, "and 199,995 more"),
    ],
    ids=["image-list", "image-object", "image-not-offered", "200000-keys"],
)
def test_every_shape_of_bad_options_is_a_short_400_that_takes_nothing(hub: Hub, options, message):
    response = hub.api("POST", "/users/alice/servers/bad", json={"user_options": options})
    assert response.status_code == 400, response.text[:300]
    assert message in response.json()["message"]
    assert len(response.content) < 2000
    assert hub.pool()["free"] == 4
    assert hub.server_model("alice", "bad") is None


@pytest.fixture(scope="module")
def anything(hub_factory) -> Hub:
    """A hub where users may name any image, pulled when it is not here (no registry is)."""
    config = (
        "c.GPUSpawner.simulate_gpus = 2\nc.GPUSpawner.allowed_images = '*'\n"
        "c.DockerSpawner.pull_policy = 'ifnotpresent'\n"
        'c.GPUSpawner.profiles = [{"display_name": "CPU only", "slug": "cpu", "gpus": 0},'
        ' {"display_name": "1 GPU", "slug": "gpu-1", "gpus": 1, "default": True}]\n'
    )
    hub = hub_factory(config)
    hub.add_users("alice")
    return hub


def test_any_image_is_offered_as_a_name_to_type_not_as_a_star(anything: Hub):
    page = anything.login("alice").get(f"{anything.url}/hub/spawn/alice/x").text
    assert 'name="image"' in page and 'value="*"' not in page and 'type="text"' in page
    refused = anything.spawn("alice", "x", image="not an image!")
    assert refused.status_code == 400 and "is not a Docker image name" in refused.json()["message"]


@pytest.mark.parametrize("profile", ["cpu", "gpu-1"])
def test_an_image_that_cannot_be_pulled_is_a_400_naming_it_that_holds_nothing(anything, profile):
    refused = anything.spawn("alice", profile, profile=profile, image="busybox:latest")
    assert refused.status_code == 400, refused.text[:300]
    message = refused.json()["message"]
    assert message.startswith("Image 'busybox:latest' is not on this machine, and could not be")
    assert "Traceback" not in refused.text
    anything.wait_gone("alice", profile)
    assert anything.pool()["free"] == 2
    assert not anything.containers(all=True)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("c.GPUSpawner.monitor_interval = 0\n", "monitor_interval must be a number of seconds > 0"),
        (
            'c.GPUSpawner.extra_host_config = {"privileged": True}\n',
            "c.GPUSpawner.extra_host_config sets privileged=True",
        ),
        (
            'c.GPUSpawner.volumes = {"//dev/./": "/mnt/dev"}\n',
            "c.GPUSpawner.volumes sets mounts of /dev",
        ),
        (
            'c.GPUSpawner.profiles = [{"display_name": "CPU", "slug": "cpu", "gpus": 0,'
            ' "spawner_override": {"mem_limt": "4G"}}]\n',
            "c.GPUSpawner.profiles[cpu].spawner_override: 'mem_limt' is not a setting",
        ),
        (
            'c.GPUSpawner.usage_ledger_file = "/no/such/folder/usage.sqlite"\n',
            "c.GPUSpawner.usage_ledger_file '/no/such/folder/usage.sqlite' cannot be used",
        ),
    ],
    ids=["monitor-interval", "privileged", "dev-mount", "override-typo", "ledger-path"],
)
def test_a_config_the_hub_cannot_run_safely_stops_it_with_one_line(hub_factory, config, expected):
    bad = hub_factory("c.GPUSpawner.simulate_gpus = 2\n" + config, start=False)
    bad.start(wait=False)
    assert bad.process.wait(60) != 0
    lines = [line for line in bad.log().splitlines() if "gpuspawner:" in line]
    assert len(lines) == 1, bad.log()[-3000:]
    assert expected in lines[0]


def test_the_gpu_page_answers_before_the_first_look_at_the_gpus(hub_factory):
    """Right after a hub starts, no GPU has been sampled yet: the page shows dashes."""
    fresh = hub_factory("c.GPUSpawner.simulate_gpus = 2\nc.GPUSpawner.monitor_interval = 3600\n")
    fresh.add_users("admin")
    page = fresh.login("admin").get(f"{fresh.url}/hub/gpus")
    assert page.status_code == 200
    text = page.content.decode("utf-8")
    assert 'id="gpu-table"' in text and "<td>–</td>" in text
    assert all(gpu["telemetry"] is None for gpu in fresh.pool()["gpus"])
