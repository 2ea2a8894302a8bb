"""Ids from outside (a URL, a server's name) are read only as far as SQLite can hold them."""

import pytest

from gpuspawner.core.ids import MAX_ID, as_id


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("7", 7),
        ("0", 0),
        ("007", 7),
        ("0" * 40 + "12", 12),  # leading zeros are no digits of the number
        (str(MAX_ID), MAX_ID),
        (str(MAX_ID + 1), None),  # OverflowError in SQLite: no row has it
        ("9" * 23, None),
        ("9" * 5000, None),  # more digits than Python converts: counted first, never converted
        ("", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1e3", None),
        ("١٢", None),  # Arabic-Indic digits: str.isdigit() says yes, an id's digits are ASCII
        ("²", None),
    ],
)
def test_an_id_is_ascii_digits_within_sqlites_integers(text, read):
    assert as_id(text) == read
