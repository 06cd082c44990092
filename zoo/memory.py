"""What autograd keeps for a backward pass: the memory measure that tests and benchmarks share."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def saved_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct storages autograd saves while fn() runs, leaving out those of `exclude` (e.g. frozen
    weights, which are alive anyway). Storages, not tensors: views of one buffer are counted once."""
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    return sum(n for ptr, n in seen.items() if ptr not in skip)
