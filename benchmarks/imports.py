"""What starting gpuspawner's processes costs: `gpuspawner --help`, and the idle culler's hook.

Each command runs in a fresh interpreter, `runs` times; medians and ranges are
printed against the target, and against importing the whole hub side (what
0.1 loaded for both, since its package imported the spawner).
Usage: .venv/bin/python benchmarks/imports.py [runs=15]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
TARGET_SECONDS = 0.3

COMMANDS = {
    "gpuspawner --help": [str(BIN / "gpuspawner"), "--help"],
    "the idle culler's hook": [
        sys.executable,
        "-c",
        "from gpuspawner.core.culling import idle_arbiter",
    ],
    "the hub side (as 0.1 loaded for both)": [
        sys.executable,
        "-c",
        "from gpuspawner import GPUSpawner",
    ],
    "python itself": [sys.executable, "-c", "pass"],
}


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def modules(code: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(len(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.split()[-1])


def main(runs: int = 15) -> None:
    medians = {}
    for name, command in COMMANDS.items():
        timed(command)  # warm the file cache
        samples = [timed(command) for _ in range(runs)]
        medians[name] = statistics.median(samples)
        print(
            f"{name:40s} median {medians[name] * 1000:6.0f} ms "
            f"(range {min(samples) * 1000:.0f} – {max(samples) * 1000:.0f} ms, {runs} runs)"
        )
    whole = medians["the hub side (as 0.1 loaded for both)"]
    for name in ("gpuspawner --help", "the idle culler's hook"):
        met = "met" if medians[name] < TARGET_SECONDS else "NOT met"
        print(
            f"{name}: {medians[name] / whole:.2f} of the hub side's import time; "
            f"target < {TARGET_SECONDS * 1000:.0f} ms {met}"
        )
    core, hub = modules("import gpuspawner.core.pool"), modules("from gpuspawner import GPUSpawner")
    print(f"modules loaded: the core's pool {core}, the hub side {hub}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
