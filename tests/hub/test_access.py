"""gpuspawner's scopes: defined where the config did not, granted to admins by default, and
an admin's stop read by its user as an admin's."""

from jupyterhub import roles

from gpuspawner.hub import attach
from gpuspawner.hub.base import access
from gpuspawner.hub.spawn import notices


class App:
    def __init__(self, custom_scopes=None):
        self.custom_scopes = custom_scopes or {}
        self.extra_user_scopes = set()
        self.template_paths = []
        self.data_files_path = "/share"


def scopes_of(role_name: str) -> list[str]:
    return next(r for r in roles.get_default_roles() if r["name"] == role_name)["scopes"]


def test_a_config_without_them_gets_the_scopes_admins_act_and_users_have_their_jobs():
    app = App()
    attach.before_roles(app)
    assert set(app.custom_scopes) == {access.READ, access.ADMIN, access.JOBS}
    assert app.custom_scopes[access.ADMIN]["subscopes"] == [access.READ]
    assert scopes_of("admin").count(access.ADMIN) == 1
    assert "admin:servers" in scopes_of("admin")  # JupyterHub's own scopes are all still there
    # a user holds only their own jobs (JupyterHub adds extra_user_scopes to the user role),
    # and nothing of the pool
    user_scopes = [*scopes_of("user"), *app.extra_user_scopes]
    assert [s for s in user_scopes if s.startswith("custom:")] == ["custom:gpu-jobs!user"]
    assert not any(s.startswith("custom:") for s in scopes_of("server"))
    # a server's own token asks for the server role's scopes and its user's jobs
    assert access.server_token_scopes() == [*scopes_of("server"), "custom:gpu-jobs!user"]


def test_an_admins_own_definition_stands_and_registering_twice_grants_once():
    own = {access.READ: {"description": "our wording"}}
    app = App(own)
    attach.before_roles(app)
    attach.before_roles(app)
    assert app.custom_scopes[access.READ] == {"description": "our wording"}
    assert access.ADMIN in app.custom_scopes
    assert scopes_of("admin").count(access.ADMIN) == 1
    assert app.extra_user_scopes == {"custom:gpu-jobs!user"}
    assert not getattr(roles.get_default_roles.__wrapped__, "gpuspawner", False)


def test_an_admins_stop_says_so_and_quotes_the_reason_on_one_line():
    assert notices.stopped_by_admin("") == "an admin stopped it"
    assert notices.stopped_by_admin("  \n ") == "an admin stopped it"
    assert (
        notices.stopped_by_admin("Save your work.")
        == "an admin stopped it, saying “Save your work”"
    )
    assert notices.stopped_by_admin("exam at 14:00,\n  GPUs booked") == (
        "an admin stopped it, saying “exam at 14:00, GPUs booked”"
    )
