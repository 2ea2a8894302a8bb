"""The hub's books on a mixed host (2 exclusive H100s, an A100 cut in 7 × 1g.10gb, an L40S
shared by 4): recovery from labels, GPUs reached outside the hub, layout changes, the form,
the admin report, per-slot activity. Containers as `docker inspect` shows them, read by the
engine's own reader; the real stack runs the same in tests/stack/test_slices.py."""

import json
import logging
from fractions import Fraction
from types import SimpleNamespace

import pytest
from brokers import a_broker

from gpuspawner.config.settings import GPUSettings
from gpuspawner.config.site import GPUSite
from gpuspawner.core.culling import Busyness
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.pool import DeviceState, Grant, Holder
from gpuspawner.core.units import Kind, Request
from gpuspawner.engine import docker as engine
from gpuspawner.hub.books.broker import Broker
from gpuspawner.hub.books.recovery import KnownServers
from gpuspawner.hub.spawn import form
from gpuspawner.hub.watch.monitor import Monitor, Observation
from gpuspawner.hub.web.lease import lease_of
from gpuspawner.hub.web.report import pool_report
from gpuspawner.records.ledger import Ledger

LOG = logging.getLogger("test")
HUB = "jupyter"
HOST = [
    {"model": "NVIDIA H100 80GB HBM3", "memory": "80G", "count": 2},
    {"model": "NVIDIA A100-SXM4-80GB", "memory": "80G", "mig": ["1g.10gb"] * 7},
    {"model": "NVIDIA L40S", "memory": "48G"},
]
PROFILES = [
    {"display_name": "CPU", "slug": "cpu"},
    {"display_name": "H100", "slug": "h100", "gpus": 1, "gpu_model": "*H100*"},
    {"display_name": "Slice", "slug": "slice", "mig_profile": "1g.10gb"},
    {"display_name": "Shared", "slug": "shared", "shared": True},
]
ANN, BOB, CAT = Holder(1, 10, "ann"), Holder(2, 11, "bob", "train"), Holder(3, 12, "cat")
SLICE, SLOT = Request(mig_profile="1g.10gb"), Request(shared=True)


def settings(host=HOST, **more) -> GPUSettings:
    return GPUSettings(simulated_host=host, shared_gpus={3: 4}, profiles=PROFILES, **more)


def broker_on(host=HOST, **more) -> Broker:
    return a_broker(settings(host, **more))


def container(name: str, grant: Grant | None = None, devices=(), **labels) -> object:
    """A running container: one of ours for `grant`, else a foreign one asking for `devices`."""
    if grant is not None:
        labels = {**engine.labels(grant, HUB), **labels}
        devices = grant.uuids
    return engine.seen(
        {
            "Id": f"{name}-id",
            "Name": f"/{name}",
            "Config": {"Labels": labels, "Image": "notebook"},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": engine.device_requests(devices)},
        }
    )


def known(*holders: Holder) -> KnownServers:
    return KnownServers(frozenset((h.spawner_id, h.user_id) for h in holders), {})


def gpu(broker: Broker, index: int) -> str:
    return next(g.uuid for g in broker.site.gpus if g.index == index)


def test_the_site_gives_thirteen_units_of_three_kinds():
    broker = broker_on()
    kinds = [u.kind for u in broker.pool.units]
    assert (kinds.count(Kind.GPU), kinds.count(Kind.MIG), kinds.count(Kind.SHARED)) == (2, 7, 4)
    assert sum(u.weight for u in broker.pool.units) == 4


def test_recovery_rebuilds_which_slot_and_which_instance_each_server_holds():
    first = broker_on()
    grants = {
        h.spawner_id: first.take_now(h, r) for h, r in [(ANN, SLOT), (BOB, SLOT), (CAT, SLICE)]
    }
    restarted = broker_on()
    running = [container(f"jupyter-{g.holder.user}", g) for g in grants.values()]
    restarted.recover(running, known(ANN, BOB, CAT))
    for key, grant in grants.items():
        assert restarted.pool.grant_of(key).ids == grant.ids
    assert restarted.pool.free_count(SLOT) == 2 and restarted.pool.free_count(SLICE) == 6
    # every container reaches the L40S, but each holds its own slot: none is "external"
    assert restarted.pool.externals() == {}


def test_a_container_reaching_a_shared_gpu_without_a_slot_takes_the_whole_gpu_out():
    broker = broker_on()
    l40s = gpu(broker, 3)
    broker.recover([container("batch", devices=[l40s])], known())
    assert broker.pool.free_count(SLOT) == 0
    assert {broker.pool.states()[f"{l40s}#{n}"] for n in (1, 2, 3, 4)} == {DeviceState.EXTERNAL}
    # ... and so does one of ours whose labels name no slot (a server older than slots)
    old = Grant(ANN, tuple(u for u in broker.pool.units if u.id == f"{l40s}#1"), 1.0)
    broker.recover([container("jupyter-ann", old, **{"gpuspawner.units": ""})], known(ANN))
    assert broker.pool.grant_of(ANN.spawner_id) is None
    assert broker.pool.free_count(SLOT) == 0


def test_reaching_a_mig_gpu_reaches_all_its_instances_and_an_instance_only_itself():
    broker = broker_on()
    a100 = gpu(broker, 2)
    one = next(u.id for u in broker.pool.units if u.kind is Kind.MIG)
    broker.note_containers([container("job", devices=[one])], {})
    assert broker.pool.free_count(SLICE) == 6
    broker.note_containers([container("job", devices=[a100])], {})
    assert broker.pool.free_count(SLICE) == 0
    broker.note_containers([container("job", devices=["2:5"])], {})  # a MIG device by index
    assert broker.pool.free_count(SLICE) == 0
    broker.note_containers([], {})
    assert broker.pool.free_count(SLICE) == 7


def test_a_mig_layout_changed_by_an_admin_is_followed_without_touching_other_gpus(tmp_path, caplog):
    host = tmp_path / "host.json"
    host.write_text(json.dumps(HOST))
    broker = broker_on(str(host))
    held = broker.take_now(ANN, SLICE)
    h100 = broker.take_now(BOB, 1)
    layout = [*HOST[:1], {**HOST[1], "mig": ["3g.40gb", "3g.40gb"]}, HOST[2]]
    host.write_text(json.dumps(layout))
    broker.follow_layout(broker.site.layout_now())
    assert broker.pool.on_one_machine(Request(mig_profile="3g.40gb")) == 2
    assert broker.pool.grant_of(ANN.spawner_id) == held  # the server keeps its instance
    assert broker.pool.states()[held.ids[0]] is DeviceState.UNHEALTHY
    assert broker.pool.grant_of(BOB.spawner_id) == h100
    assert "GPU 2 (" in caplog.text
    assert (
        "it now gives 2 × 3g.40gb; gone but still held until their servers stop: "
        f"{held.ids[0]} (ann)" in caplog.text
    )
    caplog.clear()
    broker.follow_layout(broker.site.layout_now())
    assert "changed" not in caplog.text  # said once


def test_the_form_shows_each_kind_with_its_free_count_and_why_not():
    broker = broker_on()
    pool = broker.pool
    for n in range(7):
        pool.allocate(Holder(100 + n, 100 + n, f"u{n}"), SLICE)
    rows = form.availability(pool, pool.states())
    assert [(a.kind, a.free, a.total) for a in rows] == [
        ("gpu", 2, 2),
        ("mig", 0, 7),
        ("shared", 4, 4),
    ]
    assert rows[0].what == "GPUs free · NVIDIA H100 80GB HBM3 · 80 GiB"
    assert rows[1].what == "MIG 1g.10gb instances free · 10 GiB each, 1/7 of NVIDIA A100-SXM4-80GB"
    assert "no memory isolation" in rows[2].what
    table = LimitsTable.parse({}, {"max_gpus_per_user": 0.25}, [p["slug"] for p in PROFILES])
    limits = table.for_user(set())
    by_slug = {r.slug: r for r in form.profile_rows(broker.site.profiles, limits, 10, pool, None)}
    assert by_slug["slice"].reason == "Needs a MIG instance 1g.10gb; 0 of 7 free right now."
    assert "max_gpus_per_server" not in by_slug["h100"].reason
    assert "asks for 1 more" in by_slug["h100"].reason  # 1 GPU is more than 1/4
    assert by_slug["shared"].reason == ""  # a quarter of the L40S fits in 0.25
    assert by_slug["shared"].hardware == (
        "1 of 4 slots of NVIDIA L40S (shared): shares the GPU and its memory with the other "
        "servers on it: no memory isolation"
    )
    grant = pool.allocate(Holder(200, 10, "ann", "x"), SLOT)
    assert form.holdings(limits, 10, pool) == (
        f"You hold 1/4 of your 1/4 GPU: {grant.uuids[0]} (slot 1 of 4) (your server 'x')."
    )


def test_the_admin_report_has_a_row_per_unit():
    broker = broker_on()
    broker.take_now(ANN, SLOT)
    report = pool_report(broker)
    assert report["total"] == 13 and report["free"] == 12
    assert report["by_kind"] == {
        "gpu": {"total": 2, "free": 2},
        "mig": {"total": 7, "free": 7},
        "shared": {"total": 4, "free": 3},
    }
    [held] = [row for row in report["gpus"] if row["holder"]]
    assert (held["kind"], held["slot"], held["slots"], held["gpu_equivalents"]) == (
        "shared",
        1,
        4,
        "1/4",
    )
    assert held["uuid"] == gpu(broker, 3) and held["unit"] == f"{gpu(broker, 3)}#1"


def test_only_the_busy_servers_on_a_shared_gpu_count_as_busy(tmp_path):
    """The monitor's word on busy, which culling and the usage ledger both go by: one busy
    server on a shared GPU is not its neighbours' busy time."""
    load = tmp_path / "load.json"
    now = [1000.0]
    ledger = Ledger(tmp_path / "usage.sqlite")
    broker = a_broker(settings(simulated_load_file=str(load)), clock=lambda: now[0], ledger=ledger)
    ann = broker.take_now(ANN, SLOT)
    bob = broker.take_now(BOB, SLOT)
    cat = broker.take_now(CAT, SLOT)
    l40s = str(gpu(broker, 3))
    processes = [
        {"container": "jupyter-ann", "utilization_percent": 90},
        {"container": "jupyter-bob", "utilization_percent": 0},
    ]
    load.write_text(json.dumps({"3": {"utilization_percent": 90, "processes": processes}}))
    source = broker.site.source
    monitor = Monitor(broker, LOG, busyness=Busyness(), owners=source.process_owners)
    observation = monitor.observe()
    observation = Observation(
        observation.telemetry,
        [container(f"jupyter-{g.holder.user}", g) for g in (ann, bob, cat)],
        None,
        observation.owners,
        observation.layout,
    )
    now[0] = 1060.0
    observation = monitor.apply(observation)
    busy = {g.holder.user: observation.busy[g.key] for g in (ann, bob, cat)}
    assert busy == {"ann": True, "bob": False, "cat": False}
    assert observation.telemetry[l40s].utilization_percent == 90
    records = {r.user: (r.gpus, r.busy_seconds) for r in ledger.records(since=0)}
    assert records == {"ann": (0.25, 60), "bob": (0.25, 0), "cat": (0.25, 0)}


def test_a_mig_instance_marks_its_own_health_only():
    broker = broker_on()
    monitor = Monitor(broker, LOG)
    a100 = gpu(broker, 2)
    migs = [u.id for u in broker.pool.units if u.gpu == a100]
    telemetry = {a100: Telemetry(health="needs a reset")}
    telemetry |= {m: Telemetry(health="needs a reset") for m in migs[1:]}
    telemetry[migs[0]] = Telemetry(health="not found by the driver")
    monitor.apply(Observation(telemetry, [], None))
    assert broker.pool.marked_unhealthy(a100) == "needs a reset"
    assert [broker.pool.marked_unhealthy(m) for m in migs[:2]] == ["not found by the driver", None]
    assert broker.pool.free_count(SLICE) == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"simulate_gpus": 2}, r"simulate_gpus and c.GPUSpawner.simulated_host both"),
        ({"shared_gpus": {2: 4}}, r"GPU 2 is in MIG mode"),
        ({"exclude_gpus": [3]}, r"GPU 3 is both in c.GPUSpawner.exclude_gpus and in"),
    ],
)
def test_a_mixed_host_config_that_cannot_work_stops_the_hub(config, message):
    merged = {"simulated_host": HOST, "shared_gpus": {3: 4}, **config}
    with pytest.raises(ValueError, match=message):
        GPUSite.from_config(GPUSettings(**merged))


def test_limits_charge_each_kind_its_weight():
    broker = broker_on()
    weights = []
    for holder, request in [(ANN, SLICE), (BOB, SLOT), (CAT, 1)]:
        broker.take_now(holder, request, admit=lambda weight, *_: weights.append(weight))
    assert weights == [Fraction(1, 7), Fraction(1, 4), 1]


def test_a_sick_shared_gpu_names_every_server_on_it(caplog):
    broker = broker_on()
    broker.take_now(ANN, SLOT)
    broker.take_now(BOB, SLOT)
    l40s = gpu(broker, 3)
    Monitor(broker, LOG).apply(Observation({l40s: Telemetry(health="lost")}, [], None))
    assert f"{l40s} is unhealthy (lost): no new server gets it; ann, bob/train hold it" in (
        caplog.text
    )


def test_the_lease_names_each_unit_held_and_counts_its_share():
    """The JupyterLab lease of a MIG server: its instance, not its whole A100."""
    broker = broker_on(default_limits={"gpu_idle_timeout": 3600})
    grant = broker.take_now(ANN, SLICE)
    user = SimpleNamespace(name="ann", groups=[], admin=False)
    spawner = SimpleNamespace(
        orm_spawner=SimpleNamespace(id=ANN.spawner_id, started=None, last_activity=None),
        user=user,
        name="",
        idle_limit=None,
        warn_before_cull=0,
        calendar_warning=0,
        parking=False,
        user_options={"profile": "slice"},
        images_offered=lambda: [],
    )
    body = lease_of(spawner, broker)
    [unit] = grant.units
    assert body["gpus"] == [
        {
            "uuid": unit.device,
            "index": 2,
            "model": "NVIDIA A100-SXM4-80GB",
            "unit": unit.id,
            "kind": "mig",
            "name": unit.name,
            "label": unit.label,
        }
    ]
    assert unit.device != gpu(broker, 2)  # the instance's own UUID, not its GPU's
    assert body["summary"] == "1/7 GPU"
    assert body["profile"] == {"slug": "slice", "display_name": "Slice"}

    def gpu_idle_says() -> str:
        [idle] = [d for d in lease_of(spawner, broker)["limits"] if d["key"] == "gpu_idle_timeout"]
        return idle["says"]

    assert gpu_idle_says().startswith("Your 1/7 GPU is not measured yet.")  # no sample yet
    broker.note_busy({grant.key: True}, broker.clock())
    assert gpu_idle_says().startswith("Your 1/7 GPU is not idle.")
    broker.note_busy({grant.key: None}, broker.clock())  # the monitor cannot tell now
    assert gpu_idle_says().startswith("Your 1/7 GPU is not measured yet.")


def test_gpu_hours_are_gpu_equivalent_hours_a_slice_an_hour_is_a_seventh(tmp_path):
    """What budgets and reports count: a 1g.10gb instance of a 7-slice A100 held for an
    hour is 1/7 GPU-hour; a slot of the L40S shared by 4, 1/4; an H100, 1."""
    clock = [0.0]
    ledger = Ledger(tmp_path / "usage.sqlite")
    broker = a_broker(settings(), clock=lambda: clock[0], ledger=ledger)
    for holder, request in ((ANN, SLICE), (BOB, SLOT), (CAT, Request(gpus=1))):
        broker.take_now(holder, request)
    clock[0] = 3600.0
    held = {r.user: r.gpus * r.held_seconds(clock[0]) / 3600 for r in ledger.records(since=0)}
    assert held == pytest.approx({"ann": 1 / 7, "bob": 1 / 4, "cat": 1.0})
