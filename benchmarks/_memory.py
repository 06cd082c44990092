"""Memory measures and the device header the benchmarks share (imported by the scripts in this folder, run as
`python benchmarks/x.py`)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from zoo.memory import saved_bytes  # noqa: F401 - re-exported for the benchmark scripts


def in_forked_child(target, *args, timeout: float | None = None):
    """What target(*args, queue) puts on its queue, run in a forked child: the child's peak RSS is its own, so a
    measurement there sees neither the parent's nor another method's allocations."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(*args, queue))
    child.start()
    out = queue.get(timeout=timeout)
    child.join()
    return out


def status_kib(field: str) -> int:
    """A /proc/self/status field in KiB (Linux): VmRSS now, VmHWM the peak since start or the last reset_peak_rss()."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS, so a later status_kib("VmHWM") sees only what comes after."""
    Path("/proc/self/clear_refs").write_text("5")


def device_line(device) -> str:
    """The machine a benchmark ran on, for its header: `cpu, torch 2.14.1` or
    `cuda (NVIDIA H200), torch 2.11.0+cu130, CUDA 13.0`."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return f"{dev}, torch {torch.__version__}"
    return f"{dev} ({torch.cuda.get_device_name(dev)}), torch {torch.__version__}, CUDA {torch.version.cuda}"
