from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.pool import Holder, Pool
from gpuspawner.core.profiles import default_profiles
from gpuspawner.core.units import whole
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.hub import form

GPUS = SimulatedSource(4).list_gpus()
ANN, BOB = 1, 2  # user ids
PROFILES = default_profiles(4)


def rows_for(user, groups, pool, limits_config, previous=None, profiles=PROFILES):
    table = LimitsTable.parse(limits_config, {}, [p.slug for p in profiles])
    limits = table.for_user(groups)
    rows = form.profile_rows(profiles, limits, user, pool, previous)
    return {row.slug: row for row in rows}, limits


def test_rows_say_why_a_profile_cannot_start_now():
    pool = Pool([whole(g) for g in GPUS])
    pool.allocate(Holder(9, 2, "other"), 2)
    rows, _ = rows_for(ANN, set(), pool, {})
    assert rows["gpu-2"].reason == ""
    assert rows["gpu-4"].reason == "Needs 4 free GPU(s); 2 free right now."
    assert rows["gpu-1"].checked  # the default profile
    assert rows["gpu-4"].hardware == "4 × NVIDIA H100 80GB HBM3 · 80 GiB each"


def test_rows_hide_what_the_group_may_not_pick_and_grey_out_what_is_over_a_limit():
    pool = Pool([whole(g) for g in GPUS])
    config = {"students": {"max_gpus_per_server": 1, "profiles": ["cpu", "gpu-1", "gpu-2"]}}
    rows, _ = rows_for(ANN, {"students"}, pool, config)
    assert sorted(rows) == ["cpu", "gpu-1", "gpu-2"]
    assert "max_gpus_per_server of group students" in rows["gpu-2"].reason


def test_the_previous_choice_is_preselected_when_it_can_start():
    pool = Pool([whole(g) for g in GPUS])
    rows, _ = rows_for(ANN, set(), pool, {}, previous="gpu-2")
    assert rows["gpu-2"].checked and not rows["gpu-1"].checked


def test_holdings_name_the_users_servers():
    pool = Pool([whole(g) for g in GPUS])
    grant = pool.allocate(Holder(1, ANN, "ann", "train"), 1)
    _, limits = rows_for(ANN, {"students"}, pool, {"students": {"max_gpus_per_user": 2}})
    text = form.holdings(limits, ANN, pool)
    assert text == f"You hold 1 of your 2 GPUs: {grant.uuids[0]} (your server 'train')."
    assert form.holdings(limits, BOB, pool) == "You hold 0 of your 2 GPUs."


def test_everything_shown_is_escaped():
    html = form.render(
        [],
        free=1,
        total=4,
        model="<b>model</b>",
        rows=[form.ProfileRow("gpu-1", "<script>x</script>", "<i>d</i>", "hw", "<u>no</u>", True)],
        holdings="You hold <img src=x onerror=alert(1)>",
        images=["<evil>"],
        notices=["<script>n</script>"],
    )
    for raw in ["<script>", "<b>model", "<i>d", "<u>no", "<img src", "<evil>"]:
        assert raw not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "&lt;img src=x" in html


def test_admins_can_override_the_template(tmp_path):
    (tmp_path / form.TEMPLATE).write_text("custom {{ free }} of {{ total }}")
    assert form.render([str(tmp_path)], free=2, total=4, rows=[]) == "custom 2 of 4"
