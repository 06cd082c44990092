"""Unlearning updates in plain torch: gradient ascent, selective gradient ascent, task arithmetic.

As in the paper's official code (github.com/GeorgeOctavian/selective_unlearning, read for reference only):
* GA (Jang et al., 2023): minimise -NLL on the forget set D_f (one step = minus one fine-tuning step);
  stop when mean MA (and EL_n, Jang's rule) of D_f fall below their unseen-data levels.
* SGA: in every batch ascend only on the x whose memorization g(x) = MA(x) is at or above a high threshold
  (official: 0.70 for GPT-Neo), always including the batch's most memorized x; the same average stopping rule.
* TA (task arithmetic, Ilharco et al. 2023): theta_u = theta_s - lambda (theta_ft - theta_s), theta_ft = theta_s
  fine-tuned on D_f one more epoch at a time until theta_u meets the stopping rule (official lambda = 3).
* TAU (task arithmetic for unlearning, the paper's second method; official run name "sga+ta"): SGA until mean MA
  falls below a switch level (official 0.5), then TA from that theta_s with lambda = 1.
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


def select_for_ascent(scores: torch.Tensor, threshold: float, top: bool = True) -> torch.Tensor:
    """SGA's selection: the sequences with g(x) >= threshold, plus (`top`, as the official code) the most memorized
    sequence of the batch even when it is below, so every step still lowers the highest memorization."""
    sel = scores >= threshold
    if top and scores.numel():
        sel[scores.argmax()] = True
    return sel


def snapshot(params: Iterable[tuple[str, torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in params}


@torch.no_grad()
def task_arithmetic(base: dict[str, torch.Tensor], finetuned: dict[str, torch.Tensor], lam: float,
                    out: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """theta_u = theta_0 - lambda * (theta_ft - theta_0): the forget-set task vector, negated. One tensor at a time,
    written into `out` (e.g. the model's parameters) when given, so no copy of the task vector or the model is
    made."""
    if out is None:
        out = {n: torch.empty_like(b) for n, b in base.items()}
    for n in base:
        torch.sub(finetuned[n], base[n], out=out[n])
        out[n].mul_(-lam).add_(base[n])
    return out
