"""Search algorithms over a space's discrete prompts (paper Sec. 5): GPO, EPO, Hybrid, and uniform random search.

A candidate is a tuple with one option index per free slot. `Evaluator` scores candidates with full generations
(the expensive part), caches them, counts evaluations and applies the attack's semantic constraint by rejection:
an inadmissible candidate is never scored and never returned.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import torch

from zoo.dpodiff.optim import GPOUpdate
from zoo.dpodiff.relax import gumbel_coefficients, sample_choice
from zoo.errors import ZooError

Choice = tuple[int, ...]


class BudgetExhausted(Exception):
    """The evaluation budget is spent; searches stop where they are."""


class Evaluator:
    """loss(choice) via `score` (lower is better), at most `max_evaluations` distinct scored candidates."""

    def __init__(self, score: Callable[[Choice], float], render: Callable[[Choice], str],
                 admissible: Optional[Callable[[Choice], bool]] = None, max_evaluations: Optional[int] = None):
        self.score, self.render, self._admissible = score, render, admissible
        self.max_evaluations = max_evaluations
        self.records: dict[Choice, dict] = {}
        self._ok: dict[Choice, bool] = {}

    @property
    def evaluations(self) -> int:
        return len(self.records)

    def admissible(self, choice: Choice) -> bool:
        if self._admissible is None:
            return True
        if choice not in self._ok:
            self._ok[choice] = bool(self._admissible(choice))
        return self._ok[choice]

    def seen(self, choice: Choice) -> bool:
        return choice in self.records

    def __call__(self, choice: Choice) -> Optional[float]:
        """The candidate's loss, or None if it breaks the constraint. Raises BudgetExhausted when a new candidate
        would exceed the budget."""
        choice = tuple(int(i) for i in choice)
        if choice in self.records:
            return self.records[choice]["loss"]
        if not self.admissible(choice):
            return None
        if self.max_evaluations is not None and self.evaluations >= self.max_evaluations:
            raise BudgetExhausted
        loss = float(self.score(choice))
        self.records[choice] = {"choice": list(choice), "prompt": self.render(choice), "loss": loss,
                                "order": self.evaluations}
        return loss

    def ranked(self) -> list[dict]:
        return sorted(self.records.values(), key=lambda r: r["loss"])


def rejection_sample(draw: Callable[[], Choice], n: int, admissible: Callable[[Choice], bool],
                     exclude: Callable[[Choice], bool] = lambda c: False, max_tries: Optional[int] = None) -> list[Choice]:
    """Up to n distinct candidates from `draw` that satisfy the constraint (official GPO `sample_and_eval`; the
    official loop has no cap and never ends on a small space, and stops in a stray `pdb.set_trace()` when a
    constraint is set; here `max_tries` = 10·n draws)."""
    out: list[Choice] = []
    tries = 10 * max(n, 1) if max_tries is None else max_tries
    while len(out) < n and tries > 0:
        tries -= 1
        c = tuple(int(i) for i in draw())
        if c in out or exclude(c) or not admissible(c):
            continue
        out.append(c)
    return out


# -- GPO -----------------------------------------------------------------------------------------------------------
def gpo(log_coeffs: Sequence[torch.Tensor], loss_at: Callable[[list[torch.Tensor], int], torch.Tensor],
        update: GPOUpdate, schedule: Sequence[int], tau: float = 1.0) -> list[float]:
    """Gradient-based prompt optimisation: per iteration, a Gumbel-Softmax sample of the coefficients, the
    Shortcut Text Gradient of the loss at t_i (`loss_at`), and the clip/RMSprop/clamp update. Returns the losses."""
    losses = []
    for t in schedule:
        with torch.enable_grad():
            loss = loss_at(gumbel_coefficients(log_coeffs, tau), int(t))
            loss.backward()
        update.step()
        losses.append(float(loss.detach()))
    return losses


def sample_and_evaluate(evaluator: Evaluator, log_coeffs: Sequence[torch.Tensor], n: int,
                        generator: Optional[torch.Generator] = None) -> None:
    """Score n distinct admissible prompts sampled from the learned distribution (Gumbel-max of α)."""
    if n <= 0:
        return
    for c in rejection_sample(lambda: sample_choice(log_coeffs, generator=generator), n, evaluator.admissible,
                              exclude=evaluator.seen):
        try:
            evaluator(c)
        except BudgetExhausted:
            return


# -- EPO -----------------------------------------------------------------------------------------------------------
def check_epo(population: int, select: int, crossover: int, mutation: int, m_prob: float, budget: int) -> None:
    if min(population, select, budget) < 1 or crossover < 0 or mutation < 0 or not 0 <= m_prob <= 1:
        raise ZooError(f"bad EPO settings: population={population}, select={select}, crossover={crossover}, "
                       f"mutation={mutation}, m_prob={m_prob}, budget={budget}")


def epo(evaluator: Evaluator, sizes: Sequence[int], rng: np.random.Generator, population: int = 20, select: int = 10,
        crossover: int = 10, mutation: int = 10, m_prob: float = 0.1, budget: int = 40,
        init: Optional[Callable[[], Choice]] = None) -> None:
    """Evolutionary prompt optimisation (official `EvolutionPromptOptimizer.search`).

    A population of `population` candidates from `init` (uniform over the space by default; Hybrid passes the
    GPO-learned distribution), then rounds of `mutation` mutants (each position redrawn with probability
    `m_prob`) and `crossover` children (each position from one of two parents) of the `select` best, until
    `budget` new candidates have been scored. As in the official code the budget is checked after the mutations
    of a round, so a round may overshoot it by its crossovers. Each operator tries 10× its count before giving
    up (a small space runs out of new candidates)."""
    check_epo(population, select, crossover, mutation, m_prob, budget)
    sizes = [int(s) for s in sizes]
    start = evaluator.evaluations
    uniform = lambda: tuple(int(rng.integers(s)) for s in sizes)
    init = init or uniform
    exceeded = False
    top: list[Choice] = []

    def fill(make: Callable[[], Choice], count: int, into: list[Choice]) -> None:
        nonlocal exceeded
        tries, goal = 10 * count, len(into) + count
        while len(into) < goal and tries > 0:
            tries -= 1
            c = tuple(int(i) for i in make())
            if evaluator.seen(c) or evaluator(c) is None:
                continue
            into.append(c)
        if len(into) < goal:  # ran out of tries: the space has no new candidates left for this operator
            exceeded = True

    def mutate() -> Choice:
        p = list(top[rng.integers(len(top))])
        for i, s in enumerate(sizes):
            if rng.random() < m_prob:
                p[i] = int(rng.integers(s))
        return tuple(p)

    def cross() -> Choice:
        a, b = top[rng.integers(len(top))], top[rng.integers(len(top))]
        return tuple(a[i] if rng.random() < 0.5 else b[i] for i in range(len(sizes)))

    def rank(cands: list[Choice]) -> None:
        nonlocal top
        pool = list(dict.fromkeys(top + cands))
        top = sorted(pool, key=lambda c: evaluator.records[c]["loss"])[:select]

    candidates: list[Choice] = []
    try:
        fill(init, population, candidates)
        while evaluator.evaluations - start < budget and not exceeded and candidates:
            rank(candidates)
            new: list[Choice] = []
            fill(mutate, mutation, new)
            if evaluator.evaluations - start >= budget:
                break
            fill(cross, crossover, new)
            candidates = new
            fill(init, max(population - len(candidates), 0), candidates)
    except BudgetExhausted:
        pass


def first_argmax_then_gumbel(log_coeffs: Sequence[torch.Tensor], generator: Optional[torch.Generator] = None):
    """Hybrid's EPO seeding: the mode of α first, then Gumbel-max samples (official `sample_from_learned`)."""
    state = {"first": True}

    def draw() -> Choice:
        c = sample_choice(log_coeffs, argmax=state["first"], generator=generator)
        state["first"] = False
        return c

    return draw


def mixed_init(learned: Callable[[], Choice], sizes: Sequence[int], rng: np.random.Generator, explore: float):
    """EPO's population sampler: uniform with probability `explore`, else the learned distribution."""
    def draw() -> Choice:
        if rng.random() < explore:
            return tuple(int(rng.integers(s)) for s in sizes)
        return learned()

    return draw


def random_search(evaluator: Evaluator, sizes: Sequence[int], rng: np.random.Generator, budget: int) -> None:
    """Baseline: distinct uniform samples from the same space, `budget` evaluations."""
    draw = lambda: tuple(int(rng.integers(s)) for s in sizes)
    for c in rejection_sample(draw, budget, evaluator.admissible, exclude=evaluator.seen):
        try:
            evaluator(c)
        except BudgetExhausted:
            return
