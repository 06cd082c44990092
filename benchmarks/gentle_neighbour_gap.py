"""How far apart the true conditionals of MST neighbours are on toy1, in conditional standard deviations, at a given
number of covariates: the bias that GENTLE's OT term takes on when it pulls every covariate's conditional towards its
neighbour's, beside the noise it can remove (the mean of k draws misses mu by sqrt(2/pi)/sqrt(k) SDs on average).
No training: toy1's true N(mu(x), sigma(x)^2) at the covariates the simulator draws, the neighbours of
`zoo.gentle.mst_neighbours` on the standardised covariates (as GENTLEModule pairs them).

    python benchmarks/gentle_neighbour_gap.py                       # 200, 500, 1,000 covariates, seeds 0-9
    python benchmarks/gentle_neighbour_gap.py --quick               # 50 and 100 covariates, 2 seeds (seconds)
"""

from __future__ import annotations

import argparse

import numpy as np

from zoo.gentle import mst_neighbours
from zoo.gentle.simulators import toy1_covariates, toy1_params


def neighbour_gaps(n_covariates: int, seed: int) -> dict[str, float]:
    """Means over covariates i of |mu_i - mu_j| / sigma_i and W2(N_i, N_j) / sigma_i (1-D Gaussians:
    W2^2 = (mu_i - mu_j)^2 + (sigma_i - sigma_j)^2), with j the MST neighbour, and of the standardised distance."""
    x = toy1_covariates(n_covariates, np.random.default_rng(seed))
    xs = (x - x.mean(0)) / x.std(0)
    j = mst_neighbours(xs)
    mu, sigma = toy1_params(x)
    return {"location": float(np.mean(np.abs(mu - mu[j]) / sigma)),
            "w2": float(np.mean(np.hypot(mu - mu[j], sigma - sigma[j]) / sigma)),
            "distance": float(np.mean(np.linalg.norm(xs - xs[j], axis=1)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--covariates", type=int, nargs="+", default=[200, 500, 1000])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes, seeds = ([50, 100], 2) if args.quick else (args.covariates, args.seeds)
    miss = ", ".join(f"k = {k}: {np.sqrt(2 / np.pi / k):.2f}" for k in (1, 2, 3, 5))
    print(f"toy1, MST neighbours on the standardised covariates, mean over seeds 0-{seeds - 1}. For reference, the "
          f"mean of k draws misses mu by, on average (SDs): {miss}\n")
    print("| covariates | abs(mu_i - mu_j) / sigma_i | W2(i, j) / sigma_i | standardised distance |")
    print("|---|---|---|---|")
    for n in sizes:
        rows = [neighbour_gaps(n, s) for s in range(seeds)]
        mean = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
        print(f"| {n:,} | {mean['location']:.3f} | {mean['w2']:.3f} | {mean['distance']:.3f} |")


if __name__ == "__main__":
    main()
