"""Data of BGGN (intersectional unfairness discovery): samples (x, y, a) for the classifier f, and the table of
bias values L_f(a) per distinct sensitive vector for the predictor, the VAE and BGGN.

`IntersectionalSamplesDataModule` (phase 0, the classifier f) — sources, explicit and logged:
* ``celeba``: torchvision's ``CelebA`` from a local ``root`` (``root/celeba/img_align_celeba/``,
  ``list_attr_celeba.txt``, ``list_eval_partition.txt``, ``identity_CelebA.txt``, ``list_bbox_celeba.txt``,
  ``list_landmarks_align_celeba.txt``, as released by MMLab); never downloaded. Target ``Attractive``; the 20
  sensitive attributes of the official ``CELEBA_2_FEAS_ID``. Images resized to 256² with ImageNet normalisation
  (official ``data/celebA.py``).
* ``toxic``: Jigsaw/WILDS CivilComments ``all_data_with_identities.csv`` (header row; ``comment_text``,
  ``split``, ``toxicity`` and the identity columns as fractions of raters) from ``csv_path``; label
  ``toxicity > 0.4`` and identities ``> 0.1`` (official ``data/toxic_data_preprocessing.py``); the 25 identities of
  ``TOXIC_25_FEAS_ID``. x is DistilBERT's first-token embedding computed here from a cached model
  (``embedding_model``, loaded with ``local_files_only``) and cached as ``.npy`` under ``embedding_cache``.
* ``synthetic`` (embedded): the planted benchmark below.

`BiasTableDataModule` (phases 1–3) — sources:
* ``synthetic``: the planted benchmark's ground-truth bias of every combination (known by construction);
* ``table``: a CSV written by phase 0 (``bias_table.csv``: one column per attribute (0/1), ``count``, ``bias``).
30% of the combinations (``unseen_share``) are held out with a seeded split (official ``te_par: 0.3``).

The synthetic benchmark: d binary attributes with skewed frequencies p_j ~ U(p_min, p_max) (independent), every
one of the 2^d combinations gets ``min_count`` samples plus a multinomial share of ``n_extra``; labels y ~ Bern(½)
with features x = (2y−1)·δ·e_1 + N(0, I), then flipped with rate ρ(a) = base_flip + Σ_m w_m·[a matches planted
interaction m] (capped at ``max_flip``); the planted interactions are conjunctions of ``interaction_order``
attributes set to their *rare* value, so high bias lives in rare combinations. The ground-truth bias is the
expected binary cross-entropy of the Bayes classifier of the clean labels, σ(2δ·x_1), under ρ(a):
L*(a) = (1−ρ)·E[softplus(−m)] + ρ·E[softplus(m)], m ~ N(2δ², 4δ²) (Gauss–Hermite quadrature).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import ClassVar, Literal, Optional

import lightning.pytorch as L
import numpy as np
import pandas as pd
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, TensorDataset

from zoo.bggn.bias import (
    BiasTable,
    bias_bins,
    codes,
    inverse_frequency_weights,
    one_hot,
    read_bias_table,
    split_seen_unseen,
)
from zoo.data import reading, refuse_unread_files, train_loader
from zoo.errors import ZooError, flat

CELEBA_TARGET = "Attractive"
# official utils/hypers.py CELEBA_2_FEAS_ID (the 20 sensitive attributes when the target is Attractive)
CELEBA_SENSITIVE = ["Bags_Under_Eyes", "Bald", "Bangs", "Big_Lips", "Big_Nose", "Blond_Hair", "Blurry",
                    "Bushy_Eyebrows", "Chubby", "Double_Chin", "Eyeglasses", "Goatee", "Gray_Hair", "High_Cheekbones",
                    "Male", "Narrow_Eyes", "Smiling", "Wavy_Hair", "Wearing_Lipstick", "Young"]
# official TOXIC_25_FEAS_ID over TOXIC_SENS_FEAS
TOXIC_SENSITIVE = ["male", "female", "transgender", "other_gender", "heterosexual", "homosexual_gay_or_lesbian",
                   "bisexual", "other_sexual_orientation", "LGBTQ", "christian", "jewish", "muslim", "hindu", "buddhist",
                   "atheist", "other_religion", "black", "white", "asian", "latino", "other_race_or_ethnicity",
                   "physical_disability", "intellectual_or_learning_disability", "psychiatric_or_mental_illness",
                   "other_disability"]
TOXIC_LABEL_THRESHOLD = 0.4  # official generate_multi_attrs_toxic(bar=0.4)
TOXIC_IDENTITY_THRESHOLD = 0.1


# -- the embedded synthetic benchmark -------------------------------------------------------------------------------

def _margin_losses(delta: float) -> tuple[float, float]:
    """E[softplus(−m)], E[softplus(m)] for m ~ N(2δ², 4δ²): the Bayes classifier's BCE on clean / flipped labels."""
    t, w = np.polynomial.hermite_e.hermegauss(80)
    m = 2 * delta**2 + 2 * delta * t
    w = w / w.sum()
    return float(np.sum(w * np.logaddexp(0, -m))), float(np.sum(w * np.logaddexp(0, m)))


class SyntheticBenchmark:
    """The planted benchmark (see the module docstring); everything follows from ``seed``."""

    def __init__(self, d: int = 10, seed: int = 0, n_planted: int = 4, interaction_order: int = 5,
                 base_flip: float = 0.02, planted_flip: tuple[float, float] = (0.03, 0.4), max_flip: float = 0.49,
                 p_min: float = 0.1, p_max: float = 0.5, min_count: int = 20, n_extra: int = 20_000,
                 feature_dim: int = 8, delta: float = 1.5):
        if d < interaction_order or d > 20:
            raise ZooError(f"synthetic benchmark: d must be in [{interaction_order}, 20], got {d}")
        rng = np.random.default_rng(seed)
        self.d, self.feature_dim, self.delta = d, feature_dim, delta
        self.names = [f"s{j}" for j in range(d)]
        self.p = rng.uniform(p_min, p_max, d)  # P(a_j = 1): value 1 is the rare one
        self.combos = ((np.arange(2**d)[:, None] >> np.arange(d - 1, -1, -1)) & 1).astype(np.int64)
        freq = np.prod(np.where(self.combos == 1, self.p, 1 - self.p), axis=1)
        self.count = min_count + rng.multinomial(n_extra, freq)
        self.interactions = [rng.choice(d, interaction_order, replace=False) for _ in range(n_planted)]
        self.weights = rng.uniform(*planted_flip, n_planted)
        rho = np.full(2**d, base_flip)
        for idx, w in zip(self.interactions, self.weights):
            rho += w * np.all(self.combos[:, idx] == 1, axis=1)
        self.flip = np.minimum(rho, max_flip)
        clean, flipped = _margin_losses(delta)
        self.bias = (1 - self.flip) * clean + self.flip * flipped
        self.rng = rng

    def samples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x (N, feature_dim) float32, y (N,) int64 noisy labels, a (N, d) int64), in a shuffled order."""
        rng = self.rng
        a = np.repeat(self.combos, self.count, axis=0)
        n = len(a)
        y = rng.integers(0, 2, n)
        x = rng.standard_normal((n, self.feature_dim))
        x[:, 0] += (2 * y - 1) * self.delta
        flipped = rng.random(n) < np.repeat(self.flip, self.count)
        y_noisy = np.where(flipped, 1 - y, y)
        order = rng.permutation(n)
        return x[order].astype(np.float32), y_noisy[order].astype(np.int64), a[order]


# -- phase 0: samples for the classifier f --------------------------------------------------------------------------

class _CelebASamples(Dataset):
    def __init__(self, base, target_idx: int, sens_idx: list[int]):
        self.base, self.t, self.s = base, target_idx, sens_idx

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        b = self.base
        with reading(Path(b.root) / b.base_folder / "img_align_celeba" / b.filename[i], "CelebA image"):
            img, attr = b[i]
        return img, attr[self.t].long(), attr[self.s].long()


def _celeba_dataset(root: str, split: str, verify_md5: bool):
    from torchvision import transforms
    from torchvision.datasets import CelebA

    class _CelebA(CelebA):
        def _check_integrity(self) -> bool:
            if verify_md5:
                return super()._check_integrity()
            base = Path(self.root) / self.base_folder
            return all((base / f).exists() for _, _, f in self.file_list if not f.endswith(".zip")) and \
                (base / "img_align_celeba").is_dir()

    tfm = transforms.Compose([transforms.Resize((256, 256)), transforms.ToTensor(),
                              transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    try:
        return _CelebA(root, split=split, target_type="attr", transform=tfm, download=False)
    except RuntimeError as e:
        raise ZooError(f"CelebA not found under {root!r}/celeba ({e}); download img_align_celeba.zip and the "
                       f"list_*.txt / identity_CelebA.txt files from MMLab's CelebA page into it") from e
    except (OSError, ValueError, IndexError) as e:  # torchvision's parser of the list_*.txt files: a damaged one
        raise ZooError(f"the CelebA list files (list_attr_celeba.txt, list_eval_partition.txt, identity_CelebA.txt, "
                       f"list_bbox_celeba.txt, list_landmarks_align_celeba.txt) in {Path(root) / 'celeba'} are not "
                       f"readable ({type(e).__name__}: {flat(e)})") from e


def embed_texts(texts: list[str], model_dir: str, batch_size: int = 64, max_length: int = 128) -> np.ndarray:
    """DistilBERT first-token ([CLS]) embeddings of the last layer, from a locally cached model (never downloaded)."""
    from transformers import AutoModel, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    except OSError as e:
        raise ZooError(f"embedding model {model_dir!r} is not available locally ({e}); download it once with "
                       f"`huggingface-cli download distilbert-base-uncased` or point embedding_model at a directory")
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            enc = tok(texts[i:i + batch_size], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt")
            out.append(model(**enc).last_hidden_state[:, 0].float().numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size), np.float32)


def read_toxic(csv_path: str, sensitive: list[str]) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """all_data_with_identities.csv -> (frame, y (N,), a (N, d)); rows without identity annotations are dropped."""
    path = Path(csv_path)
    if not path.is_file():
        raise ZooError(f"Jigsaw file {csv_path!r} not found; get all_data_with_identities.csv from the WILDS "
                       f"CivilComments release (or Kaggle's Jigsaw Unintended Bias) and point csv_path at it")
    with reading(path, "CSV"):
        df = pd.read_csv(path)
    missing = [c for c in ["comment_text", "toxicity", *sensitive] if c not in df.columns]
    if missing:
        raise ZooError(f"configured attribute(s) {missing} absent from {csv_path} (columns: {list(df.columns)[:12]}...)")
    df = df.dropna(subset=sensitive)
    rows = df.index.to_numpy()  # each kept row's place among the file's data rows (a comment may span lines)
    df = df.reset_index(drop=True)
    # pandas reads an empty cell (or one that says NA, null, nan, ...) as a missing value: a float, which neither
    # the embedding cache's key nor DistilBERT's tokenizer takes (and as text it would be embedded as "nan")
    text = df["comment_text"]
    missing_text = np.flatnonzero(text.isna().to_numpy())
    if missing_text.size:
        raise ZooError(f"{csv_path}: comment_text is empty (or NA) in data row {rows[missing_text[0]] + 1} (header "
                       f"not counted; {missing_text.size} such row(s)); every comment with identities needs its text")
    try:
        y = (df["toxicity"].to_numpy(dtype=np.float64) > TOXIC_LABEL_THRESHOLD).astype(np.int64)
        a = (df[sensitive].to_numpy(dtype=np.float64) > TOXIC_IDENTITY_THRESHOLD).astype(np.int64)
    except (TypeError, ValueError) as e:
        raise ZooError(f"{csv_path}: toxicity and {sensitive} must be numbers ({flat(e)})") from e
    # fractions of raters: a missing toxicity or a value outside [0, 1] would be thresholded into a wrong label silently
    values = df[["toxicity", *sensitive]].to_numpy(dtype=np.float64)
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ZooError(f"{csv_path}: {['toxicity', *sensitive][col]} is {values[row, col]} in row {row} (after "
                       f"dropping rows without identities); toxicity and identities are fractions of raters in [0, 1]")
    return df, y, a


class IntersectionalSamplesDataModule(L.LightningDataModule):
    """Samples (x, y, a) for the classifier f whose per-group loss is the bias value.

    Args:
        source: ``celeba`` | ``toxic`` | ``synthetic`` (embedded).
        root: CelebA root (the directory holding ``celeba/``).
        csv_path: Jigsaw ``all_data_with_identities.csv``.
        embedding_model: local DistilBERT directory or cached Hub id (Toxic).
        embedding_cache: directory for the computed embeddings (``.npy``); None recomputes them.
        sensitive: the sensitive attribute names; None = the paper's (20 CelebA / 25 Toxic / all synthetic).
        target: CelebA target attribute (official ``target_id: 2`` = Attractive).
        verify_md5: check the CelebA release's md5 sums (torchvision); off for hand-made files.
        d, seed, n_extra, min_count, feature_dim, n_planted: the synthetic benchmark.
        val_share: share of the training samples kept for validation (synthetic and Toxic without a ``val`` split).
        batch_size, num_workers: loaders.

    Batches: ``(x, y, a)``. Validation has two loaders: the training split, unshuffled (index 0; the classifier
    is selected on it), and the validation split (index 1); the test loader yields every sample.
    """

    # the file options and the sources that read them (`refuse_unread_files`; embedding_cache is a cache, not the
    # data, and embedding_model a model)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"root": ("celeba",), "csv_path": ("toxic",)}

    def __init__(self, source: Literal["celeba", "toxic", "synthetic"] = "synthetic", root: Optional[str] = None,
                 csv_path: Optional[str] = None, embedding_model: str = "distilbert-base-uncased",
                 embedding_cache: Optional[str] = None, sensitive: Optional[list[str]] = None,
                 target: str = CELEBA_TARGET, verify_md5: bool = True, d: int = 10, seed: int = 0,
                 n_extra: int = 20_000, min_count: int = 20, feature_dim: int = 8, n_planted: int = 4,
                 val_share: float = 0.1, batch_size: int = 64, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()
        if source not in ("celeba", "toxic", "synthetic"):
            raise ZooError(f"source must be celeba, toxic or synthetic, got {source!r}")
        refuse_unread_files(self, source, locals())
        self.names: list[str] = []

    def setup(self, stage: str) -> None:
        if getattr(self, "_ready", False):
            return
        h = self.hparams
        if h.source == "synthetic":
            bench = SyntheticBenchmark(d=h.d, seed=h.seed, n_extra=h.n_extra, min_count=h.min_count,
                                       feature_dim=h.feature_dim, n_planted=h.n_planted)
            x, y, a = bench.samples()
            self.names = bench.names
            self.feature_width = x.shape[1]  # checked against the classifier's in_dim
            self.benchmark = bench
            ds = TensorDataset(torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(a))
            n_val = int(h.val_share * len(ds))
            self.train_set = torch.utils.data.Subset(ds, range(n_val, len(ds)))
            self.val_set = torch.utils.data.Subset(ds, range(n_val))
            self.all_set = ds
            rank_zero_info(f"bggn data: embedded synthetic benchmark, d={h.d}, {len(ds)} samples, seed {h.seed}")
        elif h.source == "celeba":
            if not h.root:
                raise ZooError("source=celeba needs root (the directory holding celeba/)")
            base_all = _celeba_dataset(h.root, "all", h.verify_md5)
            names = list(base_all.attr_names)
            sens = h.sensitive or CELEBA_SENSITIVE
            missing = [n for n in [h.target, *sens] if n not in names]
            if missing:
                raise ZooError(f"configured attribute(s) {missing} absent from CelebA's list_attr_celeba.txt")
            t, s = names.index(h.target), [names.index(n) for n in sens]
            self.names = list(sens)
            self.train_set = _CelebASamples(_celeba_dataset(h.root, "train", h.verify_md5), t, s)
            self.val_set = _CelebASamples(_celeba_dataset(h.root, "valid", h.verify_md5), t, s)
            self.all_set = _CelebASamples(base_all, t, s)
            rank_zero_info(f"bggn data: CelebA (torchvision, local {h.root}), target {h.target}, {len(s)} attributes")
        else:
            if not h.csv_path:
                raise ZooError("source=toxic needs csv_path (all_data_with_identities.csv)")
            sens = h.sensitive or TOXIC_SENSITIVE
            df, y, a = read_toxic(h.csv_path, sens)
            x = self._toxic_embeddings(df["comment_text"].astype(str).tolist())
            self.names = list(sens)
            self.feature_width = x.shape[1]  # checked against the classifier's in_dim
            ds = TensorDataset(torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(a))
            split = df["split"].to_numpy() if "split" in df.columns else np.array(["train"] * len(df))
            tr = np.nonzero(split != "val")[0] if (split == "val").any() else np.arange(len(df))
            va = np.nonzero(split == "val")[0] if (split == "val").any() else tr[: max(1, int(h.val_share * len(tr)))]
            # official: f trains on train+val+test ("all"), the bias values come from all samples
            self.train_set, self.val_set, self.all_set = torch.utils.data.Subset(ds, tr), torch.utils.data.Subset(ds, va), ds
            rank_zero_info(f"bggn data: Jigsaw {h.csv_path} ({len(df)} rows), DistilBERT {h.embedding_model}")
        self._ready = True

    def _toxic_embeddings(self, texts: list[str]) -> np.ndarray:
        h = self.hparams
        # keyed by the texts (in order) and the model, not only the file's name: an edited or different CSV with as
        # many rows would otherwise reuse stale embeddings silently
        key = hashlib.sha256("\0".join([h.embedding_model, *texts]).encode()).hexdigest()[:16]
        cache = Path(h.embedding_cache) / f"{Path(h.csv_path).stem}.{Path(h.embedding_model).name}.{key}.npy" \
            if h.embedding_cache else None
        if cache is not None and cache.exists():
            with reading(cache, ".npy embedding cache (delete it to recompute)"):
                x = np.load(cache, allow_pickle=False)
            if len(x) == len(texts):
                rank_zero_info(f"bggn data: embeddings from cache {cache}")
                return x
        x = embed_texts(texts, h.embedding_model)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.save(cache, x)
        return x

    def train_dataloader(self):
        return train_loader(self.train_set, self.hparams.batch_size, shuffle=True, num_workers=self.hparams.num_workers)

    def val_dataloader(self):
        # the training split first (unshuffled), then the validation split: the classifier is selected on its
        # training accuracy (official f_model_train keeps the best accuracy on its 'tr' loader), val is reported
        h = self.hparams
        splits = (self.train_set, self.val_set)
        return [DataLoader(s, batch_size=h.batch_size, num_workers=h.num_workers) for s in splits]

    def test_dataloader(self):  # every sample: the bias values are group means over all of them
        return DataLoader(self.all_set, batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)

    def card_metadata(self) -> dict:
        h = self.hparams
        src = {"synthetic": f"embedded: planted synthetic benchmark (d={h.d}, seed {h.seed})",
               "celeba": f"CelebA (local torchvision files in {h.root}), target {h.target}",
               "toxic": f"toxic comments CSV {h.csv_path} + {h.embedding_model} embeddings"}[h.source]
        return {"data_source": src}


# -- phases 1-3: the table of bias values ---------------------------------------------------------------------------

class _Cycled(Dataset):
    """``length`` items drawn from ``base`` epoch after epoch, each pass in a seeded permutation: a fixed number of
    fine-tuning iterations whatever the number of training combinations (and a deterministic, resumable order)."""

    def __init__(self, base: Dataset, length: int, seed: int):
        self.base, self.length, self.seed, self._perms = base, length, seed, {}

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        n = len(self.base)
        cycle = i // n
        if cycle not in self._perms:
            self._perms[cycle] = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + cycle))
        return self.base[int(self._perms[cycle][i % n])]


class BiasTableDataModule(L.LightningDataModule):
    """Distinct sensitive vectors with their bias values; training = the seen ones.

    Batches (train/val): ``(one_hot (B, 2d), bias (B,), bin (B,), weight (B,))``; validation has two loaders, the
    seen (training) combinations (index 0) and the held-out ones (index 1, absent when nothing is held out); the
    test loader yields the whole table once: ``(a (G, d), bias (G,), seen (G,))``.

    Args:
        source: ``synthetic`` (ground truth by construction) | ``table`` (``table_path``, phase 0's CSV).
        unseen_share: held-out share of the combinations (official ``te_par: 0.3``).
        split_seed: seed of the held-out split (the same in every phase of one experiment).
        bin_interval, n_bins: the predictor's bias bins (official ``pred_cls_interval``/``pred_cls_num``).
        iterations: if set, the training loader yields exactly this many batches (BGGN's fine-tuning iterations).
        min_train_combinations: refuse a split with fewer training combinations (the top-k masks need them).
        d, seed, n_extra, min_count, n_planted: the synthetic benchmark (as in `IntersectionalSamplesDataModule`).
    """

    # the file options and the sources that read them (`refuse_unread_files`)
    FILE_OPTIONS: ClassVar[dict[str, tuple[str, ...]]] = {"table_path": ("table",)}

    def __init__(self, source: Literal["synthetic", "table"] = "synthetic", table_path: Optional[str] = None,
                 unseen_share: float = 0.3, split_seed: int = 0, batch_size: int = 64, bin_interval: float = 0.05,
                 n_bins: int = 10, iterations: Optional[int] = None, min_train_combinations: int = 1, d: int = 10,
                 seed: int = 0, n_extra: int = 20_000, min_count: int = 20, n_planted: int = 4, num_workers: int = 0):
        super().__init__()
        # the synthetic benchmark's knobs mean nothing for a table; kept out of the hparams, its default d=10 would
        # clash with the model's d set to the table's attributes (Lightning refuses differing shared hparams)
        synthetic_only = ["d", "seed", "n_extra", "min_count", "n_planted"]
        self.save_hyperparameters(ignore=synthetic_only if source == "table" else [])
        if source not in ("synthetic", "table"):
            raise ZooError(f"source must be synthetic or table, got {source!r}")
        refuse_unread_files(self, source, locals())

    def setup(self, stage: str) -> None:
        if getattr(self, "table", None) is not None:
            return
        h = self.hparams
        if h.source == "synthetic":
            bench = SyntheticBenchmark(d=h.d, seed=h.seed, n_extra=h.n_extra, min_count=h.min_count,
                                       n_planted=h.n_planted)
            names, a, bias, count = bench.names, bench.combos, bench.bias, bench.count
            rank_zero_info(f"bggn data: embedded synthetic benchmark's true bias table (d={h.d}, {len(a)} combinations)")
        else:
            if not h.table_path:
                raise ZooError("source=table needs table_path (phase 0's bias_table.csv)")
            with reading(h.table_path, "bias table CSV"):
                names, a, bias, count = read_bias_table(h.table_path)
            # else a nan/inf bias only surfaces as a non-finite training loss, and a repeated combination could sit
            # on both sides of the seen/unseen split
            bad = np.flatnonzero(~np.isfinite(bias))
            if bad.size:
                raise ZooError(f"bias table {h.table_path}: non-finite bias ({bias[bad[0]]}) in row {bad[0]} "
                               f"({bad.size} such row(s))")
            # a bias value is a group's mean loss (>= 0) over its `count` samples (>= 1; read_bias_table refuses a
            # missing, non-finite or fractional count)
            neg = np.flatnonzero(bias < 0)
            if neg.size:
                raise ZooError(f"bias table {h.table_path}: bias is {bias[neg[0]]} in row {neg[0]} ({neg.size} such "
                               f"row(s)); a bias value is a group's mean loss, >= 0")
            few = np.flatnonzero(count < 1)
            if few.size:
                raise ZooError(f"bias table {h.table_path}: count is {count[few[0]]} in row {few[0]} ({few.size} such "
                               f"row(s)); count is the number of samples of the combination, a whole number >= 1")
            _, first, n = np.unique(a, axis=0, return_index=True, return_counts=True)
            if (n > 1).any():
                i = np.flatnonzero(n > 1)[0]
                raise ZooError(f"bias table {h.table_path}: combination {a[first[i]].tolist()} appears {n[i]} times; "
                               f"one row per distinct combination")
            rank_zero_info(f"bggn data: bias table {h.table_path} ({len(a)} combinations, {len(names)} attributes)")
        seen = split_seen_unseen(len(a), h.unseen_share, h.split_seed)
        n_seen = int(seen.sum())
        if n_seen < h.min_train_combinations:
            raise ZooError(f"{n_seen} training combinations after holding out {h.unseen_share:.0%}, but the top-k mask "
                           f"needs at least {h.min_train_combinations}")
        self.table = BiasTable(list(names), torch.tensor(np.asarray(a)), torch.tensor(np.asarray(bias)),
                               torch.tensor(np.asarray(count)), seen)
        self.names = list(names)
        self.bank_codes = codes(self.table.a[seen])

    def _split(self, mask: torch.Tensor) -> TensorDataset:
        t = self.table
        bias = t.bias[mask]
        bins = bias_bins(bias, self.hparams.bin_interval, self.hparams.n_bins)
        w = inverse_frequency_weights(bins, self.hparams.n_bins)
        return TensorDataset(one_hot(t.a[mask]), bias.to(torch.get_default_dtype()), bins, w)

    def train_dataloader(self):
        ds = self._split(self.table.seen)
        h = self.hparams
        if h.iterations:
            if len(ds) < h.batch_size:
                raise ZooError(f"{len(ds)} training combinations, fewer than the batch of {h.batch_size} each "
                               f"fine-tuning iteration draws")
            ds = _Cycled(ds, h.iterations * h.batch_size, h.split_seed)
            return train_loader(ds, h.batch_size, shuffle=False, drop_last=True, num_workers=h.num_workers)
        return train_loader(ds, h.batch_size, shuffle=True, num_workers=h.num_workers)

    def val_dataloader(self):
        # the seen (training) combinations first, then the held-out ones: the predictor is selected on the seen
        # ones (official bias_predictor_train keeps the best group MAE on tr_reduced), the unseen MAE is reported
        t, batch = self.table, max(self.hparams.batch_size, 256)
        loaders = [DataLoader(self._split(t.seen), batch_size=batch)]
        if not t.seen.all():  # unseen_share 0 holds nothing out: no empty loader
            loaders.append(DataLoader(self._split(~t.seen), batch_size=batch))
        return loaders

    def test_dataloader(self):
        t = self.table
        return DataLoader([(t.a, t.bias, t.seen)], batch_size=None)

    def card_metadata(self) -> dict:
        h = self.hparams
        src = (f"embedded: planted synthetic benchmark's true bias values (d={h.d}, seed {h.seed})"
               if h.source == "synthetic" else f"bias table {h.table_path}")
        return {"data_source": src}
