"""How gpuspawner says things: one spelling for each idea people read.

Servers, GPU counts, durations and where a limit came from appear in refusals,
notices, logs, pages and the command line; each is spelled here once.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from fractions import Fraction

DEFAULT_GROUP = "default_limits"
NO_GROUP = "(none)"  # a grant charged to no quota group, in reports and metrics


def server_name(user: str, server: str) -> str:
    """As JupyterHub names servers: "alice" for the default one, "alice/train" for a named one."""
    return f"{user}/{server}" if server else user


def your_server(server: str) -> str:
    """ "your default server" / "your server 'train'": a server, to its own user."""
    return f"your server {server!r}" if server else "your default server"


def their_server(user: str, server: str) -> str:
    """ "bob's server" / "bob's server 'train'": someone's server, to another user."""
    return f"{user}'s server {server!r}" if server else f"{user}'s server"


def ordinal(n: int) -> str:
    """ "1st", "2nd", "3rd", "11th", "22nd": a place in the waiting line."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def count_gpus(n: int | float | Fraction) -> str:
    """ "1 GPU", "2 GPUs", "1/7 GPU", "1 3/7 GPUs": the words users read in refusals and
    on the form. Fractions are GPU-equivalents (a MIG instance, a shared slot)."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:g} GPU"
    if isinstance(n, Fraction) and n.denominator != 1:
        whole, rest = divmod(n, 1)
        return f"{rest} GPU" if not whole else f"{whole} {rest} GPUs"
    n = int(n)
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def amount(n: int | Fraction) -> str:
    """ "2", "1/7", "1 3/7": a number of GPU-equivalents without its noun."""
    whole, rest = divmod(Fraction(n), 1)
    if not rest:
        return str(whole)
    return f"{whole} {rest}" if whole else str(rest)


COUNTING = (
    "GPU-equivalents: a whole GPU counts 1, a MIG instance its share of its GPU's compute "
    "slices, a slot of a shared GPU 1/slots"
)


def gib(n_bytes: int) -> int:
    """Memory in whole GiB, as people read it ("80 GiB")."""
    return round(n_bytes / 2**30)


def duration(seconds: float) -> str:
    """ "2 h 5 min", "40 s": long enough to read, short enough to trust."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def iso_utc(moment: float | None) -> str | None:
    """ "2026-12-03T20:15:08Z": a moment in the JSON that scripts read."""
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def at_clock(moment: float, now: float) -> str:
    """ "18:00 UTC", with the date when it is not within the next day: when something happens."""
    when = datetime.fromtimestamp(moment, UTC)
    return when.strftime("%H:%M UTC" if abs(moment - now) < 20 * 3600 else "%Y-%m-%d %H:%M UTC")


def gpu_hours(hours: float, against: float | None = None) -> str:
    """ "12.5", "39.96", "40": GPU-hours rounded down, so a budget reads as used up only once
    it is; to two decimals, or to as many as the budget they are read `against` has (a
    budget of 0.002 used up reads "0.002 of your 0.002", not "0 of your 0.002")."""
    places = 2 if against is None else min(6, max(2, _decimals(against)))
    scale = 10**places
    shown = f"{math.floor(hours * scale + 1e-9) / scale:.{places}f}"
    return shown.rstrip("0").rstrip(".")


def _decimals(number: float) -> int:
    """How many decimals `number` is written with: 2 for 0.25, 3 for 0.002, 0 for 40."""
    text = f"{number:.10f}".rstrip("0")
    return len(text.partition(".")[2])


def from_group(group: str | None) -> str:
    """ " of group students" / " from default_limits": where a limit came from."""
    if group == DEFAULT_GROUP:
        return " from default_limits"
    return f" of group {group}" if group else ""


def members(group: str) -> str:
    """ "Members of group students" / "Users in no listed group": a group, as its members."""
    return "Users in no listed group" if group == DEFAULT_GROUP else f"Members of group {group}"


def quoted(text: str, limit: int = 40) -> str:
    """A user's text, quoted and cut short, for messages that echo it back."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def listed(items: list[str], most: int = 5) -> str:
    """ "a, b, c and 12 more": a list that stays short whatever a request sends."""
    shown = ", ".join(items[:most])
    rest = len(items) - most
    return f"{shown} and {rest:,} more" if rest > 0 else shown


def with_memory(model: str, memory_bytes: int) -> str:
    """ "NVIDIA H100 80GB HBM3 · 80 GiB"; the model alone where the memory is not known
    (a Swarm node that does not say)."""
    return f"{model} · {gib(memory_bytes)} GiB" if memory_bytes else model
