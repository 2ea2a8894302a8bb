"""One hub's GPU site as its config describes it: the GPUs found, the profiles, the limits.

Built once at hub start (and by `gpuspawner doctor`, to check a config the same
way). Any problem here is a GPUConfigError: the hub must not start with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from traitlets import TraitError

from ..core.errors import InventoryConfigError, ProfileConfigError, UnsafeContainerConfig
from ..core.gpus import GPU
from ..core.limits import LimitsTable
from ..core.placement import PLACEMENT_POLICIES
from ..core.pool import Pool
from ..core.profiles import Profile, parse_profiles
from ..core.units import Unit, units_of
from ..devices.nvml import NvmlSource
from ..devices.simulated import MACHINE, SimulatedSource
from ..devices.source import GPUSource, Inventory, discover
from ..engine.escapes import settings_escapes


class GPUConfig(Protocol):
    """The GPUSpawner traits the site is built from."""

    simulate_gpus: int
    simulated_host: list[Any] | str
    simulated_load_file: str
    simulated_machine: str
    exclude_gpus: list[Any]
    shared_gpus: dict[Any, Any]
    placement: str
    profiles: list[Any]
    group_limits: dict[str, Any]
    default_limits: dict[str, Any]
    limit_admins: bool
    usage_retention_days: float


@dataclass
class GPUSite:
    inventory: Inventory
    profiles: list[Profile]
    limits: LimitsTable
    source: GPUSource
    placement: str

    @classmethod
    def from_config(cls, config: GPUConfig, source: GPUSource | None = None) -> GPUSite:
        """Check the whole GPU config against this machine; GPUConfigError says what is wrong."""
        if source is None:
            source = gpu_source(
                config.simulate_gpus,
                config.simulated_load_file,
                config.simulated_host,
                config.simulated_machine,
            )
        inventory = discover(source, config.exclude_gpus, config.shared_gpus)
        profiles = parse_profiles(config.profiles, inventory.units)
        limits = LimitsTable.parse(
            config.group_limits,
            config.default_limits,
            [p.slug for p in profiles],
            config.limit_admins,
            config.usage_retention_days * 24 * 3600,
        )
        if config.placement not in PLACEMENT_POLICIES:
            raise ValueError(f"unknown placement policy {config.placement!r}")
        return cls(inventory, profiles, limits, source, config.placement)

    @property
    def gpus(self) -> list[GPU]:
        return self.inventory.gpus

    @property
    def excluded(self) -> list[GPU]:
        return self.inventory.excluded

    @property
    def units(self) -> list[Unit]:
        return self.inventory.units

    def new_pool(self, clock: Callable[[], float] = time.time) -> Pool:
        """An empty pool of this site's units, whole GPUs placed by their wiring."""
        machine = [*self.inventory.gpus, *self.inventory.excluded]
        topology = self.source.topology(machine)
        return Pool(self.units, self.placement, clock, topology)

    def layout_now(self) -> dict[str, tuple[Unit, ...]]:
        """What each of the pool's GPUs gives now, by GPU UUID, as the driver reports it
        (a MIG layout may have changed); GPUs the driver does not list now are left out.
        Blocking: for the broker's worker thread."""
        ours = {g.uuid for g in self.gpus}
        return {
            gpu.uuid: units_of(gpu, self.inventory.shared.get(gpu.uuid))
            for gpu in self.source.list_gpus()
            if gpu.uuid in ours
        }


def gpu_source(
    simulate_gpus: int,
    simulated_load_file: str = "",
    simulated_host: list[Any] | str | None = None,
    simulated_machine: str = MACHINE,
) -> GPUSource:
    """Simulated GPUs where the config asks for them, else the driver's, through NVML."""
    simulated = simulated_source(
        simulate_gpus, simulated_load_file, simulated_host, simulated_machine
    )
    return NvmlSource() if simulated is None else simulated


def simulated_source(
    simulate_gpus: int,
    simulated_load_file: str = "",
    simulated_host: list[Any] | str | None = None,
    simulated_machine: str = MACHINE,
) -> SimulatedSource | None:
    """The simulated GPUs the config asks for; None where it asks for none."""
    if simulate_gpus and simulated_host:
        raise InventoryConfigError(
            "c.GPUSpawner.simulate_gpus and c.GPUSpawner.simulated_host both describe the "
            "simulated GPUs: set only one"
        )
    if not (simulate_gpus or simulated_host):
        return None
    return SimulatedSource(
        simulate_gpus,
        seed=simulated_machine,
        load_file=simulated_load_file,
        host=simulated_host or (),
    )


def check_container_settings(spawner: Any, group_overrides: Any) -> None:
    """UnsafeContainerConfig naming every setting that would hand a notebook GPUs (or the host)
    outside its grant: the spawner's own, each profile's override, each group override's."""
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("c.GPUSpawner.", {name: getattr(spawner, name, None) for name in SETTINGS_CHECKED}),
        *((f"{where}.", override) for where, override in overrides(spawner, group_overrides)),
    ]
    problems = [p for where, settings in layers for p in settings_escapes(settings, where)]
    if problems:
        raise UnsafeContainerConfig(
            "; ".join(problems) + ". A notebook gets GPUs only from the pool: remove these."
        )


def check_overrides(make_spawner: Callable[[], Any], group_overrides: Any) -> None:
    """ProfileConfigError for an override that would fail every start it applies to: a key
    that is no setting of the spawner (a typo), or a value its setting refuses. Each is
    tried on a spawner of its own (`make_spawner`), as JupyterHub applies it at a start;
    callables depend on the user and are left to the start."""
    for where, override in overrides(make_spawner(), group_overrides):
        probe = make_spawner()
        for key, value in override.items():
            if not probe.has_trait(key):
                raise ProfileConfigError(
                    f"{where}: {key!r} is not a setting of {type(probe).__name__}"
                )
            if callable(value):
                continue
            try:
                probe._apply_overrides({key: value})
            except (TraitError, TypeError, ValueError, AttributeError) as refused:
                raise ProfileConfigError(f"{where}[{key!r}]: {refused}") from None


def overrides(spawner: Any, group_overrides: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Each profile's and group override's spawner_override that is a dict, and where it is."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for profile in spawner.profiles:
        if isinstance(profile, Mapping) and isinstance(profile.get("spawner_override"), Mapping):
            where = f"c.GPUSpawner.profiles[{profile.get('slug') or profile.get('display_name')}]"
            found.append((f"{where}.spawner_override", profile["spawner_override"]))
    groups = group_overrides if isinstance(group_overrides, Mapping) else {}  # or a callable
    for name, override in groups.items():
        if isinstance(override, Mapping) and isinstance(override.get("spawner_override"), Mapping):
            found.append(
                (
                    f"c.Spawner.group_overrides[{name}].spawner_override",
                    override["spawner_override"],
                )
            )
    return found


SETTINGS_CHECKED = (
    "extra_host_config",
    "extra_create_kwargs",
    "volumes",
    "read_only_volumes",
    "mounts",
)
