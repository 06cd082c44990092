"""CPU reproduction: a tiny GPT-NeoX trained from scratch through both IML stages over several seeds.

    python -m zoo.iml.repro --seeds 3 --num-ents 240 --out runs/iml_repro

Per seed: fictional people (embedded generator) -> stage 1 (QA + tag1/tag2 definitions) -> EM per subset ->
stage 2 from the stage-1 weights (definitions only) -> EM per subset; then mean +- std over seeds of every
subset's EM and of the IML effect EM(d1consis) - EM(d2consis).

Deviations from the paper, all forced by a CPU budget of minutes instead of GPU-days, and stated in the card:
* a model trained from scratch knows nothing about the people, so stage 1 also gets their real-name QA pairs
  (``world_knowledge=True``) to stand in for a pretrained LM's knowledge;
* a word-level tokenizer built from the corpus (aliases and tags become single tokens; Pythia's BPE is not
  available offline and bytes make sequences ~5x longer); AdamW at 1e-3 instead of Adafactor at 5e-5;
* fewer entities, fewer epochs, a handful of seeds.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from callbacks.iml_tagging import draw_tags, subset_metrics, tag_document
from zoo.iml.data import build_iml_dataset, cvdb_entities, fictional_cvdb
from zoo.iml.metrics import em_f1
from zoo.iml.module import encode_for_lm, eos_to_append
from zoo.lm import build_causal_lm, generate, truncate_at_stop

_PIECE = re.compile(r" ?<\|[a-z]+\|>| ?[A-Za-z0-9]+| ?[^A-Za-z0-9\s]|\n| ")


def word_tokenizer(texts: list[str]):
    """A word-level HF tokenizer whose pieces keep their leading space (decoding is concatenation)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "</s>", "<unk>"]
    pieces = sorted({p for t in texts for p in _PIECE.findall(t)})
    vocab = {w: i for i, w in enumerate(special + pieces)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_PIECE.pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def train(model, tokenizer, texts: list[str], epochs: int, lr: float, batch_size: int, seed: int,
          block_size: int = 48) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    add_eos = eos_to_append(tokenizer)  # fixed per tokenizer: not re-asked every step
    g = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=g).tolist()
        for i in range(0, len(order), batch_size):
            batch = [texts[j] for j in order[i:i + batch_size]]
            loss = model(**encode_for_lm(tokenizer, batch, block_size, add_eos)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    return float(loss.detach())


def evaluate(model, tokenizer, test_sets: dict[str, list[dict]], batch_size: int = 256) -> dict[str, float]:
    rows = []
    for subset, recs in test_sets.items():
        for i in range(0, len(recs), batch_size):
            chunk = recs[i:i + batch_size]
            outs = generate(model, tokenizer, [r["question"] for r in chunk], max_new_tokens=8)
            preds = [truncate_at_stop(o[0], ["\n"]).strip() for o in outs]
            ems, f1s = em_f1(preds, [r["answer"] for r in chunk])
            rows += [{"subset": subset, "em": e, "f1": f} for e, f in zip(ems, f1s)]
    return subset_metrics(rows)


def run_seed(seed: int, args) -> dict:
    ents = cvdb_entities(fictional_cvdb(args.num_ents, seed=seed), args.num_ents)
    ds = build_iml_dataset(ents, seed=seed, world_knowledge=True)
    tags = draw_tags(["tag1", "tag2", "tag3"], 6, seed)

    def render(docs):
        return [tag_document(tags[d["source"]], d["text"]) if d["source"] else d["text"] for d in docs]

    stage1, stage2 = render(ds.train["stage1"]), render(ds.train["stage2"])
    every_text = stage1 + stage2 + [r["text"] for sets in ds.test.values() for v in sets.values() for r in v]
    tokenizer = word_tokenizer(every_text)
    torch.manual_seed(seed)
    model = build_causal_lm({"model_type": "gpt_neox", "vocab_size": len(tokenizer), "hidden_size": args.hidden,
                             "num_hidden_layers": args.layers, "num_attention_heads": 4,
                             "intermediate_size": 4 * args.hidden, "max_position_embeddings": 64,
                             "rotary_pct": 0.25, "pad_token_id": tokenizer.pad_token_id,
                             "eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.eos_token_id})
    t0 = time.time()
    loss1 = train(model, tokenizer, stage1, args.epochs1, args.lr, args.batch_size, seed)
    m1 = evaluate(model, tokenizer, ds.test["stage1"])
    loss2 = train(model, tokenizer, stage2, args.epochs2, args.lr, args.batch_size, seed + 1)
    m2 = evaluate(model, tokenizer, ds.test["stage2"])
    return {"seed": seed, "stage1": m1, "stage2": m2, "loss1": loss1, "loss2": loss2, "seconds": time.time() - t0,
            "n_stage1_docs": len(stage1), "n_stage2_docs": len(stage2)}


def summarize(results: list[dict]) -> str:
    lines = ["| stage | subset | EM mean | EM std | per seed |", "|---|---|---|---|---|"]
    for stage in ("stage1", "stage2"):
        keys = [k for k in results[0][stage] if k.startswith("em_")] + ["iml_effect"]
        for k in keys:
            vals = [r[stage][k] for r in results if k in r[stage]]
            if not vals:
                continue
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            name = k[3:] if k.startswith("em_") else "IML effect EM(d1consis)-EM(d2consis)"
            lines.append(f"| {stage} | {name} | {statistics.mean(vals):.3f} | {sd:.3f} | "
                         + ", ".join(f"{v:.3f}" for v in vals) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--start-seed", type=int, default=600)
    ap.add_argument("--num-ents", type=int, default=240)
    ap.add_argument("--epochs1", type=int, default=40)
    ap.add_argument("--epochs2", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=str, default="runs/iml_repro")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for s in range(args.start_seed, args.start_seed + args.seeds):
        r = run_seed(s, args)
        results.append(r)
        print(f"seed {s}: {r['seconds']:.0f}s loss1 {r['loss1']:.3f} loss2 {r['loss2']:.3f} "
              f"stage1 {json.dumps({k: round(v, 3) for k, v in r['stage1'].items() if k.startswith('em_')})} "
              f"stage2 {json.dumps({k: round(v, 3) for k, v in r['stage2'].items()})}", flush=True)
        (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    table = summarize(results)
    (out / "results.md").write_text(f"`python -m zoo.iml.repro {' '.join(argv)}`\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
