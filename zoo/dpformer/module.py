"""`DPSASRecModule`: next-item prediction with a tied-embedding SASRec, trainable with `DPClipping`.

Training privately is the callback's job (configs add `callbacks.dp_clipping.DPClipping`); the module
only keeps the contract the callback needs: batch-first inputs, a batch-mean of per-user losses
(divided by the actual, possibly zero, Poisson batch size), and `on_dp_noise` for Re-Attention.
"""

from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn

from zoo.attached import attached_datamodule
from zoo.dpformer.model import SASRec
from zoo.errors import ZooError
from zoo.hub import HubMixin


def rank_metrics(scores: torch.Tensor, target: torch.Tensor, k: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """HR@k and NDCG@k per row for one relevant item per user (full ranking).

    rank r = #items scored above the target; HR@k = [r < k], NDCG@k = [r < k] / log2(r + 2)
    (the ideal DCG is 1). Checked against torchmetrics' retrieval metrics in the tests.
    """
    t = scores.gather(1, target.unsqueeze(1))
    rank = (scores > t).sum(1).to(scores.dtype)
    hit = (rank < k).to(scores.dtype)
    return hit, hit / torch.log2(rank + 2)


class DPSASRecModule(HubMixin, pl.LightningModule):
    monitor_mode = "max"

    def __init__(
        self,
        num_items: Optional[int] = None,
        max_len: int = 50,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 1,
        d_ff: int = 256,
        dropout: float = 0.2,
        re_attention: bool = True,
        re_attention_c: float = 1.0,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        top_k: int = 10,
    ):
        """
        Args:
            num_items: number of items M (ids 1..M); None = taken from the data module at setup.
            max_len, d_model, n_layers, n_heads, d_ff, dropout: SASRec architecture.
            re_attention: debias attention logits by -C·σ_j²/2 (active once DPClipping reports σ).
            re_attention_c: the constant C of Re-Attention (a hyper-parameter; the paper leaves it open).
            lr, weight_decay: Adam.
            top_k: cut-off of HR@k / NDCG@k (logged as val/hr10, val/ndcg10 for k=10).
        """
        super().__init__()
        if d_model < 1 or n_heads < 1 or d_model % n_heads:
            raise ZooError(f"DPSASRecModule: d_model={d_model} must be a positive multiple of n_heads={n_heads}")
        if top_k < 1 or max_len < 1:
            raise ZooError(f"DPSASRecModule: top_k={top_k} and max_len={max_len} must be positive")
        self.save_hyperparameters()
        self.model: SASRec | None = None
        self.item_frequency: torch.Tensor | None = None
        if num_items is not None:
            self._build(num_items)

    @property
    def monitor(self) -> str:
        """The metric the best checkpoint keeps: NDCG at the configured cut-off (val/ndcg10 for top_k 10)."""
        return f"val/ndcg{self.hparams.top_k}"

    def _build(self, num_items: int) -> None:
        hp = self.hparams
        self.model = SASRec(num_items, hp.max_len, hp.d_model, hp.n_layers, hp.n_heads, hp.d_ff, hp.dropout,
                            hp.re_attention, hp.re_attention_c)
        self.hparams["num_items"] = num_items

    # ------------------------------------------------------------ wiring to data and checkpoints
    def setup(self, stage: str) -> None:
        dm = attached_datamodule(self)
        n = getattr(dm, "num_items", None)
        if n is not None:
            if self.model is None:
                self._build(n)
            elif n != self.hparams.num_items:
                raise ZooError(f"DPSASRecModule: num_items={self.hparams.num_items} but the data has {n} items")
            freq = getattr(dm, "item_frequency", None) if stage == "fit" else None  # a property: read once
            if freq is not None:
                self.item_frequency = freq
        elif self.model is None:
            raise ZooError("DPSASRecModule: num_items is unset and no data module provides it")

    def prepare_state_dict_load(self, state_dict: dict) -> None:
        if self.model is None:  # built lazily from the data: the checkpoint's item table gives its size
            self._build(state_dict["model.item_emb.weight"].shape[0] - 1)

    def on_dp_noise(self, noise_multiplier: float, max_grad_norm: float, expected_batch_size: float) -> None:
        """Called by DPClipping: the averaged gradient's noise std σC/B sets Re-Attention's variances."""
        if not self.hparams.re_attention:
            return
        freq = self.item_frequency
        if freq is None:
            rank_zero_warn("DPSASRecModule: no item frequencies from the data; Re-Attention assumes p_i = 1")
            freq = torch.ones(self.hparams.num_items + 1)
        self.model.set_dp_noise(noise_multiplier * max_grad_norm / expected_batch_size, freq)

    def card_metadata(self) -> dict:
        return {"tags": ["dpformer", "differential-privacy", "sequential-recommendation", "zoo"],
                "pipeline_tag": None}

    # ------------------------------------------------------------ steps
    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        """Scores of all items (index 0 = padding, -inf) for the next item after each sequence."""
        return self.model.logits(self.model.hidden(seq)[:, -1])

    def training_step(self, batch, batch_idx):
        per_user = self.model.per_sample_loss(batch["seq"], batch["target"])
        n = per_user.shape[0]
        loss = per_user.sum() / max(n, 1)  # batch mean; a Poisson batch may be empty
        self.log("train/loss", loss, prog_bar=True, batch_size=max(n, 1))
        return loss

    def _eval(self, batch, split: str):
        hit, ndcg = rank_metrics(self(batch["seq"]), batch["target"], self.hparams.top_k)
        k, b = self.hparams.top_k, hit.shape[0]
        self.log(f"{split}/hr{k}", hit.mean(), batch_size=b, prog_bar=split == "val", sync_dist=True)
        self.log(f"{split}/ndcg{k}", ndcg.mean(), batch_size=b, prog_bar=split == "val", sync_dist=True)

    def validation_step(self, batch, batch_idx):
        self._eval(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval(batch, "test")

    def configure_optimizers(self):
        # Adam with β2 = 0.98 as in SASRec (Kang & McAuley 2018).
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(0.9, 0.98),
                                weight_decay=self.hparams.weight_decay)
