"""Shared oracle helpers and data locations for the GENTLE tests."""

import os
from pathlib import Path

import lightning as L
import pytest
import torch

from datamodules.conditional import ConditionalDataModule
from zoo.gentle.entropic import semi_dual


def tiny_data(**kw):
    """A tiny seeded toy1 datamodule (12 covariates x 3 draws) for the module tests."""
    base = {"dataset": "toy1", "n_train_covariates": 12, "n_train_samples": 3, "n_val_covariates": 2,
            "n_test_covariates": 3, "n_eval_draws": 30, "batch_size": 12}
    return ConditionalDataModule(**{**base, **kw})


def tabled_model(seed: int, **kw):
    """A small GENTLEModule (seeded before it is built) with the KDE and neighbour tables of `tiny_data`, that
    datamodule, and the covariates x_i with their MST neighbours x_j."""
    from zoo.gentle import GENTLEModule

    L.seed_everything(seed, verbose=False)
    model = GENTLEModule(**{"x_dim": 3, "n_u": 16, "n_eval_samples": 10, **kw})
    dm = tiny_data()
    dm.setup("fit")
    model.build_tables(*dm.train_groups())
    return model, dm, model.train_x, model.train_x[model.neighbour]


def trainer(**kw):
    """A quiet CPU Trainer: no logger, checkpoints, progress bar, summary or sanity check."""
    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, num_sanity_val_steps=0, **kw)


def fit_and_test(model, dm, **kw) -> dict:
    """Fit `model` on `dm` for one epoch with the quiet trainer, then its test metrics."""
    t = trainer(max_epochs=1, **kw)
    t.fit(model, datamodule=dm)
    return t.test(model, datamodule=dm, verbose=False)[0]


def maximise_semi_dual(a, b, eps, term=semi_dual):
    """Free potential vector v on the target points b, maximising the semi-dual by L-BFGS in float64; returns
    `term` (the semi-dual itself, or e.g. its debiased form) at the maximiser, and v."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    v = torch.zeros(len(b), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([v], lr=1, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -semi_dual(a, b, v, eps)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    return term(a, b, v.detach(), eps).item(), v.detach()


def pot_kl_value(a, b, eps):
    """POT's min <C,π> + ε KL(π | μ⊗ν) (``reg_type="KL"``) for uniform weights on 1-D samples a, b, with the
    envelope gradient (POT is imported here only: the tests that call this skip without it)."""
    import ot

    w_a = torch.full((len(a),), 1 / len(a), dtype=torch.float64)
    w_b = torch.full((len(b),), 1 / len(b), dtype=torch.float64)
    C = (a[:, None] - b[None, :]) ** 2
    return ot.solve(C, w_a, w_b, reg=eps, reg_type="KL", grad="envelope", max_iter=20000, tol=1e-12).value


REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"  # as tests/conftest.py


def official_file(env: str, folder: str, name: str, what: str) -> Path:
    """An official file: $env, then data/gentle/<folder> (git-ignored), then the shared data; skips where none
    has it."""
    for c in (os.environ.get(env), REPO_ROOT / "data" / "gentle" / folder, SHARED_DATA / "gentle" / folder):
        if c and (Path(c) / name).is_file():
            return Path(c) / name
    pytest.skip(f"{what} is not available (put {name} in data/gentle/{folder}, ../shared/data/gentle/{folder} or {env})")


@pytest.fixture
def official_cps_dir() -> Path:
    """The official LDW-CPS CSVs (datasets/cps/*.csv), where configs/gentle_cps.yaml reads them."""
    return official_file("GENTLE_CPS_DIR", "cps", "train.csv", "the official LDW-CPS CSVs (datasets/cps/*.csv)").parent


@pytest.fixture
def official_cps_relation() -> Path:
    """The official code's saved MST assignment on LDW-CPS (relation/cps_0.3.npy of the official repository)."""
    return official_file("GENTLE_RELATION_DIR", "relation", "cps_0.3.npy", "the official relation/cps_0.3.npy")


@pytest.fixture
def official_ecm_relation() -> Path:
    """The same on the official ECM training file (relation/cancer_0.3.npy)."""
    return official_file("GENTLE_RELATION_DIR", "relation", "cancer_0.3.npy", "the official relation/cancer_0.3.npy")


@pytest.fixture
def official_ecm_train() -> Path:
    """The official ECM training file (datasets/cancer/train.csv of the official repository)."""
    return official_file("GENTLE_ECM_DIR", "ecm", "train.csv", "the official datasets/cancer/train.csv")
