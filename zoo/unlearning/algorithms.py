"""Unlearning updates in plain torch: gradient ascent, selective gradient ascent, task arithmetic.

* GA (Jang et al., 2023): minimise -NLL on the forget set D_f (one step = minus one fine-tuning step);
  stop when mean MA and mean EL_n of D_f fall below their unseen-data levels.
* SGA (Barbulescu & Triantafillou, 2024): score every x in D_f with g(x) (= MA); ascend only on the x with
  g(x) above the unseen threshold; repeat until no such outlier is left.
* TA (task arithmetic, Ilharco et al. 2023, used for unlearning by the paper): theta_u = theta_0 - lambda *
  (theta_ft - theta_0), theta_ft = theta_0 fine-tuned on D_f.
* TAU: the selective version of TA: the task vector is fine-tuned on the outliers of D_f only, and the
  subtraction is repeated on the new outliers (see cards/unlearning.md for this reading of the paper).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from zoo.unlearning.metrics import token_stats


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            select: torch.Tensor | Callable[[torch.Tensor], torch.Tensor] | None = None):
    """Token-mean NLL over the selected sequences, and the per-sequence MA of the same forward pass.

    `select`: a boolean mask, or a function of the per-sequence MA returning one (SGA selects by the MA of this
    very pass, so the token statistics are computed once). Returns (loss or None when nothing is selected, ma,
    number selected)."""
    ma, nll_sum, ntok = token_stats(logits, input_ids, attention_mask)
    if callable(select):
        select = select(ma)
    if select is None:
        select = torch.ones_like(ma, dtype=torch.bool)
    k = int(select.sum())
    if k == 0:
        return None, ma, 0
    loss = nll_sum[select].sum() / ntok[select].sum().clamp(min=1)
    return loss, ma, k


def gradient_ascent_loss(logits, input_ids, attention_mask, select=None):
    """-NLL: descending on it is ascending the LM loss (GA; SGA when `select` masks the outliers)."""
    loss, ma, k = lm_loss(logits, input_ids, attention_mask, select)
    return (None if loss is None else -loss), ma, k


def select_outliers(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Sequences still memorized above the unseen threshold (strictly above, as c(D_f) counts them)."""
    return scores > threshold


def snapshot(params: Iterable[tuple[str, torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in params}


def task_vector(finetuned: dict[str, torch.Tensor], base: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """tau = theta_ft - theta_0."""
    return {n: finetuned[n] - base[n] for n in base}


def task_arithmetic(base: dict[str, torch.Tensor], tau: dict[str, torch.Tensor], lam: float,
                    out: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """theta_u = theta_0 - lambda * tau (negating the forget-set task); written into `out` (e.g. the model's
    parameters, under no_grad) when given, so no second copy of the model is made."""
    if out is None:
        return {n: base[n] - lam * tau[n] for n in base}
    for n in base:
        torch.sub(base[n], tau[n], alpha=lam, out=out[n])
    return out
