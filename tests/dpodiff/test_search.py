"""Search algorithms on synthetic objectives over small spaces, checked by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from zoo.dpodiff.optim import GPOUpdate, t_schedule
from zoo.dpodiff.relax import sample_choice
from zoo.dpodiff.search import Evaluator, epo, first_argmax_then_gumbel, gpo, mixed_init, random_search, rejection_sample
from zoo.errors import ZooError

SIZES = [3, 4, 2, 5]


def _objective(seed=0):
    table = np.random.default_rng(seed).random(SIZES)
    return (lambda c: float(table[tuple(c)])), table


def test_epo_operators_keep_every_slot_in_its_space_and_respect_the_budget():
    f, table = _objective()
    drawn = []

    def score(c):
        drawn.append(c)
        return f(c)

    ev = Evaluator(score, str)
    epo(ev, SIZES, np.random.default_rng(0), population=8, select=4, crossover=4, mutation=4, m_prob=0.5, budget=24)
    assert ev.evaluations == len(drawn) == len(set(drawn)) >= 24  # distinct; a round may overshoot (official)
    for c in drawn:
        assert len(c) == len(SIZES) and all(0 <= i < n for i, n in zip(c, SIZES))
    # EPO's best of ~24 of 120 candidates is at least as good as the population it started from
    ranked = ev.ranked()
    assert ranked[0]["loss"] == min(table[tuple(c)] for c in drawn)


def test_epo_generations_breed_from_the_elite_of_everything_scored_and_spend_the_budget_exactly():
    """The 120-evaluation sweep's setting (official population 20, top 10, 10 mutations at p = 0.1, 10 crossovers):
    a uniform population of 20, then 5 generations of 20 (10 mutants, 10 children). Each generation's parents are
    the 10 best of *all* candidates scored before it (the official `keep_top_k` keeps the elite across
    generations), every candidate is scored once (a candidate already seen costs nothing, as the official
    `vis_dict`), and the budget is spent exactly."""
    sizes = [40, 40, 40, 40]
    parts = [np.random.default_rng(10 + i).random(n) for i, n in enumerate(sizes)]
    scored = []

    def score(c):
        scored.append(c)
        return float(sum(p[i] for p, i in zip(parts, c)))

    ev = Evaluator(score, str, max_evaluations=120)
    epo(ev, sizes, np.random.default_rng(0), population=20, select=10, crossover=10, mutation=10, m_prob=0.1,
        budget=120)
    assert len(scored) == len(set(scored)) == ev.evaluations == 120
    loss = {c: r["loss"] for c, r in ev.records.items()}
    for g in range(1, 6):
        elite = sorted(scored[:20 * g], key=loss.get)[:10]
        mutants, children = scored[20 * g:20 * g + 10], scored[20 * g + 10:20 * g + 20]
        # a mutant is an elite with a few slots redrawn (p = 0.1 each: here at most 2 of 4)
        assert all(min(sum(a != b for a, b in zip(c, e)) for e in elite) <= 2 for c in mutants), g
        # a child takes every slot from one of two elite parents
        assert all(any(all(x in (a[i], b[i]) for i, x in enumerate(c)) for a in elite for b in elite)
                   for c in children), g
    assert min(loss[c] for c in scored[20:]) < min(loss[c] for c in scored[:20])  # evolution improved on the start


def test_epo_and_random_find_the_brute_force_optimum_of_a_small_space():
    # separable (a sum of per-slot terms), so mutation and crossover can assemble the optimum; random search with
    # budget = |space| enumerates everything
    parts = [np.random.default_rng(i).random(n) for i, n in enumerate(SIZES)]
    table = sum(np.meshgrid(*parts, indexing="ij"))
    f = lambda c: float(table[tuple(c)])
    best = min(itertools.product(*map(range, SIZES)), key=lambda c: table[c])
    for search in ("epo", "random"):
        ev = Evaluator(f, str)
        rng = np.random.default_rng(0)
        if search == "epo":
            epo(ev, SIZES, rng, population=20, select=10, crossover=10, mutation=10, m_prob=0.3, budget=100)
        else:
            random_search(ev, SIZES, rng, budget=120)
        assert tuple(ev.ranked()[0]["choice"]) == best, search


def test_rejection_sampling_never_returns_an_inadmissible_prompt():
    score = {c: float(np.random.default_rng(sum(c)).random()) for c in itertools.product(*map(range, SIZES))}
    ok = lambda c: score[c] >= 0.9
    rng = np.random.default_rng(0)
    draw = lambda: tuple(int(rng.integers(n)) for n in SIZES)
    out = rejection_sample(draw, 50, ok)
    assert out and all(ok(c) for c in out) and len(set(out)) == len(out)
    # through the evaluator: rejected candidates are never scored, EPO included
    f, _ = _objective()
    ev = Evaluator(f, str, admissible=ok)
    epo(ev, SIZES, np.random.default_rng(1), population=6, select=3, crossover=3, mutation=3, budget=9)
    random_search(ev, SIZES, np.random.default_rng(2), budget=5)
    assert ev.records and all(ok(tuple(r["choice"])) for r in ev.records.values())


def test_evaluator_cap_and_cache():
    calls = []
    ev = Evaluator(lambda c: calls.append(c) or 1.0, str, max_evaluations=3)
    random_search(ev, SIZES, np.random.default_rng(0), budget=10)
    assert ev.evaluations == 3 == len(calls)
    ev((0, 0, 0, 0)) if (0, 0, 0, 0) in ev.records else None
    assert len(calls) == 3


def test_gpo_moves_the_distribution_to_the_minimiser():
    """A relaxed loss that rewards option 2 of slot 0 and option 0 of slot 1: GPO's mode goes there."""
    alphas = [torch.tensor([1.0, 0.0, 0.0, 0.0], requires_grad=True), torch.tensor([1.0, 0.0, 0.0], requires_grad=True)]
    loss_at = lambda coeffs, t: -(coeffs[0][2] + coeffs[1][0])
    losses = gpo(alphas, loss_at, GPOUpdate(alphas), t_schedule(60, 0, 1))
    assert sample_choice(alphas, argmax=True) == (2, 0)
    assert all(0.0 <= a.min() and a.max() <= 3.0 for a in alphas)
    assert len(losses) == 60
    draw = first_argmax_then_gumbel(alphas, torch.Generator().manual_seed(0))
    assert draw() == (2, 0)  # Hybrid seeds EPO with the mode first
    init = mixed_init(draw, [4, 3], np.random.default_rng(0), explore=0.0)
    assert all(0 <= c[0] < 4 and 0 <= c[1] < 3 for c in (init() for _ in range(20)))


def test_bad_epo_settings_are_refused():
    with pytest.raises(ZooError, match="bad EPO settings"):
        epo(Evaluator(lambda c: 0.0, str), SIZES, np.random.default_rng(0), m_prob=1.5)


@pytest.mark.parametrize("kw, needle", [
    ({"algorithm": "gpo", "gpo_iters": 0}, "algorithm 'gpo' needs gpo_iters >= 1, got 0"),
    ({"algorithm": "hybrid", "gpo_iters": 0}, "algorithm 'hybrid' needs gpo_iters >= 1, got 0"),
    ({"algorithm": "gpo", "gpo_samples": 0}, "algorithm 'gpo' needs gpo_samples >= 1, got 0"),
    # the update's and EPO's own checks, made before the first prompt instead of at its first search
    ({"algorithm": "hybrid", "coeff_min": 4.0}, r"bad GPO update: .*clamp=\[4.0, 3.0\]"),
    ({"algorithm": "epo", "epo_m_prob": 1.5}, "bad EPO settings: .*m_prob=1.5"),
    ({"algorithm": "hybrid", "epo_select": 0}, "bad EPO settings: .*select=0"),
])
def test_gpo_without_iterations_or_samples_is_refused(kw, needle):
    # 0 iterations ran a search from the uniform initial coefficients and reported it as GPO's
    from zoo.dpodiff.optimize import DPOSettings

    with pytest.raises(ZooError, match=needle):
        DPOSettings(**kw).check()
    DPOSettings(algorithm="epo", gpo_iters=0).check()  # EPO alone does not run GPO
