"""Train-step time and training memory: PEFT LoRA vs RoSA (SDDMM) vs a dense masked reference, same process.

A mid-size Llama is built from a config (random weights; all-linear targets). Every method runs the same
micro-batches: forward + backward + AdamW step. Columns:
* step time: median over the timed steps (after warm-up steps), and the ratio to PEFT LoRA (CPU: process CPU
  time, robust to other load; CUDA: wall time);
* train-state memory: bytes of tensors saved for backward (unique storages) + gradients + AdamW state of the
  trainable parameters; on CUDA also the true peak (`torch.cuda.max_memory_allocated`). This is what a method
  adds on top of the frozen weights, so "LoRA + sparse values" is the RoSA target.

    python benchmarks/rosa_train_step.py            # hidden 512, 4 layers, seq 256, batch 2
    python benchmarks/rosa_train_step.py --quick    # hidden 256, 2 layers, seq 128, batch 2
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _memory import device_line  # noqa: E402 - the sibling helper of the benchmark scripts
from zoo.lm import build_causal_lm  # noqa: E402
from zoo.rosa.layer import RoSALinear, SupportPlan  # noqa: E402
from zoo.rosa.mask import apply_rosa, find_targets  # noqa: E402


class DenseMaskedLoRA(nn.Module):
    """The baseline column: y = x (W + M ⊙ D)ᵀ + b + (α/r) B A x with a dense trainable D whose gradient autograd
    masks (M ⊙ dOᵀX): what RoSA costs without the sparse kernels (dense D, dense out×in gradient per layer)."""

    def __init__(self, layer: RoSALinear):
        super().__init__()
        mask = torch.zeros(layer.out_features * layer.in_features)
        mask[layer.sparse_index.long()] = 1
        self.base_layer = layer.base_layer
        self.register_buffer("mask", mask.view(layer.out_features, layer.in_features).to(layer.base_layer.weight))
        # fp32 like RoSA's sparse values and the LoRA factors (adapters stay fp32 over a bf16 base)
        self.delta = nn.Parameter(torch.zeros_like(layer.base_layer.weight, dtype=layer.sparse_values.dtype))
        self.lora_A, self.lora_B = layer.lora_A, layer.lora_B
        self.scaling = layer.scaling
        self.lora_dropout = layer.lora_dropout

    def forward(self, x):
        w = self.base_layer.weight.detach() + (self.mask * self.delta).to(x.dtype)
        lora = self.lora_B(self.lora_A(self.lora_dropout(x.to(self.delta.dtype)))) * self.scaling
        return F.linear(x, w, self.base_layer.bias) + lora.to(x.dtype)


def build(method: str, base: nn.Module, r: int, density: float, seed: int = 0, sddmm: str = "auto") -> nn.Module:
    model = copy.deepcopy(base)
    torch.manual_seed(seed)
    if method == "peft-lora":
        from peft import LoraConfig, get_peft_model

        return get_peft_model(model, LoraConfig(r=r, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear"))
    kernel, _, plan = sddmm.partition(":")
    layers = apply_rosa(model, "all-linear", r=r, lora_alpha=16, lora_dropout=0.05, density=density, sddmm=kernel)
    g = torch.Generator().manual_seed(seed)
    for layer in layers.values():  # speed does not depend on which entries are chosen
        layer.set_mask(torch.randperm(layer.in_features * layer.out_features, generator=g)[: layer.nnz])
        if plan == "per-step":  # the layer before its SupportPlan cache: the CSR pattern / block ranges every step
            layer.support_plan = lambda layer=layer: SupportPlan(layer.sparse_index, *layer.weight_shape)
    if method == "dense-masked":
        for name, layer in layers.items():
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, DenseMaskedLoRA(layer))
    return model


def train_state_bytes(model: nn.Module, opt: torch.optim.Optimizer, batch: dict) -> int:
    """Saved-for-backward tensors (unique storages) + grads + optimizer state after one step."""
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(**batch).loss
    loss.backward()
    opt.step()
    frozen = {p.untyped_storage().data_ptr() for p in model.parameters() if not p.requires_grad}
    frozen |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    activations = sum(v for k, v in saved.items() if k not in frozen)  # frozen weights are not extra memory
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    state = sum(t.nbytes for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    opt.zero_grad(set_to_none=True)
    return activations + grads + state


def bench(models: list[nn.Module], batches: list[dict], warmup: int, steps: int, device: str):
    """Round-robin over the methods, one step each in turn, so load changes on a shared machine hit all alike.

    On CPU the clock is this process's CPU time (`time.process_time`): other jobs on a shared machine inflate
    wall time but not the work done here. On CUDA it is wall time after a synchronize."""
    clock = time.perf_counter if device == "cuda" else time.process_time
    opts = []
    for model in models:
        model.to(device).train()
        opts.append(torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4))
    times: list[list[float]] = [[] for _ in models]
    peaks = [0] * len(models)
    for i in range(warmup + steps):
        for j, (model, opt) in enumerate(zip(models, opts)):
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()  # every model's weights and AdamW state: not this step's
            t = clock()
            model(**batches[i % len(batches)]).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device == "cuda":
                torch.cuda.synchronize()
                peaks[j] = max(peaks[j], torch.cuda.max_memory_allocated() - before)
            if i >= warmup:
                times[j].append(clock() - t)
    out = []
    for j, (model, opt) in enumerate(zip(models, opts)):
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        out.append((statistics.median(times[j]), train_state_bytes(model, opt, batches[0]), peaks[j], n_train))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (hidden 256, 2 layers, seq 128)")
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--intermediate", type=int, default=None, help="MLP width (default: 8/3 hidden, rounded to 64)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="dtype of the frozen base (adapters stay fp32, as in RoSA's and PEFT's defaults)")
    ap.add_argument("--sddmm", default="auto", help="comma-separated SDDMM kernels of the RoSA rows (auto, csr, "
                    "blocked, gather): one row per kernel and density; KERNEL:per-step rebuilds the support's "
                    "plan (CSR row pointers, block ranges) every step instead of once per mask")
    ap.add_argument("--profile", action="store_true", help="also profile one step of each method (top operators)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    hidden = args.hidden or (256 if args.quick else 512)
    layers = args.layers or (2 if args.quick else 4)
    seq = args.seq or (128 if args.quick else 256)
    steps = args.steps or (3 if args.quick else 5)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    intermediate = args.intermediate or int(hidden * 8 / 3) // 64 * 64
    cfg = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": intermediate,
           "num_hidden_layers": layers, "num_attention_heads": max(1, hidden // 64),
           "num_key_value_heads": max(1, hidden // 64), "vocab_size": 8192, "max_position_embeddings": seq}
    torch.manual_seed(0)
    base = build_causal_lm(cfg, torch_dtype=args.dtype)
    n_target = sum(base.get_submodule(n).weight.numel() for n in find_targets(base, "all-linear"))
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(2):
        ids = torch.randint(0, cfg["vocab_size"], (args.batch, seq), generator=g).to(device)
        batches.append({"input_ids": ids, "labels": ids})
    kernels = args.sddmm.split(",")
    runs = [("PEFT LoRA r=16", "peft-lora", 0.0, "auto")]
    for d in (0.006, 0.018):
        runs += [(f"RoSA r=16, d={100 * d:.1f}%" + ("" if k == "auto" else f" ({k})"), "rosa", d, k) for k in kernels]
    runs.append(("dense masked r=16, d=1.8%", "dense-masked", 0.018, "auto"))
    models = [build(method, base, 16, density, sddmm=k) for _, method, density, k in runs]
    results = bench(models, batches, warmup=1, steps=steps, device=device)
    rows = [(label, *res, density) for (label, _, density, _), res in zip(runs, results)]
    t0, m0 = rows[0][1], rows[0][2]
    print(f"\nLlama hidden {hidden}, intermediate {intermediate}, {layers} layers, {args.dtype}, seq {seq}, "
          f"batch {args.batch}, {n_target / 1e6:.1f}M target "
          f"weights, device {device_line(device)}, torch threads {torch.get_num_threads()}, median of {steps} steps "
          f"({'wall' if device == 'cuda' else 'process CPU'} time)\n")
    head = ("| method | trainable params | step time (s) | vs LoRA | train-state memory (MiB) | vs LoRA "
            "| LoRA + sparse values budget (MiB) |")
    if device == "cuda":
        head += " peak CUDA above the step's start (MiB) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for label, t, mem, peak, n_train, density in rows:
        # the goal for RoSA: LoRA's memory plus its sparse values, their gradient and two Adam moments (fp32)
        budget = (m0 + int(density * n_target) * 4 * 4) / 2**20 if label.startswith("RoSA") else float("nan")
        line = (f"| {label} | {n_train / 1e6:.2f}M | {t:.3f} | {t / t0:.2f}x | {mem / 2**20:.1f} | "
                f"{mem / m0:.2f}x | {'' if budget != budget else f'{budget:.1f}'} |")
        if device == "cuda":
            line += f" {peak / 2**20:.0f} |"
        print(line)
    if args.profile:
        profile_step(models, runs, batches[0], device)


def profile_step(models: list[nn.Module], runs: list[tuple], batch: dict, device: str) -> None:
    """Where a training step's time goes: torch.profiler over one step of LoRA and of each RoSA row, top operators
    by device (CUDA) or CPU self time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    for (label, method, _, _), model in zip(runs, models):
        if method == "dense-masked":
            continue
        with profile(activities=activities) as prof:
            model(**batch).loss.backward()
            if device == "cuda":
                torch.cuda.synchronize()
        print(f"\n{label}: one forward + backward\n")
        print(prof.key_averages().table(sort_by=key, row_limit=12, max_name_column_width=60))
        model.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
