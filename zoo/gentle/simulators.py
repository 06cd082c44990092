"""Seeded simulators of the paper's synthetic conditionals (official `datasets/data_generation.py`, re-written).

* toy1: x = (x1, x2, x3) ~ U(0,10) x U(-5,5) x U(0,5);  y | x ~ N(5 + x1 + 2x2 + 0.5x3, σ²) with σ = 1 + 0.1x1 +
  0.2x2 + 0.05x3. The second parameter is a standard deviation (the official code passes it as numpy's `scale`).
* toy2: x = (x1, x2) ~ U(0,10) x U(-5,5);  y | x ~ Laplace(0.05 x1 x2, scale 5 sin²(x1 + x2) + 5).
* ECM, the esophageal-cancer Markov model: x = (Barrett risk ~ U(0, 0.1), aspirin effect ~ U(0,1), statin effect ~
  U(0,1), drug ∈ {1 aspirin, 2 statin}, initial age ∈ {55..80}); y = quality-adjusted life years (QALY) of one
  simulated patient, with the official control variate. Monthly transitions among 8 states (Table below), yearly
  natural mortality from a life table, evaluated for all patients at once.

ECM states: 0 Barrett's oesophagus, 1 cancer, 2 treated cancer (surgery), 3 cancer-free after treatment,
4 recurrent cancer, 5 death, 6 Barrett's on chemoprevention, 7 drug complication.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ------------------------------------------------------------------------------------------------ toy scenarios


def toy1_covariates(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 5, n)])


def toy1_params(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, standard deviation) of y | x for toy1."""
    x1, x2, x3 = np.asarray(x, dtype=np.float64).T
    return 5 + x1 + 2 * x2 + 0.5 * x3, 1 + 0.1 * x1 + 0.2 * x2 + 0.05 * x3


def toy1_sample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(len(x), n) draws of y | x."""
    loc, scale = toy1_params(x)
    return rng.normal(loc[:, None], scale[:, None], size=(len(loc), n))


def toy2_covariates(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n)])


def toy2_params(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(location, Laplace scale) of y | x for toy2."""
    x1, x2 = np.asarray(x, dtype=np.float64).T
    return 0.05 * x1 * x2, 5 * np.sin(x1 + x2) ** 2 + 5


def toy2_sample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    loc, scale = toy2_params(x)
    return rng.laplace(loc[:, None], scale[:, None], size=(len(loc), n))


# ------------------------------------------------------------------------------------------------ ECM

# Annual probability of natural death at ages 55..100 (index age - 55); certain at 100.
NATURAL_DEATH_55_100 = np.array([
    0.007779, 0.008415, 0.009074, 0.009727, 0.010371, 0.011034, 0.011738, 0.012489, 0.013335, 0.014319,
    0.015482, 0.016824, 0.01833, 0.0199, 0.021539, 0.023396, 0.025476, 0.027794, 0.03035, 0.033204,
    0.036345, 0.039788, 0.04372, 0.048335, 0.05365, 0.059565, 0.065848, 0.072956, 0.080741, 0.089357,
    0.09965, 0.110901, 0.123146, 0.136412, 0.15071, 0.166038, 0.182374, 0.199676, 0.21788, 0.236903,
    0.256636, 0.276954, 0.297713, 0.318755, 0.339914, 1.0])
NATURAL_DEATH = np.concatenate([np.zeros(54), NATURAL_DEATH_55_100])  # index = age - 1, ages 1..100
CANCER_MORTALITY = 0.29  # annual, recurrent cancer -> death
COMPLICATION = (0.0024, 0.001)  # annual drug complication: aspirin, statin
COMPLICATION_CURE = (0.9576, 0.998)  # complication -> back to Barrett's (else death)
ASPIRIN_DISABILITY = (0.058, 0.61)  # after an aspirin complication: probability, utility factor
UTILITY = np.array([1.0, 0.5, 0.5, 0.97, 0.5, 1.0, 1.0, 1.0])  # per month, by state
CV_COEF = 0.9
MIN_AGE, MAX_AGE = 55, 100
MAX_MONTHS = (MAX_AGE - MIN_AGE) * 12 + 6  # natural death is certain in the first half of age 100


@dataclass
class ECMUniforms:
    """The U(0,1) draws of one run: natural-death draws per age (R, 100), one per monthly transition (R, 546),
    and the aspirin-disability draw (R,). Passing them makes a run reproducible against a reference."""

    natural: np.ndarray
    transition: np.ndarray
    disability: np.ndarray

    @classmethod
    def draw(cls, n: int, rng: np.random.Generator) -> ECMUniforms:
        return cls(rng.random((n, 100)), rng.random((n, MAX_MONTHS)), rng.random(n))


def ecm_transition_matrices(risk, aspirin, statin, drug) -> np.ndarray:
    """(R, 8, 8) monthly transition matrices without the age-dependent row 1 (set per year)."""
    risk, drug = np.asarray(risk, np.float64), np.asarray(drug)
    n = risk.shape[0]
    p1 = 1 - (1 - risk) ** (1 / 12)  # Barrett's -> cancer, monthly
    p3 = 1 - (1 - CANCER_MORTALITY) ** (1 / 12)
    factor = np.where(drug == 1, 1 - np.asarray(aspirin, np.float64), 1 - np.asarray(statin, np.float64))
    comp = np.where(drug == 1, COMPLICATION[0], COMPLICATION[1])
    cure = np.where(drug == 1, COMPLICATION_CURE[0], COMPLICATION_CURE[1])
    on_drug = drug != 0
    # the monthly exits from "on drug" (cancer or complication) split in the ratio of their annual rates
    k = np.where(on_drug, risk * factor / comp, 0.0)
    p4 = np.where(on_drug, (1 - (1 - risk * factor - comp) ** (1 / 12)) / (1 + k), 0.0)
    p11, p5 = k * p4, np.where(on_drug, cure, 0.0)
    P = np.zeros((n, 8, 8))
    P[:, 0, 0], P[:, 0, 1] = 1 - p1, p1
    P[:, 2, 3:6] = (0.8, 0.16, 0.04)
    P[:, 3, 3] = 1.0
    P[:, 4, 4], P[:, 4, 5] = 1 - p3, p3
    P[:, 5, 5] = 1.0
    P[:, 6, 1], P[:, 6, 6], P[:, 6, 7] = p11, 1 - p11 - p4, p4
    P[:, 7, 0], P[:, 7, 5] = p5, 1 - p5
    return P


def expected_natural_lifetime(initial_age: np.ndarray) -> np.ndarray:
    """E[k + 1/2], k = years until natural death from `initial_age` (the control variate's mean)."""
    out = np.empty(len(initial_age))
    for age in np.unique(initial_age):
        q = NATURAL_DEATH[age - 1:]
        p = q * np.concatenate([[1.0], np.cumprod(1 - q[:-1])])
        out[initial_age == age] = (np.arange(len(q)) + 0.5) @ p
    return out


def esophageal_cancer_qaly(risk, aspirin, statin, drug, initial_age, rng: np.random.Generator | None = None,
                           uniforms: ECMUniforms | None = None, control_variate: bool = True) -> np.ndarray:
    """QALY of one simulated patient per row (all arrays of length R).

    Each year: six monthly transitions, then natural death (a draw against the life table; it ends the run in
    mid-year), then six more transitions, then a stop if dead of cancer. The patient's months are those before
    the month preceding death (official indexing), each weighted by its state's utility; after an aspirin
    complication a 5.8% draw scales the remaining months by 0.61. With the control variate, Y - 0.9 (C - E[C])
    where C is the natural lifetime: years lived if the natural death came first, else the natural-death year
    index - 0.5 (the official python simulator's convention, which we keep so that our data match its files).
    """
    risk = np.asarray(risk, np.float64)
    drug = np.asarray(drug).astype(np.int64)
    age0 = np.asarray(initial_age).astype(np.int64)
    n = risk.shape[0]
    if ((age0 < MIN_AGE) | (age0 > MAX_AGE)).any():
        raise ValueError(f"initial age must be in {MIN_AGE}..{MAX_AGE}")
    if not np.isin(drug, (0, 1, 2)).all():
        raise ValueError("drug index must be 0 (none), 1 (aspirin) or 2 (statin)")
    if uniforms is None:
        uniforms = ECMUniforms.draw(n, rng if rng is not None else np.random.default_rng())
    P = ecm_transition_matrices(risk, aspirin, statin, drug)
    rows = np.arange(n)
    history = np.zeros((n, MAX_MONTHS + 1), dtype=np.int8)
    history[:, 0] = np.where(drug != 0, 6, 0)
    state = history[:, 0].astype(np.int64)
    month = np.zeros(n, dtype=np.int64)  # transitions made so far (the official `i`)
    active = np.ones(n, dtype=bool)
    natural = np.zeros(n, dtype=bool)

    def transitions(count: int) -> None:
        nonlocal state
        for _ in range(count):
            r = rows[active]
            cum = np.cumsum(P[r, state[r]], axis=-1)
            u = uniforms.transition[r, month[r]]
            state[r] = np.argmax(cum >= u[:, None], axis=-1)  # first state whose cumulative mass reaches u
            month[r] += 1
            history[r, month[r]] = state[r]

    for year in range(MAX_AGE - MIN_AGE + 1):
        age = age0 + year
        p2 = -0.0023 * age + 1.1035  # surgery success falls with age
        P[:, 1, 2], P[:, 1, 3] = p2, 1 - p2
        transitions(6)
        idx = np.minimum(age, MAX_AGE) - 1  # rows past 100 are inactive; clipped only for indexing
        dies = active & (uniforms.natural[rows, idx] <= NATURAL_DEATH[idx])
        natural |= dies
        active &= ~dies
        transitions(6)
        active &= state != 5
        if not active.any():
            break

    dead = history == 5
    first_death = np.where(dead.any(axis=1), dead.argmax(axis=1), -1)
    last = np.where(state == 5, first_death - 1, month - 1)  # number of months counted
    months = np.arange(MAX_MONTHS + 1)[None, :]
    counted = months < last[:, None]
    life = UTILITY[history] * counted
    comp = (history == 7) & counted
    has_comp = comp.any(axis=1)
    first_comp = comp.argmax(axis=1)
    disabled = (drug == 1) & has_comp & (last > first_comp) & (uniforms.disability <= ASPIRIN_DISABILITY[0])
    scale = np.where(disabled[:, None] & (months > first_comp[:, None]), ASPIRIN_DISABILITY[1], 1.0)
    qaly = (life * scale).sum(axis=1) / 12
    if not control_variate:
        return qaly
    # the year of natural death counted from the initial age (certain by age 100, so argmax always hits)
    idx = np.minimum(age0[:, None] - 1 + np.arange(MAX_AGE)[None, :], MAX_AGE - 1)
    natural_year = (uniforms.natural[rows[:, None], idx] <= NATURAL_DEATH[idx]).argmax(axis=1)
    cv = np.where(natural, last / 12, natural_year - 0.5)
    return qaly - CV_COEF * (cv - expected_natural_lifetime(age0))


def ecm_covariates(n: int, rng: np.random.Generator) -> np.ndarray:
    """(2n, 5) rows (risk, aspirin effect, statin effect, drug, initial age): each draw once per drug, as the
    official generator writes them."""
    base = np.column_stack([rng.uniform(0, 0.1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n),
                            rng.integers(MIN_AGE, 81, n)])
    both = np.repeat(base, 2, axis=0)
    drug = np.tile([1, 2], n)
    return np.column_stack([both[:, :3], drug, both[:, 3]])


def ecm_sample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """(len(x), n) QALY draws at covariate rows (risk, aspirin, statin, drug, age)."""
    rows = np.repeat(np.asarray(x, np.float64), n, axis=0)
    y = esophageal_cancer_qaly(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4], rng=rng)
    return y.reshape(len(x), n)
