"""EL_n (extraction likelihood) evaluation: zoo's exact shortcut vs the reference code's per-prefix generation.

    OMP_NUM_THREADS=1 python benchmarks/unlearning_el.py    # GPT-Neo-shaped model, 200-token sequences

The reference code (Jang et al.'s `validation_el`, used unchanged by the paper's official code) calls
`model.generate` once per prefix length t = T-1 .. 1 over the batch and scores each continuation's n-grams. zoo
computes the same numbers (`zoo.unlearning.metrics.extraction_likelihoods`): greedy decoding from x_<t reproduces x
until the first teacher-forced mistake m >= t, so one decode per mistake position serves every prefix before it.
The gain therefore grows with memorization: measured on a freshly initialised model (unseen-like text, a mistake at
almost every position) and on the same model after it memorized the sequences. Rows: the reference loop re-run
here with Hugging Face `generate` (the peer), zoo's per-prefix batched decode (`shortcut=False`), zoo's shortcut.
Times are process CPU seconds (the machine is shared); every row must give the same EL_n (max |diff| column).
The sequences are memorized by Lightning's loop (`zoo.unlearning.MemorizeModule` on the sequences themselves); the
thread count is the environment's (OMP_NUM_THREADS), printed with the table.
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
from torch.utils.data import DataLoader

from zoo.unlearning import MemorizeModule
from zoo.unlearning.metrics import extraction_likelihood, extraction_likelihoods, token_stats


def reference_el(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """The reference loop: one greedy `generate` per prefix length, n-gram overlaps scored per sequence."""
    B, T = ids.shape
    conts: list[list[list[int]]] = [[[] for _ in range(T - 1)] for _ in range(B)]
    for t in reversed(range(1, T)):
        out = model.generate(input_ids=ids[:, :t], attention_mask=torch.ones_like(ids[:, :t]), max_length=T,
                             do_sample=False, pad_token_id=0)[:, t:]
        for b in range(B):
            conts[b][t - 1] = out[b].tolist()
    return torch.tensor([extraction_likelihood(ids[b].tolist(), conts[b], n) for b in range(B)], dtype=torch.float64)


def memorize(module: MemorizeModule, ids: torch.Tensor, steps: int) -> None:
    """`steps` AdamW steps (a fresh optimizer each call) of +NLL on all the sequences at once, by Lightning's loop."""
    if steps <= 0:
        return
    rows = [{"input_ids": x, "attention_mask": torch.ones_like(x)} for x in ids]
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, max_epochs=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(rows, batch_size=len(rows)))
    module.model.eval()


def timed(fn):
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=200, help="tokens per sequence (the benchmark's 200)")
    p.add_argument("--num-seqs", type=int, default=8)
    p.add_argument("--el-n", type=int, default=10)
    p.add_argument("--memorize-steps", type=int, nargs=2, default=[12, 150],
                   help="Adam steps on the sequences before the 'partly memorized' and the 'memorized' rows")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    config = {"model_type": "gpt_neo", "vocab_size": a.vocab, "hidden_size": a.hidden, "num_layers": a.layers,
              "num_heads": 4, "attention_types": [[["global", "local"], max(1, a.layers // 2)]], "window_size": 256,
              "max_position_embeddings": max(256, a.seq_len), "intermediate_size": 4 * a.hidden,
              "resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0, "bos_token_id": None,
              "eos_token_id": None, "pad_token_id": 0}  # no EOS: generate must not stop (or bar a token) early
    module = MemorizeModule(model=config, lr=3e-3, weight_decay=0.01)  # AdamW as torch's defaults but lr
    model = module.model.eval()
    ids = torch.randint(2, a.vocab, (a.num_seqs, a.seq_len), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    rows = []
    done = 0
    for state, steps in (("fresh (unseen-like)", 0), ("partly memorized", a.memorize_steps[0]),
                         ("memorized", a.memorize_steps[1])):
        memorize(module, ids, steps - done)
        done = steps
        with torch.no_grad():
            ma = float(token_stats(model(input_ids=ids, attention_mask=mask).logits, ids, mask)[0].mean())
            ref, t_ref = timed(lambda: reference_el(model, ids, a.el_n))
            full, t_full = timed(lambda: extraction_likelihoods(model, ids, mask, a.el_n, shortcut=False))
            fast, t_fast = timed(lambda: extraction_likelihoods(model, ids, mask, a.el_n, shortcut=True))
        for name, el, t in (("reference loop (HF generate per prefix)", ref, t_ref),
                            ("zoo per-prefix, batched (shortcut=False)", full, t_full),
                            ("zoo shortcut (one decode per mistake)", fast, t_fast)):
            rows.append((state, f"{ma:.3f}", name, f"{t:.2f}", f"{t_ref / t:.1f}x", f"{float(el.mean()):.4f}",
                         f"{float((el - ref).abs().max()):.1e}"))
    print(f"GPT-Neo {a.layers} layers, hidden {a.hidden}, vocab {a.vocab}; {a.num_seqs} sequences of {a.seq_len} "
          f"tokens; EL_{a.el_n}; {torch.get_num_threads()} thread(s)\n")
    print("| model | mean MA | method | CPU s | speed-up vs reference | mean EL | max abs diff vs reference |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
