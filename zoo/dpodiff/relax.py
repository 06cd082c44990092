"""Gumbel-Softmax relaxation of the discrete prompt (paper Sec. 5.1).

Each free slot i has log-coefficients α_i, initialised to (1, 0, ..., 0) (official `get_init_log_coeff`), so the
search starts near the original word (synonym space) or the empty option (negative spaces). The slot's input
embedding is e_i = GumbelSoftmax(α_i, τ)·E_cand; the sequence [BOS] e_1 ... e_n [EOS] is padded with EOS rows to
77 positions and fed to the CLIP text encoder through its input embeddings.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from zoo.dpodiff.spaces import SearchSpace
from zoo.errors import ZooError


def init_log_coeffs(space: SearchSpace, init: float = 1.0, dtype: torch.dtype = torch.float32,
                    device: Optional[torch.device] = None) -> list[torch.Tensor]:
    out = []
    for n in space.sizes:
        a = torch.zeros(n, dtype=dtype, device=device)
        a[0] = init
        out.append(a.requires_grad_(True))
    return out


def gumbel_coefficients(log_coeffs: Sequence[torch.Tensor], tau: float = 1.0, hard: bool = False) -> list[torch.Tensor]:
    """One Gumbel-Softmax sample per slot (global torch RNG, seeded by the run)."""
    if tau <= 0:
        raise ZooError(f"the Gumbel-Softmax temperature must be > 0, got {tau}")
    return [F.gumbel_softmax(a, tau=tau, hard=hard) for a in log_coeffs]


def relaxed_inputs_embeds(space: SearchSpace, coeffs: Sequence[torch.Tensor], token_embedding: torch.Tensor,
                          bos_id: int, eos_id: int, max_length: int = 77) -> torch.Tensor:
    """(1, max_length, D): [BOS], each slot's coefficient-weighted candidate rows, [EOS], EOS padding.

    Fixed slots contribute their own token rows. Longer sequences are cut at max_length, as the official
    `padding` does."""
    if len(coeffs) != len(space.free):
        raise ZooError(f"one coefficient vector per free slot ({len(space.free)}), got {len(coeffs)}")
    E = token_embedding
    rows = [E[bos_id].unsqueeze(0)]
    it = iter(coeffs)
    for slot in space.slots:
        cand = E[torch.as_tensor(slot.token_ids, device=E.device)]
        if slot.substitute:
            c = next(it)
            if c.shape != (len(slot.token_ids),):
                raise ZooError(f"slot {slot.word!r} has {len(slot.token_ids)} candidates, coefficients {tuple(c.shape)}")
            rows.append((c.to(E.dtype) @ cand).unsqueeze(0))
        else:
            rows.append(cand)
    rows.append(E[eos_id].unsqueeze(0))
    x = torch.cat(rows, 0)
    if x.shape[0] < max_length:
        x = torch.cat([x, E[eos_id].unsqueeze(0).expand(max_length - x.shape[0], -1)], 0)
    return x[:max_length].unsqueeze(0)


def causal_mask(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    m = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    return m[None, None]


def encode_inputs_embeds(text_encoder, inputs_embeds: torch.Tensor) -> torch.Tensor:
    """CLIP text encoder hidden states from token embeddings: position embeddings, causal encoder, final norm.

    The same path `CLIPTextModel.forward` takes from input ids (transformers' forward takes ids only), through
    the model's public submodules."""
    h = text_encoder.embeddings(inputs_embeds=inputs_embeds.to(text_encoder.dtype))
    mask = causal_mask(h.shape[1], h.dtype, h.device).expand(h.shape[0], 1, -1, -1)
    h = text_encoder.encoder(inputs_embeds=h, attention_mask=mask).last_hidden_state
    return text_encoder.final_layer_norm(h)


def token_embedding_matrix(text_encoder) -> torch.Tensor:
    return text_encoder.get_input_embeddings().weight


def sample_choice(log_coeffs: Sequence[torch.Tensor], argmax: bool = False,
                  generator: Optional[torch.Generator] = None) -> tuple[int, ...]:
    """A discrete prompt from the learned distribution: Gumbel-max of α (= argmax of a Gumbel-Softmax sample),
    or the mode of α (ties broken by the generator, as the official `sample_prompt(argmax=True)` does)."""
    out = []
    for a in log_coeffs:
        a = a.detach()
        if argmax:
            best = torch.nonzero(a == a.max()).flatten()
            i = best[torch.randint(len(best), (1,), generator=generator)].item()
        else:
            u = torch.rand(a.shape, generator=generator, dtype=torch.float64).clamp_(1e-20, 1.0)
            i = int(torch.argmax(a.double().cpu() - torch.log(-torch.log(u))).item())
        out.append(int(i))
    return tuple(out)
