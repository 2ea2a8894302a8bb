"""Parking on a real NVIDIA driver: a CUDA process's memory to host RAM and back, timed.

CI parks only the checkpoint driver's double (gpuspawner/devices/simulated_checkpoint.py).
On a machine with a real GPU (driver >= 550) and PyTorch or CuPy, `scripts/device-check`
runs this after nvml_check.py. For 1, 8 and 32 GiB it starts a CUDA process that fills
that much GPU memory with a known pattern, parks it from this process with gpuspawner's
own code (devices/checkpoint.py: lock, checkpoint), shows through gpuspawner's NVML
source that the memory left the GPU, restores it, has the process check its data, and
prints park and restore seconds beside the time the process itself takes to copy the same
bytes to the host and back (the PCIe copy). It never changes MIG mode or resets a GPU.

    python benchmarks/park_check.py [GiB ...]
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from gpuspawner.devices.checkpoint import CheckpointError, CudaDriver, park, unpark
from gpuspawner.devices.nvml import NvmlSource

SIZES_GIB = (1, 8, 32)
GIB = 2**30

# The CUDA process: fills `gib` GiB, times a copy to the host and back, then answers
# "check" (is the memory as it was?) until stdin closes.
HOLDER = textwrap.dedent(
    """
    import sys, time
    gib = int(sys.argv[1])
    try:
        import torch
        data = torch.arange(gib * 2**28, dtype=torch.int32, device="cuda")
        total = lambda: int(data.sum(dtype=torch.int64).item())
        sync, to_host = torch.cuda.synchronize, lambda: data.cpu()
        back = lambda host: host.cuda()
        library = "torch " + torch.__version__
    except ImportError:
        import cupy
        data = cupy.arange(gib * 2**28, dtype=cupy.int32)
        total = lambda: int(data.sum(dtype=cupy.int64).item())
        sync, to_host = cupy.cuda.runtime.deviceSynchronize, lambda: cupy.asnumpy(data)
        back = lambda host: cupy.asarray(host)
        library = "cupy " + cupy.__version__
    expected = total()
    sync(); started = time.perf_counter(); host = to_host(); sync()
    down = time.perf_counter() - started
    started = time.perf_counter(); copy = back(host); sync()
    up = time.perf_counter() - started
    del host, copy
    print(f"ready {library} {down:.3f} {up:.3f}", flush=True)
    for line in sys.stdin:
        print("intact" if total() == expected else "CHANGED", flush=True)
    """
)


def used_gib(source: NvmlSource, uuid: str) -> str:
    used = source.sample([uuid])[uuid].memory_used_bytes
    return "?" if used is None else f"{used / GIB:.1f} GiB"


def check(gib: int, driver: CudaDriver, source: NvmlSource, uuid: str) -> bool:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(gib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        ready = holder.stdout.readline().split()
        if not ready or ready[0] != "ready":
            print(f"  {gib} GiB: the CUDA process did not start (out of memory?)")
            return False
        library, down, up = " ".join(ready[1:3]), float(ready[3]), float(ready[4])
        resident = used_gib(source, uuid)
        started = time.perf_counter()
        park(driver, [holder.pid], timeout_ms=10_000)
        parked_s = time.perf_counter() - started
        parked_state = driver.state(holder.pid).name
        parked = used_gib(source, uuid)
        started = time.perf_counter()
        unpark(driver, [holder.pid])
        restored_s = time.perf_counter() - started
        holder.stdin.write("check\n")
        holder.stdin.flush()
        verdict = holder.stdout.readline().strip()
        print(
            f"  {gib:>2} GiB ({library}): GPU memory used {resident} resident, {parked} "
            f"parked ({parked_state}); park {parked_s:.2f} s, restore {restored_s:.2f} s; "
            f"the process's own copy to host {down:.2f} s, back {up:.2f} s; data {verdict}"
        )
        return verdict == "intact"
    except CheckpointError as error:
        print(f"  {gib} GiB: the driver refused: {error}")
        return False
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def main(sizes: list[int]) -> int:
    try:
        driver = CudaDriver()
    except CheckpointError as error:
        print(f"No checkpoint API here ({error}): it needs an NVIDIA driver >= 550.")
        return 1
    source = NvmlSource()
    gpu = source.list_gpus()[0]
    print(f"parking on GPU 0 ({gpu.model}, {gpu.uuid}):")
    fits = [gib for gib in sizes if gib * GIB < gpu.memory_total_bytes * 0.9]
    results = [check(gib, driver, source, gpu.uuid) for gib in fits]
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or list(SIZES_GIB)))
