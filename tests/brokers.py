"""The one way in-process tests build the hub's broker: its site from settings, on an engine
with nothing running (`GoneEngine`, or the test's own), as `hub/parts.py` builds it."""

import logging

from doubles import GoneEngine

from gpuspawner.config.settings import GPUSettings
from gpuspawner.config.site import GPUSite
from gpuspawner.devices.source import GPUSource
from gpuspawner.engine.base import Engine
from gpuspawner.hub.books.broker import Broker

HUB = "jupyter"  # c.DockerSpawner.prefix, as the labels of the hub's containers say it
LOG = logging.getLogger("test")


def a_broker(
    settings: GPUSettings | None = None,
    *,
    gpus: int = 4,
    source: GPUSource | None = None,
    site: GPUSite | None = None,
    engine: Engine | None = None,
    **options,
) -> Broker:
    """A broker over `settings` (else `gpus` simulated GPUs) and the GPUs of `source`, or over
    a `site` built already; `options` are Broker's own (clock, ledger, reserve_after …)."""
    if site is None:
        site = GPUSite.from_config(settings or GPUSettings(simulate_gpus=gpus), source)
    return Broker(site, engine or GoneEngine(), HUB, LOG, **options)
