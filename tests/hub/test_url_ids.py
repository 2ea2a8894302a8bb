"""An id in a URL's path is read as far as a record could hold it: past SQLite's integers it
names nothing (404, its text quoted short), never a 500 from the database."""

import pytest
from tornado import web

from gpuspawner.hub.base.answers import id_in_url


@pytest.mark.parametrize("text", ["99999999999999999999999", "9223372036854775808", "9" * 5000])
def test_an_id_no_record_could_hold_is_no_such_thing(text):
    with pytest.raises(web.HTTPError) as refused:
        id_in_url(text, "job")
    assert refused.value.status_code == 404
    assert refused.value.log_message.startswith(f"No such job: '{text[:10]}")
    assert len(refused.value.log_message) < 80


def test_an_id_within_sqlites_integers_is_read():
    assert id_in_url("9223372036854775807", "job") == 2**63 - 1
