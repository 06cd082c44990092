"""Cost of one GFN-PG training iteration on the 256x256 hypergrid at batch 128: our TB vs torchgfn 2.4.1's TB,
and our RL-U and RL-B vs our TB, in one process.

    python benchmarks/gfnpg_iteration.py             # H = 256, d = 2, batch 128, MLP 4x256 (official defaults)
    python benchmarks/gfnpg_iteration.py --stop-bias -6   # long trajectories, as late in training
    python benchmarks/gfnpg_iteration.py --quick     # H = 16, batch 16, MLP 2x32: a few seconds

An iteration is what the official train.py does per step: sample the batch on-policy, evaluate the loss, one
optimiser step (RL: the critic, actor and log Z updates; RL-B also samples backward trajectories and updates pi_B
and V_B). Every method starts from the same initial networks and is timed round-robin (one iteration of each per
round) so that a shared machine's load drifts evenly; the table gives the median and the interquartile range over
rounds. On CPU the time is the process's CPU time (one thread), on CUDA wall time between synchronisations.
Memory: the bytes autograd saves for the backward pass of one iteration (distinct storages, sampling included), and
on CUDA the peak allocated memory. Goals: our TB within 1.2x of torchgfn's, RL-B within 2x of our TB.
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
from _memory import saved_bytes  # noqa: E402 - the sibling helper of the benchmark scripts


def ours(variant: str, env, pf_init, args, device):
    module = GFNPGModule(variant=variant, batch_size=args.batch, hidden_dim=args.hidden, n_hidden_layers=args.layers)
    module.set_env(env)
    module.pf.load_state_dict(pf_init.state_dict())
    module.to(device)
    opts = module.named_optimizers()
    lengths = []

    def step():
        lengths.append(float(module.train_iteration(opts)["train/mean_length"]))

    return step, lengths


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

    return step, lengths


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
    p.add_argument("--quick", action="store_true", help="H 16, batch 16, MLP 2x32, 5 rounds")
    args = p.parse_args()
    if args.quick:
        args.height, args.batch, args.hidden, args.layers, args.reps, args.warmup = 16, 16, 32, 2, 5, 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    env = Hypergrid(args.height, args.ndim, args.R0)
    pf_init = mlp(env.feature_dim, env.n_actions, args.hidden, args.layers)
    with torch.no_grad():
        pf_init[-1].bias[-1] += args.stop_bias
    methods = {}
    try:
        import gfn  # noqa: F401
    except ImportError:
        print("torchgfn is not installed: the peer's rows are left out (pip install --no-deps torchgfn==2.4.1)")
    else:
        env_args = (args.height, args.ndim, args.R0)
        methods["torchgfn TB-U (recompute log pi_F)"] = torchgfn_tb(env_args, pf_init, args, device, False)
        methods["torchgfn TB-U (saved log-probs)"] = torchgfn_tb(env_args, pf_init, args, device, True)
    for v in ("TB-U", "RL-U", "RL-B"):
        methods[f"ours {v}"] = ours(v, env, pf_init, args, device)

    clock = time.process_time if device.type == "cpu" else time.perf_counter
    times: dict[str, list[float]] = {k: [] for k in methods}
    memory = {k: saved_bytes(step) for k, (step, _) in methods.items()}  # also the first warm-up round
    for r in range(args.warmup - 1 + args.reps):
        for name, (step, _) in methods.items():
            torch.manual_seed(1000 + r)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = clock()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if r >= args.warmup - 1:
                times[name].append(clock() - t)
    peak = {}
    if device.type == "cuda":
        for name, (step, _) in methods.items():
            torch.cuda.reset_peak_memory_stats()
            step()
            peak[name] = torch.cuda.max_memory_allocated() / 2**20

    med = {k: statistics.median(v) for k, v in times.items()}
    base_peer = med.get("torchgfn TB-U (recompute log pi_F)", float("nan"))
    base_ours = med["ours TB-U"]
    clock_name = "CPU ms" if device.type == "cpu" else "wall ms"
    print(f"hypergrid {args.height}^{args.ndim}, batch {args.batch}, MLP {args.layers}x{args.hidden}, stop-logit bias "
          f"{args.stop_bias:g}, {args.reps} rounds, device {device}, torch {torch.__version__}\n")
    print(f"| method | {clock_name} / iteration (median) | IQR | vs torchgfn TB (recompute) | vs our TB | "
          f"mean trajectory length | autograd saved MB |" + (" CUDA peak MB |" if peak else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if peak else ""))
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0], ts[0], ts[0]]
        lengths = methods[name][1]
        print(f"| {name} | {1e3 * med[name]:.1f} | {1e3 * q[0]:.1f}-{1e3 * q[2]:.1f} | {med[name] / base_peer:.2f}x | "
              f"{med[name] / base_ours:.2f}x | {statistics.mean(lengths):.2f} | {memory[name] / 2**20:.2f} |"
              + (f" {peak[name]:.1f} |" if peak else ""))


if __name__ == "__main__":
    main()
