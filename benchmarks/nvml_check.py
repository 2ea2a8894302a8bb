"""One short check of gpuspawner's MIG and NVML discovery on a real NVIDIA driver.

CI runs these paths against the NVML double (tests/nvml_double.py) only. On a machine with
a real GPU, run this once and paste what it prints into benchmarks/README.md ("MIG and
NVML on a real driver"). It changes nothing on the machine: it only reads, through the
same pynvml calls and the same NvmlSource the hub uses, and prints each raw answer beside
what gpuspawner makes of it. A GPU in MIG mode shows its instances; without one, the
check still shows that a GPU without MIG answers as the double does (NotSupported).

    .venv/bin/python benchmarks/nvml_check.py
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from typing import Any

import pynvml

from gpuspawner.core.units import all_units
from gpuspawner.devices.nvml import NvmlSource


def answer(call: Any, *args: Any) -> str:
    """A pynvml call's answer, or the name of the error class it raised."""
    try:
        return repr(call(*args))
    except pynvml.NVMLError as error:
        return f"raises {type(error).__name__} ({error})"


def raw(index: int) -> None:
    """The MIG calls for one GPU, as the driver answers them."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    print(f"GPU {index}: {pynvml.nvmlDeviceGetName(handle)} {pynvml.nvmlDeviceGetUUID(handle)}")
    print(f"  nvmlDeviceGetMigMode: {answer(pynvml.nvmlDeviceGetMigMode, handle)}")
    most = answer(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
    print(f"  nvmlDeviceGetMaxMigDeviceCount: {most}")
    print(f"  nvmlDeviceGetProcessUtilization: {answer(_process_shares, handle)}")
    if not most.isdigit():
        return
    for position in range(int(most) + 1):  # one past the end: InvalidArgument expected
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
        except pynvml.NVMLError as error:
            print(f"  MIG index {position}: raises {type(error).__name__}")
            continue
        attributes = pynvml.nvmlDeviceGetAttributes(mig)
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        print(
            f"  MIG index {position}: {pynvml.nvmlDeviceGetUUID(mig)} "
            f"name={answer(pynvml.nvmlDeviceGetName, mig)} "
            f"gpuInstanceSliceCount={attributes.gpuInstanceSliceCount} "
            f"computeInstanceSliceCount={attributes.computeInstanceSliceCount} "
            f"memorySizeMB={attributes.memorySizeMB} "
            f"parent={pynvml.nvmlDeviceGetUUID(parent)}"
        )
        for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature"):
            args = (mig, pynvml.NVML_TEMPERATURE_GPU) if "Temperature" in name else (mig,)
            print(f"    {name}: {answer(getattr(pynvml, name), *args)}")
        processes = answer(pynvml.nvmlDeviceGetComputeRunningProcesses, mig)
        print(f"    nvmlDeviceGetComputeRunningProcesses: {processes}")


def _process_shares(handle: Any) -> list[tuple[int, int]]:
    samples = pynvml.nvmlDeviceGetProcessUtilization(handle, 0)
    return [(int(s.pid), int(s.smUtil)) for s in samples]


def main() -> int:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        print(f"NVML could not start ({error}): run this on a machine with an NVIDIA driver.")
        return 1
    bindings = importlib.metadata.version("nvidia-ml-py")
    print(f"driver {pynvml.nvmlSystemGetDriverVersion()}, nvidia-ml-py {bindings}")
    for index in range(pynvml.nvmlDeviceGetCount()):
        raw(index)
    started = time.perf_counter()
    source = NvmlSource()
    gpus = source.list_gpus()
    listed = time.perf_counter() - started
    print(f"\ngpuspawner's view ({listed * 1000:.1f} ms to list):")
    for unit in all_units(gpus, {}):
        print(f"  {unit.name}: {unit.id} · {unit.label} · weight {unit.weight}")
    samples = source.sample([*(g.uuid for g in gpus), *(m.uuid for g in gpus for m in g.mig)])
    for device, sample in samples.items():
        print(f"  sample {device}: {sample}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
