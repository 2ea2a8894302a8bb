"""The hub's jupyterhub_config.py as the admin tools read it: loaded as the hub would.

`gpuspawner doctor` and `gpuspawner status` need what the hub would use —
the spawner's settings, its images, and the address containers connect to —
without starting a hub. The spawner class is the one the config names, loaded
as JupyterHub loads it; the admin tools themselves import only its settings.
"""

from __future__ import annotations

import traceback
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyterhub.app import JupyterHub
from jupyterhub.app import aliases as hub_aliases
from jupyterhub.app import flags as hub_flags
from jupyterhub.objects import Hub
from traitlets.config import Config
from traitlets.config.loader import ArgumentError, KVArgParseConfigLoader, PyFileConfigLoader

from ..config.adapter import EngineAdapter
from ..config.seams import missing
from ..config.settings import GPUSettings
from ..config.site import simulated_source as configured_simulation
from ..devices.nvml import NvmlSource
from ..devices.simulated import SimulatedSource
from ..devices.source import GPUSource

DEFAULT_PATH = Path("jupyterhub_config.py")


class ConfigError(Exception):
    """The config cannot be loaded, or its hub would not use GPUSpawner."""


@dataclass(frozen=True)
class HubAddress:
    """Where the hub listens and where containers are told to connect."""

    bind_host: str  # "" or "0.0.0.0": every interface
    bind_port: int
    connect_host: str
    connect_port: int


@dataclass(frozen=True)
class HubConfig:
    path: Path
    config: Config
    spawner: Any  # the configured GPUSpawner (GPUSettings and DockerSpawner traits)

    @property
    def images(self) -> list[str]:
        """Every image a spawn may use: the default, the profiles' and the allowed ones."""
        spawner = self.spawner
        names = [spawner.image]
        for profile in spawner.profiles:
            override = profile.get("spawner_override") if isinstance(profile, dict) else None
            if isinstance(override, dict) and override.get("image"):
                names.append(str(override["image"]))
        if isinstance(
            spawner.allowed_images, dict
        ):  # a callable depends on the user: not known here
            names.extend(spawner.allowed_images.values())
        return list(dict.fromkeys(names))

    def hub_setting(self, name: str) -> Any:
        """A JupyterHub setting as the config sets it, else JupyterHub's default."""
        settings = self.config.JupyterHub
        return settings[name] if name in settings else getattr(JupyterHub, name).default_value

    def public_host(self) -> str:
        """Where the hub's proxy listens for people ("" for every interface)."""
        if "ip" in self.config.JupyterHub:  # the older spelling of bind_url
            return str(self.config.JupyterHub.ip)
        return urllib.parse.urlsplit(self.hub_setting("bind_url")).hostname or ""

    def authenticator_class(self) -> type:
        """The authenticator the hub would use, resolved as JupyterHub resolves it."""
        trait = JupyterHub.class_traits()["authenticator_class"]
        return trait.validate(None, self.hub_setting("authenticator_class"))

    def authenticator_setting(self, name: str, authenticator: type) -> Any:
        """A setting of the authenticator, from its own section or Authenticator's."""
        for section in (authenticator.__name__, "Authenticator"):
            if name in self.config[section]:
                return self.config[section][name]
        return None

    def hub_address(self) -> HubAddress:
        """As the hub computes it (`JupyterHub.init_hub`), from the same settings."""
        settings = self.config.JupyterHub

        def setting(name: str) -> Any:
            return settings[name] if name in settings else getattr(JupyterHub, name).default_value

        if setting("hub_bind_url"):
            hub = Hub(bind_url=setting("hub_bind_url"))
        else:
            hub = Hub(ip=setting("hub_ip"), port=setting("hub_port"))
        if setting("hub_connect_ip"):
            hub.connect_ip = setting("hub_connect_ip")
        if setting("hub_connect_url"):
            hub.connect_url = setting("hub_connect_url")
        connect = urllib.parse.urlsplit(hub.url)
        default_port = 443 if connect.scheme == "https" else 80
        return HubAddress(
            bind_host=hub.ip,
            bind_port=hub.port,
            connect_host=connect.hostname or "",
            connect_port=connect.port or default_port,
        )


def load(
    path: Path, simulate_gpus: int | None = None, hub_arguments: Sequence[str] = ()
) -> HubConfig:
    """Run the config file and build the GPUSpawner it configures.

    `simulate_gpus` overrides the file's `c.GPUSpawner.simulate_gpus`; `hub_arguments`
    are settings as `jupyterhub` takes them on its command line (`--DockerSpawner.prefix=x`),
    which override the file's as they do the hub's.
    """
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    try:
        config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    except Exception as error:
        raise ConfigError(
            f"{path}{_line_of(error, path)}: {type(error).__name__}: {error}"
        ) from None
    config.merge(_command_line(hub_arguments))
    if simulate_gpus is not None:
        config.GPUSpawner.simulate_gpus = simulate_gpus
        config.GPUSpawner.simulated_host = []  # the command line's simulation replaces the file's
    spawner_class = _spawner_class(config, path)
    try:
        spawner = spawner_class.from_config(config)
    except Exception as error:
        raise ConfigError(f"{path}: {error}") from None
    return HubConfig(path, config, spawner)


def gpu_source(site: HubConfig | None, simulate: int | None, load_file: str = "") -> GPUSource:
    """The hub's GPUs: simulated where `simulate` or else its config asks for them, else NVML.

    A simulated pool reads `load_file`, or else the config's `simulated_load_file`.
    """
    simulated = simulated_source(site, simulate, load_file)
    return NvmlSource() if simulated is None else simulated


def simulated_source(
    site: HubConfig | None, simulate: int | None, load_file: str = ""
) -> SimulatedSource | None:
    """The simulated GPUs `simulate` or else the config asks for; None: the driver's."""
    count = site.spawner.simulate_gpus if site else simulate or 0
    load_file = load_file or (site.spawner.simulated_load_file if site else "")
    host = site.spawner.simulated_host if site else None
    if site is None:
        return configured_simulation(count, load_file, host)
    return configured_simulation(count, load_file, host, site.spawner.simulated_machine)


def _command_line(arguments: Sequence[str]) -> Config:
    """Settings from jupyterhub's command line, read as JupyterHub reads them (its aliases
    and flags: `--port 8001`, `--debug`)."""
    loader = KVArgParseConfigLoader(list(arguments), aliases=hub_aliases, flags=hub_flags)
    try:
        return loader.load_config()
    except (ArgumentError, SystemExit):  # argparse has said which one, on stderr
        raise ConfigError(
            f"jupyterhub would not take {' '.join(arguments)!r}: give settings as "
            "--Class.trait=value, or jupyterhub's own options"
        ) from None


def _spawner_class(config: Config, path: Path) -> type[Any]:
    trait = JupyterHub.class_traits()["spawner_class"]
    value = config.JupyterHub.get("spawner_class", trait.default_value)
    try:
        spawner_class = trait.validate(None, value)
    except Exception as error:
        raise ConfigError(f"{path}: c.JupyterHub.spawner_class: {error}") from None
    if not issubclass(spawner_class, GPUSettings):
        raise ConfigError(
            f"{path}: the hub would use {spawner_class.__name__}, not GPUSpawner: "
            'set c.JupyterHub.spawner_class = "gpu"'
        )
    lacking = missing(spawner_class, EngineAdapter)
    if lacking:
        raise ConfigError(
            f"{path}: {spawner_class.__name__} is no engine adapter (it lacks "
            f"{', '.join(lacking)}): subclass GPUSpawner or SwarmGPUSpawner"
        )
    return spawner_class


def _line_of(error: Exception, path: Path) -> str:
    """ ", line N" where the error happened in the config file, if it did."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f", line {error.lineno}"
    here = path.resolve()
    frames = [
        f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == here
    ]
    return f", line {frames[-1].lineno}" if frames else ""
