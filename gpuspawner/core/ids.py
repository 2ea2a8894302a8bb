"""Ids that come from outside (a URL's path, a server's name), read only as far as a record
could hold them.

Jobs, servers and calendar windows are rows of SQLite tables, whose INTEGER is a signed
64-bit number: a longer number sent to SQLite raises OverflowError, which a handler would
answer with a 500 (and a pass over many servers would end on). No row has such an id, so
it reads as none, like any other id that names nothing.
"""

from __future__ import annotations

MAX_ID = 2**63 - 1  # SQLite's largest INTEGER
MAX_DIGITS = len(str(MAX_ID))


def as_id(text: str) -> int | None:
    """The id `text` spells in ASCII digits, or None where it spells none a record could
    hold (not digits, Unicode digits included, or past `MAX_ID`). The digits are counted
    before they are converted: a megabyte of them costs nothing."""
    if not text.isascii() or not text.isdigit():
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > MAX_DIGITS:
        return None
    number = int(digits)
    return number if number <= MAX_ID else None
