"""`gpuspawner usage`: GPU-hours held and busy per user or quota group, from the usage ledger.

It reads the ledger file itself (read-only, whether or not the hub runs), at the path the
hub's config names (`c.GPUSpawner.usage_ledger_file`; a relative path is relative to the
hub's working directory, so run it there, or pass --ledger). The figures come from
`core.usage.report_rows`, as the admin page's "Use in the last 7 days" does.

Columns of csv and json: `user` (or `group`: the quota group charged, `(none)` for none),
`held_gpu_hours`, `busy_gpu_hours`, `busy_ratio` (busy over held; empty or null where
nothing was held). A grant still open counts up to now.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ..config.settings import GPUSettings
from ..core.usage import REPORT_COLUMNS, report_rows
from ..core.words import at_clock
from ..records.ledger import Ledger

UNITS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
DEFAULT_LEDGER = str(GPUSettings.class_traits()["usage_ledger_file"].default_value)
DEFAULT_CONFIG = Path("jupyterhub_config.py")  # as hubconfig's, which loads JupyterHub: late


class UsageError(Exception):
    """The report cannot be made; the message says why and what to pass instead."""


def main(args: argparse.Namespace) -> int:
    now = time.time()
    try:
        since = since_moment(args.since, now)
        path = ledger_path(args.ledger, args.config)
        try:
            ledger = Ledger(path, read_only=True)
        except FileNotFoundError:
            raise UsageError(
                f"no usage ledger at {path.resolve()}: run this in the hub's working directory "
                "(a relative c.GPUSpawner.usage_ledger_file is relative to it), or pass "
                "--ledger PATH"
            ) from None
        try:
            records = ledger.records(since)
        except sqlite3.Error as error:
            raise UsageError(f"cannot read the usage ledger {path.resolve()}: {error}") from None
        finally:
            ledger.close()
    except UsageError as error:
        print(f"gpuspawner usage: {error}", file=sys.stderr)
        return 1
    rows = report_rows(records, since, now, args.by)
    print(render(rows, args.by, args.format, since, now, path), end="")
    return 0


def since_moment(text: str, now: float) -> float:
    """From "7d", "24h", "90m", "2w" (before now) or a date or time such as "2026-11-01",
    "2026-11-01T08:00" (UTC unless it names its offset)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text)
    try:
        if found:
            since = now - float(found[1]) * UNITS[found[2]]
        else:
            when = datetime.fromisoformat(text.strip())
            since = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        datetime.fromtimestamp(since, UTC)  # a moment the report can show
    except (ValueError, OverflowError, OSError):
        raise UsageError(
            f"--since {text!r} is neither a time before now (such as 7d, 24h, 90m, 2w) nor a "
            "date (such as 2026-11-01 or 2026-11-01T08:00, UTC)"
        ) from None
    if since > now:
        raise UsageError(f"--since {text!r} is in the future: the report ends now")
    return since


def ledger_path(given: Path | None, config: Path | None) -> Path:
    """--ledger, else the config's usage_ledger_file, else the hub's default name (here)."""
    if given is not None:
        return given
    if config is None and not DEFAULT_CONFIG.is_file():
        return Path(DEFAULT_LEDGER)
    from . import hubconfig  # JupyterHub's config machinery: only when there is a config

    try:
        site = hubconfig.load(config or DEFAULT_CONFIG)
    except hubconfig.ConfigError as error:
        raise UsageError(str(error)) from None
    return Path(site.spawner.usage_ledger_file)


def render(
    rows: list[dict[str, str | float | None]],
    by: str,
    form: str,
    since: float,
    now: float,
    path: Path,
) -> str:
    columns = [by, *REPORT_COLUMNS]
    if form == "json":
        window = {"since": _iso(since), "until": _iso(now), "by": by}
        return json.dumps({**window, "ledger": str(path.resolve()), "rows": rows}, indent=2) + "\n"
    if form == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    return _table(rows, by, since, now, path)


def _table(
    rows: list[dict[str, str | float | None]], by: str, since: float, now: float, path: Path
) -> str:
    window = (
        f"From {at_clock(since, now)} to {at_clock(now, since)}, "
        f"from the usage ledger {path.resolve()}."
    )
    if not rows:
        return f"No GPU held. {window}\n"
    held = sum(float(row["held_gpu_hours"] or 0) for row in rows)
    busy = sum(float(row["busy_gpu_hours"] or 0) for row in rows)
    total: dict[str, str | float | None] = {
        by: "total",
        "held_gpu_hours": held,
        "busy_gpu_hours": busy,
        "busy_ratio": busy / held if held else None,
    }
    header = (by.upper(), "GPU-HOURS HELD", "BUSY", "BUSY SHARE")
    cells = [header, *(_cells(row, by) for row in [*rows, total])]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    ]
    return "\n".join([*lines[:-1], "", lines[-1], "", window]) + "\n"


def _cells(row: dict[str, str | float | None], by: str) -> tuple[str, str, str, str]:
    share = row["busy_ratio"]
    return (
        str(row[by]),
        f"{float(row['held_gpu_hours'] or 0):.2f}",
        f"{float(row['busy_gpu_hours'] or 0):.2f}",
        "–" if share is None else f"{100 * float(share):.0f} %",
    )


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
