"""Memory measures the benchmarks share (imported by the scripts in this folder, run as `python benchmarks/x.py`)."""

from __future__ import annotations

import torch


def saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd keeps for the backward pass of fn()."""
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
