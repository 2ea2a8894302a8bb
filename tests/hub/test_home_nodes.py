"""Homes that are each node's own (a swarm without shared storage): once a user's first
server has run on a machine, their home is there, and every later start of theirs (the
form, the line, the refusal, a restart of the hub) keeps to that machine, so nobody opens
JupyterLab to an empty home. In-process, over two simulated machines ("old", "new")."""

import asyncio
from dataclasses import replace

import pytest
from brokers import a_broker
from jupyterhub.spawner import SpawnException
from test_machines import (
    LIMITS,
    PROFILES,
    Machines,
    admin_page,
    hold,
    node_of,
    profile,
    refusal,
    settle,
    spawner_of,
)
from test_machines import db as db
from traitlets.config import Config

from gpuspawner.config.settings import GPUSettings
from gpuspawner.core.errors import GPUConfigError
from gpuspawner.core.homes import Home
from gpuspawner.core.words import iso_utc
from gpuspawner.engine.shared_homes import MARKER
from gpuspawner.engine.swarm import SwarmNode
from gpuspawner.hub.engines.swarm import SwarmGPUSpawner, first_home
from gpuspawner.hub.homes import nodes as homes
from gpuspawner.hub.web.report import pool_report
from gpuspawner.records.homes import HomeRecord


async def take(spawner, slug: str, away: bool = False):
    """GPUs for a start of `spawner` on profile `slug`, as its start takes them (`away`: its
    user ticked "start on another machine" on the form)."""
    spawner.user_options = {"profile": slug, "away_from_home": "on"} if away else {}
    limits = homes.away_if_full(
        spawner.user_limits(),
        profile(spawner.broker, slug),
        spawner.user_options,
        spawner.broker.pool,
    )
    return await spawner._take(profile(spawner.broker, slug), limits)


NODES = ("old", "new", "manager")  # the manager has no GPU


@pytest.fixture
async def broker(tmp_path):
    """Two machines of 2 GPUs each, homes each machine's own."""
    broker = a_broker(
        GPUSettings(group_limits=LIMITS, profiles=PROFILES),
        source=Machines(4),
        homes=HomeRecord(tmp_path / "usage.sqlite"),
    )
    broker.install()
    yield broker
    await broker.shutdown()


def home_on(broker, user: str, node: str) -> Home:
    """As the swarm spawner says once a server of `user` runs on `node`."""
    home = broker.homes.settled(user, f"gpuspawner-home-{user}", node, broker.clock())
    assert home is not None and home.node == node
    return home


async def test_a_users_servers_go_where_their_home_is(broker, db):
    """Packed picks "new" (a tie goes to the name): ann's home is on "old"."""
    home_on(broker, "ann", "old")
    assert node_of(await take(spawner_of(db, "bob"), "gpu-1")) == "new"  # no home yet
    assert node_of(await take(spawner_of(db, "ann"), "gpu-1")) == "old"


async def test_a_start_waits_for_its_homes_machine_not_a_gpu_elsewhere(broker, db):
    home_on(broker, "ann", "old")
    on_old = [hold(broker, key, "old") for key in (901, 902)]
    start = asyncio.ensure_future(take(spawner_of(db, "ann", "patient"), "gpu-1"))
    await settle()
    assert not start.done() and broker.pool.free_count() == 2  # new's two stay free
    await asyncio.wait_for(broker.release_when_gone(on_old[1].key), 10)
    assert node_of(await asyncio.wait_for(start, 10)) == "old"


async def test_a_refusal_and_the_form_say_where_the_files_are(broker, db):
    home_on(broker, "ann", "old")
    for key in (901, 902):
        hold(broker, key, "old")
    told = "Your files are on old (home gpuspawner-home-ann), so your servers start there"
    ann = spawner_of(db, "ann")
    refused = await refusal(ann, "gpu-1")
    assert refused.status_code == 409 and told in refused.jupyterhub_message
    assert "0 of 2 are free" in refused.jupyterhub_message  # old's, not the machine's
    form = ann._render_form()
    assert told in form and "<strong>0 of 2</strong> GPUs free" in form
    assert told.split(" (")[0] not in spawner_of(db, "bob")._render_form()


async def test_the_home_outlives_the_hub(broker, db, tmp_path):
    made = home_on(broker, "ann", "old")
    later = broker.homes.settled("ann", "gpuspawner-home-ann", "old", made.made + 60)
    assert later is not None and later.last_used == made.made + 60 and later.made == made.made
    restarted = a_broker(
        GPUSettings(profiles=PROFILES),
        source=Machines(4),
        homes=HomeRecord(tmp_path / "usage.sqlite"),
    )
    assert restarted.homes.all() == [later]


async def test_a_server_placed_elsewhere_leaves_the_home_where_it_is(broker):
    home = home_on(broker, "ann", "old")
    assert broker.homes.settled("ann", "gpuspawner-home-ann", "new", home.made + 5) == home


async def test_a_home_on_a_machine_the_users_groups_do_not_allow_keeps_them_on_theirs(broker, db):
    """The course may use only "old"; a home on "new" (from before) cannot pin it there."""
    home_on(broker, "ann", "new")
    ann = spawner_of(db, "ann", "course")
    assert "Your files are on new" not in ann._render_form()  # it would not be true
    assert node_of(await take(ann, "gpu-1")) == "old"


async def test_on_one_host_or_shared_storage_nothing_is_pinned(db):
    broker = a_broker(GPUSettings(profiles=PROFILES), source=Machines(4))
    broker.install()
    try:
        assert broker.homes.settled("ann", "home-ann", "old", 0.0) is None
        assert node_of(await take(spawner_of(db, "ann"), "gpu-1")) == "new"
    finally:
        await broker.shutdown()


async def test_a_profile_for_another_machine_is_the_users_choice(broker, db):
    """A profile that runs only on "new" still starts there for a user whose home is on
    "old": they picked it, and the form said where their files are."""
    home_on(broker, "ann", "old")
    on_new = replace(profile(broker, "gpu-1"), nodes=frozenset({"new"}))
    ann = spawner_of(db, "ann")
    assert node_of(await ann._take(on_new, ann.user_limits())) == "new"


async def test_a_user_who_chose_so_starts_elsewhere_when_the_homes_machine_is_full(broker, db):
    """The form's checkbox: with "old" full, the start goes to "new" (that machine's own
    copy of the home) at once, instead of waiting; the home stays on "old"."""
    home = home_on(broker, "ann", "old")
    for key in (901, 902):
        hold(broker, key, "old")
    ann = spawner_of(db, "ann")
    form = ann._render_form()
    assert 'name="away_from_home"' in form
    assert "your files stay on old" in form
    ann.user_options = {"profile": "gpu-1", "away_from_home": "on"}
    limits = ann.user_limits()
    ann.permitted_profile(limits)  # the option is accepted where homes are each node's own
    assert node_of(await take(ann, "gpu-1", away=True)) == "new"
    assert broker.homes.of("ann") == home


async def test_the_choice_to_start_elsewhere_is_only_a_fallback(broker, db):
    home_on(broker, "ann", "old")
    ann = spawner_of(db, "ann")
    assert node_of(await take(ann, "gpu-1", away=True)) == "old"  # old has room


async def test_a_bad_choice_is_refused_and_one_host_knows_no_such_option(broker, db):
    ann = spawner_of(db, "ann")
    ann.user_options = {"profile": "gpu-1", "away_from_home": "maybe"}
    with pytest.raises(SpawnException, match="away_from_home must be true or false"):
        ann.permitted_profile(ann.user_limits())
    broker.homes.record = None  # as on one host
    ann.user_options = {"profile": "gpu-1", "away_from_home": True}
    with pytest.raises(SpawnException, match="Unknown option"):
        ann.permitted_profile(ann.user_limits())


# --- homes on shared storage instead ---------------------------------------------------------


def test_with_shared_storage_homes_are_its_folders_and_no_node_holds_one():
    config = Config()
    config.SwarmGPUSpawner.shared_homes = "/mnt/homes/"
    shared = SwarmGPUSpawner.from_config(config)
    assert shared.volumes == {"/mnt/homes/{username}": "/home/jovyan"}
    assert not shared.homes_on_nodes  # placement is free
    assert SwarmGPUSpawner.from_config(Config()).homes_on_nodes  # each node's named volumes


def test_shared_storage_beside_named_homes_in_volumes_is_refused(tmp_path):
    config = Config()
    config.SwarmGPUSpawner.shared_homes = str(tmp_path)
    config.DockerSpawner.volumes = {"home-{username}": "/home/jovyan"}
    with pytest.raises(
        GPUConfigError, match=r"keeps homes in named volumes .*\(home-\{username\}\)"
    ):
        SwarmGPUSpawner.from_config(config).check_storage()
    assert not (tmp_path / MARKER).exists()  # refused before anything was written


async def test_the_gpus_page_lists_each_home_and_its_node(broker):
    made = home_on(broker, "ann", "old")
    page = admin_page({**pool_report(broker), "homes": homes.homes_json(broker.homes)})
    row = page.split('<tr data-user="ann" data-node="old">')[1].split("</tr>")[0]
    when = iso_utc(made.made)
    assert "<code>gpuspawner-home-ann</code>" in row
    assert f'<time datetime="{when}">{when[:16].replace("T", " ")} UTC</time>' in row
    assert 'data-testid="homes-empty"' in admin_page({**pool_report(broker), "homes": []})
    assert 'id="homes"' not in admin_page({**pool_report(broker), "homes": None})  # one host


async def test_a_first_cpu_only_server_makes_its_home_where_gpus_can_follow(broker):
    """Swarm would place it anywhere (a manager without GPUs): it goes to the ready node, of
    those the user may use, with the most free GPUs."""
    hold(broker, 901, "new")
    nodes = {name: SwarmNode(name, name, "ready", "active", "24.0", False, "") for name in NODES}

    def first(allowed):
        return first_home(broker.pool, broker.calendar.states(broker.pool), allowed, nodes)

    assert first(None) == "old"  # 2 free, against new's 1
    assert first(frozenset({"new"})) == "new"  # the group's machines
    on_old = [g.uuid for g in broker.site.gpus if g.node == "old"]
    drain = broker.calendar.drain(on_old, broker.clock(), "fan", "admin", "node old")
    assert first(None) == "new"  # a drained node's GPUs are not free
    broker.calendar.end(drain.id)
    nodes["old"] = replace(nodes["old"], state="down")
    assert first(None) == "new"
    assert first(frozenset({"gone"})) is None  # Swarm places it
