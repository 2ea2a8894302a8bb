"""The engine adapters: each puts `hub.server.GPUServer` before an engine's spawner class.

`docker` (GPUSpawner, one host's Docker) and `swarm` (SwarmGPUSpawner, a Docker Swarm)
are the only hub modules that import docker-py or dockerspawner (import-linter checks it).
"""
