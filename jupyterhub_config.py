# A working gpuspawner hub: run `jupyterhub -f jupyterhub_config.py` (or scripts/hub).
#
# Everything below is ordinary JupyterHub / DockerSpawner config plus the
# GPUSpawner traits. Environment variables make the demo run anywhere;
# on your server, write the values in directly.
import os

from gpuspawner import docker_bridge_gateway, idle_culler_service, nvml_gpu_count

c = get_config()  # noqa: F821  (provided by JupyterHub)

# --- Spawner ---------------------------------------------------------------
c.JupyterHub.spawner_class = "gpu"

# On a machine without NVIDIA GPUs (a laptop, CI) run on simulated ones.
c.GPUSpawner.simulate_gpus = int(os.environ.get("GPUSPAWNER_SIMULATE_GPUS", "0"))
# Jobs give way to people by parking their GPU memory in host RAM instead of stopping
# (NVIDIA driver 550 or later: docs/parking.md); on simulated GPUs a stand-in driver does it.
c.GPUSpawner.parking = bool(c.GPUSpawner.simulate_gpus)
if c.GPUSpawner.simulate_gpus:
    # What runs on the simulated GPUs: `gpuspawner simulate` (scripts/hub starts it) writes
    # one CUDA process per server into this file, idle for people, busy for jobs.
    c.GPUSpawner.simulated_load_file = "simulated-load.json"
    # The stand-in driver keeps nothing in this machine's memory: park as an 8-GPU server would.
    c.GPUSpawner.park_memory_limit = "256G"
# c.GPUSpawner.exclude_gpus = [7]   # keep GPU 7 for jobs outside JupyterHub
# c.GPUSpawner.shared_gpus = {6: 4}  # GPU 6 for up to 4 servers at once: no memory isolation
#   (then offer it: {"display_name": "Shared GPU", "slug": "shared", "shared": True};
#   a GPU an admin put in MIG mode is offered by {"mig_profile": "1g.10gb"};
#   docs/slices.md, "MIG instances and shared GPUs")

# Built from images/gpu and images/cpu (docs/setup.md: "Set up a GPU server", step 5).
c.GPUSpawner.image = os.environ.get("GPUSPAWNER_NOTEBOOK_IMAGE", "gpuspawner-notebook:latest")
CPU_IMAGE = os.environ.get("GPUSPAWNER_CPU_IMAGE", "gpuspawner-notebook-cpu:latest")
c.GPUSpawner.pull_policy = "ifnotpresent"
c.GPUSpawner.mem_limit = "16G"


PROFILES = [
    {
        "display_name": "CPU only",
        "slug": "cpu",
        "gpus": 0,
        "description": "Editing, data preparation, small experiments.",
        "spawner_override": {"image": CPU_IMAGE},
    },
    {
        "display_name": "1 GPU",
        "slug": "gpu-1",
        "gpus": 1,
        "default": True,
        "description": "Most notebooks: fine-tuning, inference, coursework.",
    },
    {
        "display_name": "2 GPUs",
        "slug": "gpu-2",
        "gpus": 2,
        "description": "Data-parallel training on a GPU pair.",
        "spawner_override": {"mem_limit": "64G"},
    },
    {
        "display_name": "4 GPUs",
        "slug": "gpu-4",
        "gpus": 4,
        "description": "Large models. Please stop the server when your run ends.",
        "spawner_override": {"mem_limit": "128G"},
    },
]
# Only what this machine can serve: a profile bigger than the machine stops the hub.
# The GPUs here: the simulated ones, else those NVML lists (0 where it cannot: the hub
# then says why as it starts).
GPUS = c.GPUSpawner.simulate_gpus or nvml_gpu_count()
c.GPUSpawner.profiles = [p for p in PROFILES if p["gpus"] <= GPUS]
# With parking, two people may share a GPU in turns when none is free (docs/parking.md).
TURNS = ["gpu-1-turns"] if c.GPUSpawner.parking else []
if TURNS:
    c.GPUSpawner.profiles.append(
        {
            "display_name": "1 GPU, in turns when all are taken",
            "slug": "gpu-1-turns",
            "gpus": 1,
            "turns": True,
            "description": "For when you would otherwise wait.",
        }
    )
OFFERED = [p["slug"] for p in c.GPUSpawner.profiles]

# Students: one GPU each, at most 2 for the whole course at once, back after 1 h of idle GPU;
# when the course's GPUs or the machine's are all taken, a student's start waits in line
# for up to 30 min instead of being refused (docs/waiting-line.md).
# Researchers: up to 4 GPUs per person, for at most 3 days a server.
# Everyone else: CPU or one GPU. Idle notebooks stop after 2 h (CPU-only ones after 8 h).
HOUR = 3600
c.GPUSpawner.default_limits = {
    "max_gpus_per_user": 1,
    "profiles": [s for s in OFFERED if s in ("cpu", "gpu-1", *TURNS)],
    "idle_timeout": 2 * HOUR,
    "cpu_idle_timeout": 8 * HOUR,
    "gpu_idle_timeout": 4 * HOUR,
}
c.GPUSpawner.group_limits = {
    "students": {
        "max_gpus_per_server": 1,
        "max_gpus_per_user": 1,
        "max_gpus_group": 2,
        "gpu_idle_timeout": 1 * HOUR,
        "max_wait": 30 * 60,
    },
    "researchers": {
        "max_gpus_per_user": 4,
        "profiles": OFFERED,
        "max_age": 72 * HOUR,
        # a start waits up to 10 min for GPUs: jobs holding them give way (docs/jobs.md)
        "max_wait": 10 * 60,
        "max_jobs": 8,
        "max_runtime": 24 * HOUR,
    },
}
# Jobs (docs/jobs.md) run as named servers "job-<id>"; people may name servers of their own.
c.JupyterHub.allow_named_servers = True

# --- Storage: users' files outlive their containers (docs/configuration.md) --
# A home per user, shared by all their servers and profiles: GPUSpawner's default, written out.
# Docker keeps named volumes under its data root (/var/lib/docker/volumes); containers come
# and go, culls included, and the home stays until an admin deletes it.
c.GPUSpawner.volumes = {"gpuspawner-home-{username}": "/home/jovyan"}
# Or homes on a big local disk: the hub creates each folder for the notebook user (uid 1000).
# c.GPUSpawner.volumes = {"/srv/home/{username}": "/home/jovyan"}
# Shared datasets, read-only for everyone (the folder must exist on the host) ...
# c.GPUSpawner.read_only_volumes = {"/srv/data": "/data"}
# ... and per group: JupyterHub's group_overrides add to everyone's mounts.
# c.Spawner.group_overrides = {
#     "physics-data": {
#         "groups": ["physics"],
#         "spawner_override": {"read_only_volumes": {"/srv/physics": "/data-physics"}},
#     },
# }

# --- Culling: jupyterhub-idle-culler, with each server's group idle timeout -----
# The hub's GPU monitor counts busy GPUs as activity, so the culler spares a
# training run that prints nothing; gpu_idle_timeout and max_age it enforces itself.
culler, culler_role = idle_culler_service(timeout=24 * HOUR, cull_every=60)
c.JupyterHub.services = [culler]
c.JupyterHub.load_roles = [culler_role]
c.JupyterHub.load_groups = {
    "students": {"users": ["student1", "student2", "student3"]},
    "researchers": {"users": ["alice", "bob"]},
}

# --- Networking: containers reach the hub over Docker's bridge --------------
c.JupyterHub.hub_ip = os.environ.get("GPUSPAWNER_HUB_IP") or docker_bridge_gateway()
c.JupyterHub.bind_url = os.environ.get("GPUSPAWNER_BIND_URL", "http://127.0.0.1:8000")
# On one origin the hub and every user's server are one site to the browser: script on a
# user's page, opened by an admin, can act as that admin (JupyterHub's single-origin limit).
# A hub with admins should give each server its own subdomain (wildcard DNS and TLS
# certificate; docs/setup.md, "Admins and users' pages"):
# c.JupyterHub.subdomain_host = "https://hub.example.org"
# c.JupyterHub.cookie_host_prefix_enabled = True

# --- Authentication: replace with your site's (OAuthenticator, LDAP, PAM …) --
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ.get("GPUSPAWNER_DEMO_PASSWORD", "gpu-demo")
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}
