"""Budgets count a person's own hours, even where JupyterHub gives their id to someone new."""

import time
from datetime import UTC, datetime, timedelta

from jupyterhub import orm

from gpuspawner.core.usage import HOUR, UsageRecord
from gpuspawner.hub.books.budgets import of_users_now


def test_a_new_user_given_a_deleted_users_id_does_not_inherit_their_hours():
    db = orm.new_session_factory("sqlite://")()
    a_day_ago = datetime.now(UTC) - timedelta(days=1)
    ann, bob = orm.User(name="ann", created=a_day_ago), orm.User(name="bob", created=a_day_ago)
    db.add_all([ann, bob])
    db.commit()
    bob_id, now = bob.id, time.time()
    records = [
        UsageRecord(ann.id, "ann", "", None, 1.0, now - 2 * HOUR, now - HOUR, 0.0),
        UsageRecord(bob_id, "bob", "", None, 4.0, now - 2 * HOUR, now - HOUR, 0.0),
    ]
    assert of_users_now(db, records) == records
    db.delete(bob)
    db.commit()
    carol = orm.User(name="carol")
    db.add(carol)
    db.commit()
    assert carol.id == bob_id  # as JupyterHub's SQLite database does
    assert of_users_now(db, records) == records[:1]
