"""The hub over several machines, in-process: GPUSpawner on a JupyterHub user and database,
the broker's real pool and line. A group's `nodes` holds wherever a start is made or judged
(the reservation, the waiting line, the form), and refusals say what the books say.
Containers are the one stand-in (every container is already gone when asked)."""

import asyncio
import logging
import re
from dataclasses import replace

import jinja2
import pytest
from brokers import a_broker
from doubles import Cluster
from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.spawner import SpawnException
from jupyterhub.user import User

from gpuspawner.config.settings import GPUSettings
from gpuspawner.config.site import GPUSite
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import Request
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.engines.docker import GPUSpawner
from gpuspawner.hub.spawn import form
from gpuspawner.hub.watch.monitor import Monitor
from gpuspawner.hub.web import pages
from gpuspawner.hub.web.report import pool_report

LOG = logging.getLogger("test")
LIMITS = {
    "course": {"nodes": ["old"]},
    "patient-course": {"nodes": ["old"], "max_wait": 60},
    "away": {"nodes": ["gone"], "max_wait": 60},
    "patient": {"max_wait": 60},
}


class Machines(SimulatedSource):
    """Simulated H100s, the first half on machine "old", the others on "new"."""

    def list_gpus(self):
        gpus = super().list_gpus()
        return [replace(g, node="old" if g.index < len(gpus) // 2 else "new") for g in gpus]


# As an admin may list them: 4 GPUs too, though no machine has 4.
PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "gpus": 0},
    *(
        {"display_name": f"{n} GPU{'s' * (n > 1)}", "slug": f"gpu-{n}", "gpus": n}
        for n in (1, 2, 4)
    ),
]


@pytest.fixture
async def broker():
    """Two machines of 2 GPUs each."""
    broker = a_broker(GPUSettings(group_limits=LIMITS, profiles=PROFILES), source=Machines(4))
    broker.install()
    yield broker
    await broker.shutdown()


@pytest.fixture
def db():
    return orm.new_session_factory("sqlite://")()


def spawner_of(db, name: str, *groups: str) -> GPUSpawner:
    """A user's default server as the hub makes it, in groups (made where missing)."""
    user = orm.User(name=name)
    for group in groups:
        user.groups.append(orm.Group.find(db, group) or orm.Group(name=group))
    db.add(user)
    orm_spawner = orm.Spawner(user=user, name="")
    db.add(orm_spawner)
    db.commit()
    return GPUSpawner(user=User(user, {"db": db}), orm_spawner=orm_spawner, hub=Hub(), db=db)


def profile(broker: Broker, slug: str):
    return next(p for p in broker.site.profiles if p.slug == slug)


def hold(broker: Broker, key: int, node: str) -> Grant:
    """Someone else's server, with 1 GPU on `node`."""
    request = Request(gpus=1, nodes=frozenset({node}))
    return broker.take_now(Holder(key, key, f"user{key}"), request)


def node_of(grant: Grant) -> str:
    (node,) = {u.node for u in grant.units}
    return node


async def take(spawner: GPUSpawner, slug: str) -> Grant:
    """GPUs for a start of `spawner` on profile `slug`, as its start takes them."""
    return await spawner._take(profile(spawner.broker, slug), spawner.user_limits())


async def refusal(spawner: GPUSpawner, slug: str) -> SpawnException:
    with pytest.raises(SpawnException) as refused:
        await take(spawner, slug)
    assert spawner.broker.grant_of(spawner.orm_spawner.id) is None
    return refused.value


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


# --- a group's machines -------------------------------------------------------------------
async def test_a_groups_server_goes_only_to_its_machines(broker, db):
    """Packed would pick "new" (a tie goes to the name); the course may use only "old"."""
    first = await take(spawner_of(db, "ann", "course"), "gpu-1")
    second = await take(spawner_of(db, "bob", "course"), "gpu-1")
    assert (node_of(first), node_of(second)) == ("old", "old")
    anyone = await take(spawner_of(db, "cat"), "gpu-1")
    assert node_of(anyone) == "new"
    refused = await refusal(spawner_of(db, "dan", "course"), "gpu-1")
    assert refused.status_code == 409 and str(refused.jupyterhub_message) == (
        "Not enough free GPUs: profile '1 GPU' needs 1, 0 of 2 are free right now. Try again "
        "when another server stops, or pick a profile with fewer GPUs."
    )  # the 2 GPUs of its machine


async def test_a_waiting_start_takes_a_gpu_only_on_its_groups_machines(broker, db):
    on_old = [hold(broker, key, "old") for key in (901, 902)]
    start = asyncio.ensure_future(take(spawner_of(db, "ann", "patient-course"), "gpu-1"))
    await settle()
    assert not start.done() and broker.pool.free_count() == 2  # new's two stay free
    on_new = hold(broker, 903, "new")
    await asyncio.wait_for(broker.release_when_gone(on_new.key), 10)
    await settle()
    assert not start.done()  # a GPU freed on "new" is not for it
    await asyncio.wait_for(broker.release_when_gone(on_old[0].key), 10)
    grant = await asyncio.wait_for(start, 10)
    assert grant.uuids == on_old[0].uuids


async def test_the_form_counts_and_judges_only_the_groups_machines(broker, db):
    for key in (901, 902):
        hold(broker, key, "old")
    course = spawner_of(db, "ann", "course")._render_form()
    assert "<strong>0 of 2</strong> GPUs free" in course
    assert "Needs 1 free GPU(s); 0 free right now." in course
    anyone = spawner_of(db, "bob")._render_form()
    assert "<strong>2 of 4</strong> GPUs free" in anyone
    assert "free right now" not in anyone.split('data-testid="profile-gpu-2"')[0]
    assert machines(anyone) == "Free on each machine: old 0 of 2 · new 2 of 2"
    assert machines(course) == "Free on each machine: old 0 of 2"


def machines(html: str) -> str:
    """The form's line of free GPUs per machine, as text."""
    line = html.split('data-testid="machines">')[1].split("</p>")[0]
    return " ".join(re.sub(r"<[^>]+>", "", line).split())


# --- refusals in the books' words ---------------------------------------------------------
def reason(html: str, slug: str) -> str:
    """A profile's greyed-out reason and note on the form, as text."""
    row = html.split(f'data-testid="profile-{slug}"')[1].split("</label>")[0]
    return " | ".join(re.findall(r'<span class="gpu-(?:reason|note)">(.*?)</span>', row))


async def test_free_gpus_on_different_machines_are_refused_as_such(broker, db):
    for key, node in ((901, "old"), (902, "new")):
        hold(broker, key, node)
    why = "2 GPUs are free, but no single machine has 2 free: at most 1 on one machine."
    refused = await refusal(spawner_of(db, "ann"), "gpu-2")
    assert refused.jupyterhub_message == (
        f"Profile '2 GPUs' cannot start now: {why} Pick another profile, or try again later."
    )
    assert reason(spawner_of(db, "bob")._render_form(), "gpu-2") == why


async def test_a_start_no_machine_could_ever_hold_is_refused_at_once_not_kept_waiting(broker, db):
    """4 GPUs are free, but on two machines of 2: waiting could never help."""
    why = "4 GPUs are free, but no single machine has 4 free: at most 2 on one machine."
    patient = spawner_of(db, "ann", "patient")
    assert reason(patient._render_form(), "gpu-4") == why  # no offer to wait
    refused = await asyncio.wait_for(refusal(patient, "gpu-4"), 10)
    assert why in refused.jupyterhub_message and broker.line.standings() == []


async def test_a_group_whose_machines_are_not_there_is_told_so(broker, db):
    """A machine named in `nodes` but not in the pool is no error: the group is told, at once
    (though it may wait in line: waiting would not bring the machine)."""
    why = "1 GPU may come only from machine gone, which is not available now."
    away = spawner_of(db, "ann", "away")
    assert reason(away._render_form(), "gpu-1") == why
    assert "<strong>0 of 0</strong> GPUs free" in away._render_form()
    refused = await asyncio.wait_for(refusal(away, "gpu-1"), 10)
    assert refused.jupyterhub_message == (
        f"Profile '1 GPU' cannot start now: {why} Pick another profile, or try again later."
    )


async def test_a_start_whose_machines_cannot_be_reached_waits_for_them(broker, db):
    """Where the group may wait: the machine is there, only away for now."""
    broker.pool.mark_unreachable("old", "machine old cannot be reached: dockerd does not answer")
    why = "1 GPU may come only from machine old, which is not available now."
    course = spawner_of(db, "ann", "patient-course")
    waits = f"{why} If you start it now, you wait in line"
    assert reason(course._render_form(), "gpu-1").startswith(waits)
    start = asyncio.ensure_future(take(course, "gpu-1"))
    await settle()
    assert not start.done() and broker.pool.free_count() == 2  # new's, not for it
    broker.pool.mark_reachable("old")
    broker.line.run()  # as the monitor's next look does
    assert node_of(await asyncio.wait_for(start, 10)) == "old"


async def test_no_gpus_gather_for_a_start_no_machine_has_enough_healthy_gpus_for(broker, db):
    """Each machine has one GPU held and one broken: 2 GPUs are healthy, but never on one
    machine, so a 2-GPU start waits without keeping what frees up from a 1-GPU start."""
    broker.line.reserve_after = 0
    for key, node in ((901, "old"), (902, "new")):
        held = hold(broker, key, node)
        broken = next(u for u in broker.pool.units if u.node == node and u not in held.units)
        broker.pool.mark_unhealthy(broken.gpu, "XID 79")
    big = asyncio.ensure_future(take(spawner_of(db, "ann", "patient"), "gpu-2"))
    await settle()
    small = asyncio.ensure_future(take(spawner_of(db, "bob", "patient"), "gpu-1"))
    await settle()
    assert [(s.user, s.kept_for) for s in broker.line.standings()] == [
        ("ann", False),
        ("bob", True),  # one machine could give it a GPU once a server there ends
    ]
    await asyncio.wait_for(broker.release_when_gone(901), 10)
    assert node_of(await asyncio.wait_for(small, 10)) == "old"
    assert not big.done()
    big.cancel()


# --- the admin report -----------------------------------------------------------------------
def admin_page(report: dict) -> str:
    """The admin page's own part, as the hub renders it (JupyterHub's page around it: a stub)."""
    hub_page = "{% block main %}{% endblock %}{% block script %}{% endblock %}"
    loader = jinja2.ChoiceLoader(
        [
            jinja2.FileSystemLoader(pages.TEMPLATES),
            jinja2.DictLoader({"templates/page.html": hub_page}),
        ]
    )
    environment = jinja2.Environment(loader=loader, autoescape=True)
    return environment.get_template("gpuspawner_admin.html").render(report=report)


async def test_the_report_says_each_units_machine_and_how_each_machine_stands(broker):
    held = hold(broker, 901, "old")
    away = "machine new cannot be reached: dockerd does not answer"
    broker.pool.mark_unreachable("new", away)
    report = pool_report(broker)
    assert {row["unit"]: row["node"] for row in report["gpus"]} == {
        u.id: u.node for u in broker.pool.units
    }
    assert report["by_node"] == {
        "old": {"gpu": {"total": 2, "free": 1}},
        "new": {"gpu": {"total": 2, "free": 0}},
    }
    assert report["by_kind"] == {"gpu": {"total": 4, "free": 1}}
    assert report["unreachable"] == {"new": away}
    page = admin_page(report)
    machines = page.split('data-testid="by-node"')[1].split("</ul>")[0]
    assert "<strong>old</strong> — whole GPUs: 1 of 2 free</li>" in machines
    unreachable = '<span class="badge text-bg-danger">unreachable</span>'
    assert f"<strong>new</strong> — whole GPUs: 0 of 2 free {unreachable} <small>{away}" in machines
    row = page.split(f'data-unit="{held.ids[0]}"')[1].split("</tr>")[0]
    assert '<small class="text-muted" data-testid="node">on old</small>' in row


def test_one_hosts_report_names_one_machine_and_its_page_none():
    broker = a_broker(gpus=2)
    report = pool_report(broker)
    assert {row["node"] for row in report["gpus"]} == {""}
    assert report["by_node"] == {"": {"gpu": {"total": 2, "free": 2}}}
    assert report["unreachable"] == {}
    page = admin_page(report)
    assert 'data-testid="by-node"' not in page and 'data-testid="node"' not in page
    assert form.by_machine(broker.pool, broker.pool.states()) == []  # no line per machine
    broker.executor.shutdown(wait=False)


async def test_a_machine_that_goes_down_gives_no_start_its_gpus_until_it_is_back(broker, db):
    broker.engine = cluster = Cluster()
    monitor = Monitor(broker, LOG)
    cluster.down = {"new": "node new is down"}
    monitor.apply(monitor.observe())
    assert broker.pool.unreachable() == {"new": "node new is down"}
    spawners = [spawner_of(db, f"u{n}") for n in (1, 2, 3)]
    on_old = [await take(s, "gpu-1") for s in spawners[:2]]
    assert {node_of(g) for g in on_old} == {"old"}
    assert "Not enough free GPUs" in str(await refusal(spawners[2], "gpu-1"))
    cluster.down = {}
    monitor.apply(monitor.observe())
    assert broker.pool.unreachable() == {}
    assert node_of(await take(spawners[2], "gpu-1")) == "new"


def test_default_profiles_ask_for_no_more_gpus_than_one_machine_has():
    site = GPUSite.from_config(GPUSettings(), Machines(8))  # 4 on each of two machines
    assert [p.slug for p in site.profiles] == ["cpu", "gpu-1", "gpu-2", "gpu-4"]


def test_a_gpu_whose_memory_no_one_told_shows_none_not_zero():
    """A Swarm node advertises its GPUs without their memory (unless labelled)."""
    site = GPUSite.from_config(GPUSettings(), Machines(2))
    unknown = replace(site.inventory.gpus[0], memory_total_bytes=0)
    site.inventory.gpus[0] = unknown
    broker = a_broker(site=site)
    cells = re.findall(r'data-testid="memory">(.*?)</td>', admin_page(pool_report(broker)))
    assert [" ".join(c.split()) for c in cells] == ["–", "80 GiB"]
    broker.note_telemetry({unknown.uuid: Telemetry(memory_used_bytes=3 * 2**30)})
    cells = re.findall(r'data-testid="memory">(.*?)</td>', admin_page(pool_report(broker)))
    assert " ".join(cells[0].split()) == "3.0 GiB"
    broker.executor.shutdown(wait=False)
