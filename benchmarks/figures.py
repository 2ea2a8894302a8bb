"""Shared by the benchmarks: where the test harness lives, and how figures are printed."""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # realhub: the real hub the tests drive

# A server that only holds its GPUs and answers HTTP (the hub's check that it is up), in
# perl (every Debian image has it), at about 3 MB where the tests' light server, Python's
# http.server, takes 20: for the benchmarks that run hundreds of servers on this machine.
_ANSWER = (
    "$s = IO::Socket::INET->new(LocalPort => 8888, Listen => 128, ReuseAddr => 1) or die $!;"
    'while ($c = $s->accept) { $c->sysread($r, 65536); $c->print("HTTP/1.0 200 OK\\r\\n'
    'Content-Length: 0\\r\\n\\r\\n"); close $c }'
)
TINY_SERVER = {
    "cmd": ["perl", "-MIO::Socket::INET", "-e", _ANSWER],
    "mem_limit": "16M",
    "extra_host_config": {"init": True},  # stops at once on SIGTERM
}


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(values: Sequence[float], unit: str = "s", scale: float = 1.0) -> str:
    """Median and range, e.g. "4.21 s (3.98 – 4.60, n=10)"."""
    scaled = [v * scale for v in values]
    return (
        f"{statistics.median(scaled):.3g} {unit} "
        f"({min(scaled):.3g} – {max(scaled):.3g}, n={len(scaled)})"
    )


def machine() -> str:
    import os

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
