from .spawner import GPUSpawner

__all__ = ["GPUSpawner"]
