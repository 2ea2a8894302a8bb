import pytest

from gpuspawner.core.limits import LimitsTable
from gpuspawner.core.pool import Holder, Pool
from gpuspawner.core.profiles import Profile, default_profiles
from gpuspawner.core.units import whole
from gpuspawner.devices.simulated import SimulatedSource
from gpuspawner.hub.spawn import form, notices

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


def test_a_used_up_budget_greys_out_every_gpu_profile_and_leaves_cpu_chosen():
    """Even for a user who may wait in line: waiting would not give budget back."""
    pool = Pool([whole(g) for g in GPUS])
    pool.allocate(Holder(9, BOB, "bob"), 4)
    table = LimitsTable.parse({}, {"max_wait": 600}, [p.slug for p in PROFILES])
    rows = form.profile_rows(
        PROFILES, table.for_user(set()), ANN, pool, "gpu-1", over_budget="Used."
    )
    assert {row.slug: (row.reason, row.note) for row in rows} == {
        "cpu": ("", ""),
        "gpu-1": ("Used.", ""),
        "gpu-2": ("Used.", ""),
        "gpu-4": ("Used.", ""),
    }
    assert [row.slug for row in rows if row.checked] == ["cpu"]


def test_the_budget_lines_are_shown_escaped():
    html = form.render([], free=4, total=4, rows=[], budget=["You used <b>1</b> of your 2."])
    assert 'data-testid="budget">You used &lt;b&gt;1&lt;/b&gt; of your 2.</p>' in html
    assert 'data-testid="budget"' not in form.render([], free=4, total=4, rows=[])


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
        notices=[form.NoticeRow("<script>n</script>", "c<p>u", "<b>CPU", '/x?a="><p>')],
    )
    for raw in ["<script>", "<b>model", "<i>d", "<u>no", "<img src", "<evil>", "<p>", "<b>CPU"]:
        assert raw not in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "&lt;img src=x" in html
    assert "&lt;script&gt;n&lt;/script&gt;" in html


def test_admin_templates_written_for_plain_notices_still_show_them(tmp_path):
    (tmp_path / form.TEMPLATE).write_text("{% for n in notices %}[{{ n }}]{% endfor %}")
    assert form.render([str(tmp_path)], notices=[form.NoticeRow("stopped", "cpu")]) == "[stopped]"


def test_admins_can_override_the_template(tmp_path):
    (tmp_path / form.TEMPLATE).write_text("custom {{ free }} of {{ total }}")
    assert form.render([str(tmp_path)], free=2, total=4, rows=[]) == "custom 2 of 4"


class Stopped:
    """A stopped server's record as JupyterHub's database holds it."""

    def __init__(self, state, running=False):
        self.state, self.server = state, (object() if running else None)


def test_gpu_servers_stopped_by_policy_offer_the_cpu_profile_and_say_how_by_rest():
    pool = Pool([whole(g) for g in GPUS])
    _, limits = rows_for(ANN, set(), pool, {})
    cpu = notices.cpu_profile(PROFILES, limits, ANN, pool)
    assert cpu is not None and cpu.slug == "cpu"
    found = list(
        notices.stop_notices(
            {
                "train": Stopped({"stop_notice": "GPU idle. Kept.", "restart_on_cpu": True}),
                "": Stopped({"stop_notice": "Idle. Kept."}),  # was CPU-only: nothing to offer
                "running": Stopped({"stop_notice": "old"}, running=True),
                "plain": Stopped({}),
            },
            cpu,
        )
    )
    assert [(n.server, n.text, n.restart) for n in found] == [
        ("", "Idle. Kept.", None),
        ("train", "GPU idle. Kept.", cpu),
    ]
    assert notices.as_json(found[1], "/hub/api/users/ann/servers/") == {
        "server": "train",
        "notice": "GPU idle. Kept.",
        "restart": {
            "profile": "cpu",
            "display_name": "CPU only",
            "method": "POST",
            "url": "/hub/api/users/ann/servers/train",
            "json": {"user_options": {"profile": "cpu"}},
        },
    }


def test_no_cpu_offer_where_the_group_may_not_pick_a_cpu_profile():
    pool = Pool([whole(g) for g in GPUS])
    _, limits = rows_for(ANN, {"gpu-only"}, pool, {"gpu-only": {"profiles": ["gpu-1"]}})
    assert notices.cpu_profile(PROFILES, limits, ANN, pool) is None


def test_a_mig_or_shared_profile_is_no_cpu_offer():
    """They ask for no whole GPU (gpus=0), but a GPU all the same."""
    pool = Pool([whole(g) for g in GPUS])
    slices = [
        Profile("mig", "MIG", 0, mig_profile="1g.10gb"),
        Profile("shared", "Shared", 0, shared=True),
        Profile("cpu", "CPU", 0),
    ]
    _, limits = rows_for(ANN, set(), pool, {}, profiles=slices)
    assert notices.cpu_profile(slices, limits, ANN, pool) == slices[2]


def test_the_offer_is_a_button_posting_to_that_servers_spawn_url_with_the_xsrf_token():
    cpu = PROFILES[0]
    shown = notices.rows(
        [
            notices.StopNotice("train", "GPU idle.", cpu),
            notices.StopNotice("", "Default GPU idle.", cpu),
            notices.StopNotice("cpu-box", "Idle.", None),
        ],
        "/hub/spawn/ann",
        b"token-1",
    )
    assert [n.restart_action for n in shown] == [
        "/hub/spawn/ann/train?_xsrf=token-1",
        "/hub/spawn/ann?_xsrf=token-1",
        "",
    ]
    html = form.render([], free=0, total=4, rows=[], notices=shown)
    assert html.count('data-testid="restart-on-cpu"') == 2
    assert 'name="restart_on" value="cpu"' in html
    assert 'formaction="/hub/spawn/ann/train?_xsrf=token-1"' in html
    # Enter in a field submits with the first button: a plain Start, before any offer
    assert html.index('class="visually-hidden"') < html.index("restart-on-cpu")
    # no page being served, no token: the notice without a button
    alone = notices.rows([notices.StopNotice("train", "GPU idle.", cpu)], "/x", None)
    assert [n.restart_action for n in alone] == [""]


def test_the_offer_button_names_the_profile_whatever_else_the_form_chose():
    from gpuspawner.hub.spawn.page import options_from_form

    pressed = {"profile": ["gpu-1"], "restart_on": ["cpu"], "image": ["x"]}
    assert options_from_form(pressed) == {"profile": "cpu"}
    assert options_from_form({"profile": ["gpu-1"], "_xsrf": ["t"]}) == {"profile": "gpu-1"}


def test_the_forms_options_are_checked_by_the_spawner_it_was_sent_to():
    """JupyterHub passes the spawner: its refusal comes back with the form at once (a
    start's after JupyterHub's first second would show only on the pending page)."""
    from gpuspawner.hub.spawn.page import options_from_form

    class Refusing:
        def __init__(self):
            self.checked: list[dict] = []

        def user_limits(self):
            return "limits"

        def permitted_profile(self, limits, options=None):
            self.checked.append(options)
            raise ValueError(f"There is no profile {options['profile']!r}.")

    spawner = Refusing()
    with pytest.raises(ValueError, match="There is no profile 'gpu-9'"):
        options_from_form({"profile": ["gpu-9"], "_xsrf": ["t"]}, spawner=spawner)
    assert spawner.checked == [{"profile": "gpu-9"}]


def test_where_the_user_may_wait_a_full_pool_greys_nothing_out_and_says_so():
    pool = Pool([g.uuid for g in GPUS])
    pool.allocate(Holder(9, BOB, "other"), 3)
    config = {"researchers": {"max_wait": 1800}}
    table = LimitsTable.parse(config, {}, [p.slug for p in PROFILES])
    limits = table.for_user({"researchers"})
    rows = form.profile_rows(PROFILES, limits, ANN, pool, None, {"gpu-2": 3})
    by_slug = {row.slug: row for row in rows}
    assert by_slug["gpu-2"].reason == ""
    assert by_slug["gpu-2"].note == (
        "Needs 2 free GPU(s); 1 free right now. If you start it now, you wait in line, "
        "at most 30 min (max_wait of group researchers)."
    )
    assert by_slug["gpu-2"].waiting == 3 and by_slug["gpu-1"].waiting == 0
    html = form.render([], free=1, total=4, model="", rows=rows, holdings="", images=[], notices=[])
    assert (
        '<span class="badge text-bg-secondary" data-testid="waiting-gpu-2">3 waiting</span>' in html
    )
    # without max_wait, as before: greyed out with the reason
    plain = rows_for(ANN, set(), pool, {})[0]
    assert plain["gpu-2"].reason and not plain["gpu-2"].note
    # with every place in line she may have taken: greyed out too, not offered as a wait
    full = {r.slug: r for r in form.profile_rows(PROFILES, limits, ANN, pool, None, may_wait=False)}
    assert full["gpu-2"].reason.startswith("Needs 2 free GPU(s); 1 free right now.")
    assert not full["gpu-2"].note


def test_a_profile_the_machine_can_never_serve_is_not_offered_as_a_wait():
    few = Pool([g.uuid for g in GPUS[:2]])  # two GPUs; the profiles go up to four
    limits = LimitsTable.parse({}, {"max_wait": 600}, [p.slug for p in PROFILES]).for_user(set())
    rows = {r.slug: r for r in form.profile_rows(PROFILES, limits, ANN, few, None)}
    assert rows["gpu-4"].reason == "Needs 4 free GPU(s); 2 free right now."
    assert rows["gpu-4"].note == ""


def test_a_profile_bigger_than_the_groups_whole_quota_is_not_offered_as_a_wait():
    pool = Pool([g.uuid for g in GPUS])
    rows, _ = rows_for(ANN, {"students"}, pool, {"students": {"max_gpus_group": 1, "max_wait": 60}})
    assert rows["gpu-1"].reason == "" and rows["gpu-1"].note == ""
    assert rows["gpu-2"].reason.startswith("This profile asks for 2 GPUs, but members of group")
    assert rows["gpu-2"].note == ""


def test_a_full_quota_says_one_thing_wait_in_line_or_try_again():
    """A student at their group's quota reads what would happen: the wait where they may
    wait, the refusal (and when to try again) where they may not; never both."""
    pool = Pool([g.uuid for g in GPUS])
    pool.allocate(Holder(9, BOB, "bob"), 1, admit=lambda *_: "course")
    quota = "Members of group course already hold 1 of their 1 GPU (max_gpus_group of group "
    quota += "course); this profile asks for 1 more."
    waiting, _ = rows_for(ANN, {"course"}, pool, {"course": {"max_gpus_group": 1, "max_wait": 600}})
    assert waiting["gpu-1"].reason == ""
    assert waiting["gpu-1"].note == (
        f"{quota} If you start it now, you wait in line until a group member's server stops, "
        "at most 10 min (max_wait of group course)."
    )
    refused, _ = rows_for(ANN, {"course"}, pool, {"course": {"max_gpus_group": 1}})
    assert refused["gpu-1"].note == ""
    assert refused["gpu-1"].reason == (
        f"{quota} Try again when a group member's server stops, or pick CPU only."
    )


def test_a_profile_in_turns_starts_at_once_on_a_gpu_shared_in_turns_and_says_what_turns_mean():
    profiles = [Profile("gpu-1", "1 GPU", 1), Profile("turns", "1 GPU, in turns", 1, turns=True)]
    pool = Pool([whole(g) for g in GPUS])
    for key in range(4):
        pool.allocate(
            Holder(10 + key, BOB, "bob", f"s{key}"), Profile("", "", 1, turns=True).request
        )
    rows, _ = rows_for(ANN, set(), pool, {}, profiles=profiles)
    assert rows["gpu-1"].reason == "Needs 1 free GPU(s); 0 free right now."
    assert rows["turns"].reason == "" and rows["turns"].turns and not rows["gpu-1"].turns
    html = form.render([], free=0, total=4, rows=list(rows.values()), turns=form.turns_words(300))
    assert html.count("In turns: when no GPU is free, you start at once") == 1
    assert "each has it for 5 min at a time" in html
