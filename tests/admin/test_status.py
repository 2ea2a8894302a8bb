"""gpuspawner status: the pool as Docker's labels and the GPUs tell it, hub or no hub."""

import json
import re
import time
from dataclasses import replace

import pytest
from admintools import gpuspawner, servers
from realhub import CPU_IMAGE, OTHER_WORKERS, SIMULATED_MACHINE, Hub

from gpuspawner.admin import status
from gpuspawner.core.calendar import Window
from gpuspawner.core.gpus import Telemetry
from gpuspawner.core.pool import Grant, Holder
from gpuspawner.core.units import bare
from gpuspawner.devices.nvml import NvmlSource
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.devices.source import Inventory
from gpuspawner.engine import docker as engine
from gpuspawner.records.calendar import CalendarRecord

SOURCE = SimulatedSource(8)
GPUS = SOURCE.list_gpus()
UUIDS = [g.uuid for g in GPUS]
NOW = 1_750_000_000.0


def inspected(name, labels=None, devices=()):
    requests = [{"Driver": "nvidia", "DeviceIDs": list(devices), "Capabilities": [["gpu"]]}]
    return engine.seen(
        {
            "Id": name,
            "Name": f"/{name}",
            "Config": {"Labels": labels or {}, "Image": "notebook"},
            "State": {"Running": True},
            "HostConfig": {"DeviceRequests": requests if devices else None},
        }
    )


def ours(name, user, server, devices, since=NOW - 7500, hub="jupyter"):
    grant = Grant(Holder(1, 1, user, server), tuple(map(bare, devices)), since)
    return inspected(name, engine.labels(grant, hub), devices)


def table(output: str) -> dict[str, list[str]]:
    """GPU index → the cells of its row, cut where the header's columns start."""
    lines = output.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    rows = [[line[a:b].strip() for a, b in bounds] for line in lines[1:] if re.match(r"\d", line)]
    return {row[0]: row for row in rows}


def test_rows_name_each_gpus_holders_and_load():
    holdings = status.scan(
        [
            ours("jupyter-ann--train", "ann", "train", UUIDS[0:2]),
            ours("jupyter-bob", "bob", "", []),
            inspected("batch-job", devices=["3"]),  # by index, not ours
            ours("otherhub-cat", "cat", "", UUIDS[4:5], hub="otherhub"),
        ],
        Inventory(GPUS[:7], [GPUS[7]], []),
        hub="jupyter",
    )
    samples = {u: Telemetry(0.0, 0, 30.0) for u in UUIDS}
    samples[UUIDS[0]] = Telemetry(87.0, 12 * 2**30, 71.0)
    samples[UUIDS[5]] = Telemetry(health="needs a reset")
    rows = status.pool_rows(GPUS, [GPUS[7]], samples, holdings)
    output = status.render(rows, holdings, NOW)
    cells = table(output)

    assert cells["0"][:6] == ["0", "ann/train", cells["0"][2], "87 %", "12/80 GiB", "71 °C"]
    assert cells["0"][2].endswith("(2h 05m)")
    assert cells["0"][2].startswith(time.strftime("%Y-%m-%d %H:%M", time.localtime(NOW - 7500)))
    assert cells["1"][1] == "ann/train"
    assert cells["3"][1] == "batch-job (not gpuspawner)"
    assert cells["4"][1] == "otherhub-cat (another hub)"  # held from outside, as the hub sees it
    assert cells["5"][1] == "unhealthy" and cells["5"][-1] == "needs a reset"
    assert cells["7"][1] == "excluded"
    assert cells["2"][-2:] == [UUIDS[2], "ok"]
    assert output.splitlines()[-3:] == [
        "2 of 7 GPU(s) free.",
        "Unhealthy, not handed out: GPU 5 (needs a reset).",
        "CPU-only servers: bob.",
    ]


def test_a_drained_gpu_is_shown_drained_and_not_counted_free(tmp_path):
    """As the hub places: a drain of the calendar (in the ledger's file) holds its GPUs out."""
    ledger = tmp_path / "usage.sqlite"
    record = CalendarRecord(ledger)
    record.add(Window(0, frozenset(UUIDS[2:4]), NOW - 60, reason="driver update"))
    record.add(Window(0, frozenset(UUIDS[4:5]), NOW + 3600, reason="later"))  # not yet
    record.add(Window(0, frozenset(UUIDS[5:6]), NOW - 60, NOW + 3600, user="ann"))  # a booking
    record.close()
    drained, unread = status.drained_in(ledger, NOW)
    assert (drained, unread) == ({UUIDS[2]: "driver update", UUIDS[3]: "driver update"}, "")
    holdings = status.scan([ours("jupyter-ann", "ann", "", UUIDS[3:4])], Inventory(GPUS, [], []))
    rows = status.pool_rows(GPUS, [], {}, holdings, drained=drained)
    output = status.render(rows, holdings, NOW)
    assert table(output)["2"][1] == "drained (driver update)"
    assert table(output)["3"][1] == "ann"  # held until the hub stops it
    assert output.splitlines()[-2:] == [
        "6 of 8 GPU(s) free.",
        "Drained by the calendar, not handed out: GPU 2 (driver update), GPU 3 (driver update).",
    ]
    assert status.drained_in(tmp_path / "none.sqlite", NOW) == ({}, "")  # no hub ran here
    (tmp_path / "bad.sqlite").write_text("not a database")
    assert "cannot read" in status.drained_in(tmp_path / "bad.sqlite", NOW)[1]


def test_values_a_gpu_does_not_report_show_as_a_dash():
    rows = status.pool_rows(GPUS[:1], [], {UUIDS[0]: Telemetry()}, status.Holdings())
    assert table(status.render(rows, status.Holdings(), NOW))["0"][3:6] == ["–", "–", "–"]


def test_containers_asking_for_devices_this_host_lacks_are_named():
    holdings = status.scan([inspected("ghost", devices=["GPU-gone"])], Inventory(GPUS[:1], [], []))
    rows = status.pool_rows(GPUS[:1], [], {UUIDS[0]: Telemetry()}, holdings)
    output = status.render(rows, holdings, NOW)
    assert output.endswith("Containers ask for devices this host does not have: GPU-gone.")
    # which GPU it would reach cannot be known, so it counts as reaching them all
    assert table(output)["0"][1] == "ghost (not gpuspawner)"


@pytest.mark.docker
def test_status_reads_the_pool_from_running_containers(tmp_path):
    load = tmp_path / "load.json"
    load.write_text(
        json.dumps(
            {
                "6": {"utilization_percent": 93, "temperature_celsius": 71, "memory_used_gib": 40},
                "3": {"health": "lost: the GPU has fallen off the bus"},
            }
        )
    )
    # This worker's simulated machine, and the other workers' containers looked past, as its
    # hubs do: on a shared dockerd they are another machine's (tests/realhub.py).
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        'c.JupyterHub.spawner_class = "gpu"\n'
        f"c.GPUSpawner.simulated_machine = {SIMULATED_MACHINE!r}\n"
        f"c.GPUSpawner.ignore_gpu_containers = {OTHER_WORKERS!r}\n"
    )
    uuids = [g.uuid for g in SimulatedSource(8, SIMULATED_MACHINE).list_gpus()]
    since = time.time() - 3 * 3600
    with servers("status") as made:
        made.create(
            "ann--train",
            CPU_IMAGE,
            Grant(Holder(1, 1, "ann", "train"), tuple(map(bare, uuids[6:8])), since),
        )
        made.create("bob--notes", CPU_IMAGE, Grant(Holder(2, 2, "bob", "notes"), (), since))
        eve = Grant(Holder(3, 3, "eve", "old"), tuple(map(bare, uuids[4:5])), since)
        made.create("old", CPU_IMAGE, eve, start=False)
        device = {"Driver": "nvidia", "DeviceIDs": [uuids[5]], "Capabilities": [["gpu"]]}
        made.create("batch", CPU_IMAGE, None, device_requests=[device])
        done = gpuspawner(
            "status", "-f", str(config), "--simulate", "8", "--simulated-load", str(load),
            "--prefix", made.prefix, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cells = table(done.stdout)
    assert cells["6"][1] == cells["7"][1] == "ann/train"
    assert cells["6"][2].endswith("(3h 00m)")
    assert cells["6"][3:6] == ["93 %", "40/80 GiB", "71 °C"]
    assert cells["5"][1] == f"{made.prefix}-batch (not gpuspawner)"
    assert cells["4"][1] == "free"  # eve's container stopped: it holds nothing
    assert cells["3"][1] == "unhealthy"
    assert cells["3"][-1] == "lost: the GPU has fallen off the bus"
    assert "CPU-only servers: bob/notes." in done.stdout


def test_status_works_while_the_hub_is_down(hub_factory, tmp_path):
    hub: Hub = hub_factory("c.GPUSpawner.simulate_gpus = 4\n")
    hub.add_users("ann")
    hub.spawn_ready("ann", "train", profile="gpu-2")
    held = hub.held_uuids("ann", "train")
    hub.kill()
    done = gpuspawner("status", "-f", str(hub.config_file), "--prefix", hub.prefix, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    holders = {row[-2]: row[1] for row in table(done.stdout).values()}
    assert sorted(uuid for uuid, holder in holders.items() if holder == "ann/train") == sorted(held)
    assert "2 of 4 GPU(s) free." in done.stdout
    # its server outlives the killed hub: gone now, or the module's next hub (same simulated
    # GPUs) sees it as use outside JupyterHub, which failed CI17
    hub.remove_containers()


def test_status_without_gpus_or_simulation_says_why(tmp_path):
    done = gpuspawner("status", cwd=tmp_path)
    assert done.returncode == 1
    assert "NVML could not start" in done.stderr


def test_on_a_swarm_each_row_names_its_node_and_an_index_is_its_nodes_own():
    on_nodes = [replace(g, node="n1" if g.index < 4 else "n2", index=g.index % 4) for g in GPUS]
    job = replace(inspected("batch-job", devices=["0"]), node="n2")
    holdings = status.scan([job], Inventory(on_nodes, [], []))
    rows = status.pool_rows(on_nodes, [], {}, holdings)
    cells = {cells[0]: cells for cells in (status._cells(row, NOW) for row in rows)}
    assert cells["n2:0"][1] == "batch-job (not gpuspawner)"
    assert cells["n1:0"][1] == "free"


def test_status_and_the_hub_agree_on_who_holds_each_gpu(hub_factory, tmp_path):
    """One reader of the labels (`Seen.of_hub`, `Seen.units_held`): the hub's GPUs API and
    `gpuspawner status` name the same holder for every GPU, another hub's server included."""
    hub: Hub = hub_factory("c.GPUSpawner.simulate_gpus = 4\n")
    hub.add_users("ann")
    hub.spawn_ready("ann", "train", profile="gpu-1")
    [held] = hub.held_uuids("ann", "train")
    others = [r["uuid"] for r in hub.api("GET", "/gpus").json()["gpus"] if r["uuid"] != held]
    with servers("otherhub") as made:
        cat = Grant(Holder(9, 9, "cat", ""), (bare(others[0]),), time.time())
        made.create("cat", CPU_IMAGE, cat)  # another hub's server on this machine
        device = {"Driver": "nvidia", "DeviceIDs": [others[1]], "Capabilities": [["gpu"]]}
        made.create("batch", CPU_IMAGE, None, device_requests=[device])  # not gpuspawner's

        def hub_rows() -> dict[str, dict] | None:
            rows = {r["uuid"]: r for r in hub.api("GET", "/gpus").json()["gpus"]}
            outside = [rows[u]["used_outside_hub_by"] for u in others[:2]]
            return rows if all(outside) else None

        rows = hub.wait_for(hub_rows, 60, "the hub's monitor seeing both containers")
        done = gpuspawner(
            "status", "-f", str(hub.config_file), "--prefix", hub.prefix, cwd=tmp_path
        )
    assert done.returncode == 0, done.stderr
    cells = {row[-2]: row[1] for row in table(done.stdout).values()}
    for uuid, row in rows.items():
        holder, outside = row["holder"], row["used_outside_hub_by"]
        if holder:
            assert cells[uuid] == f"{holder['user']}/{holder['server']}"
        elif outside:
            assert cells[uuid].startswith(outside.removeprefix("container ") + " (")
        else:
            assert cells[uuid] == "free"
    assert cells[others[0]] == f"{made.prefix}-cat (another hub)"
    assert cells[others[1]] == f"{made.prefix}-batch (not gpuspawner)"
    assert cells[others[2]] == "free"


def test_where_the_checkpoint_driver_cannot_be_asked_status_says_so():
    holdings = status.scan(
        [
            ours("jupyter-ann", "ann", "", UUIDS[:1]),
            ours("jupyter-bob--job-1", "bob", "job-1", UUIDS[:1]),
        ],
        Inventory(GPUS[:1], [], []),
    )
    asked = status.parked(holdings, "simulated", source=NvmlSource())  # not simulated GPUs
    output = status.render(status.pool_rows(GPUS[:1], [], {}, asked), asked, NOW)
    assert table(output)["0"][1] == "ann, bob/job-1"  # neither marked parked
    assert output.endswith(
        "Parked servers are not told apart here: c.GPUSpawner.checkpoint_driver = 'simulated' "
        "parks simulated GPUs' work only: set simulate_gpus or simulated_host, "
        "or checkpoint_driver = 'cuda'."
    )
