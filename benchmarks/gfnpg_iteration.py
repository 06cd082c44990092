"""Cost of one GFN-PG training iteration on the 256x256 hypergrid at batch 128: our TB vs torchgfn 2.4.1's TB,
and our RL-U and RL-B vs our TB, in one process.

    python benchmarks/gfnpg_iteration.py             # H = 256, d = 2, batch 128, MLP 4x256 (official defaults)
    python benchmarks/gfnpg_iteration.py --stop-bias -6 --no-peer  # long trajectories, as late in training
    python benchmarks/gfnpg_iteration.py --quick     # H = 16, batch 16, MLP 2x32: a few seconds
    python benchmarks/gfnpg_iteration.py --profile 20 --no-memory  # + where the time goes, per network and per op
    python benchmarks/gfnpg_iteration.py --ablations  # the alternatives (stacked networks, Adam kernels, ...)

An iteration is what the official train.py does per step: sample the batch on-policy, evaluate the loss, one
optimiser step (RL: the critic, actor and log Z updates; RL-B also samples backward trajectories and updates pi_B
and V_B). Every measured iteration starts from the same initial networks and the same warm optimiser state (Adam's
moments after one untimed iteration, as in training; restored in place, untimed, before it: see warm_restorer),
and round r seeds every method alike, so our methods sample the same forward trajectories: the rows
compare one iteration at the same policy. (Left to train, the methods' samplers drift apart, to longer trajectories
at different rates, and later rounds stop being comparable.) Methods are timed round-robin (one iteration of each
per round) so that a shared machine's load drifts evenly; the table gives the median and the interquartile range
over rounds. On CPU the time is the process's CPU time (one thread), on CUDA wall time between synchronisations.
Memory, three ways, each over one iteration from the same initial state:
* autograd saved: the bytes autograd keeps for the backward passes of the iteration (distinct storages);
* torch peak: the peak of the live CPU tensor memory during the iteration above what was live before it (the running
  sum of the allocations and frees `torch.profiler` records with profile_memory=True; temporaries an op frees itself
  are not seen); on CUDA, `torch.cuda.max_memory_allocated` above the memory allocated before the iteration;
* peak RSS (CPU): the process's resident-memory high-water mark during the iteration above its resident memory
  before it, in a forked child per method (measured alone), after one iteration there and a reset of the kernel's
  high-water mark (/proc/self/clear_refs); it includes the allocator's cached blocks, and it is 0 where the
  iteration fits in memory the allocator already holds.
Goals: our TB within 1.2x of torchgfn's, RL-B within 2x of our TB.
torchgfn is run two ways: recomputing log pi_F after sampling (what our TB and the official code do) and reusing the
log-probabilities saved while sampling (torchgfn's on-policy shortcut).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from zoo.gfnpg import GFNPGModule, Hypergrid
from zoo.gfnpg.sampling import mlp
from _memory import in_forked_child, reset_peak_rss, saved_bytes, status_kib  # noqa: E402 - the sibling helper of the benchmark scripts


def warm_restorer(modules, optimizers, step):
    """A reset() for the timed iterations. One untimed iteration first gives the optimisers their state (Adam's
    moments, as in every iteration of training after the first), then the modules are put back to their initial
    values. reset() restores that state in place: the modules' parameters by load_state_dict (a copy into the
    existing tensors) and the optimisers' state tensors by copy_. (Restoring the optimisers by load_state_dict, as
    the benchmark did up to commit fce8bf5, replaced their state with new tensors, or with none at the start, so
    every timed iteration paid for allocating and first touching the Adam state, a cost that training pays once and
    that grows with the number of parameters: RL-B's four networks have 1,053,448, 3.2x TB's
    329,476.)"""
    init = [copy.deepcopy(m.state_dict()) for m in modules]
    torch.manual_seed(999)
    step()
    for m, state in zip(modules, init):
        m.load_state_dict(state)
    saved_modules = [copy.deepcopy(m.state_dict()) for m in modules]
    saved_optims = [{p: {k: v.clone() for k, v in st.items()} for p, st in o.state.items()} for o in optimizers]

    def reset():
        for m, state in zip(modules, saved_modules):
            m.load_state_dict(state)
        for o, states in zip(optimizers, saved_optims):
            for p, st in states.items():
                for k, v in st.items():
                    o.state[p][k].copy_(v)

    return reset


def ours(variant: str, env, pf_init, args, device):
    module = GFNPGModule(variant=variant, batch_size=args.batch, hidden_dim=args.hidden, n_hidden_layers=args.layers)
    module.set_env(env)
    module.pf.load_state_dict(pf_init.state_dict())
    module.to(device)
    opts = module.named_optimizers()
    lengths = []

    def step():
        lengths.append(float(module.train_iteration(opts)["train/mean_length"]))

    reset = warm_restorer([module], list(opts.values()), step)
    lengths.clear()
    return reset, step, lengths


def torchgfn_tb(env_args, pf_init, args, device, saved_logprobs: bool):
    from gfn.estimators import DiscretePolicyEstimator
    from gfn.gflownet import TBGFlowNet
    from gfn.gym import HyperGrid
    from gfn.preprocessors import KHotPreprocessor
    from gfn.samplers import Sampler

    class AsFloat(torch.nn.Module):  # torchgfn's K-hot is integer; the same one-hot as floats for our MLP
        def __init__(self, net):
            super().__init__()
            self.net, self.input_dim = net, net[0].in_features

        def forward(self, x):
            return self.net(x.float())

    height, ndim, R0 = env_args
    env = HyperGrid(ndim=ndim, height=height, reward_fn_kwargs={"R0": R0, "R1": 0.5, "R2": 2.0}, device=device,
                    validate_modes=False)
    pre = KHotPreprocessor(height, ndim)
    pf = DiscretePolicyEstimator(AsFloat(copy.deepcopy(pf_init)), ndim + 1, preprocessor=pre).to(device)
    pb = DiscretePolicyEstimator.uniform(ndim + 1, preprocessor=pre).to(device)
    gfn = TBGFlowNet(pf, pb, init_logZ=0.0, log_reward_clip_min=-12.0).to(device)
    opt = torch.optim.Adam([{"params": list(pf.parameters()), "lr": 1e-3}, {"params": [gfn.logZ], "lr": 0.1}])
    sampler = Sampler(estimator=pf)
    lengths = []

    def step():
        traj = sampler.sample_trajectories(env, n=args.batch, save_logprobs=saved_logprobs)
        loss = gfn.loss(env, traj, recalculate_all_logprobs=not saved_logprobs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        lengths.append(float(traj.terminating_idx.float().mean()))

    reset = warm_restorer([gfn], [opt], step)
    lengths.clear()
    return reset, step, lengths


def torch_peak_mib(step) -> float:
    """Peak live CPU tensor memory during step(), above what was live before (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    running = peak = 0
    for _, nbytes in sorted((e.time_range.start, e.self_cpu_memory_usage) for e in prof.events()):
        running += nbytes
        peak = max(peak, running)
    return peak / 2**20


def _rss_child(reset, step, queue) -> None:
    reset()
    step()  # the first iteration in this process grows the allocator's pools; it is not counted
    reset()
    reset_peak_rss()
    before = status_kib("VmRSS")
    step()
    queue.put((status_kib("VmHWM") - before) / 1024)


def rss_peak_mib(reset, step) -> float:
    """Peak RSS of one iteration above the RSS before it, in a forked child (Linux; see the docstring)."""
    return in_forked_child(_rss_child, reset, step, timeout=1800)


def _span_table(title: str, spans: dict, totals: dict) -> None:
    names = list(spans)
    order = sorted({k for v in spans.values() for k in v}, key=lambda k: -max(v.get(k, 0.0) for v in spans.values()))
    print(f"\n{title}\n")
    print("| span | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for k in order:
        cells = [f"{spans[n][k]:.2f} ({100 * spans[n][k] / totals[n]:.0f}%)" if k in spans[n] else "-" for n in names]
        print(f"| {k} | " + " | ".join(cells) + " |")
    rest = [totals[n] - sum(spans[n].values()) for n in names]
    print("| (the rest: costs, GAE, losses, metrics) | " +
          " | ".join(f"{r:.2f} ({100 * r / totals[n]:.0f}%)" for r, n in zip(rest, names)) + " |")
    print("| **iteration** | " + " | ".join(f"{totals[n]:.2f}" for n in names) + " |")


def cpu_spans(methods: dict, reps: int) -> None:
    """Per network: the process CPU time of each of the module's `gfnpg/...` spans (one per network pass, autograd
    backward and Adam step), median over `reps` iterations of each method (restored and seeded as in the timing
    rounds; the methods interleaved per round). The module's record_function is swapped for a CPU-time span for
    this call only: CPU time does not count the moments the process is descheduled, as the profiler's wall clock
    does on a shared machine."""
    import contextlib

    import zoo.gfnpg.module as gfnpg_module

    current: dict[str, float] = {}

    @contextlib.contextmanager
    def cpu_span(name):
        t = time.process_time()
        try:
            yield
        finally:
            current[name] = current.get(name, 0.0) + time.process_time() - t

    per: dict[str, dict[str, list[float]]] = {n: {} for n in methods}
    totals: dict[str, list[float]] = {n: [] for n in methods}
    original = gfnpg_module.record_function
    gfnpg_module.record_function = cpu_span
    try:
        for r in range(reps + 1):
            for name, (reset, step, _) in methods.items():
                reset()
                torch.manual_seed(1000 + r)
                current.clear()
                t = time.process_time()
                step()
                if r:  # round 0 is a warm-up
                    totals[name].append(time.process_time() - t)
                    for k, v in current.items():
                        per[name].setdefault(k, []).append(v)
    finally:
        gfnpg_module.record_function = original
    spans = {n: {k: 1e3 * statistics.median(v) for k, v in per[n].items()} for n in methods}
    _span_table(f"CPU time per span, median of {reps} iterations: ms (share of the median iteration)", spans,
                {n: 1e3 * statistics.median(v) for n, v in totals.items()})


def profile_ops(methods: dict, reps: int, top: int) -> None:
    """Per op: `reps` iterations of each method under torch.profiler, the ops with the most self time (mean per
    iteration). The profiler times by the wall clock, with its own per-op overhead, so on a shared machine its
    milliseconds are larger than the CPU times and noisier; the ranking and the call counts are what it is for."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for name, (reset, step, _) in methods.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for r in range(reps):
                reset()
                torch.manual_seed(1000 + r)
                with record_function("iteration"):
                    step()
        events = prof.key_averages()
        total = sum(e.cpu_time_total for e in events if e.key == "iteration") / reps / 1e3
        ops = sorted(((e.key, e.self_cpu_time_total / reps / 1e3, e.count / reps) for e in events
                      if e.key != "iteration" and not e.key.startswith("gfnpg/")), key=lambda o: -o[1])
        print(f"\n{name}: torch.profiler, the {top} ops with the most self time (mean over {reps} iterations of "
              f"{total:.1f} profiled ms)\n")
        print("| op | self ms | share | calls |\n|---|---|---|---|")
        for key, ms, calls in ops[:top]:
            print(f"| {key} | {ms:.2f} | {100 * ms / total:.0f}% | {calls:.0f} |")
        print(f"| (all ops: {sum(c for _, _, c in ops):.0f} calls) | {sum(m for _, m, _ in ops):.2f} | | |")


def _median_ms(fns: dict, reps: int) -> dict[str, float]:
    """Median process CPU time of each fn() over `reps` interleaved rounds (after one untimed round); fn(r) gets the
    round, to seed by."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps + 1):
        for k, f in fns.items():
            t = time.process_time()
            f(r)
            if r:
                times[k].append(time.process_time() - t)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def ablations(env, args) -> None:
    """The alternatives to how an RL-B iteration is computed, each timed against what the module does (CPU ms,
    median of --reps interleaved rounds):
    1. two networks of pi's shape (MLP 4x256) over the same states (a batch's forward parents), forward + backward:
       two calls (used) vs one vmap over their stacked parameters (torch.func.stack_module_state + functional_call,
       a batched matmul per layer); both on the dense K-hot features, so that only the stacking differs;
    2. Adam over RL-B's five parameter groups (pi_F, V, log Z, pi_B, V_B), one step: fused (used) vs foreach vs the
       per-tensor loop;
    3. pi_B's backward trajectories and the gradient of their log-probabilities: the no-grad sampler, then one
       batched pass with gradients (used), vs a sampler that keeps each step's graph (the pass is not repeated)."""
    from torch.func import functional_call, stack_module_state

    from zoo.gfnpg.sampling import (backward_log_probs, policy_logits, sample_actions, sample_backward,
                                    sample_forward)

    torch.manual_seed(0)
    mk = lambda out, layers: mlp(env.feature_dim, out, args.hidden, layers)  # noqa: E731
    pf, pb, value, value_b = mk(env.n_actions, args.layers), mk(env.n_actions - 1, args.layers), mk(1, 2), mk(1, 2)
    traj = sample_forward(env, pf, args.batch)
    parents = traj.states[:-1][traj.valid]
    feats = env.features(parents)
    twin = mlp(env.feature_dim, env.n_actions, args.hidden, args.layers)
    params, buffers = stack_module_state([pf, twin])
    shell = copy.deepcopy(pf).to("meta")
    stacked = torch.vmap(lambda p, b, x: functional_call(shell, (p, b), (x,)), in_dims=(0, 0, None))

    def two_calls(r):
        (pf(feats).sum() + twin(feats).sum()).backward()

    def one_vmap(r):
        stacked(params, buffers, feats).sum().backward()

    res = _median_ms({"two calls (used)": two_calls, "one vmap over stacked parameters": one_vmap}, args.reps)
    print(f"\nablations, {args.reps} rounds, CPU ms (median)\n\n| alternative | CPU ms |\n|---|---|")
    print(f"| **1. two MLPs {args.layers}x{args.hidden}, {len(parents)} states, forward + backward** | |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} |")

    log_z = torch.nn.Parameter(torch.zeros(()))
    nets = [pf, value, pb, value_b]
    for p in [log_z] + [p for n in nets for p in n.parameters()]:
        p.grad = torch.randn_like(p)
    groups = lambda: [{"params": list(n.parameters())} for n in nets] + [{"params": [log_z], "lr": 0.1}]  # noqa: E731
    adams = {"fused (used)": torch.optim.Adam(groups(), lr=1e-3, fused=True),
             "foreach": torch.optim.Adam(groups(), lr=1e-3, foreach=True),
             "per-tensor loop": torch.optim.Adam(groups(), lr=1e-3, foreach=False)}
    n_params = sum(p.numel() for n in nets for p in n.parameters()) + 1
    res = _median_ms({k: (lambda r, o=o: o.step()) for k, o in adams.items()}, args.reps)
    print(f"| **2. one Adam step, {n_params:,} parameters in 5 groups** | |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} |")

    x = traj.terminal_states

    def batched(r):
        torch.manual_seed(r)
        pb.zero_grad(set_to_none=True)
        backward_log_probs(env, pb, sample_backward(env, pb, x)).sum().backward()

    def keep_graph(r):
        torch.manual_seed(r)
        pb.zero_grad(set_to_none=True)
        lengths = env.level(x)
        s, picked = x[torch.argsort(lengths, descending=True, stable=True)], []
        for m in (lengths[None, :] > torch.arange(int(lengths.max()))[:, None]).sum(1).tolist():
            s = s[:m]
            logits = policy_logits(env, pb, s, backward=True)
            a = sample_actions(logits.detach())
            picked.append(logits.log_softmax(-1).gather(1, a[:, None]))
            s = env.backward_step(s, a)
        torch.cat(picked).sum().backward()

    res = _median_ms({"no-grad sampler + one batched pass with grad (used)": batched,
                      "sampler keeps its per-step graph": keep_graph}, args.reps)
    print(f"| **3. pi_B: backward trajectories from {len(x)} x and their gradient** | |")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--height", type=int, default=256)
    p.add_argument("--ndim", type=int, default=2)
    p.add_argument("--R0", type=float, default=0.01)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--reps", type=int, default=30, help="timed rounds (after --warmup rounds)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--stop-bias", type=float, default=0.0,
                   help="added to the initial stop logit: e.g. -6 makes trajectories long, like a trained sampler's")
    p.add_argument("--no-peer", action="store_true", help="leave torchgfn out (its sampler is slow on long trajectories)")
    p.add_argument("--quick", action="store_true", help="H 16, batch 16, MLP 2x32, 5 rounds")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timing table: CPU time per network span over N iterations of each of our methods, "
                   "and torch.profiler's top ops over N/3")
    p.add_argument("--no-memory", action="store_true", help="skip the memory table")
    p.add_argument("--ablations", action="store_true",
                   help="only time the alternatives (stacked networks, Adam kernels, a sampler keeping its graph)")
    args = p.parse_args()
    if args.quick:
        args.height, args.batch, args.hidden, args.layers, args.reps, args.warmup = 16, 16, 32, 2, 5, 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    env = Hypergrid(args.height, args.ndim, args.R0)
    if args.ablations:
        ablations(env, args)
        return
    pf_init = mlp(env.feature_dim, env.n_actions, args.hidden, args.layers)
    with torch.no_grad():
        pf_init[-1].bias[-1] += args.stop_bias
    methods = {}
    try:
        if args.no_peer:
            raise ImportError
        import gfn  # noqa: F401
    except ImportError:
        print("torchgfn's rows are left out" + ("" if args.no_peer else
              " (it is not installed: pip install --no-deps torchgfn==2.4.1)"))
    else:
        env_args = (args.height, args.ndim, args.R0)
        methods["torchgfn TB-U (recompute log pi_F)"] = torchgfn_tb(env_args, pf_init, args, device, False)
        methods["torchgfn TB-U (saved log-probs)"] = torchgfn_tb(env_args, pf_init, args, device, True)
    for v in ("TB-U", "RL-U", "RL-B"):
        methods[f"ours {v}"] = ours(v, env, pf_init, args, device)

    clock = time.process_time if device.type == "cpu" else time.perf_counter
    times: dict[str, list[float]] = {k: [] for k in methods}
    for r in range(args.warmup + args.reps):
        for name, (reset, step, _) in methods.items():
            reset()
            torch.manual_seed(1000 + r)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = clock()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if r >= args.warmup:
                times[name].append(clock() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    base_peer = med.get("torchgfn TB-U (recompute log pi_F)", float("nan"))
    base_ours = med["ours TB-U"]
    clock_name = "CPU ms" if device.type == "cpu" else "wall ms"
    print(f"hypergrid {args.height}^{args.ndim}, batch {args.batch}, MLP {args.layers}x{args.hidden}, stop-logit bias "
          f"{args.stop_bias:g}, {args.reps} rounds after {args.warmup} warm-up, device {device}, torch "
          f"{torch.__version__}\n")
    print(f"| method | {clock_name} / iteration (median) | IQR | vs torchgfn TB (recompute) | vs our TB | "
          "mean trajectory length |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0], ts[0], ts[0]]
        print(f"| {name} | {1e3 * med[name]:.1f} | {1e3 * q[0]:.1f}-{1e3 * q[2]:.1f} | {med[name] / base_peer:.2f}x | "
              f"{med[name] / base_ours:.2f}x | {statistics.mean(methods[name][2]):.2f} |", flush=True)

    if args.profile:
        ours_only = {k: v for k, v in methods.items() if k.startswith("ours")}
        cpu_spans(ours_only, args.profile)
        profile_ops(ours_only, max(1, args.profile // 3), 12)
    if args.no_memory:
        return
    # memory, one row at a time (a long run that is stopped keeps the rows it has)
    peak_name = "torch peak MB" if device.type == "cpu" else "CUDA peak MB"
    print(f"\n| method | autograd saved MB | {peak_name} |" + (" peak RSS MB |" if device.type == "cpu" else ""))
    print("|---|---|---|" + ("---|" if device.type == "cpu" else ""), flush=True)
    for name, (reset, step, _) in methods.items():
        reset()
        torch.manual_seed(1)
        saved = saved_bytes(step) / 2**20
        reset()
        torch.manual_seed(1)
        if device.type == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            print(f"| {name} | {saved:.2f} | {(torch.cuda.max_memory_allocated() - base) / 2**20:.1f} |", flush=True)
        else:
            peak = torch_peak_mib(step)
            torch.manual_seed(1)
            print(f"| {name} | {saved:.2f} | {peak:.1f} | {rss_peak_mib(reset, step):.1f} |", flush=True)

if __name__ == "__main__":
    main()
