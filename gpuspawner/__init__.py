"""gpuspawner: share a multi-GPU server through JupyterHub.

The package is layered (see docs/architecture.md): `core` (the books and
the rules, standard library only), `devices` (what GPUs exist), `engine` (where
containers run), `config` (the admin's settings), `hub` (the spawner and what
runs inside the hub) and `admin` (the `gpuspawner` command). Importing the
package imports none of them; `gpuspawner.GPUSpawner` loads the hub side on
first use, so the core and the command line start quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hub.engines.docker import GPUSpawner

__all__ = ["GPUSpawner"]


def __getattr__(name: str) -> Any:
    if name == "GPUSpawner":
        from .hub.engines.docker import GPUSpawner

        return GPUSpawner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
