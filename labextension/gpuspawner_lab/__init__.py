"""gpuspawner in JupyterLab: the lease of this notebook server's GPUs, from the hub.

Two halves, installed together by pip into the notebook image: a prebuilt
JupyterLab extension (src/, built into labextension/) that shows the lease, and
a Jupyter server extension (handlers.py) that fetches it from the hub with the
server's own token, which the browser never sees.

Beside them, the `gpuspawner-job` command (job.py): in a job's container it runs the job's
notebook or script next to the server and reports its progress to the hub.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from .handlers import setup_handlers

__version__ = version("gpuspawner-lab")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "gpuspawner-lab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "gpuspawner_lab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    setup_handlers(server_app.web_app)
