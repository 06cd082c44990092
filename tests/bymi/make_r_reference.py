"""Writes tests/bymi/data/r_reference.json: outputs of the official R functions (mywang99/ByMI, ByMI_function.R and
the geom package) on small seeded inputs, the oracle of tests/bymi/test_identify.py.

Needs R (with RcppArmadillo), rpy2 and a local copy of the official repository (never vendored):
    python tests/bymi/make_r_reference.py /path/to/ByMI
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(repo: str) -> None:
    import rpy2.robjects as ro
    from rpy2.robjects import numpy2ri
    from rpy2.robjects.conversion import localconverter

    repo = Path(repo)
    ro.r(f'if (!require(geom, quietly = TRUE)) install.packages("{repo / "geom_1.0.tar.gz"}", repos = NULL, '
         f'type = "source"); suppressMessages(library(geom)); source("{repo / "ByMI_function.R"}")')
    cv = ro.default_converter + numpy2ri.converter
    cases = []
    for seed, (M, d, nh, k, shift) in enumerate([(60, 8, 50, 11, 0.5), (80, 6, 40, 12, 0.35), (50, 5, 30, 0, 0.0)]):
        rng = np.random.default_rng(seed)
        g1, g2 = (rng.standard_normal((M, d)) / np.sqrt(nh) for _ in range(2))
        g1[1: k + 1] += shift
        g2[1: k + 1] += shift
        S0 = np.cov(rng.standard_normal((2 * nh, d)).T, bias=True)
        pv = rng.random(40) ** 3
        with localconverter(cv):
            for name, value in dict(g1=g1, g2=g2, S0=S0, pv=pv).items():
                ro.globalenv[name] = value
        ro.globalenv["bs"], ro.globalenv["n"] = nh, 2 * nh
        ro.r('''
nb <- nrow(g1)
g1m <- apply(g1, 2, mean); g1s <- t(t(g1) - g1m) * sqrt(bs)
invisible(capture.output(f <- filtering_refine(g1s, rep(1/nb, nb), ep = 1.2*0.1, Sig_0 = S0, iter_pow = 5000, tol_pow = 1e-8)))
invisible(capture.output(ft <- filtering_refine(g1s, rep(1/nb, nb), ep = 1.2*0.1, Sig_0 = S0, iter_pow = 100000, tol_pow = 1e-15)))
mu_filter <- f[[1]] / sqrt(bs) + g1m; mu_filter_tight <- ft[[1]] / sqrt(bs) + g1m; w_filter_tight <- ft[[2]]
mu_geom <- geom_solver_C(X = g1s, tol = 1e-10, is_echo = F)[[1]] / sqrt(bs) + g1m
grad <- (g1 + g2) / 2
Om <- solve(diag(apply(grad, 2, mad)))
split <- matrix(0, 2*nb, ncol(g1)); for (j in 1:nb) { split[2*j-1,] <- g1[j,]; split[2*j,] <- g2[j,] }
sink("/dev/null"); pdf(NULL)
flag_filter <- ByMI(id = 2, mu_hat = mu_filter, Xbar2 = split, Omega = Om, alpha = 0.1, is_scale = T)
flag_geom <- ByMI(id = 2, mu_hat = mu_geom, Xbar2 = split, Omega = Om, alpha = 0.1, is_scale = T)
v1 <- eigen(t(g1s) %*% g1s / nb)$vectors[, 1]
Z <- g1 %*% v1
mu_plus <- as.numeric(est_dim_one(w0 = rep(1/nb, nb), Z = Z, ep = 1.2*0.1, loop_max = 2000)[[1]])
flag_plus <- ByMI(id = 2, mu_hat = mu_plus, Xbar2 = split %*% v1, Omega = 1, alpha = 0.1, is_scale = T)
dev.off(); sink()
flag_filter <- c(flag_filter, integer(0)); flag_geom <- c(flag_geom, integer(0)); flag_plus <- c(flag_plus, integer(0))
gs <- t(t(grad) - apply(grad, 2, mean)) * sqrt(n)
krum <- Krum(gs[-1, ], f = ceiling(nb*1.2*0.1))[[1]] + 1
faba <- FABA(gs[-1, ], alpha = 1.2*0.1)[[1]] + 1
bh <- which(bh.func(pv, 0.1)$de == 1)
''')
        with localconverter(cv):
            get = lambda k: np.asarray(ro.globalenv[k]).astype(float).ravel().tolist()  # noqa: E731
            out = {k: get(k) for k in ("mu_filter", "mu_filter_tight", "w_filter_tight", "mu_geom", "flag_filter",
                                       "flag_geom", "flag_plus", "krum", "faba", "bh")}
            out["mu_plus_abs"] = abs(get("mu_plus")[0])  # the eigenvector's sign is arbitrary
        cases.append({"inputs": {"g1": g1.tolist(), "g2": g2.tolist(), "sigma0": S0.tolist(), "n_half": nh,
                                 "pvalues": pv.tolist()}, "r": out})
    path = Path(__file__).parent / "data" / "r_reference.json"
    path.write_text(json.dumps({"source": "github.com/mywang99/ByMI @ 1112af8, R " + ro.r("R.version.string")[0],
                                "cases": cases}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
